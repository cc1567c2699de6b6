"""The spans a gateway and vLLM would export for each request, made with the OpenTelemetry SDK and sent over OTLP.

The gateway (the EPP's process) exports ``gateway.request`` (SERVER) with the request headers captured as
``http.request.header.*`` attributes, and its child ``gateway.request_orchestration``; it injects
``traceparent`` into the request it forwards. Each pod's vLLM extracts that context and exports
``llm_request`` as a child, with vLLM's ``gen_ai.*`` attributes, from a TracerProvider whose resource
names the pod (``k8s.pod.name``), as the downward API would. Every provider has its own batch processor and
OTLP/gRPC exporter, like separate processes; nothing is handed to sloscope in-process.

Spans are made when a request completes, with the times the simulation measured (the SDK takes explicit
start and end times), so their timestamps are the simulated requests' own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from sloscope.demo.records import Completion, SimRequest
from sloscope.upstream.vllm import llm_request_attributes

__all__ = ["SpanEmitter", "completion_attributes"]

_PROPAGATOR = TraceContextTextMapPropagator()


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _provider(endpoint: str, attributes: dict[str, str]) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create(attributes))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500, max_export_batch_size=512))
    return provider


class SpanEmitter:
    def __init__(self, endpoint: str, pods: Sequence[str], namespace: str = "demo") -> None:
        """``endpoint``: sloscope's OTLP/gRPC ``host:port``."""
        self._gateway = _provider(
            endpoint, {"service.name": "inference-gateway", "k8s.namespace.name": namespace, "k8s.pod.name": "epp-0"}
        )
        self._pods = {
            pod: _provider(endpoint, {"service.name": "vllm", "k8s.namespace.name": namespace, "k8s.pod.name": pod})
            for pod in pods
        }

    def emit(
        self, request: SimRequest, completion: Completion, *, routing: str, endpoint: str, routed_at: float
    ) -> None:
        """Export the request's three spans: gateway.request, its orchestration child and vLLM's llm_request."""
        gateway_tracer = self._gateway.get_tracer("sloscope.demo.gateway")
        headers: dict[str, AttributeValue] = {
            "http.request.header.x-request-id": [request.request_id],
            "http.request.header.x-prediction-based-scheduling": ["true" if routing == "predicted" else "false"],
            "http.request.header.x-gateway-destination-endpoint": [endpoint],
            "gen_ai.request.model": request.model,
            "http.request.method": "POST",
            "url.path": "/v1/completions",
        }
        if request.slo_ttft_ms is not None:
            headers["http.request.header.x-slo-ttft-ms"] = [f"{request.slo_ttft_ms:g}"]
        if request.slo_tpot_ms is not None:
            headers["http.request.header.x-slo-tpot-ms"] = [f"{request.slo_tpot_ms:g}"]
        root = gateway_tracer.start_span(
            "gateway.request",
            kind=SpanKind.SERVER,
            start_time=_ns(request.arrival),
            attributes=headers,
        )
        context = trace.set_span_in_context(root)
        orchestration = gateway_tracer.start_span(
            "gateway.request_orchestration",
            context=context,
            start_time=_ns(request.arrival),
            attributes={"target_model": request.model, "request_prio": 0},
        )
        orchestration.end(end_time=_ns(routed_at))
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=context)  # the traceparent header the EPP forwards
        pod_tracer = self._pods[completion.pod].get_tracer("vllm.llm_engine")
        llm = pod_tracer.start_span(
            "llm_request",
            context=_PROPAGATOR.extract(carrier),
            kind=SpanKind.SERVER,
            start_time=_ns(completion.arrived),
            attributes=_vllm_attributes(request, completion),
        )
        llm.end(end_time=_ns(completion.finished))
        root.end(end_time=_ns(completion.finished))

    def flush(self, timeout_millis: int = 10_000) -> bool:
        ok = self._gateway.force_flush(timeout_millis)
        return all([ok, *(p.force_flush(timeout_millis) for p in self._pods.values())])

    def shutdown(self) -> None:
        for provider in (self._gateway, *self._pods.values()):
            provider.shutdown()


def _vllm_attributes(request: SimRequest, completion: Completion) -> dict[str, Any]:
    return completion_attributes(completion, f"cmpl-{request.request_id}", request.output_tokens)


def completion_attributes(completion: Completion, request_id: str, max_tokens: int) -> dict[str, Any]:
    """vLLM's request span attributes (the catalogue's, :func:`sloscope.upstream.vllm.llm_request_attributes`),
    from the pod's own measurements of one completion."""
    return llm_request_attributes(
        request_id=request_id,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        ttft=completion.ttft,
        e2e=completion.e2e,
        queue=completion.queue_time,
        prefill=completion.prefill_time,
        decode=completion.decode_time,
        inference=completion.finished - completion.scheduled,
        max_tokens=max_tokens,
        top_p=0.95,
        temperature=0.7,
    )
