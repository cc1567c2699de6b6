"""Fuzz target: OTLP/JSON decoding (``decode_json``).

Contract: a body is decoded or refused with :class:`MalformedPayloadError` carrying a short reason,
nothing else (no ``RecursionError`` from deep nesting, no ``ValueError`` from a 5000-digit integer);
a valid request's OTLP/JSON form decodes to the same spans as its protobuf form.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.receivers.otlp_decode import MalformedPayloadError, decode_json
from sloscope.records import Span
from sloscope.testing import to_otlp_json
from tests.fuzz.budget import fuzz_settings
from tests.fuzz.mutate import json_bodies
from tests.fuzz.otlp_strategies import requests
from tests.fuzz.seeds import json_bodies as otlp_json_bodies

_REASON_CHARS = 400  # a refusal quotes enough to find the fault, never the body back


@fuzz_settings()
@given(generated=requests())
def test_a_valid_request_decodes_to_its_spans(generated: tuple[ExportTraceServiceRequest, list[Span], int]) -> None:
    request, expected, rejected = generated
    decoded = decode_json(to_otlp_json(request))
    assert decoded.spans == expected
    assert decoded.rejected == rejected


def _decodes_or_is_malformed(body: bytes) -> None:
    try:
        decoded = decode_json(body)
    except MalformedPayloadError as error:
        assert len(str(error)) < _REASON_CHARS
        return
    assert all(len(s.trace_id) == 32 and len(s.span_id) == 16 for s in decoded.spans)


@fuzz_settings()
@given(body=json_bodies([json.loads(b) for b in otlp_json_bodies()]))
def test_damaged_bodies_decode_or_are_malformed(body: bytes) -> None:
    _decodes_or_is_malformed(body)


@fuzz_settings(0.25)
@given(depth=st.integers(1, 3000), opening=st.sampled_from(["[", '{"a":', '{"resourceSpans":[']))
def test_any_nesting_depth_decodes_or_is_malformed(depth: int, opening: str) -> None:
    closing = {"[": "]", '{"a":': "}", '{"resourceSpans":[': "]}"}[opening]
    _decodes_or_is_malformed((opening * depth + "1" * (opening == '{"a":') + closing * depth).encode())
