"""Fuzz target: OTLP protobuf decoding (``decode_protobuf``), as both transports call it.

Contract: a body is decoded or refused with :class:`MalformedPayloadError`, nothing else; a valid
request's spans are all decoded with the right ids and values, and exactly the spans that break
OTLP's id rules are rejected. The protobuf runtime is the oracle for damaged bodies: when it parses
one, every span it holds is either decoded or counted as rejected.
"""

from __future__ import annotations

from hypothesis import given
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.receivers.otlp_decode import MalformedPayloadError, decode_protobuf
from sloscope.records import Span
from tests.fuzz.budget import fuzz_settings
from tests.fuzz.mutate import mutated_bytes
from tests.fuzz.otlp_strategies import requests
from tests.fuzz.seeds import protobuf_bodies

_HEX = frozenset("0123456789abcdef")


@fuzz_settings()
@given(generated=requests())
def test_a_valid_request_decodes_to_its_spans(generated: tuple[ExportTraceServiceRequest, list[Span], int]) -> None:
    request, expected, rejected = generated
    decoded = decode_protobuf(request.SerializeToString())
    assert decoded.spans == expected
    assert decoded.rejected == rejected
    assert (decoded.message == "") == (rejected == 0)


@fuzz_settings()
@given(body=mutated_bytes(protobuf_bodies()))
def test_any_body_decodes_or_is_malformed(body: bytes) -> None:
    try:
        decoded = decode_protobuf(body)
    except MalformedPayloadError as error:
        assert str(error).startswith("not a valid OTLP ExportTraceServiceRequest protobuf")
        return
    oracle = ExportTraceServiceRequest.FromString(body)  # the runtime parsed it, so must the oracle
    held = sum(len(scope.spans) for resource in oracle.resource_spans for scope in resource.scope_spans)
    assert len(decoded.spans) + decoded.rejected == held
    for span in decoded.spans:
        assert len(span.trace_id) == 32 and set(span.trace_id) <= _HEX and span.trace_id != "0" * 32
        assert len(span.span_id) == 16 and set(span.span_id) <= _HEX and span.span_id != "0" * 16
        assert len(span.parent_span_id) in (0, 16)
