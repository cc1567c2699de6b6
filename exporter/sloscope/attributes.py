"""The attribute mapping: which span or resource attribute gives each request field, and its type.

Compiled once from :class:`sloscope.config.Attributes`. The receivers use :meth:`Mapping.check`
to reject spans whose mapped attributes have the wrong type (a clear OTLP partial-success
message rather than a silently wrong number); the assembler uses the ``*_of`` readers.

Header-derived fields follow the EPP: a missing or unparsable ``x-slo-*`` header means
"no SLO", never an error. Model-server numbers (``gen_ai.*``) must be numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sloscope.config import Attributes
from sloscope.records import AttributeValue, Span

_RESOURCE = "resource."

# Fields whose value must be an OTLP int or double when present.
NUMBER_FIELDS = (
    "predicted_ttft_ms",
    "predicted_tpot_ms",
    "gateway_ttft_seconds",
    "gateway_ttft_ms",
    "ttft_seconds",
    "e2e_seconds",
    "queue_seconds",
    "prefill_seconds",
    "decode_seconds",
    "prompt_tokens",
    "completion_tokens",
)
# Fields whose value must be a string (or an array of strings: a captured header) when present.
STRING_FIELDS = ("request_id", "requested_model", "target_model", "pool", "pod", "endpoint")
# Header-derived fields: strings parsed leniently.
HEADER_FIELDS = ("slo_ttft_ms", "slo_tpot_ms", "prediction_based_scheduling", "prediction_based_scheduling_off")


@dataclass(frozen=True)
class _Keys:
    span: tuple[str, ...]
    resource: tuple[str, ...]
    order: tuple[tuple[bool, str], ...]  # (is_resource, key) in configured order


def _compile(keys: Sequence[str]) -> _Keys:
    order = tuple((k.startswith(_RESOURCE), k.removeprefix(_RESOURCE)) for k in keys)
    return _Keys(
        span=tuple(k for is_res, k in order if not is_res),
        resource=tuple(k for is_res, k in order if is_res),
        order=order,
    )


class Mapping:
    """Reads request fields out of spans according to the configured attribute names."""

    def __init__(self, config: Attributes) -> None:
        self.default_pool = config.default_pool
        self._keys = {
            name: _compile(getattr(config, name)) for name in (*NUMBER_FIELDS, *STRING_FIELDS, *HEADER_FIELDS)
        }
        self._number_checks = tuple((name, self._keys[name]) for name in NUMBER_FIELDS)
        self._string_checks = tuple((name, self._keys[name]) for name in STRING_FIELDS)

    # ---- validation (receivers) -------------------------------------------------------------

    def check(self, span: Span) -> str | None:
        """Why the span's mapped attributes are unusable, or None. Must stay cheap: it runs per span."""
        attrs = span.attributes
        for name, keys in self._number_checks:
            for key in keys.span:
                if key in attrs and not _is_number(attrs[key]):
                    return _wrong_type(span, key, name, "a number", attrs[key])
        for name, keys in self._string_checks:
            for key in keys.span:
                if key in attrs and _as_string(attrs[key]) is None:
                    return _wrong_type(span, key, name, "a string", attrs[key])
        return None

    # ---- reading (assembler) ----------------------------------------------------------------

    def raw(self, name: str, spans: Iterable[Span]) -> AttributeValue:
        """The first configured attribute present on any of ``spans`` (in order), else None."""
        keys = self._keys[name]
        for span in spans:
            for is_resource, key in keys.order:
                source = span.resource if is_resource else span.attributes
                if key in source:
                    return source[key]
        return None

    def number(self, name: str, spans: Iterable[Span]) -> float | None:
        value = self.raw(name, spans)
        return float(value) if _is_number(value) else None

    def string(self, name: str, spans: Iterable[Span]) -> str | None:
        return _as_string(self.raw(name, spans))

    def header_number(self, name: str, spans: Iterable[Span]) -> float | None:
        """A header such as x-slo-ttft-ms: a float in a string (or a one-element array); None if unusable."""
        value = self.raw(name, spans)
        if _is_number(value):
            return float(value)
        text = _as_string(value)
        if text is None:
            return None
        try:
            number = float(text.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None

    def present(self, name: str, spans: Iterable[Span]) -> bool:
        return self.raw(name, spans) is not None

    def header_bool(self, name: str, spans: Iterable[Span]) -> bool | None:
        value = self.raw(name, spans)
        if isinstance(value, bool):
            return value
        text = _as_string(value)
        if text is None:
            return None
        lowered = text.strip().lower()
        if lowered in ("true", "1", "t", "yes"):
            return True
        if lowered in ("false", "0", "f", "no"):
            return False
        return None


def _is_number(value: AttributeValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_string(value: AttributeValue) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]  # a captured header: the OpenTelemetry convention is an array of values
    return None


def _wrong_type(span: Span, key: str, name: str, expected: str, value: AttributeValue) -> str:
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return (
        f"span {span.span_id} ({span.name}): attribute {key} ({name}) must be {expected}, "
        f"got {type(value).__name__} {shown}"
    )
