"""Fuzz target: the native OTLP decoders against the Python reference (``decode_protobuf`` / ``decode_json``
and ``Mapping.check``), on generated requests and on damaged real bodies.

Contract: on any bytes both decoders agree, span for span: the same spans, the same rejection count and
message, and a refusal (``MalformedPayloadError``) exactly when the reference refuses. The native JSON
decoder leaves a body it is unsure of to the reference, so for JSON: a body it reads itself is read as the
reference reads it, and a generated request's plain OTLP/JSON is always one it reads.
"""

from __future__ import annotations

import json

from hypothesis import given
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.records import Span
from sloscope.testing import to_otlp_json
from tests.fuzz.budget import fuzz_settings
from tests.fuzz.mutate import json_bodies, mutated_bytes
from tests.fuzz.otlp_strategies import requests
from tests.fuzz.seeds import json_bodies as otlp_json_bodies
from tests.fuzz.seeds import protobuf_bodies
from tests.support.native_decoding import KEEP, assert_same, assert_same_json


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


@fuzz_settings()
@given(generated=requests())
def test_a_generated_requests_json_is_read_natively_alike(
    generated: tuple[ExportTraceServiceRequest, list[Span], int],
) -> None:
    body = to_otlp_json(generated[0])
    assert assert_same_json(body, None, None)
    assert assert_same_json(body, KEEP)


@fuzz_settings()
@given(body=json_bodies([json.loads(b) for b in otlp_json_bodies()]))
def test_any_json_body_is_judged_alike(body: bytes) -> None:
    assert_same_json(body)
