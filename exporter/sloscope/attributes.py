"""The attribute mapping: which span or resource attribute gives each request field, and its type.

Compiled once from :class:`sloscope.config.Attributes`. The receivers use :meth:`Mapping.check`
to reject spans whose mapped attributes have the wrong type (a clear OTLP partial-success
message rather than a silently wrong number); the assembler uses the ``*_of`` readers.

Header-derived fields follow the EPP: a missing or unparsable ``x-slo-*`` header means
"no SLO", never an error. Model-server numbers (``gen_ai.*``) must be numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sloscope.config import Attributes
from sloscope.records import AttributeValue, Span

_RESOURCE = "resource."

# Fields whose value must be an OTLP int or double when present.
NUMBER_FIELDS = (
    "prefix_cache_score",
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
STRING_FIELDS = ("requested_model", "target_model", "pool", "pod", "endpoint", "gateway")
# Identifiers: a string, or an integer read as its decimal string (TensorRT-LLM's gen_ai.request.id).
ID_FIELDS = ("request_id",)
# Header-derived fields: strings parsed leniently.
HEADER_FIELDS = ("slo_ttft_ms", "slo_tpot_ms", "prediction_based_scheduling", "prediction_based_scheduling_off")


def _compile(keys: Sequence[str]) -> tuple[tuple[bool, str], ...]:
    """(is_resource, key) pairs in configured order; ``resource.`` names a resource attribute."""
    return tuple((k.startswith(_RESOURCE), k.removeprefix(_RESOURCE)) for k in keys)


def _span_keys(order: tuple[tuple[bool, str], ...]) -> list[str]:
    return [key for is_resource, key in order if not is_resource]


class Mapping:
    """Reads request fields out of spans according to the configured attribute names."""

    def __init__(self, config: Attributes) -> None:
        self.default_pool = config.default_pool
        self._order = {
            name: _compile(getattr(config, name))
            for name in (*NUMBER_FIELDS, *STRING_FIELDS, *ID_FIELDS, *HEADER_FIELDS)
        }
        # span attribute key -> (field, expected type), for the per-span check at intake
        self._typed: dict[str, tuple[str, str]] = {}
        for kind, names in (
            ("a string", STRING_FIELDS),
            ("a number", NUMBER_FIELDS),
            ("a string or an integer", ID_FIELDS),
        ):
            for name in names:
                for key in _span_keys(self._order[name]):
                    self._typed.setdefault(key, (name, kind))
        self._number_keys = frozenset(k for k, (_, kind) in self._typed.items() if kind == "a number")
        self._string_keys = frozenset(k for k, (_, kind) in self._typed.items() if kind == "a string")
        self._id_keys = frozenset(k for k, (_, kind) in self._typed.items() if kind == "a string or an integer")

    def span_keys(self, *extra: str) -> frozenset[str]:
        """Every span attribute some field reads (plus ``extra``): what the decoder needs to convert."""
        keys = {key for order in self._order.values() for key in _span_keys(order)}
        return frozenset(keys.union(extra))

    def rules(self) -> dict[str, object]:
        """The compiled mapping as plain data, for the native core (``sloscope._native``), which must read
        spans exactly as this class does: each field's ``(is_resource, key)`` order, and each span key's
        ``(field, expected kind)`` checked at intake."""
        return {
            "default_pool": self.default_pool,
            "order": {name: list(order) for name, order in self._order.items()},
            "typed": dict(self._typed),
        }

    # ---- validation (receivers) -------------------------------------------------------------

    def check(self, span: Span) -> str | None:
        """Why the span's mapped attributes are unusable, or None. Must stay cheap: it runs per span."""
        attrs = span.attributes
        keys = attrs.keys()
        # Set intersections run in C, so only the few mapped keys a span carries are looked at.
        bad = [k for k in keys & self._number_keys if type(attrs[k]) not in _NUMBER_TYPES]
        bad += [k for k in keys & self._string_keys if _as_string(attrs[k]) is None]
        bad += [k for k in keys & self._id_keys if _as_id(attrs[k]) is None]
        if not bad:
            return None
        key = next(k for k in attrs if k in bad)  # the first in the span's own order: the same message every run
        name, kind = self._typed[key]
        return _wrong_type(span, key, name, kind, attrs[key])

    # ---- reading (assembler) ----------------------------------------------------------------

    def raw(self, name: str, view: View) -> AttributeValue:
        """The value of the first configured attribute the view holds, else None."""
        attrs, resource = view.attributes, view.resource
        for is_resource, key in self._order[name]:
            source = resource if is_resource else attrs
            if key in source:
                return source[key]
        return None

    def number(self, name: str, view: View) -> float | None:
        attrs, resource = view.attributes, view.resource  # raw() inlined: this runs a dozen times per request
        for is_resource, key in self._order[name]:
            source = resource if is_resource else attrs
            if key in source:
                value = source[key]
                return float(value) if type(value) in _NUMBER_TYPES else None
        return None

    def string(self, name: str, view: View) -> str | None:
        return _as_string(self.raw(name, view))

    def identifier(self, name: str, view: View) -> str | None:
        return _as_id(self.raw(name, view))

    def header_number(self, name: str, view: View) -> float | None:
        """A header such as x-slo-ttft-ms: a float in a string (or a one-element array); None if unusable."""
        value = self.raw(name, view)
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

    def present(self, name: str, view: View) -> bool:
        return self.raw(name, view) is not None

    def header_bool(self, name: str, view: View) -> bool | None:
        value = self.raw(name, view)
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


class View:
    """The attributes of several spans merged, nearest first: where two spans carry the same attribute,
    the one earlier in the list wins. Fields are then read key by key in configured order."""

    __slots__ = ("attributes", "resource")

    def __init__(self, spans: Sequence[Span]) -> None:
        if len(spans) == 1:  # the common single-span case needs no copy
            self.attributes = spans[0].attributes
            self.resource = spans[0].resource
            return
        attributes: dict[str, AttributeValue] = {}
        resource: dict[str, AttributeValue] = {}
        for span in reversed(spans):
            attributes.update(span.attributes)
            resource.update(span.resource)
        self.attributes = attributes
        self.resource = resource


_NUMBER_TYPES = (int, float)  # exact types: bool is an int subclass but never a number here


def _is_number(value: AttributeValue) -> bool:
    return type(value) in _NUMBER_TYPES


def _as_string(value: AttributeValue) -> str | None:
    if type(value) is str:
        return value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]  # a captured header: the OpenTelemetry convention is an array of values
    return None


def _as_id(value: AttributeValue) -> str | None:
    if type(value) is int:
        return str(value)
    return _as_string(value)


def _wrong_type(span: Span, key: str, name: str, expected: str, value: AttributeValue) -> str:
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return (
        f"span {span.span_id} ({span.name}): attribute {key} ({name}) must be {expected}, "
        f"got {type(value).__name__} {shown}"
    )
