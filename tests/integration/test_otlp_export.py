"""The OTLP export against a real Jaeger v2 process: what crossed the wire is read back from Jaeger's query API.

The records are hand-made (tests/support/evaluation_records.py), so every attribute value is known
exactly. Each test uses trace ids of its own, so one Jaeger serves the whole session.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from sloscope import __version__
from sloscope.config import Export
from sloscope.demo.ports import free_ports
from sloscope.publishers.otlp_export import OTLPExport
from sloscope.publishers.sinks import SinkMetrics
from sloscope.testing import gateway_attributes, vllm_attributes
from tests.support.evaluation_records import (
    ARRIVAL_NS,
    END_NS,
    MET_ATTRIBUTES,
    START_NS,
    VIOLATING_ATTRIBUTES,
    bare_record,
    met_record,
    violating_record,
)
from tests.support.jaeger import Jaeger, StoredSpan

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

SPAN_KIND_INTERNAL = 1  # OTLP enum values, as Jaeger's OTLP/JSON gives them
STATUS_UNSET, STATUS_ERROR = 0, 2

VIOLATING = VIOLATING_ATTRIBUTES
MET = MET_ATTRIBUTES
BARE = {
    "sloscope.slo_class": "none",
    "sloscope.pool": "default",
    "sloscope.routing": "unknown",
    "sloscope.join.outcome": "anchor_only",
    "sloscope.target_source": "none",
    "sloscope.invalid_fields": ["ttft_seconds"],
    "sloscope.prediction.source": "none",
}


def ids() -> tuple[str, str]:
    """A fresh (trace id, span id) for the model-server span a record points at."""
    return secrets.token_hex(16), secrets.token_hex(8)


def export_settings(jaeger: Jaeger, protocol: str, **overrides: Any) -> Export:
    endpoint = jaeger.otlp_grpc if protocol == "grpc" else jaeger.otlp_http
    return Export(enabled=True, endpoint=endpoint, protocol=protocol, schedule_delay_seconds=0.2, **overrides)  # type: ignore[arg-type]


def counts(registry: CollectorRegistry) -> dict[str, float]:
    return {
        result: registry.get_sample_value("sloscope_records_total", {"sink": "otlp", "result": result}) or 0.0
        for result in ("written", "filtered", "dropped", "failed")
    }


def only(spans: list[StoredSpan]) -> StoredSpan:
    assert len(spans) == 1, [s.raw for s in spans]
    return spans[0]


@pytest.mark.parametrize(
    ("protocol", "compression"),
    [("grpc", "gzip"), ("http/protobuf", "gzip"), ("grpc", "none"), ("http/protobuf", "none")],
)
def test_child_spans_arrive_with_parent_link_times_status_and_every_attribute(
    jaeger: Jaeger, protocol: str, compression: str
) -> None:
    registry = CollectorRegistry()
    sink = OTLPExport(
        export_settings(jaeger, protocol, compression=compression, headers={"X-Tenant": "t1"}), SinkMetrics(registry)
    )
    sink.start()
    (violating_trace, violating_span), (met_trace, met_span), (bare_trace, bare_span) = ids(), ids(), ids()
    sink.emit(violating_record(violating_trace, violating_span))
    sink.emit(met_record(met_trace, met_span))
    sink.emit(bare_record(bare_trace, bare_span))
    assert sink.shutdown(30)
    assert counts(registry) == {"written": 3, "filtered": 0, "dropped": 0, "failed": 0}

    span = only(jaeger.wait_for_spans(violating_trace, 1))
    assert span.name == "sloscope.evaluation"
    assert span.kind == SPAN_KIND_INTERNAL
    assert span.trace_id == violating_trace
    assert span.parent_span_id == violating_span
    assert span.links == [(violating_trace, violating_span)]
    assert (span.start_ns, span.end_ns) == (ARRIVAL_NS, END_NS)
    assert span.status == (STATUS_ERROR, "SLO violated: ttft 250 ms > 200 ms, goodput")
    assert span.attributes == VIOLATING
    assert span.scope == "sloscope"
    assert span.resource["service.name"] == "sloscope"
    assert span.resource["service.version"] == __version__

    span = only(jaeger.wait_for_spans(met_trace, 1))
    assert (span.parent_span_id, span.links) == (met_span, [(met_trace, met_span)])
    assert span.status == (STATUS_UNSET, "")
    assert span.attributes == MET

    span = only(jaeger.wait_for_spans(bare_trace, 1))
    assert (span.start_ns, span.end_ns) == (START_NS, END_NS)  # no gateway span: the model server's start
    assert span.attributes == BARE


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_link_relation_gives_a_trace_of_its_own_linked_to_the_request(jaeger: Jaeger, protocol: str) -> None:
    registry = CollectorRegistry()
    sink = OTLPExport(export_settings(jaeger, protocol, relation="link"), SinkMetrics(registry))
    sink.start()
    request_trace, request_span = ids()
    sink.emit(violating_record(request_trace, request_span))
    assert sink.shutdown(30)
    assert counts(registry)["written"] == 1

    assert jaeger.trace(request_trace) == []  # nothing was added to the request's trace
    found = [
        span
        for span in jaeger.find("sloscope", "sloscope.evaluation", ARRIVAL_NS - 1_000_000, ARRIVAL_NS + 1_000_000)
        if span.links == [(request_trace, request_span)]
    ]
    span = only(found)
    assert span.trace_id != request_trace
    assert span.parent_span_id == ""
    assert span.attributes == VIOLATING
    assert span.status == (STATUS_ERROR, "SLO violated: ttft 250 ms > 200 ms, goodput")


def test_only_violations_sends_only_the_violating_request(jaeger: Jaeger) -> None:
    registry = CollectorRegistry()
    sink = OTLPExport(export_settings(jaeger, "grpc", only_violations=True), SinkMetrics(registry))
    sink.start()
    (met_trace, met_span), (violating_trace, violating_span) = ids(), ids()
    sink.emit(met_record(met_trace, met_span))
    sink.emit(violating_record(violating_trace, violating_span))
    assert sink.shutdown(30)
    assert counts(registry) == {"written": 1, "filtered": 1, "dropped": 0, "failed": 0}

    assert only(jaeger.wait_for_spans(violating_trace, 1)).attributes == VIOLATING
    assert jaeger.trace(met_trace) == []  # filtered before it was built: never sent


def test_many_spans_in_several_batches_all_arrive(jaeger: Jaeger) -> None:
    registry = CollectorRegistry()
    sink = OTLPExport(export_settings(jaeger, "grpc", max_batch_size=7), SinkMetrics(registry))
    sink.start()
    traces = [ids() for _ in range(50)]
    for trace_id, span_id in traces:
        sink.emit(violating_record(trace_id, span_id))
    assert sink.shutdown(30)
    assert counts(registry) == {"written": 50, "filtered": 0, "dropped": 0, "failed": 0}
    for trace_id, span_id in traces:
        assert only(jaeger.wait_for_spans(trace_id, 1)).parent_span_id == span_id


# ---- end to end: sloscope serve with the export enabled -----------------------------------------

T0 = 1_750_000_000_000_000_000  # the gateway saw the request; vLLM ran from T0 + 0.1 s to T0 + 1.1 s


def _provider(resource: dict[str, str], memory: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider


def _request(
    epp: trace.Tracer, vllm: trace.Tracer, gateway: dict[str, Any], model_server: dict[str, Any], offset_ns: int
) -> tuple[ReadableSpan, ReadableSpan]:
    """A gateway.request span and its vLLM llm_request child, with explicit timestamps: both start together (the
    EPP scheduled at once), so the TTFT from the gateway's arrival is vLLM's own."""
    start = T0 + offset_ns
    root = epp.start_span("gateway.request", kind=trace.SpanKind.SERVER, attributes=gateway, start_time=start)
    llm = vllm.start_span(
        "llm_request",
        context=trace.set_span_in_context(root),
        kind=trace.SpanKind.SERVER,
        attributes=model_server,
        start_time=start,
    )
    llm.end(end_time=start + 1_100_000_000)
    root.end(end_time=start + 1_200_000_000)
    assert isinstance(root, ReadableSpan) and isinstance(llm, ReadableSpan)
    return root, llm


def test_serve_exports_the_verdict_under_the_vllm_span_in_jaeger(serve: Callable[..., Server], jaeger: Jaeger) -> None:
    """A real sloscope serve, export enabled with only_violations, receives two EPP + vLLM traces:

    R1 interactive: TTFT 250 ms against 200 ms (missed), TPOT (0.75 - 0.25) / 10 = 50 ms against 50 ms (met),
       the EPP's predictions 180 ms / 40 ms on its span (headroom 20 ms / 10 ms, quantile 0.9 by default);
    R2 interactive: TTFT 150 ms against 200 ms, TPOT 50 ms: every SLO met, so filtered.
    The original spans go to Jaeger too, so the evaluation span must sit in R1's trace under its vLLM span.
    """
    server = serve(
        join={"window_seconds": 0.5, "trace_ttl_seconds": 5.0},
        predictions={"streaming_mode": True},  # the EPP's predictions on its span are a TTFT's and a TPOT's
        export={
            "enabled": True,
            "endpoint": jaeger.otlp_grpc,
            "protocol": "grpc",
            "only_violations": True,
            "schedule_delay_seconds": 0.2,
        },
    )
    memory = InMemorySpanExporter()
    epp = _provider({"service.name": "epp"}, memory).get_tracer("gateway-api-inference-extension")
    vllm = _provider({"service.name": "vllm", "k8s.pod.name": "vllm-0"}, memory).get_tracer("vllm.llm_engine")
    slo = gateway_attributes(slo_ttft_ms="200", slo_tpot_ms="50", model="llama", request_id="r1")
    r1 = _request(
        epp,
        vllm,
        {**slo, "inference_pool": "pool-a", "predicted_ttft_ms": 180.0, "predicted_tpot_ms": 40.0},
        vllm_attributes(ttft=0.25, e2e=0.75, completion_tokens=11, model="llama", request_id="r1"),
        0,
    )
    r2 = _request(
        epp,
        vllm,
        {**gateway_attributes(slo_ttft_ms="200", slo_tpot_ms="50", model="llama", request_id="r2")},
        vllm_attributes(ttft=0.15, e2e=0.65, completion_tokens=11, model="llama", request_id="r2"),
        2_000_000_000,
    )
    spans = [*r1, *r2]
    assert GrpcExporter(endpoint=server.otlp_grpc, insecure=True).export(spans) == SpanExportResult.SUCCESS
    assert GrpcExporter(endpoint=jaeger.otlp_grpc, insecure=True).export(spans) == SpanExportResult.SUCCESS

    def records(result: str) -> float:
        return server.value("sloscope_records_total", sink="otlp", result=result)

    wait_until(lambda: records("written") + records("filtered") == 2, what="both requests reach the OTLP export")
    assert (records("written"), records("filtered"), records("dropped"), records("failed")) == (1, 1, 0, 0)

    root, llm = r1
    assert root.context is not None and llm.context is not None
    trace_id, vllm_span = format(llm.context.trace_id, "032x"), format(llm.context.span_id, "016x")
    stored = {span.name: span for span in jaeger.wait_for_spans(trace_id, 3)}
    assert set(stored) == {"gateway.request", "llm_request", "sloscope.evaluation"}
    evaluation = stored["sloscope.evaluation"]
    assert evaluation.parent_span_id == vllm_span == stored["llm_request"].span_id
    assert evaluation.links == [(trace_id, vllm_span)]
    assert (evaluation.start_ns, evaluation.end_ns) == (T0, T0 + 1_100_000_000)
    assert evaluation.kind == SPAN_KIND_INTERNAL
    assert evaluation.status == (STATUS_ERROR, "SLO violated: ttft 250 ms > 200 ms, goodput")
    assert evaluation.resource["service.name"] == "sloscope"
    assert evaluation.attributes == {
        "sloscope.slo_class": "interactive",
        "sloscope.model": "llama",
        "sloscope.pool": "pool-a",
        "sloscope.pod": "vllm-0",
        "sloscope.routing": "unknown",
        "sloscope.request.id": "r1",
        "sloscope.join.outcome": "joined",
        "sloscope.target_source": "request",
        "sloscope.ttft.target_ms": 200.0,
        "sloscope.ttft.actual_ms": 250.0,
        "sloscope.ttft.source": "gateway_arrival",
        "sloscope.ttft.predicted_ms": 180.0,
        "sloscope.ttft.headroom_ms": 20.0,
        "sloscope.ttft.met": False,
        "sloscope.tpot.target_ms": 50.0,
        "sloscope.tpot.actual_ms": 50.0,
        "sloscope.tpot.predicted_ms": 40.0,
        "sloscope.tpot.headroom_ms": 10.0,
        "sloscope.tpot.met": True,
        "sloscope.goodput.met": False,
        "sloscope.violated": ["ttft", "goodput"],
        "sloscope.prediction.source": "span",
        "sloscope.prediction.quantile": 0.9,
        "sloscope.prediction.objective": "quantile",
    }
    assert r2[1].context is not None
    r2_spans = jaeger.trace(format(r2[1].context.trace_id, "032x"))  # stored with R1's originals, in one request
    assert sorted(span.name for span in r2_spans) == ["gateway.request", "llm_request"]  # no evaluation: filtered
    assert server.stop() == 0


def test_serve_reports_an_export_failing_beyond_its_grace_on_readyz(serve: Callable[..., Server]) -> None:
    """Export to a port nobody listens on, no grace: /readyz answers 503 with the OTLP check false and the reason."""
    (port,) = free_ports(1)
    server = serve(
        join={"window_seconds": 0.2, "trace_ttl_seconds": 5.0},
        export={
            "enabled": True,
            "endpoint": f"127.0.0.1:{port}",
            "timeout_seconds": 0.5,
            "schedule_delay_seconds": 0.1,
            "failure_grace_seconds": 0,
        },
    )
    memory = InMemorySpanExporter()
    epp = _provider({"service.name": "epp"}, memory).get_tracer("gateway-api-inference-extension")
    vllm = _provider({"service.name": "vllm", "k8s.pod.name": "vllm-0"}, memory).get_tracer("vllm.llm_engine")
    spans = _request(
        epp,
        vllm,
        gateway_attributes(slo_ttft_ms="200", model="llama", request_id="r1"),
        vllm_attributes(ttft=0.25, e2e=0.75, completion_tokens=11, model="llama", request_id="r1"),
        0,
    )
    assert GrpcExporter(endpoint=server.otlp_grpc, insecure=True).export(spans) == SpanExportResult.SUCCESS
    wait_until(lambda: server.value("sloscope_records_total", sink="otlp", result="failed") == 1, what="failed export")
    try:
        urllib.request.urlopen(server.url("/readyz"), timeout=10)
        raise AssertionError("/readyz answered 200 with the export failing")
    except urllib.error.HTTPError as refused:
        assert refused.code == 503
        body = json.loads(refused.read())
    assert body["checks"] == {"listeners": True, "pipeline": True, "accepting": True, "otlp": False}
    assert body["reasons"] == {"otlp": f"exports to 127.0.0.1:{port} fail (the last one: 1 span(s), after its retries)"}
    assert server.stop() == 0  # the failed span was lost while running (counted failed), not at shutdown
