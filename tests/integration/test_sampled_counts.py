"""Sampled traces counted with their adjusted counts by ``sloscope serve``, from the real OpenTelemetry SDK's samplers.

Three EPPs start traces with three of opentelemetry-sdk's samplers; each kept call reaches a vLLM whose tracer
follows its parent (the SDKs' default ``ParentBased``) through W3C propagation, and every span goes to sloscope
over OTLP/gRPC with the SDK's exporter:

- pool-a: two EPPs with the SDK's consistent ratio sampler (``_sampling_experimental``, OTEP 235), at 1/4 and 1/8:
  each trace records its threshold (``ot=th:c``, ``ot=th:e``), so one pool sees two probabilities;
- pool-b: the classic ``TraceIdRatioBased`` at 1/2, which records nothing; the pool's setting says 0.5.

Each request then counts 4, 8 or 2 in the request series, exactly (the probabilities are powers of two), and once
in the sampled twins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace._sampling_experimental import composable_traceid_ratio_based, composite_sampler
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler, TraceIdRatioBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sloscope.testing import gateway_attributes, vllm_attributes

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

CALLS = 400  # per EPP
MISSED_TTFT, MET_TTFT = 0.9, 0.1  # against a 500 ms target; every third call misses


def test_each_sampled_request_counts_its_adjusted_count(serve: Callable[..., Server]) -> None:
    server = serve(pools=[{"name": "pool-b", "trace_sampling_probability": 0.5}])
    sink = InMemorySpanExporter()
    vllm = provider({"service.name": "vllm", "k8s.pod.name": "vllm-0"}, sink).get_tracer("vllm.llm_engine")
    epps = {  # (pool, weight): the EPP's sampler
        ("pool-a", 4.0): composite_sampler(composable_traceid_ratio_based(0.25)),
        ("pool-a", 8.0): composite_sampler(composable_traceid_ratio_based(0.125)),
        ("pool-b", 2.0): TraceIdRatioBased(0.5),
    }
    kept: Counter[tuple[str, float, bool]] = Counter()  # (pool, weight, missed)
    for (pool, weight), sampler in epps.items():
        for call in range(CALLS):
            missed = call % 3 == 0
            if calls(sampler, pool, vllm, sink, missed):
                kept[(pool, weight, missed)] += 1
    spans = sink.get_finished_spans()
    assert OTLPSpanExporter(endpoint=server.otlp_grpc, insecure=True).export(list(spans)) == SpanExportResult.SUCCESS

    sampled = sum(kept.values())
    assert len(spans) == 2 * sampled and sampled > CALLS // 2  # each kept call's two spans (about 7/8 of CALLS)
    wait_until(lambda: server.total("sloscope_sampled_requests_total") == sampled, what="every request counted")
    for pool in ("pool-a", "pool-b"):
        mine = {key: n for key, n in kept.items() if key[0] == pool}
        estimated = sum(weight * n for (_, weight, _), n in mine.items())
        missed = sum(weight * n for (_, weight, miss), n in mine.items() if miss)
        assert server.total("sloscope_requests_total", pool=pool) == estimated
        assert server.total("sloscope_sampled_requests_total", pool=pool) == sum(mine.values())
        assert server.total("sloscope_slo_requests_total", pool=pool, slo="ttft") == estimated
        assert server.total("sloscope_slo_violations_total", pool=pool, slo="ttft") == missed
        assert server.total("sloscope_sampled_slo_violations_total", pool=pool, slo="ttft") == sum(
            n for (_, _, miss), n in mine.items() if miss
        )
        assert server.total("sloscope_ttft_seconds_count", pool=pool) == estimated
        assert server.total("sloscope_ttft_seconds_bucket", pool=pool, le="0.25") == estimated - missed
    assert {weight for _, weight, _ in kept} == {2.0, 4.0, 8.0}


def provider(resource: dict[str, str], sink: InMemorySpanExporter, sampler: Sampler | None = None) -> TracerProvider:
    tracer_provider = TracerProvider(resource=Resource.create(resource), sampler=sampler)
    tracer_provider.add_span_processor(SimpleSpanProcessor(sink))
    return tracer_provider


def calls(sampler: Sampler, pool: str, vllm: trace.Tracer, sink: InMemorySpanExporter, missed: bool) -> bool:
    """One call through an EPP sampling with ``sampler``: its span and, when kept, vLLM's under it; whether kept."""
    epp = provider({"service.name": "epp"}, sink, sampler).get_tracer("gateway-api-inference-extension")
    propagator = TraceContextTextMapPropagator()
    attributes = {"inference_pool": pool, **gateway_attributes(slo_ttft_ms="500", model="llama")}
    with epp.start_as_current_span("gateway.request", kind=trace.SpanKind.SERVER) as root:
        # set once started, as the EPP does: the SDK's experimental composite sampler (1.45) returns no attributes,
        # and a span keeps what its sampler returns of those given at its start
        root.set_attributes(attributes)
        headers: dict[str, str] = {}
        propagator.inject(headers)  # what the EPP sends on: the traceparent, and the tracestate holding th
        ttft = MISSED_TTFT if missed else MET_TTFT
        server_attributes = vllm_attributes(ttft=ttft, e2e=ttft + 0.5, completion_tokens=11, model="llama")
        with vllm.start_as_current_span(
            "llm_request", context=propagator.extract(headers), kind=trace.SpanKind.SERVER, attributes=server_attributes
        ):
            pass
        return bool(root.is_recording())
