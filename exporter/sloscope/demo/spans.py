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

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sloscope.demo.records import Completion, SimRequest, ns
from sloscope.demo.sdk_writer import SdkWriter
from sloscope.upstream.gie_2025 import Gie2025Epp, Vllm2025Pod
from sloscope.upstream.vllm import llm_request_attributes
from sloscope.upstream.writer import Process, Scope

__all__ = ["SpanEmitter", "completion_attributes"]

_PROPAGATOR = TraceContextTextMapPropagator()
GATEWAY_SCOPE = Scope("sloscope.demo.gateway")  # the demo's gateway names its tracer after itself


def _provider(endpoint: str, attributes: dict[str, str]) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create(attributes))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500, max_export_batch_size=512))
    return provider


class SpanEmitter:
    def __init__(self, endpoint: str, pods: Sequence[str], namespace: str = "demo") -> None:
        """``endpoint``: sloscope's OTLP/gRPC ``host:port``."""
        gateway = {"service.name": "inference-gateway", "k8s.namespace.name": namespace, "k8s.pod.name": "epp-0"}
        self._gateway = _provider(endpoint, gateway)
        self._epp = Gie2025Epp(SdkWriter(self._gateway), Process(gateway), GATEWAY_SCOPE)
        self._pods = {
            pod: _provider(endpoint, {"service.name": "vllm", "k8s.namespace.name": namespace, "k8s.pod.name": pod})
            for pod in pods
        }
        self._vllm = {
            pod: Vllm2025Pod(SdkWriter(made), Process({"k8s.pod.name": pod})) for pod, made in self._pods.items()
        }

    def emit(
        self, request: SimRequest, completion: Completion, *, routing: str, endpoint: str, routed_at: float
    ) -> None:
        """Export the request's three spans (the catalogue's late-2025 tree, :mod:`sloscope.upstream.gie_2025`):
        gateway.request, its orchestration child and vLLM's llm_request."""
        headers: dict[str, Any] = {
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
        root = self._epp.gateway(None, ns(request.arrival), ns(completion.finished), headers)
        self._epp.orchestration(root, ns(request.arrival), ns(routed_at), model=request.model)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=root)  # the traceparent header the EPP forwards
        self._vllm[completion.pod].llm_request(
            _PROPAGATOR.extract(carrier), ns(completion.arrived), ns(completion.finished),
            _vllm_attributes(request, completion),
        )  # fmt: skip

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
