"""Fuzz target: the native OTLP protobuf decoder against the Python reference (``decode_protobuf`` and
``Mapping.check``), on generated requests and on damaged real bodies.

Contract: on any bytes both decoders agree, span for span: the same spans, the same rejection count and
message, and a refusal (``MalformedPayloadError``) exactly when the reference refuses.
"""

from __future__ import annotations

from hypothesis import given
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.records import Span
from tests.fuzz.budget import fuzz_settings
from tests.fuzz.mutate import mutated_bytes
from tests.fuzz.otlp_strategies import requests
from tests.fuzz.seeds import protobuf_bodies
from tests.support.native_decoding import KEEP, assert_same


@fuzz_settings()
@given(generated=requests())
def test_a_generated_request_decodes_alike(generated: tuple[ExportTraceServiceRequest, list[Span], int]) -> None:
    request, expected, rejected = generated
    body = request.SerializeToString()
    outcome = assert_same(body, None, None)
    assert (outcome.spans, outcome.rejected) == (expected, rejected)
    assert_same(body, KEEP)


@fuzz_settings()
@given(body=mutated_bytes(protobuf_bodies()))
def test_any_body_is_judged_alike(body: bytes) -> None:
    assert_same(body)
    assert_same(body, None, None)
