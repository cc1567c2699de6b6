"""OTLP decoding: protobuf and OTLP/JSON give the same spans; bad payloads give reasons."""

from __future__ import annotations

import gzip
import zlib

import pytest

from sloscope.receivers.otlp_decode import (
    MalformedPayloadError,
    PayloadTooLargeError,
    decode_json,
    decode_protobuf,
    decompress,
)
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes

EXHAUSTIVE_ATTRIBUTES = {
    "str": "s",
    "int": -(2**62),
    "double": 0.25,
    "bool": True,
    "bytes": b"\x00\x01",
    "array": ["a", 1, 2.5, False],
    "kvlist": {"nested": "yes", "n": 3},
}


def sample_spans() -> list:
    return [
        span(7, 1, "gateway.request", gateway_attributes(slo_ttft_ms="200"), resource={"service.name": "epp"}),
        span(7, 2, "llm_request", vllm_attributes(), parent=1),
        span(8, 3, "everything", EXHAUSTIVE_ATTRIBUTES, resource={"k8s.pod.name": "p", "n": 1}),
    ]


def test_protobuf_round_trip_keeps_every_field_and_value_kind() -> None:
    spans = sample_spans()
    decoded = decode_protobuf(export_request(spans).SerializeToString())
    assert decoded.rejected == 0
    assert decoded.spans == spans


def test_otlp_json_decodes_to_the_same_spans_as_protobuf() -> None:
    request = export_request(sample_spans())
    body = to_otlp_json(request)
    assert b'"traceId": "00000000000000000000000000000007"' in body  # hex, as OTLP/JSON requires
    assert b'"intValue": "-4611686018427387904"' in body  # 64-bit integers as strings
    assert decode_json(body).spans == decode_protobuf(request.SerializeToString()).spans


def test_invalid_ids_are_rejected_one_by_one_with_reasons() -> None:
    good = span(1, 1, "ok", {})
    zero_trace = span(0, 2, "zero-trace", {})
    request = export_request([good, zero_trace])
    request.resource_spans[0].scope_spans[0].spans[1].trace_id = bytes(16)
    bad_span_id = request.resource_spans[0].scope_spans[0].spans.add(name="short-span-id")
    bad_span_id.trace_id = bytes.fromhex("01" * 16)
    bad_span_id.span_id = b"\x01\x02"
    decoded = decode_protobuf(request.SerializeToString())
    assert [s.name for s in decoded.spans] == ["ok"]
    assert decoded.rejected == 2
    assert decoded.message == (
        "rejected 2 span(s): span 'zero-trace': trace_id must be 16 bytes, not all zero; "
        "span 'short-span-id': span_id must be 8 bytes, not all zero"
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"\xff\xff\xff", "not a valid OTLP ExportTraceServiceRequest protobuf", id="garbage bytes"),
        pytest.param(b"\x0a\x05\x0a\x03", "not a valid OTLP ExportTraceServiceRequest protobuf", id="truncated"),
    ],
)
def test_malformed_protobuf(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedPayloadError, match=reason):
        decode_protobuf(body)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"{not json", "not valid JSON", id="syntax error"),
        pytest.param(b"[1, 2]", "must be an object", id="array at top level"),
        pytest.param(b'{"resourceSpans": {}}', "'resourceSpans' must be an array", id="object for array"),
        pytest.param(
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}', "is not hex", id="non-hex id"
        ),
        pytest.param(
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"name": 5}]}]}]}',
            "not a valid OTLP/JSON ExportTraceServiceRequest",
            id="number for string",
        ),
        pytest.param(b"\xff\xfe", "not valid JSON", id="not UTF-8"),
    ],
)
def test_malformed_json(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedPayloadError, match=reason):
        decode_json(body)


def test_unknown_json_fields_are_ignored_as_the_spec_requires() -> None:
    body = b'{"resourceSpans":[{"futureField":1,"scopeSpans":[{"spans":[]}]}]}'
    assert decode_json(body).spans == []


def test_gzip_and_deflate_bodies() -> None:
    assert decompress(gzip.compress(b"abc"), "gzip", 10) == b"abc"
    assert decompress(zlib.compress(b"abc"), "deflate", 10) == b"abc"
    assert decompress(b"abc", "", 10) == b"abc"


def test_decompression_stops_at_the_limit() -> None:
    bomb = gzip.compress(bytes(10_000_000))
    with pytest.raises(PayloadTooLargeError, match="decompressed body exceeds the limit of 1000 bytes"):
        decompress(bomb, "gzip", 1000)


@pytest.mark.parametrize(
    ("body", "encoding", "reason"),
    [
        pytest.param(b"plain", "gzip", "not valid gzip", id="not gzip"),
        pytest.param(gzip.compress(b"abcdef")[:-12], "gzip", "truncated gzip", id="truncated gzip"),
        pytest.param(b"x", "br", "unsupported Content-Encoding 'br'", id="brotli"),
    ],
)
def test_bad_encodings(body: bytes, encoding: str, reason: str) -> None:
    with pytest.raises(MalformedPayloadError, match=reason):
        decompress(body, encoding, 1000)


def test_only_the_kept_span_attributes_are_converted_and_resources_stay_whole() -> None:
    spans = sample_spans()
    body = export_request(spans).SerializeToString()
    decoded = decode_protobuf(body, keep=frozenset({"gen_ai.latency.e2e", "array", "absent"}))
    assert [s.attributes for s in decoded.spans] == [
        {},
        {"gen_ai.latency.e2e": 1.0},
        {"array": ["a", 1, 2.5, False]},
    ]
    assert [s.resource for s in decoded.spans] == [s.resource for s in spans]
    assert decode_json(to_otlp_json(export_request(spans)), keep=frozenset({"str"})).spans[2].attributes == {"str": "s"}
