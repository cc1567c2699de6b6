"""The native OTLP decoder (native/src/decode/) against the Python reference, byte for byte.

The reference is ``decode_protobuf`` (upb, protobuf 7.36.2, parses the message) followed by
``Mapping.check`` per span (``Intake.submit``): the native decoder must give the same spans, the same
rejections in the same words, and refuse the same payloads (``tests/support/native_decoding.py``).
The wire-format rules pinned by the hand-built payloads below are upb's, as the installed runtime
applies them: a known field given another wire type is skipped as unknown (upb/wire/decode.c:764-789 at
protobuf e712d276 maps the pairing to ``kUpb_DecodeOp_UnknownField``), a ``string`` must be UTF-8,
messages and groups nest at most 100 deep (``kUpb_WireFormat_DefaultDepthLimit``,
upb/wire/internal/constants.h:11), a varint keeps its low 64 bits. Field numbers are those of the
installed opentelemetry-proto 1.45.2 descriptors (trace_pb2.py, common_pb2.py, resource_pb2.py).
"""

from __future__ import annotations

import asyncio
import math
import random

import bench.payloads
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.receivers.decode_pool import Decoder
from sloscope.receivers.native_decode import NativeDecoder
from sloscope.receivers.otlp_decode import MalformedPayloadError, decode_protobuf, parse_json
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.fuzz.seeds import json_bodies, protobuf_bodies
from tests.support.hostile import kvlist_attribute_protobuf
from tests.support.native_decoding import KEEP, MAPPING, assert_same, native

EXHAUSTIVE = {
    "str": "s",
    "int": -(2**62),
    "double": -0.0,
    "bool": True,
    "bytes": b"\x00\x01",
    "array": ["a", 1, 2.5, False, [b"x"], {"k": None}],
    "kvlist": {"nested": "yes", "n": {"deeper": [1]}},
    "unicode ключ": "значение \u2028 \x00",
}
KEEPS = [None, KEEP, frozenset({"str", "array", "absent"})]


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _ld(field: int, body: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(body)) + body


def _span(body: bytes, resource: bytes = b"") -> bytes:
    """An export of one ResourceSpans (``resource``: its Resource body) holding one span body."""
    return _ld(1, (_ld(1, resource) if resource else b"") + _ld(2, _ld(2, body)))


IDS = _ld(1, b"\x01" * 16) + _ld(2, b"\x02" * 8)


def _kv(key: bytes, *values: bytes) -> bytes:
    return _ld(1, key) + b"".join(_ld(2, v) for v in values)


def _small_export() -> bytes:
    return export_request(
        [
            span(7, 1, "gateway.request", gateway_attributes(slo_ttft_ms="200"), resource={"service.name": "epp"}),
            span(7, 2, "llm_request", vllm_attributes(), parent=1),
            span(8, 3, "everything", EXHAUSTIVE, resource={"k8s.pod.name": "p", "n": 1}),
        ]
    ).SerializeToString()


@pytest.mark.parametrize("keep", KEEPS, ids=["all", "mapped", "some"])
def test_the_bench_payloads_decode_alike(keep: frozenset[str] | None) -> None:
    # bench/payloads.py: the late-2025 gateway + vLLM shape, and llm-d agent sessions with P/D requests
    # (the demo's span emitter through the OpenTelemetry SDK's encoder)
    payloads = bench.payloads.build(3000, 512, pods=4, seed=3).payloads
    payloads += bench.payloads.build_llmd(3000, 512, pd_share=0.5, seed=3).payloads
    for payload in payloads:
        outcome = assert_same(payload, keep)
        assert outcome.spans and outcome.rejected == 0


@pytest.mark.parametrize("keep", KEEPS, ids=["all", "mapped", "some"])
def test_the_fuzz_seeds_decode_alike(keep: frozenset[str] | None) -> None:
    # The OTLP bodies sloscope's tests send and the OpenTelemetry SDK's encoder sends (tests/fuzz/seeds.py;
    # /work/shared/fixtures holds no OTLP export), and their OTLP/JSON forms parsed back to protobuf.
    bodies = [*protobuf_bodies(), *_json_as_protobuf(), _small_export()]
    for body in bodies:
        assert_same(body, keep)
        assert_same(body, keep, None)


def _json_as_protobuf() -> list[bytes]:
    """The seeds' OTLP/JSON forms, back in protobuf (every one of them reads: their link ids are hex too)."""
    return [parse_json(body).SerializeToString() for body in json_bodies()]


def test_every_truncation_of_a_small_export_is_judged_alike() -> None:
    body = _small_export()
    refused = 0
    for end in range(len(body) + 1):
        refused += assert_same(body[:end]).spans is None
    assert 0 < refused < len(body)


def test_every_bit_flip_of_a_small_export_is_judged_alike() -> None:
    body = _small_export()
    for bit in range(len(body) * 8):
        flipped = bytearray(body)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert_same(bytes(flipped))
        assert_same(bytes(flipped), None, None)


def test_random_splices_are_judged_alike() -> None:
    rng = random.Random(16)
    seeds = [*protobuf_bodies(), _small_export()]
    for _ in range(2000):
        body = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(body) + 1)
            body[at:at] = rng.choice([b"\x00", b"\xff", b"\x80", b"\x0a", b"\x12", b"\x0b", b"\x0c", b"\x7f"])
        assert_same(bytes(body))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_span(IDS + _tag(5, 0) + _varint(3)), id="name given as a varint: unknown"),
        pytest.param(_span(_tag(1, 0) + _varint(3) + _ld(2, b"\x02" * 8)), id="trace id given as a varint"),
        pytest.param(_span(IDS + _tag(7, 0) + _varint(3) + _ld(8, b"12345678")), id="times of other wire types"),
        pytest.param(_ld(1, _ld(2, _tag(2, 0) + _varint(1))), id="spans given as a varint"),
        pytest.param(_span(IDS + _ld(5, b"\xff")), id="name not UTF-8"),
        pytest.param(_span(IDS + _ld(99, b"\xff")), id="unknown field not UTF-8"),
        pytest.param(_span(IDS + _ld(5, b"\xed\xa0\x80")), id="name holding a surrogate"),
        pytest.param(_span(IDS + _ld(11, _ld(2, b"\xc0\x80"))), id="event name overlong"),
        pytest.param(_span(IDS + _ld(13, _ld(4, _kv(b"k", _ld(1, b"\xff"))))), id="link attribute not UTF-8"),
        pytest.param(_ld(1, _ld(2, _ld(1, _ld(1, b"\xff")))), id="scope name not UTF-8"),
        pytest.param(_ld(1, _ld(1, _ld(3, _ld(3, b"\xff")))), id="entity ref id key not UTF-8"),
        pytest.param(_ld(1, _ld(3, b"\xff")), id="schema url not UTF-8"),
        pytest.param(_span(IDS + _ld(9, _kv(b"\xff", _tag(3, 0) + b"\x01"))), id="unkept key not UTF-8"),
        pytest.param(_span(IDS + _ld(9, _ld(1, b"\xff") + _ld(1, b"k"))), id="overwritten key not UTF-8"),
        pytest.param(_span(IDS + _ld(9, _kv(b"k", _ld(1, b"\xff")))), id="unkept value not UTF-8"),
        pytest.param(_tag(0, 0) + b"\x01", id="field 0"),
        pytest.param(b"\x0e", id="wire type 6"),
        pytest.param(b"\x0f", id="wire type 7"),
        pytest.param(_tag(5, 4), id="end group at the top"),
        pytest.param(_tag(5, 3) + _tag(6, 0) + b"\x01" + _tag(5, 4), id="unknown group"),
        pytest.param(_tag(5, 3) + _tag(6, 4), id="group closed by another"),
        pytest.param(_tag(5, 3), id="group never closed"),
        pytest.param(_ld(1, _tag(5, 4)), id="end group inside a message"),
        pytest.param(_tag(1, 3) + _tag(1, 4), id="resource spans given as a group"),
        pytest.param(_tag(9, 3) * 100 + _tag(9, 4) * 100, id="100 nested groups"),
        pytest.param(_tag(9, 3) * 101 + _tag(9, 4) * 101, id="101 nested groups"),
        pytest.param(_span(IDS + _tag(20, 3) * 97 + _tag(20, 4) * 97), id="groups in a span to the limit"),
        pytest.param(_span(IDS + _tag(20, 3) * 98 + _tag(20, 4) * 98), id="groups in a span past the limit"),
        pytest.param(_tag(9, 0) + b"\xff" * 9 + b"\x7f", id="ten-byte varint"),
        pytest.param(_tag(9, 0) + b"\xff" * 10 + b"\x01", id="eleven-byte varint"),
        pytest.param(b"\x88\x80\x80\x80\x00\x01", id="five-byte tag"),
        pytest.param(b"\x88\x80\x80\x80\x10\x01", id="tag past 32 bits"),
        pytest.param(b"\x88\x80\x80\x80\x80\x00\x01", id="six-byte tag"),
        pytest.param(_varint(((1 << 29) - 1) << 3) + b"\x01", id="largest field number"),
        pytest.param(_tag(1, 2) + _varint(1 << 31), id="length past 2 GiB"),
        pytest.param(_tag(1, 2) + _varint(5) + b"ab", id="length past the end"),
        pytest.param(_span(IDS + _tag(7, 1) + b"1234"), id="truncated fixed64"),
        pytest.param(_tag(9, 5) + b"12", id="truncated fixed32"),
        pytest.param(b"", id="empty"),
    ],
)
def test_wire_format_edges_are_judged_alike(body: bytes) -> None:
    assert_same(body, None)


@pytest.mark.parametrize("depth", [30, 31, 32, 33])
def test_the_depth_limit_is_the_runtimes(depth: int) -> None:
    # 31 kvlists in a span attribute decode, 32 do not (test_otlp_decode.py pins the reference).
    assert (assert_same(kvlist_attribute_protobuf(depth), None).spans is None) == (depth >= 32)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_span(IDS + _ld(15, _tag(3, 0) + _varint(1 << 40 | 5))), id="status code: low 32 bits"),
        pytest.param(_span(IDS + _ld(15, _tag(3, 0) + _varint(2**64 - 1))), id="status code -1"),
        pytest.param(_span(IDS + _ld(15, _ld(2, b"a")) + _ld(15, _tag(3, 0) + b"\x02")), id="status merged"),
        pytest.param(_span(IDS + _ld(5, b"a") + _ld(5, b"b") + _ld(2, b"\x03" * 8)), id="last scalar wins"),
        pytest.param(
            _span(IDS, _ld(1, _kv(b"a", _ld(1, b"x"))) + _ld(1, _kv(b"b", _ld(1, b"y")))), id="attributes twice"
        ),
        pytest.param(
            _ld(1, _ld(2, _ld(2, IDS)) + _ld(1, _ld(1, _kv(b"late", _ld(1, b"r"))))), id="resource after spans"
        ),
        pytest.param(
            _ld(
                1,
                _ld(1, _ld(1, _kv(b"a", _ld(1, b"x")))) + _ld(2, _ld(2, IDS)) + _ld(1, _ld(1, _kv(b"a", _ld(1, b"z")))),
            ),
            id="resource given twice merges",
        ),
        pytest.param(_span(IDS + _ld(9, _kv(b"str", _ld(1, b"x"), _tag(3, 0) + b"\x05"))), id="value twice: merged"),
        pytest.param(_span(IDS + _ld(9, _kv(b"str", _ld(1, b"x"), b""))), id="value twice, second empty"),
        pytest.param(
            _span(IDS + _ld(9, _kv(b"kv", _ld(6, _ld(1, _kv(b"a", _ld(1, b"1")))), _ld(6, _ld(1, _kv(b"b")))))),
            id="kvlists merged",
        ),
        pytest.param(
            _span(
                IDS + _ld(9, _kv(b"kv", _ld(6, _ld(1, _kv(b"a"))) + _tag(3, 0) + b"\x01" + _ld(6, _ld(1, _kv(b"b")))))
            ),
            id="kvlist reset by another member",
        ),
        pytest.param(
            _span(IDS + _ld(9, _kv(b"arr", _ld(5, _ld(1, _ld(1, b"a"))) + _ld(5, _ld(1, _tag(2, 0) + b"\x02"))))),
            id="arrays merged",
        ),
        pytest.param(
            _span(IDS + _ld(9, _kv(b"kv", _ld(6, _ld(1, _kv(b"a")) + _ld(1, _kv(b"a", _ld(1, b"2"))))))),
            id="kvlist dup",
        ),
        pytest.param(_span(IDS + _ld(9, _kv(b"int", _tag(3, 1) + b"12345678"))), id="int as fixed64: unset"),
        pytest.param(_span(IDS + _ld(9, _kv(b"s", _tag(8, 0) + b"\x03"))), id="string_value_strindex: None"),
        pytest.param(_span(IDS + _ld(9, _kv(b"b", _tag(2, 0) + _varint(1 << 40)))), id="bool from a wide varint"),
        pytest.param(_span(IDS + _ld(9, _kv(b"i", _tag(3, 0) + b"\xff" * 9 + b"\x01"))), id="int of ten bytes"),
        pytest.param(_span(IDS + _ld(9, _ld(2, _ld(1, b"no key")))), id="no key"),
        pytest.param(_span(IDS + _ld(9, _ld(1, b"no value"))), id="no value"),
        pytest.param(_span(IDS + _ld(4, bytes(8))), id="all-zero parent is kept"),
    ],
)
def test_protobuf_merge_rules_are_the_runtimes(body: bytes) -> None:
    outcome = assert_same(body, None, None)
    assert outcome.spans is not None and len(outcome.spans) == 1


def test_a_nan_stays_a_nan() -> None:
    body = _span(IDS + _ld(9, _kv(b"d", _tag(4, 1) + b"\x01\x00\x00\x00\x00\x00\xf8\x7f")))
    spans = native(body, None, None).spans
    assert spans is not None and math.isnan(spans[0].attributes["d"])


def test_invalid_ids_are_rejected_one_by_one_with_the_same_reasons() -> None:
    spans = [
        _ld(2, b"\x02" * 8) + _ld(5, "zero trace 'quoted' \u00e9".encode()),
        _ld(1, bytes(16)) + _ld(2, b"\x02" * 8) + _ld(5, b"all zero"),
        _ld(1, b"\x01" * 16) + _ld(2, b"\x01" * 7) + _ld(5, b'short "span"'),
        _ld(1, b"\x01" * 16) + _ld(2, bytes(8)),
        IDS + _ld(4, b"\x01" * 9) + _ld(5, b"\\ long parent \n"),
        IDS + _ld(4, b"\x01") + _ld(5, b"sixth"),
        IDS + _ld(5, b"fine"),
    ]
    body = _ld(1, _ld(2, b"".join(_ld(2, s) for s in spans)))
    outcome = assert_same(body, None)
    assert outcome.rejected == 6
    assert outcome.message.endswith("; and 1 more")


def _typed_export(values: dict[str, object]) -> bytes:
    spans = [span(1, i + 1, f"s{i} ünï", {key: value}) for i, (key, value) in enumerate(values.items())]
    return export_request([*spans, span(1, 99, "good", vllm_attributes())]).SerializeToString()


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"gen_ai.latency.e2e": "1.5", "gen_ai.usage.prompt_tokens": True}, id="numbers"),
        pytest.param({"gen_ai.latency.e2e": None, "gen_ai.response.model": 5}, id="none and int"),
        pytest.param({"gen_ai.request.model": [], "gen_ai.response.model": [1, "a"]}, id="arrays"),
        pytest.param({"gen_ai.request.model": ["ok"], "gen_ai.request.id": 7}, id="accepted"),
        pytest.param({"gen_ai.request.id": 1.5, "x-request-id": b"\x00\xff" * 30}, id="ids and long reprs"),
        pytest.param({"gen_ai.request.model": {"a": "é" * 50}, "gen_ai.latency.e2e": float("inf")}, id="dict, inf"),
        pytest.param({"gen_ai.latency.e2e": "x" * 39, "gen_ai.latency.time_to_first_token": "y" * 38}, id="cut"),
    ],
)
def test_wrong_types_are_rejected_with_mapping_checks_messages(values: dict[str, object]) -> None:
    assert_same(_typed_export(values))
    assert_same(_typed_export(values), None)


def test_id_faults_are_quoted_before_wrong_types() -> None:
    bad_type = export_request([span(1, 1, "typed", {"gen_ai.latency.e2e": "x"})])
    bad_id = bad_type.resource_spans[0].scope_spans[0].spans.add(name="no ids")
    assert bad_id.name == "no ids"
    outcome = assert_same(bad_type.SerializeToString())
    assert outcome.rejected == 2
    assert outcome.message.startswith("rejected 2 span(s): span 'no ids': trace_id")


def test_duplicate_keys_behave_as_a_dict() -> None:
    body = _span(
        IDS
        + _ld(9, _kv(b"gen_ai.latency.e2e", _ld(1, b"bad")))
        + _ld(9, _kv(b"a", _ld(1, b"1")))
        + _ld(9, _kv(b"gen_ai.latency.e2e", _tag(3, 0) + b"\x01")),
        _ld(1, _kv(b"r", _ld(1, b"1"))) + _ld(1, _kv(b"q", _ld(1, b"2"))) + _ld(1, _kv(b"r", _ld(1, b"3"))),
    )
    outcome = assert_same(body, None)
    assert outcome.spans is not None and outcome.rejected == 0  # the last value (an int) is what is checked
    assert list(outcome.spans[0].attributes.items()) == [("gen_ai.latency.e2e", 1), ("a", "1")]
    assert list(outcome.spans[0].resource.items()) == [("r", "3"), ("q", "2")]


def test_each_span_carries_its_resource_spans_resource() -> None:
    payload = bench.payloads.build(64, 64, pods=1).payloads[0]
    decoded = NativeDecoder(MAPPING, KEEP).protobuf(payload)
    assert decoded.batch is not None and len(decoded.batch) == 64
    spans = decoded.batch.to_spans()
    assert spans == decode_protobuf(payload, KEEP).spans
    assert [s.resource["service.name"] for s in spans] == ["vllm"] * 32 + ["epp"] * 32


def test_refusals_say_where() -> None:
    with pytest.raises(MalformedPayloadError) as raised:
        NativeDecoder(MAPPING, KEEP).protobuf(_span(IDS + _ld(5, b"\xff")))
    assert str(raised.value) == (
        "not a valid OTLP ExportTraceServiceRequest protobuf: string field is not valid UTF-8 (byte 0 of 1)"
    )
    assert native(b"\x0a\x05\x0a\x03", None, None).refusal == (
        "not a valid OTLP ExportTraceServiceRequest protobuf: truncated length-delimited field at byte 2"
    )


def test_the_decode_pool_decodes_natively() -> None:
    native_decoder = NativeDecoder(MAPPING, KEEP)
    body = _small_export()
    request = ExportTraceServiceRequest.FromString(body)
    for json_processes in (0, 1):
        pool = Decoder(KEEP, 1 << 20, threads=2, json_processes=json_processes, native=native_decoder)
        try:
            # the last body is one the native JSON decoder leaves to the reference (an enum name it does not know)
            unusual = to_otlp_json(request).replace(b'"spanId"', b'"kind": "SPAN_KIND_NEW", "spanId"', 1)
            assert native_decoder.json_natively(unusual) is None
            for payload, is_json in ((body, False), (to_otlp_json(request), True), (unusual, True)):
                decoded = asyncio.run(pool.decode(payload, "", is_json=is_json, then=lambda d: d))
                assert decoded.batch is not None and decoded.spans == []
                assert decoded.batch.to_spans() == native(body, KEEP, MAPPING).spans
            with pytest.raises(MalformedPayloadError, match="not valid JSON"):
                asyncio.run(pool.decode(b"{", "", is_json=True, then=lambda d: d))
        finally:
            pool.close()


def test_intake_queues_a_native_batch_without_checking_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import CollectorRegistry

    from sloscope.attributes import Mapping
    from sloscope.config import Attributes
    from sloscope.processors.queue import SpanQueue
    from sloscope.receivers.intake import Intake, Status
    from sloscope.telemetry import Telemetry

    mapping = Mapping(Attributes())
    queue = SpanQueue(100)
    intake = Intake(mapping, queue, Telemetry(CollectorRegistry()), 1, KEEP, engine="native")
    monkeypatch.setattr(mapping, "check", lambda span: pytest.fail("checked twice"))
    try:
        body = _typed_export({"gen_ai.latency.e2e": "slow"})
        result = asyncio.run(intake.receive(body, "", is_json=False, transport="http"))
    finally:
        intake.close()
    expected = assert_same(body)
    assert (result.status, result.rejected, result.message) == (Status.ACCEPTED, 1, expected.message)
    (batch,) = queue.take(0)
    assert len(queue) == 0 and len(batch) == 1
    assert batch.to_spans() == expected.spans  # type: ignore[union-attr]
