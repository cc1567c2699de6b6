"""Real inputs to start fuzzing from: the shared fixture pages and bodies, and OTLP exports of real spans.

The OTLP seeds are encoded twice over: by sloscope's test builder (``sloscope.testing.export_request``,
the spans sloscope's own tests send) and by the OpenTelemetry SDK's own OTLP encoder
(``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans``, what the SDK's OTLP
exporters send) from spans recorded by a real ``TracerProvider``, with the attributes of vLLM 0.33.0's
``llm_request`` span and the EPP's ``gateway.request`` span.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_033_attributes

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"

EXPOSITION_PAGES = (
    "vllm/metrics-vllm-0.33.0.txt",
    "llm-d-router/epp-metrics.prom",
    "epp/slo-metrics-constructed-from-code.prom",
    "epp/request_ttft_seconds_metric.head",
    "predictor/training-server-metrics-xgboost.txt",
    "predictor/llm-d/quantile/training-server-metrics.txt",
    "predictor/llm-d/mean/training-server-metrics.txt",
)
TRAINING_PAGES = EXPOSITION_PAGES[-3:]


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def fixture_json(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def fixture_jsons(pattern: str) -> list[Any]:
    return [json.loads(p.read_text()) for p in sorted(FIXTURES.glob(pattern))]


def _vllm() -> dict[str, Any]:
    return vllm_033_attributes(request_id="chatcmpl-3f2a", ttft=0.182, e2e=2.41, completion_tokens=211)


@cache
def otlp_requests() -> tuple[ExportTraceServiceRequest, ...]:
    built = export_request(
        [
            span(7, 1, "gateway.request", gateway_attributes(slo_ttft_ms="200"), resource={"service.name": "epp"}),
            span(7, 2, "llm_request", _vllm(), parent=1),
            span(8, 3, "kinds", {"a": ["x", 1, 2.5, True], "kv": {"n": {"m": b"\x00"}}, "d": -0.0}),
        ]
    )
    return (built, _sdk_export())


class _Ids(RandomIdGenerator):
    """Fixed ids, so that the seeds (and so a derandomized run's inputs) are the same in every run."""

    def __init__(self) -> None:
        self._next = 0x1000

    def generate_span_id(self) -> int:
        self._next += 1
        return self._next

    def generate_trace_id(self) -> int:
        return 0x0AF7651916CD43DD8448EB211C80319C


def _sdk_export() -> ExportTraceServiceRequest:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource({"service.name": "vllm", "k8s.pod.name": "vllm-0"}), id_generator=_Ids()
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("vllm.llm_engine")
    start = 1_700_000_000_000_000_000
    gateway = tracer.start_span(
        "gateway.request", attributes=_otel(gateway_attributes(slo_ttft_ms="200")), start_time=start
    )
    child = tracer.start_span(
        "llm_request", trace.set_span_in_context(gateway), attributes=_otel(_vllm()), start_time=start + 1000
    )
    child.add_event("first_token", timestamp=start + 182_000_000)
    child.add_link(gateway.get_span_context(), {"link": "parent"})
    child.end(end_time=start + 2_410_000_000)
    gateway.end(end_time=start + 2_500_000_000)
    provider.shutdown()
    request: ExportTraceServiceRequest = encode_spans(exporter.get_finished_spans())
    return request


def _otel(attributes: dict[str, Any]) -> dict[str, Any]:
    """The SDK's attribute types: scalars and homogeneous lists (no maps, no mixed lists)."""
    return {k: v for k, v in attributes.items() if not isinstance(v, dict | list) or _homogeneous(v)}


def _homogeneous(values: Any) -> bool:
    return (
        isinstance(values, list)
        and len({type(v) for v in values}) <= 1
        and not any(isinstance(v, dict) for v in values)
    )


@cache
def protobuf_bodies() -> tuple[bytes, ...]:
    return tuple(r.SerializeToString() for r in otlp_requests())


@cache
def json_bodies() -> tuple[bytes, ...]:
    return tuple(to_otlp_json(r) for r in otlp_requests())
