"""The OTLP export against a real Jaeger v2 process: what crossed the wire is read back from Jaeger's query API.

The records are hand-made (tests/support/evaluation_records.py), so every attribute value is known
exactly. Each test uses trace ids of its own, so one Jaeger serves the whole session.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sloscope import __version__
from sloscope.config import Export
from sloscope.publishers.otlp_export import OTLPExport
from sloscope.publishers.sinks import SinkMetrics
from tests.support.evaluation_records import ARRIVAL_NS, END_NS, START_NS, bare_record, met_record, violating_record
from tests.support.jaeger import Jaeger, StoredSpan

pytestmark = pytest.mark.integration

SPAN_KIND_INTERNAL = 1  # OTLP enum values, as Jaeger's OTLP/JSON gives them
STATUS_UNSET, STATUS_ERROR = 0, 2

VIOLATING = {
    "sloscope.slo_class": "interactive",
    "sloscope.model": "llama-3-8b",
    "sloscope.pool": "pool-a",
    "sloscope.pod": "vllm-0",
    "sloscope.routing": "predicted",
    "sloscope.request.id": "req-1",
    "sloscope.join.outcome": "joined",
    "sloscope.target_source": "request",
    "sloscope.ttft.target_ms": 200.0,
    "sloscope.ttft.actual_ms": 250.0,
    "sloscope.ttft.source": "gateway",
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
    "sloscope.prediction.source": "shadow",
    "sloscope.prediction.quantile": 0.9,
    "sloscope.pod.waiting": 3.0,
    "sloscope.pod.running": 5.0,
    "sloscope.pod.kv_cache_utilization": 0.42,
    "sloscope.pod.state_age_ms": 700.0,
}
MET = {
    "sloscope.slo_class": "standard",
    "sloscope.model": "mistral",
    "sloscope.pool": "pool-a",
    "sloscope.pod": "vllm-1",
    "sloscope.routing": "unknown",
    "sloscope.join.outcome": "joined",
    "sloscope.target_source": "request",
    "sloscope.ttft.target_ms": 2000.0,
    "sloscope.ttft.actual_ms": 1500.0,
    "sloscope.ttft.source": "model_server",
    "sloscope.ttft.met": True,
    "sloscope.goodput.met": True,
    "sloscope.prediction.source": "none",
    "sloscope.prediction.skipped": "no_pod_state",
}
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
