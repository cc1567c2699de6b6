"""Model-server engine names and the metric-spec syntax of the EPP's flags: what the settings check, defined once.

The settings accept a pool's engine by the EPP's engine names, or an older name (:data:`ALIASES`), and a
signal's source as ``name{label=value}`` (:class:`MetricSpec`); both are read here, below the settings and
the receivers that use them (:mod:`sloscope.receivers.protocols` maps each engine to its series).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol


class Sample(Protocol):
    """What :meth:`MetricSpec.matches` reads of a scraped sample (the exposition parser's ``Sample``)."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


__all__ = ["ALIASES", "TRITON_TENSORRT_LLM", "MetricSpec"]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

TRITON_TENSORRT_LLM = "triton-tensorrt-llm"
"""The EPP's engine name of Triton with the TensorRT-LLM backend."""


@dataclass(frozen=True)
class MetricSpec:
    """One series selector: a sample name and label values it must carry (equality only, like the EPP)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()  # sorted by label name, so equal specs compare equal

    @classmethod
    def parse(cls, text: str) -> MetricSpec:
        """Reads ``name`` or ``name{a=b,c=d}``, the syntax of the EPP's metric flags.

        Follows the EPP's ``stringToMetricSpec``: blanks around tokens are ignored, values are
        unquoted, empty braces are refused. Two additions, both refusals or harmless: a value may be
        written in double quotes as on an exposition page (``{request_type="waiting"}``), and the
        names must be valid metric and label names, so a typo fails at configuration time instead
        of silently matching nothing.
        """
        spec = text.strip()
        if not spec:
            raise ValueError("empty metric spec")
        open_at, close_at = spec.find("{"), spec.find("}")
        if open_at == -1 and close_at == -1:
            name, pairs = spec, []
        else:
            if open_at == -1 or close_at < open_at:
                raise ValueError(f"metric spec {text!r}: unmatched braces")
            if close_at != len(spec) - 1:
                raise ValueError(f"metric spec {text!r}: characters after the closing brace")
            body = spec[open_at + 1 : close_at]
            if not body.strip():
                raise ValueError(f"metric spec {text!r}: empty label block")
            name, pairs = spec[:open_at].strip(), [_label_pair(text, pair) for pair in body.split(",")]
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"metric spec {text!r}: {name!r} is not a metric name")
        labels = dict(pairs)
        if len(labels) != len(pairs):
            raise ValueError(f"metric spec {text!r}: a label name appears twice")
        return cls(name, tuple(sorted(labels.items())))

    def matches(self, sample: Sample) -> bool:
        """The sample has exactly this name (not a suffixed one) and every selector label's value."""
        return sample.name == self.name and all(sample.labels.get(k) == v for k, v in self.labels)

    def __str__(self) -> str:
        if not self.labels:
            return self.name
        return self.name + "{" + ",".join(f"{k}={v}" for k, v in self.labels) + "}"


def _label_pair(text: str, pair: str) -> tuple[str, str]:
    parts = pair.split("=")
    if len(parts) != 2:
        raise ValueError(f"metric spec {text!r}: {pair.strip()!r} is not name=value")
    key, value = parts[0].strip(), parts[1].strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not _LABEL_NAME.fullmatch(key):
        raise ValueError(f"metric spec {text!r}: {key!r} is not a label name")
    if not value or '"' in value:
        raise ValueError(f"metric spec {text!r}: empty or badly quoted value in {pair.strip()!r}")
    return key, value


ALIASES: Mapping[str, str] = MappingProxyType({"triton-trtllm": TRITON_TENSORRT_LLM})
"""Older names accepted in the settings (sloscope called Triton's TensorRT-LLM backend ``triton-trtllm``)."""
