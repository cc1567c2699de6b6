"""Bad input gets a clear client error and the server stays healthy and keeps counting good input."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request

import grpc
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from sloscope.receivers.otlp_grpc import SERVICE
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

LIMIT = 64 * 1024


def post(server: Server, body: bytes, content_type: str, encoding: str | None = None) -> tuple[int, dict, bytes]:
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    request = urllib.request.Request(server.otlp_http, body, headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def status_message(body: bytes) -> str:
    status = status_pb2.Status.FromString(body)
    return str(status.message)


def good_request(trace: int) -> bytes:
    return export_request(
        [
            span(trace, 1, "gateway.request", gateway_attributes(slo_ttft_ms="200"), resource={"service.name": "epp"}),
            span(trace, 2, "llm_request", vllm_attributes(), parent=1),
        ]
    ).SerializeToString()


def wrong_types(trace: int) -> list:
    attributes = {**vllm_attributes(), "gen_ai.usage.completion_tokens": "eleven"}
    return [
        span(trace, 1, "gateway.request", gateway_attributes()),
        span(trace, 2, "llm_request", attributes, parent=1),
    ]


@pytest.fixture(scope="module", params=["python", "native-python-fronts", "native"])
def server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Server:
    """Both decoders (``join.engine``), and both pairs of OTLP servers (``listeners.grpc.server``,
    ``listeners.otlp_http_server``), give the same answers."""
    from .conftest import start_server

    engine = "python" if request.param == "python" else "native"
    settings: dict = {"limits": {"max_request_bytes": LIMIT}, "join": {"window_seconds": 0.5, "engine": engine}}
    if request.param == "native-python-fronts":
        settings["listeners"] = {"grpc": {"server": "grpcio"}, "otlp_http_server": "uvicorn"}
    started = start_server(tmp_path_factory.mktemp("bad"), settings)
    yield started
    assert started.stop() == 0


@pytest.mark.parametrize(
    ("body", "content_type", "encoding", "status", "message"),
    [
        pytest.param(
            b"\xff\xff\xff",
            "application/x-protobuf",
            None,
            400,
            "not a valid OTLP ExportTraceServiceRequest protobuf",
            id="malformed protobuf",
        ),
        pytest.param(b"{oops", "application/json", None, 400, "not valid JSON", id="malformed JSON"),
        pytest.param(
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}',
            "application/json",
            None,
            400,
            "is not hex (OTLP/JSON ids are hex, not base64)",
            id="base64 where hex is due",
        ),
        pytest.param(
            b"x" * (LIMIT + 1), "application/x-protobuf", None, 413, f"exceeds the limit of {LIMIT}", id="oversize body"
        ),
        pytest.param(
            gzip.compress(bytes(LIMIT * 20)),
            "application/x-protobuf",
            "gzip",
            413,
            f"decompressed body exceeds the limit of {LIMIT} bytes",
            id="gzip bomb",
        ),
        pytest.param(b"not gzip", "application/x-protobuf", "gzip", 400, "not valid gzip", id="bad gzip"),
        pytest.param(b"{}", "text/plain", None, 415, "unsupported Content-Type 'text/plain'", id="wrong content type"),
    ],
)
def test_http_client_errors(
    server: Server, body: bytes, content_type: str, encoding: str | None, status: int, message: str
) -> None:
    code, _, response = post(server, body, content_type, encoding)
    assert code == status
    if content_type == "application/json":
        assert message in json.loads(response)["message"]
    else:
        assert message in status_message(response)


def test_http_wrong_attribute_types_get_partial_success_protobuf(server: Server) -> None:
    invalid_before = server.value("sloscope_spans_dropped_total", reason="invalid")
    code, _, body = post(server, export_request(wrong_types(0xB1)).SerializeToString(), "application/x-protobuf")
    assert code == 200
    response = ExportTraceServiceResponse.FromString(body)
    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message == (
        "rejected 1 span(s): span 0000000000000002 (llm_request): attribute gen_ai.usage.completion_tokens "
        "(completion_tokens) must be a number, got str 'eleven'"
    )
    assert server.value("sloscope_spans_dropped_total", reason="invalid") == invalid_before + 1


def test_http_wrong_attribute_types_get_partial_success_json(server: Server) -> None:
    code, _, body = post(server, to_otlp_json(export_request(wrong_types(0xB2))), "application/json")
    assert code == 200
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "must be a number, got str 'eleven'" in partial["errorMessage"]


def grpc_export(server: Server, body: bytes, compression: grpc.Compression = grpc.Compression.NoCompression) -> bytes:
    with grpc.insecure_channel(server.otlp_grpc, compression=compression) as channel:
        export = channel.unary_unary(f"/{SERVICE}/Export")
        return bytes(export(body, timeout=10))


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_grpc_compressed_messages_are_taken_and_their_inflated_size_limited(
    server: Server, compression: grpc.Compression
) -> None:
    trace = 0xD0 + compression.value
    before = server.total("sloscope_requests_total")
    assert grpc_export(server, good_request(trace), compression) == b""
    wait_until(lambda: server.total("sloscope_requests_total") == before + 1, what="the compressed request")
    with pytest.raises(grpc.RpcError) as raised:  # a few hundred bytes on the wire, over the limit inflated
        grpc_export(server, b"\x0a" + b"\x00" * (LIMIT + 10), compression)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == f"message of {LIMIT + 11} bytes exceeds the limit of {LIMIT}; send smaller batches"


def test_grpc_malformed_is_invalid_argument_with_a_reason(server: Server) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        grpc_export(server, b"\xff\xff\xff")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid OTLP ExportTraceServiceRequest protobuf" in raised.value.details()


def test_grpc_oversize_is_refused_permanently(server: Server) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        grpc_export(server, b"\x0a" + b"\x00" * (LIMIT + 10))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # not retryable: retrying cannot help
    assert raised.value.details() == f"message of {LIMIT + 11} bytes exceeds the limit of {LIMIT}; send smaller batches"


def test_grpc_wrong_attribute_types_get_partial_success(server: Server) -> None:
    response = ExportTraceServiceResponse.FromString(
        grpc_export(server, export_request(wrong_types(0xB3)).SerializeToString())
    )
    assert response.partial_success.rejected_spans == 1
    assert "(completion_tokens) must be a number" in response.partial_success.error_message


def test_server_stays_healthy_and_counts_good_input_after_bad(server: Server) -> None:
    before = server.total("sloscope_requests_total")
    malformed_before = server.value("sloscope_otlp_requests_total", transport="http", result="malformed")
    for code in (post(server, b"\xff", "application/x-protobuf")[0], post(server, b"{", "application/json")[0]):
        assert code == 400
    assert post(server, good_request(0xC1), "application/x-protobuf")[0] == 200
    assert grpc_export(server, good_request(0xC2)) == b""
    wait_until(lambda: server.total("sloscope_requests_total") == before + 2, what="two good requests")
    assert urllib.request.urlopen(server.url("/healthz"), timeout=5).status == 200
    assert urllib.request.urlopen(server.url("/readyz"), timeout=5).status == 200
    assert server.value("sloscope_otlp_requests_total", transport="http", result="malformed") == malformed_before + 2
