"""Hostile OTLP bodies through a real ``sloscope serve``: each gets a 400 (INVALID_ARGUMENT over gRPC) with a
``google.rpc.Status`` saying why, never a 500, and the process logs no traceback.

The bodies are the minimal inputs of the decoder faults fixed in ``receivers/otlp_decode.py`` (see
tests/unit/receivers/test_otlp_decode.py and the fuzz targets in tests/fuzz/).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import status_pb2

from sloscope.receivers.otlp_grpc import SERVICE
from sloscope.testing import export_request, span, to_otlp_json
from tests.support.hostile import kvlist_attribute_json, kvlist_attribute_protobuf

from .conftest import Server, start_server, wait_until
from .test_bad_input import good_request, post

pytestmark = pytest.mark.integration

LIMIT = 256 * 1024
JSON = "application/json"
PROTOBUF = "application/x-protobuf"
DEPTH = 20_000  # far past Python's recursion limit (1000), well under LIMIT


@pytest.fixture(scope="module", params=["python", "native"])
def server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Server]:
    """Both decoders (``join.engine``) refuse alike."""
    settings = {"limits": {"max_request_bytes": LIMIT}, "join": {"engine": request.param}}
    started = start_server(tmp_path_factory.mktemp("hostile"), settings)
    yield started
    if started.process.poll() is None:
        started.process.kill()
        started.process.wait(10)


JSON_BODIES = [
    pytest.param(b"[" * DEPTH + b"]" * DEPTH, "not valid JSON: nested too deeply", id="deep arrays"),
    pytest.param(b'{"a":' * DEPTH + b"1" + b"}" * DEPTH, "not valid JSON: nested too deeply", id="deep objects"),
    pytest.param(
        kvlist_attribute_json(40),
        "ExportTraceServiceRequest: nested more than 100 levels deep",
        id="kvlists deeper than the protobuf JSON parser allows",
    ),
    pytest.param(b'{"a":' + b"9" * 5000 + b"}", "not valid JSON: a number has more than 4300 digits", id="huge int"),
    pytest.param(
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":1e999}]}]}]}',
        "Couldn't parse integer: inf",
        id="huge float",
    ),
    pytest.param(
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":1e999}]}]}]}',
        "cannot convert float infinity to integer",
        id="huge float for an enum",
    ),
    pytest.param(b'{"a":NaN}', "not valid JSON: NaN is not a JSON number", id="NaN literal"),
    pytest.param(b'{"\\ud800":1}', "not valid Unicode (a lone surrogate escape)", id="lone surrogate"),
]


@pytest.mark.parametrize(("body", "message"), JSON_BODIES)
def test_nasty_json_gets_400_with_a_status_message(server: Server, body: bytes, message: str) -> None:
    code, headers, response = post(server, body, JSON)
    assert code == 400
    assert headers["content-type"] == JSON
    status = json.loads(response)  # google.rpc.Status in the JSON mapping, as OTLP/HTTP requires
    assert status["code"] == 3  # INVALID_ARGUMENT
    assert message in status["message"]
    assert len(status["message"]) < 400


def test_gzip_members_are_decoded_whole(server: Server) -> None:
    body = to_otlp_json(export_request([span(0xD1, 1, "first", {})]))
    half = len(body) // 2
    code, _, _ = post(server, gzip.compress(body[:half]) + gzip.compress(body[half:]), JSON, "gzip")
    assert code == 200


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        pytest.param(
            gzip.compress(good_request(0xD2)) + b"junk", "gzip", "4 bytes of trailing data after gzip member 1"
        ),
        pytest.param(
            zlib.compress(good_request(0xD3)) + b"junk",
            "deflate",
            "trailing data after the deflate stream",
            id="deflate",
        ),
    ],
)
def test_trailing_data_after_a_compressed_body_is_refused(
    server: Server, body: bytes, encoding: str, message: str
) -> None:
    code, _, response = post(server, body, PROTOBUF, encoding)
    assert code == 400
    assert message in status_pb2.Status.FromString(response).message


def test_protobuf_nested_past_the_runtime_limit_is_invalid_argument(server: Server) -> None:
    with grpc.insecure_channel(server.otlp_grpc) as channel:
        export = channel.unary_unary(f"/{SERVICE}/Export")
        assert export(kvlist_attribute_protobuf(31), timeout=10) == b""
        with pytest.raises(grpc.RpcError) as raised:
            export(kvlist_attribute_protobuf(32), timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid OTLP ExportTraceServiceRequest protobuf" in raised.value.details()
    code, _, response = post(server, kvlist_attribute_protobuf(32), PROTOBUF)
    assert code == 400
    assert "not a valid OTLP ExportTraceServiceRequest protobuf" in status_pb2.Status.FromString(response).message


def test_the_server_logged_no_traceback_and_exits_cleanly(server: Server) -> None:
    assert post(server, good_request(0xD4), PROTOBUF)[0] == 200
    assert server.value("sloscope_otlp_requests_total", transport="http", result="malformed") == len(JSON_BODIES) + 3
    assert server.stop() == 0
    wait_until(lambda: any("sloscope stopped" in line for line in server.log), what="the last log line read")
    log = "\n".join(server.log)
    assert "Traceback" not in log
    assert "Exception in ASGI application" not in log
