"""The native OTLP/JSON decoder (native/src/decode/json.rs) against the Python reference.

The reference is ``decode_json`` (``json.loads``, the hex ids rewritten, ``ParseDict`` with
``ignore_unknown_fields=True``; google/protobuf/json_format.py of protobuf 7.36.2) and ``Mapping.check``.
The native decoder reads a body itself only when it is sure to read it the same way, and leaves every
other body (malformed ones included) to the reference: a body it reads must give the reference's spans
and rejections, and the plain OTLP/JSON that exporters send must be one it reads
(``tests/support/native_decoding.py``).
"""

from __future__ import annotations

import json

import bench.payloads
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.fuzz.seeds import json_bodies
from tests.support.hostile import kvlist_attribute_json
from tests.support.native_decoding import KEEP, assert_same_json

EXHAUSTIVE = {
    "str": 's \u00e9 \U0001f600 "q" \\ \n',
    "int": -(2**62),
    "double": -0.0,
    "tiny": 5e-324,
    "bool": False,
    "bytes": b"\x00\x01\xfb\xff",
    "array": ["a", 1, 2.5, False, [b"x"], {"k": None}],
    "kvlist": {"nested": "yes", "n": {"deeper": [1]}},
}
KEEPS = [None, KEEP, frozenset({"str", "array", "absent"})]


def _export() -> ExportTraceServiceRequest:
    return export_request(
        [
            span(7, 1, "gateway.request", gateway_attributes(slo_ttft_ms="200"), resource={"service.name": "epp"}),
            span(7, 2, "llm_request", vllm_attributes(), parent=1),
            span(8, 3, "everything", EXHAUSTIVE, resource={"k8s.pod.name": "p", "n": 1}),
            span(8, 4, "typed", {"gen_ai.latency.e2e": "slow", "gen_ai.request.model": 3}),
        ]
    )


@pytest.mark.parametrize("keep", KEEPS, ids=["all", "mapped", "some"])
def test_plain_otlp_json_is_read_natively_and_alike(keep: frozenset[str] | None) -> None:
    bodies = [to_otlp_json(_export())]
    payloads = bench.payloads.build(1024, 512).payloads + bench.payloads.build_llmd(1024, 512, pd_share=0.5).payloads
    bodies += [to_otlp_json(ExportTraceServiceRequest.FromString(p)) for p in payloads]
    for body in bodies:
        assert assert_same_json(body, keep)
        assert assert_same_json(body, keep, None)


def test_the_fuzz_seeds_are_judged_alike() -> None:
    for body in json_bodies():
        assert_same_json(body)


def _document(span_fields: str, resource: str = '{"attributes": []}') -> bytes:
    template = (
        '{"resourceSpans": [{"resource": RESOURCE, "scopeSpans": [{"scope": {"name": "s"}, "spans": [{SPAN}]}]}]}'
    )
    return template.replace("RESOURCE", resource).replace("SPAN", span_fields).encode()


IDS = '"traceId": "0102030405060708090a0b0c0d0e0f10", "spanId": "0102030405060708"'


@pytest.mark.parametrize(
    ("fields", "native"),
    [
        pytest.param(IDS, True, id="ids only"),
        pytest.param(IDS.replace("traceId", "trace_id").replace("spanId", "span_id"), True, id="snake_case"),
        pytest.param(IDS.upper().replace("TRACEID", "traceId").replace("SPANID", "spanId"), True, id="upper hex"),
        pytest.param(IDS + ', "startTimeUnixNano": 17, "endTimeUnixNano": "18446744073709551615"', True, id="times"),
        pytest.param(IDS + ', "kind": "SPAN_KIND_SERVER", "status": {"code": 2, "message": "m"}', True, id="enums"),
        pytest.param(IDS + ', "kind": 9, "status": {"code": "STATUS_CODE_ERROR"}', True, id="open enums"),
        pytest.param(IDS + ', "kind": "SPAN_KIND_NEW"', False, id="unknown enum name"),
        pytest.param(IDS + ', "kind": 1.0', False, id="enum as a float"),
        pytest.param(IDS + ', "kind": 4294967296', False, id="enum out of range"),
        pytest.param(IDS + ', "startTimeUnixNano": -1', False, id="negative time"),
        pytest.param(IDS + ', "startTimeUnixNano": "1 "', False, id="integer with a space"),
        pytest.param(IDS + ', "startTimeUnixNano": "1_0"', False, id="integer with an underscore"),
        pytest.param(IDS + ', "startTimeUnixNano": 1e3', False, id="integer as a float"),
        pytest.param(IDS + ', "name": null', False, id="null"),
        pytest.param(IDS + ', "name": 5', False, id="number for a string"),
        pytest.param(IDS + ', "name": "a", "name": "b"', False, id="duplicate key"),
        pytest.param(IDS + ', "trace_id": "0102030405060708090a0b0c0d0e0f10"', False, id="both names"),
        pytest.param(IDS + ', "futureField": {"deep": [1, 2, {"x": null}]}', True, id="unknown field"),
        pytest.param(IDS + ', "parentSpanId": ""', True, id="empty parent"),
        pytest.param(IDS + ', "parentSpanId": "01 02"', False, id="hex with a space"),
        pytest.param('"traceId": "00", "spanId": "0102030405060708", "name": "short"', True, id="short trace id"),
        pytest.param('"spanId": "0102030405060708", "name": "\\u00e9 no trace"', True, id="no trace id"),
        pytest.param(IDS + ', "parentSpanId": "010203"', True, id="short parent"),
        pytest.param(IDS + ', "events": [{"timeUnixNano": "5", "name": "e", "attributes": []}]', True, id="event"),
        pytest.param(IDS + ', "links": [{"traceId": "01", "spanId": "", "flags": 1}]', True, id="link"),
        pytest.param(IDS + ', "links": [{"traceId": "zz"}]', False, id="link id not hex"),
        pytest.param(IDS + ', "events": [5]', False, id="event not an object"),
        pytest.param(IDS + ', "flags": 256, "droppedAttributesCount": 4294967295', True, id="uint32s"),
        pytest.param(IDS + ', "flags": 4294967296', False, id="fixed32 out of range"),
        pytest.param(IDS + ', "status": {}', True, id="empty status"),
    ],
)
def test_span_fields(fields: str, native: bool) -> None:
    assert assert_same_json(_document(fields), None) == native


def _attribute(value: str) -> bytes:
    attributes = '[{"key": "k", "value": V}, {"key": "gen_ai.latency.e2e", "value": V}]'.replace("V", value)
    return _document(IDS + ', "attributes": ' + attributes)


KVLIST_DUPLICATES = '{"kvlistValue": {"values": [{"key": "a"}, {"key": "a", "value": {"intValue": 2}}]}}'


@pytest.mark.parametrize(
    ("value", "native"),
    [
        pytest.param('{"stringValue": "x"}', True, id="string"),
        pytest.param('{"string_value": "x"}', True, id="snake_case"),
        pytest.param('{"intValue": "-9223372036854775808"}', True, id="int64 as a string"),
        pytest.param('{"intValue": 9223372036854775807}', True, id="int64 as a number"),
        pytest.param('{"intValue": 9223372036854775808}', False, id="int64 out of range"),
        pytest.param('{"doubleValue": 1}', True, id="double as an integer"),
        pytest.param('{"doubleValue": -0}', True, id="minus zero integer is zero"),
        pytest.param('{"doubleValue": -0.0}', True, id="minus zero"),
        pytest.param('{"doubleValue": 123456789012345678901234567890}', True, id="double from a long integer"),
        pytest.param('{"doubleValue": 1.7976931348623157e308}', True, id="largest double"),
        pytest.param('{"doubleValue": 1e999}', False, id="double overflow"),
        pytest.param('{"doubleValue": "Infinity"}', True, id="Infinity"),
        pytest.param('{"doubleValue": "-Infinity"}', True, id="minus Infinity"),
        pytest.param('{"doubleValue": "1.5"}', False, id="double as a string"),
        pytest.param('{"doubleValue": true}', False, id="double as a bool"),
        pytest.param('{"boolValue": true}', True, id="bool"),
        pytest.param('{"boolValue": "true"}', False, id="bool as a string"),
        pytest.param('{"bytesValue": "AAH7/w=="}', True, id="bytes"),
        pytest.param('{"bytesValue": "AAH7_w"}', True, id="urlsafe bytes, unpadded"),
        pytest.param('{"bytesValue": "A"}', False, id="bytes one char over"),
        pytest.param('{"bytesValue": "AA AA"}', False, id="bytes with a space"),
        pytest.param('{"arrayValue": {"values": [{"stringValue": "h"}, {}]}}', True, id="array"),
        pytest.param('{"arrayValue": {}}', True, id="empty array"),
        pytest.param(
            '{"kvlistValue": {"values": [{"key": "a"}, {"key": "a", "value": {"intValue": 2}}]}}',
            True,
            id="kvlist duplicates",
        ),
        pytest.param("{}", True, id="empty value"),
        pytest.param('{"stringValue": "x", "intValue": 1}', False, id="two oneof members"),
        pytest.param('{"stringValueStrindex": 1}', False, id="strindex"),
        pytest.param('{"stringValue": "\\ud800"}', False, id="lone surrogate"),
        pytest.param('{"stringValue": "\\ud83d\\ude00"}', True, id="surrogate pair"),
        pytest.param("null", False, id="null value"),
        pytest.param("[]", False, id="array for a message"),
    ],
)
def test_attribute_values(value: str, native: bool) -> None:
    assert assert_same_json(_attribute(value), None) == native
    assert_same_json(_attribute(value))


def test_duplicate_attribute_keys_behave_as_a_dict() -> None:
    fields = IDS + ', "attributes": [{"key": "a", "value": {"intValue": 1}}, {"key": "b"}, {"key": "a", "value": {}}]'
    resource = '{"attributes": [{"key": "r", "value": {"intValue": 1}}, {"key": "r", "value": {"boolValue": true}}]}'
    assert assert_same_json(_document(fields, resource), None)


@pytest.mark.parametrize("depth", [29, 30, 31, 40])
def test_nesting_at_parsedicts_limit(depth: int) -> None:
    # 30 nested kvlists decode in the reference (test_otlp_decode.py), 40 exceed max_recursion_depth=100.
    assert assert_same_json(kvlist_attribute_json(depth), None) == (depth <= 31)


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"resourceSpans": {}}',
        b'{"resourceSpans": [5]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [5]}]}]}',
        b'{"a": NaN}',
        b'{"a": ' + b"9" * 5000 + b"}",
        b"\xff\xfe",
        b"\xef\xbb\xbf{}",
        b'{"\\ud800": 1}',
        b"[" * 5000 + b"]" * 5000,
        b"",
        b"{}",
        b'{"resourceSpans": null}',
        b'{"resourceSpans": [], "resource_spans": []}',
    ],
)
def test_malformed_or_unusual_bodies_are_left_to_the_reference(body: bytes) -> None:
    assert_same_json(body)


def test_a_reordered_document_reads_alike() -> None:
    document = json.loads(to_otlp_json(_export()))
    for resource_spans in document["resourceSpans"]:
        resource_spans["scope_spans"] = resource_spans.pop("scopeSpans")
        for scope_spans in resource_spans["scope_spans"]:
            for item in scope_spans["spans"]:
                item["start_time_unix_nano"] = int(item.pop("startTimeUnixNano"))
                item["kind"] = 2
    assert assert_same_json(json.dumps(document, ensure_ascii=False).encode())
