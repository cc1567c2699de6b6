"""The Python half of the native HTTP front: what it answers and counts for each request the front hands it
(native/src/front/http.rs ``Handler``): the uvicorn receiver's answers, the same series, the settings it needs."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

from sloscope.config import ListenerAuth, Settings
from sloscope.listeners.auth import Credentials
from sloscope.listeners.http_metrics import HttpMetrics
from sloscope.listeners.tracing import ServerSpans
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline
from sloscope.receivers.intake import Result, Status
from sloscope.receivers.otlp_http import Reply, answer
from sloscope.receivers.otlp_http_native import NativeHttpReceiver
from sloscope.testing import export_request, span, vllm_attributes

LIMIT = 64 * 1024
PROTOBUF = [("content-type", "application/x-protobuf")]


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    settings = Settings.model_validate(
        {
            "join": {"engine": "native"},
            "limits": {"max_request_bytes": LIMIT, "retry_after_seconds": 3, "json_decode_processes": 0},
            "listeners": {"body_timeout_seconds": 2.5, "otlp_http_server": "native"},
        }
    )
    built = Pipeline(settings, default_spec(), CollectorRegistry())
    yield built
    built.shutdown()


def receiver_of(pipeline: Pipeline, **kwargs: object) -> tuple[NativeHttpReceiver, list[str]]:
    refused: list[str] = []
    metrics = HttpMetrics(pipeline.registry)
    receiver = NativeHttpReceiver(pipeline.intake, pipeline.settings, metrics, refused.append, **kwargs)  # type: ignore[arg-type]
    return receiver, refused


def counted(pipeline: Pipeline, result: str) -> float:
    value = pipeline.registry.get_sample_value("sloscope_otlp_requests_total", {"transport": "http", "result": result})
    return value or 0.0


def served(pipeline: Pipeline, handler: str, method: str, status: str) -> float:
    labels = {"handler": handler, "method": method, "status": status}
    return pipeline.registry.get_sample_value("http_requests_total", labels) or 0.0


def payload() -> bytes:
    return export_request([span(7, 1, "llm_request", vllm_attributes())]).SerializeToString()


def test_a_decoded_body_goes_to_the_queue_and_is_answered_200(pipeline: Pipeline) -> None:
    receiver, _ = receiver_of(pipeline)
    decoder = pipeline.intake.native_decoder
    assert decoder is not None
    assert receiver.export(decoder.protobuf(payload()), False, 0.004) == Reply(200, PROTOBUF, b"")
    assert (len(pipeline.queue), counted(pipeline, "accepted")) == (1, 1)
    assert served(pipeline, "/v1/traces", "POST", "200") == 1
    duration = pipeline.registry.get_sample_value(
        "http_request_duration_seconds_bucket", {"handler": "/v1/traces", "method": "POST", "le": "0.005"}
    )
    assert duration == 1


def test_a_body_that_did_not_decode_is_400_with_its_reason_in_the_request_encoding(pipeline: Pipeline) -> None:
    receiver, _ = receiver_of(pipeline)
    status, headers, body = receiver.export("not valid JSON: x", True, 0.0)
    assert (status, headers, json.loads(body)) == (
        400,
        [("content-type", "application/json")],
        {"code": 3, "message": "not valid JSON: x"},
    )
    assert counted(pipeline, "malformed") == 1


def test_a_compressed_body_is_inflated_and_decoded_here(pipeline: Pipeline) -> None:
    receiver, _ = receiver_of(pipeline)
    assert receiver.export_body(gzip.compress(payload()), "gzip", False, 0.0) == Reply(200, PROTOBUF, b"")
    status, _, body = receiver.export_body(b"\x1f\x8b junk", "gzip", False, 0.0)
    assert (status, status_pb2.Status.FromString(body).message.startswith("body is not valid gzip")) == (400, True)
    bomb = gzip.compress(bytes(LIMIT + 1))
    status, _, body = receiver.export_body(bomb, "gzip", False, 0.0)
    assert (status, status_pb2.Status.FromString(body).message) == (
        413,
        f"decompressed body exceeds the limit of {LIMIT} bytes",
    )
    assert [counted(pipeline, r) for r in ("accepted", "malformed", "too_large")] == [1, 1, 1]


def test_json_the_native_decoder_leaves_is_decoded_by_the_reference(pipeline: Pipeline) -> None:
    receiver, _ = receiver_of(pipeline)
    status, _, body = receiver.export_body(b'{"resourceSpans": [', "", True, 0.0)
    assert (status, json.loads(body)["message"].startswith("not valid JSON")) == (400, True)
    assert receiver.export_body(b'{"resourceSpans": []}', "", True, 0.0) == Reply(
        200, [("content-type", "application/json")], b"{}"
    )


def test_refusals_are_counted_and_answered_as_the_uvicorn_receiver_answers_them(pipeline: Pipeline) -> None:
    receiver, _ = receiver_of(pipeline)
    unsupported = receiver.refused("unsupported", "text/plain", 0, False, 0.0)
    assert (unsupported.status, status_pb2.Status.FromString(unsupported.body).message) == (
        415,
        "unsupported Content-Type 'text/plain'; use application/x-protobuf or application/json",
    )
    busy = receiver.refused("in_flight_full", "", 0, True, 0.0)
    assert (busy.status, ("Retry-After", "3") in busy.headers, json.loads(busy.body)["code"]) == (429, True, 8)
    late = receiver.refused("body_timeout", "", 10, False, 0.0)
    assert (late.status, ("Connection", "close") in late.headers) == (408, True)
    assert status_pb2.Status.FromString(late.body).message == "request body not received within 2.5s"
    assert receiver.refused("too_large", "body exceeds the limit of 65536 bytes", 0, False, 0.0).status == 413
    assert receiver.refused("client_disconnected", "", 5, False, 0.0).status == 499
    results = ("unsupported", "in_flight_full", "body_timeout", "too_large", "client_disconnected")
    assert [counted(pipeline, r) for r in results] == [1, 1, 1, 1, 1]
    assert [served(pipeline, "/v1/traces", "POST", s) for s in ("415", "429", "408", "413", "499")] == [1] * 5


def test_other_paths_and_methods_are_answered_as_fastapi_answers_them(pipeline: Pipeline) -> None:
    receiver, _ = receiver_of(pipeline)
    assert receiver.other("GET", "/v1/traces", 0.0) == Reply(
        405, [("content-type", "application/json"), ("allow", "POST")], b'{"detail": "Method Not Allowed"}'
    )
    assert receiver.other("BREW", "/coffee", 0.0) == Reply(
        404, [("content-type", "application/json")], b'{"detail": "Not Found"}'
    )
    assert served(pipeline, "/v1/traces", "GET", "405") == 1
    assert served(pipeline, "none", "_OTHER", "404") == 1  # a client's method is never a label value


def test_credentials_are_checked_and_refusals_counted(pipeline: Pipeline, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    refusals: list[str] = []
    credentials = Credentials(ListenerAuth(token_file=str(token)))
    receiver, _ = receiver_of(pipeline, credentials=(credentials, refusals.append))
    assert receiver.authorize("Bearer s3cret", "POST", 0.0) is None
    refused = receiver.authorize("Bearer nope", "POST", 0.0)
    assert refused is not None
    assert (refused.status, refused.body) == (401, b"401 Unauthorized: credentials invalid\n")
    assert ("www-authenticate", 'Bearer realm="sloscope"') in refused.headers
    assert ("connection", "close") in refused.headers
    assert refusals == ["invalid"]
    assert served(pipeline, "none", "POST", "401") == 1


def test_the_native_http_front_needs_the_native_decoder() -> None:
    with pytest.raises(pydantic.ValidationError, match=re.escape("listeners.otlp_http_server: native decodes")):
        Settings.model_validate({"listeners": {"otlp_http_server": "native"}, "join": {"engine": "python"}})
    with pytest.raises(pydantic.ValidationError, match=re.escape("listeners.grpc.server: native decodes")):
        Settings.model_validate({"listeners": {"grpc": {"server": "native"}}, "join": {"engine": "python"}})
    assert Settings.model_validate({"listeners": {"otlp_http_server": "native"}}).listeners.otlp_http_server == "native"


def test_a_successful_protobuf_answer_says_partial_success() -> None:
    reply = answer(Result(Status.ACCEPTED, 2, "span x: bad"), False, {})
    partial = ExportTraceServiceResponse.FromString(reply.body).partial_success
    assert (reply.status, partial.rejected_spans, partial.error_message) == (200, 2, "span x: bad")


def test_self_tracing_spans_are_those_the_fastapi_instrumentation_makes(pipeline: Pipeline, tmp_path: Path) -> None:
    """Named and attributed as opentelemetry-instrumentation-fastapi 0.66b2 names its server spans (its default HTTP
    conventions: the method and route, ``_OTHER`` for a method of the client's own); none for a request refused
    before routing, as the uvicorn listener's guard answers those before FastAPI."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    credentials = (Credentials(ListenerAuth(token_file=str(token))), lambda _: None)
    spans = ServerSpans(provider, scheme="https", port=4318)
    receiver, _ = receiver_of(pipeline, spans=spans, credentials=credentials)
    decoder = pipeline.intake.native_decoder
    assert decoder is not None
    assert receiver.authorize("Bearer nope", "POST", 0.0) is not None
    receiver.export(decoder.protobuf(payload()), False, 0.25)
    receiver.refused("client_disconnected", "", 5, False, 0.0)
    receiver.other("BREW", "/coffee", 0.0)
    made = [(s.name, s.kind, dict(s.attributes or {}), s.status.status_code) for s in exporter.get_finished_spans()]
    fixed = {"http.scheme": "https", "http.flavor": "1.1", "net.host.port": 4318}
    traces = {**fixed, "http.target": "/v1/traces", "http.route": "/v1/traces"}
    assert made == [
        (
            "POST /v1/traces",
            SpanKind.SERVER,
            {**traces, "http.method": "POST", "http.status_code": 200},
            StatusCode.UNSET,
        ),
        (
            "POST /v1/traces",
            SpanKind.SERVER,
            {**traces, "http.method": "POST", "http.status_code": 499},
            StatusCode.UNSET,
        ),
        (
            "HTTP",
            SpanKind.SERVER,
            {**fixed, "http.target": "/coffee", "http.method": "_OTHER", "http.status_code": 404},
            StatusCode.UNSET,
        ),
    ]
    first = exporter.get_finished_spans()[0]
    assert first.end_time is not None and first.start_time is not None
    assert first.end_time - first.start_time == 250_000_000


def test_a_server_error_span_is_an_error() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ServerSpans(provider, scheme="http", port=1).record("POST", "/v1/traces", "/v1/traces", 503, 0.0)
    ServerSpans(provider, scheme="http", port=1).record("POST", "/v1/traces", "/v1/traces", 429, 0.0)
    assert [s.status.status_code for s in exporter.get_finished_spans()] == [StatusCode.ERROR, StatusCode.UNSET]
