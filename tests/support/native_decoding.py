"""The native decoder held against the Python reference on the same bytes, for the unit and fuzz tests.

The reference is what the receivers did before the native core: ``decode_protobuf(payload, keep)`` and
then ``Intake.submit``'s ``Mapping.check`` on each span that decoded. The native decoder must give the
same spans (``SpanBatch.to_spans()``), the same rejection count and message, and refuse exactly the
payloads the reference refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from sloscope import _native
from sloscope.attributes import Mapping
from sloscope.config import Attributes
from sloscope.processors import span_shapes
from sloscope.receivers.native_decode import NativeDecoder
from sloscope.receivers.otlp_decode import Decoded, MalformedPayloadError, decode_json, decode_protobuf
from sloscope.records import Span

MAPPING = Mapping(Attributes())
KEEP = MAPPING.span_keys("gen_ai.request.id", *span_shapes.KEYS)


@dataclass
class Outcome:
    spans: list[Span] | None  # None: the payload was refused
    rejected: int = 0
    message: str = ""
    refusal: str = ""


def reference(payload: bytes, keep: frozenset[str] | None, mapping: Mapping | None, *, json: bool = False) -> Outcome:
    """``mapping`` None: ``decode_protobuf`` (``decode_json``) alone, no type check."""
    try:
        decoded = decode_json(payload, keep) if json else decode_protobuf(payload, keep)
    except MalformedPayloadError as exc:
        return Outcome(None, refusal=str(exc))
    spans = []
    for span in decoded.spans:
        problem = mapping.check(span) if mapping is not None else None
        if problem is None:
            spans.append(span)
        else:
            decoded.reject(problem)
    return Outcome(spans, decoded.rejected, decoded.message)


def native(payload: bytes, keep: frozenset[str] | None, mapping: Mapping | None) -> Outcome:
    if mapping is None:
        try:
            return _checked(_native.Decoder(keep, {}).protobuf(payload))
        except _native.DecodeError as exc:
            return Outcome(None, refusal=str(exc))
    try:
        decoded = NativeDecoder(mapping, keep).protobuf(payload)
    except MalformedPayloadError as exc:
        return Outcome(None, refusal=str(exc))
    assert isinstance(decoded.batch, _native.SpanBatch) and decoded.spans == []
    return Outcome(decoded.batch.to_spans(), decoded.rejected, decoded.message)


def assert_same(payload: bytes, keep: frozenset[str] | None = KEEP, mapping: Mapping | None = MAPPING) -> Outcome:
    """Both decoders on ``payload``; returns the (equal) outcome."""
    expected, got = reference(payload, keep, mapping), native(payload, keep, mapping)
    if expected.spans is None or got.spans is None:
        assert (expected.refusal != "", got.refusal != "") == (True, True), (expected, got)
        prefix = "not a valid OTLP ExportTraceServiceRequest protobuf: "
        assert expected.refusal.startswith(prefix) and got.refusal.startswith(prefix)
        return got
    assert got.spans == expected.spans
    assert (got.rejected, got.message) == (expected.rejected, expected.message)
    return got


def _checked(outcome: _native.Outcome) -> Outcome:
    return Outcome(
        outcome.spans.to_spans(), outcome.rejected, Decoded(rejected=outcome.rejected, errors=outcome.reasons).message
    )


def assert_same_json(payload: bytes, keep: frozenset[str] | None = KEEP, mapping: Mapping | None = MAPPING) -> bool:
    """Both decoders on an OTLP/JSON body; True when the native decoder read it itself (rather than leave it
    to ``parse_json``). A body it reads itself is one the reference accepts, with the same outcome."""
    expected = reference(payload, keep, mapping, json=True)
    typed = mapping.rules()["typed"] if mapping is not None else {}
    assert isinstance(typed, dict)
    direct = _native.Decoder(keep, typed).json(payload)
    if direct is not None:
        got = _checked(direct)
        assert expected.spans is not None, expected
        assert got.spans == expected.spans
        assert (got.rejected, got.message) == (expected.rejected, expected.message)
    if mapping is not None:  # the receivers' path: native, else the reference's parse, then native protobuf
        try:
            decoded = NativeDecoder(mapping, keep).json(payload)
        except MalformedPayloadError as exc:
            assert str(exc) == expected.refusal
        else:
            assert decoded.batch is not None
            assert decoded.batch.to_spans() == expected.spans
            assert (decoded.rejected, decoded.message) == (expected.rejected, expected.message)
    return direct is not None
