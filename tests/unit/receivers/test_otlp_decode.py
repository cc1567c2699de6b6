"""OTLP decoding: protobuf and OTLP/JSON give the same spans; bad payloads give reasons."""

from __future__ import annotations

import gzip
import re
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
from tests.support.hostile import kvlist_attribute_json, kvlist_attribute_protobuf

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


# ---- hostile bodies: every one a MalformedPayloadError with a short reason --------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # json.loads raises RecursionError (not a ValueError) past Python's recursion limit.
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "not valid JSON: nested too deeply", id="deep arrays"),
        pytest.param(
            b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "not valid JSON: nested too deeply", id="deep objects"
        ),
        pytest.param(kvlist_attribute_json(5000), "not valid JSON: nested too deeply", id="deep kvlists"),
        # Parsed by json.loads, refused by ParseDict's max_recursion_depth=100.
        pytest.param(
            kvlist_attribute_json(40),
            "not a valid OTLP/JSON ExportTraceServiceRequest: nested more than 100 levels deep$",
            id="kvlists deeper than ParseDict allows",
        ),
        # Python >= 3.11 refuses to convert integers of more than 4300 digits with a ValueError.
        pytest.param(
            b'{"a":' + b"9" * 5000 + b"}", "not valid JSON: a number has more than 4300 digits$", id="huge int"
        ),
        pytest.param(
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":' + b"9" * 4400 + b"}]}]}]}",
            "a number has more than 4300 digits",
            id="huge int in a field",
        ),
        pytest.param(
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":1e999}]}]}]}',
            re.escape(
                "Couldn't parse integer: inf at ExportTraceServiceRequest.resourceSpans[0].scopeSpans[0].spans[0]"
            ),
            id="huge float for an integer",
        ),
        pytest.param(
            b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":-1e999}}]}}]}',
            "Couldn't parse -Infinity or value too small",
            id="huge float for a double",
        ),
        pytest.param(
            b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":NaN}}]}}]}',
            "not valid JSON: NaN is not a JSON number$",
            id="NaN literal",
        ),
        pytest.param(b'{"a":-Infinity}', "not valid JSON: -Infinity is not a JSON number$", id="Infinity literal"),
        # Found by tests/fuzz/test_otlp_json.py (minimal inputs): upb's field-name lookup raised SystemError
        # on a lone surrogate escape in a name or an enum value, and an enum given 1e999 raised OverflowError.
        pytest.param(
            b'{"\\ud800":1}', "not valid Unicode \\(a lone surrogate escape\\)", id="lone surrogate in a name"
        ),
        pytest.param(
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":"\\ud800"}]}]}]}',
            "not valid Unicode",
            id="lone surrogate for an enum",
        ),
        pytest.param(
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":1e999}]}]}]}',
            "ExportTraceServiceRequest: cannot convert float infinity to integer$",
            id="huge float for an enum",
        ),
    ],
)
def test_hostile_json_is_malformed_with_a_short_reason(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedPayloadError, match=reason) as raised:
        decode_json(body)
    assert len(str(raised.value)) < 400


def test_json_as_deep_as_parsedict_allows_decodes() -> None:
    decoded = decode_json(kvlist_attribute_json(30))
    assert decoded.spans == []  # a resource without spans: nothing to decode, nothing refused


def test_protobuf_nesting_is_bounded_by_the_runtimes_depth_limit() -> None:
    # upb decodes with a depth limit of 100 messages (kUpb_WireFormat_DefaultDepthLimit,
    # upb/wire/internal/constants.h:11 at protobuf 354069cc; python/message.c PyUpb_Message_MergeFromString
    # passes it at 01f51aab): the request, resource spans, scope spans, span and key-value take 5 levels,
    # each kvlist 3 more (AnyValue, KeyValueList, KeyValue), so 31 nested kvlists decode and 32 do not.
    decoded = decode_protobuf(kvlist_attribute_protobuf(31))
    value = decoded.spans[0].attributes["k"]
    for _ in range(31):
        assert isinstance(value, dict)
        value = value["k"]
    assert value == 1
    with pytest.raises(MalformedPayloadError, match="not a valid OTLP ExportTraceServiceRequest protobuf"):
        decode_protobuf(kvlist_attribute_protobuf(32))


def test_gzip_members_are_decoded_whole() -> None:
    # RFC 1952 2.2: a gzip file is a series of members; Go's gzip.Reader (the Collector's) reads them all.
    body = gzip.compress(b"ab") + gzip.compress(b"") + gzip.compress(b"cd")
    assert decompress(body, "gzip", 10) == b"abcd"


def test_gzip_members_share_one_limit() -> None:
    body = gzip.compress(bytes(600)) + gzip.compress(bytes(600))
    assert decompress(body, "gzip", 1200) == bytes(1200)
    with pytest.raises(PayloadTooLargeError, match="decompressed body exceeds the limit of 1000 bytes"):
        decompress(body, "gzip", 1000)


@pytest.mark.parametrize(
    ("body", "encoding", "reason"),
    [
        pytest.param(
            gzip.compress(b"ab") + b"junk",
            "gzip",
            "^4 bytes of trailing data after gzip member 1 \\(not another gzip member\\)$",
            id="garbage after gzip",
        ),
        pytest.param(
            gzip.compress(b"ab") + bytes(8),
            "gzip",
            "^8 bytes of trailing data after gzip member 1",
            id="zero padding after gzip",  # Python's gzip module skips it; Go's reader (the Collector's) refuses it
        ),
        pytest.param(
            gzip.compress(b"ab") + gzip.compress(b"cd")[:-3],
            "gzip",
            "^body is truncated gzip \\(member 2\\)$",
            id="truncated second member",
        ),
        pytest.param(
            gzip.compress(b"ab") + b"\x1f\x8bnot a member",
            "gzip",
            "^body is not valid gzip \\(member 2\\): ",
            id="broken second member",
        ),
        pytest.param(
            zlib.compress(b"ab") + b"junk",
            "deflate",
            "^4 bytes of trailing data after the deflate stream$",
            id="garbage after deflate",
        ),
        pytest.param(zlib.compress(b"ab") * 2, "deflate", "trailing data after the deflate stream", id="two deflates"),
    ],
)
def test_trailing_data_after_a_compressed_stream_is_refused(body: bytes, encoding: str, reason: str) -> None:
    with pytest.raises(MalformedPayloadError, match=reason):
        decompress(body, encoding, 1000)
