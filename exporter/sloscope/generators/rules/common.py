"""Shared by every rule module: the PromQL and annotation-template helpers, and :func:`_alert`, the shape of
every alert rule (severity class, ``for``, summary, description; :mod:`.conventions` adds the runbook URL)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sloscope.generators.windows import Severity, duration_seconds

Rule = dict[str, Any]
Group = dict[str, Any]

SEVERITY = "severity"


def _num(value: float | Fraction) -> str:
    """The shortest PromQL literal for a number: ``100``, ``0.144``."""
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


def _pct(value: float | Fraction) -> str:
    """A share as a percentage for prose: ``1%``, ``99.9%``."""
    return f"{float(value) * 100:.4g}%"


def _text_num(value: float | Fraction) -> str:
    return f"{float(value):.4g}"


@dataclass(frozen=True)
class _OneOf:
    """A ``=~`` matcher of exactly these values (label values here are plain names, regex-safe)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class _Not:
    """A ``!=`` matcher."""

    value: str


Matcher = str | _OneOf | _Not


def _one_of(values: Iterable[str]) -> _OneOf:
    return _OneOf(tuple(sorted(values)))


def _selector(metric: str, matchers: Mapping[str, Matcher] | None = None) -> str:
    """``metric{a="x",b=~"y|z",c!="w"}``, matchers sorted by label name."""
    parts = []
    for name, matcher in sorted((matchers or {}).items()):
        if isinstance(matcher, _OneOf):
            parts.append(f'{name}=~"{"|".join(matcher.values)}"')
        elif isinstance(matcher, _Not):
            parts.append(f'{name}!="{matcher.value}"')
        else:
            parts.append(f'{name}="{matcher}"')
    return f"{metric}{{{','.join(parts)}}}" if parts else metric


def _by(labels: Sequence[str]) -> str:
    return ", ".join(labels)


def _label(name: str) -> str:
    return "{{ $labels.%s }}" % name  # noqa: UP031 - Go template braces would need quadruple braces in an f-string


VALUE_PERCENT = "{{ $value | humanizePercentage }}"
VALUE_DURATION = "{{ $value | humanizeDuration }}"
VALUE_NUMBER = "{{ $value | humanize }}"
INSTANCE = _label("instance")


def _alert(
    name: str,
    expr: str,
    *,
    severity: Severity,
    summary: str,
    description: str,
    hold: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Rule:
    rule: Rule = {"alert": name, "expr": expr}
    if hold is not None and duration_seconds(hold) > 0:
        rule["for"] = hold
    rule["labels"] = dict(sorted({**(labels or {}), SEVERITY: severity}.items()))
    rule["annotations"] = {"description": description, "summary": summary}  # runbook_url: conventions.render
    return rule
