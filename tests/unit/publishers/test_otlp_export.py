"""The OTLP export sink: attributes from hand-made record tables, the span's shape, filtering and exact counts.

The span's shape is checked with the SDK's in-memory exporter in place of the OTLP one; the counts
with the real OTLP gRPC exporter pointed at a loopback port nobody listens on (the endpoint is down).
tests/integration/test_otlp_export.py sends the same spans to a real Jaeger.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

from sloscope import __version__
from sloscope.config import Export
from sloscope.demo.ports import free_ports
from sloscope.publishers import evaluation_span as ox
from sloscope.publishers.evaluation_span import record_rows
from sloscope.publishers.otlp_export import OTLPExport, http_traces_url
from sloscope.publishers.sinks import SinkMetrics
from tests.support.evaluation_records import (
    ARRIVAL_NS,
    END_NS,
    MET_ATTRIBUTES,
    SPAN_ID,
    START_NS,
    TRACE_ID,
    VIOLATING_ATTRIBUTES,
    bare_record,
    bare_row,
    met_record,
    met_row,
    table,
    violating_record,
    violating_row,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "otlp-export.md"


class MemoryExport(OTLPExport):
    """The sink with another SDK exporter in place of the OTLP one."""

    def __init__(self, settings: Export, metrics: SinkMetrics, exporter: SpanExporter) -> None:
        super().__init__(settings, metrics)
        self.memory = exporter

    def _span_exporter(self) -> SpanExporter:
        return self.memory


class FailingExporter(SpanExporter):
    """Refuses every batch, as an endpoint does after the exporter's retries ran out."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.batches.append(len(spans))
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


def settings(**overrides: Any) -> Export:
    return Export(enabled=True, **overrides)


def counts(registry: CollectorRegistry) -> dict[str, float]:
    return {
        result: registry.get_sample_value("sloscope_records_total", {"sink": "otlp", "result": result}) or 0.0
        for result in ("written", "filtered", "dropped", "failed")
    }


def queued(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("sloscope_records_queued", {"sink": "otlp"})


def exported(memory: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(memory.get_finished_spans())


def evaluation_attributes(records: pa.RecordBatch) -> dict[str, Any]:
    """The attributes of a one-row record table's span, its columns read as the sink reads them."""
    (row,) = record_rows(records)
    return ox.evaluation_attributes(row)


def status_description(records: pa.RecordBatch) -> str | None:
    (row,) = record_rows(records)
    return ox.status_description(row)


# ---- attributes --------------------------------------------------------------------------------


def test_a_violating_request_carries_every_known_value_exactly() -> None:
    assert evaluation_attributes(violating_record()) == VIOLATING_ATTRIBUTES


def test_a_met_request_without_prediction_leaves_unknown_values_out() -> None:
    assert evaluation_attributes(met_record()) == MET_ATTRIBUTES


def test_a_request_with_nothing_known_has_only_the_always_set_attributes() -> None:
    assert evaluation_attributes(bare_record()) == {
        "sloscope.slo_class": "none",
        "sloscope.pool": "default",
        "sloscope.routing": "unknown",
        "sloscope.join.outcome": "anchor_only",
        "sloscope.target_source": "none",
        "sloscope.invalid_fields": ["ttft_seconds"],
        "sloscope.prediction.source": "none",
    }


def test_a_target_without_an_actual_is_kept_but_not_judged() -> None:
    record = met_record(ttft_met=None, goodput_met=None, ttft_seconds=None, ttft_judged_seconds=None)
    attributes = evaluation_attributes(record)
    assert attributes["sloscope.ttft.target_ms"] == 2000.0
    for absent in ("sloscope.ttft.actual_ms", "sloscope.ttft.source", "sloscope.ttft.met", "sloscope.goodput.met"):
        assert absent not in attributes
    assert status_description(record) is None


def test_non_finite_and_missing_pod_values_are_left_out_never_zero() -> None:
    record = violating_record(
        ttft_headroom_seconds=float("nan"),
        prediction_quantile=float("inf"),
        pod_waiting=0.0,
        pod_running=None,
        pod_kv_cache_utilization=None,
        pod_state_age_seconds=0.25,
    )
    attributes = evaluation_attributes(record)
    assert "sloscope.ttft.headroom_ms" not in attributes
    assert "sloscope.prediction.quantile" not in attributes
    assert attributes["sloscope.pod.waiting"] == 0.0  # a real zero stays
    assert "sloscope.pod.running" not in attributes
    assert "sloscope.pod.kv_cache_utilization" not in attributes
    assert attributes["sloscope.pod.state_age_ms"] == 250.0


def test_milliseconds_are_rounded_to_the_nanosecond() -> None:
    # 1.1 * 1000 is 1100.0000000000002 in binary floating point
    record = violating_record(predicted_ttft_seconds=1.1, ttft_headroom_seconds=-0.9)
    attributes = evaluation_attributes(record)
    assert attributes["sloscope.ttft.predicted_ms"] == 1100.0
    assert attributes["sloscope.ttft.headroom_ms"] == -900.0


def test_status_names_each_missed_slo_with_its_numbers() -> None:
    assert status_description(violating_record()) == "SLO violated: ttft 250 ms > 200 ms, goodput"
    record = violating_record(tpot_met=False, tpot_seconds=0.0625, tpot_target_seconds=0.05)
    assert status_description(record) == "SLO violated: ttft 250 ms > 200 ms, tpot 62.5 ms > 50 ms, goodput"


def test_a_failed_request_says_why_and_the_slos_it_missed() -> None:
    """A failed request's TTFT is no sample (``ttft_seconds`` null), yet the missed SLO is told with what it
    measured (``ttft_judged_seconds``, its verdict's actual)."""
    record = violating_record(failure_reason="timeout", prefill_pod="prefill-0", ttft_seconds=None)
    attributes = evaluation_attributes(record)
    assert (attributes["sloscope.failure.reason"], attributes["sloscope.prefill.pod"]) == ("timeout", "prefill-0")
    assert "sloscope.ttft.actual_ms" not in attributes
    assert status_description(record) == "request failed (timeout); SLO violated: ttft 250 ms > 200 ms, goodput"
    assert "sloscope.failure.reason" not in evaluation_attributes(violating_record())


def test_http_endpoint_without_a_path_gets_the_traces_path() -> None:
    assert http_traces_url("http://tempo:4318") == "http://tempo:4318/v1/traces"
    assert http_traces_url("tempo:4318/") == "http://tempo:4318/v1/traces"
    assert http_traces_url("https://otlp.example.com/otlp/v1/traces") == "https://otlp.example.com/otlp/v1/traces"


# ---- the span ----------------------------------------------------------------------------------


def test_child_relation_puts_the_span_under_the_model_server_span_and_links_it() -> None:
    registry, memory = CollectorRegistry(), InMemorySpanExporter()
    sink = MemoryExport(settings(relation="child"), SinkMetrics(registry), memory)
    sink.start()
    sink.emit(violating_record())
    assert sink.shutdown(10)

    (span,) = exported(memory)
    assert span.name == "sloscope.evaluation"
    assert span.kind is SpanKind.INTERNAL
    assert span.context is not None and span.parent is not None
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(span.parent.span_id, "016x") == SPAN_ID
    assert span.parent.is_remote
    assert [(format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")) for link in span.links] == [
        (TRACE_ID, SPAN_ID)
    ]
    assert (span.start_time, span.end_time) == (ARRIVAL_NS, END_NS)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "SLO violated: ttft 250 ms > 200 ms, goodput"
    assert dict(span.attributes or {}) == {
        k: tuple(v) if isinstance(v, list) else v for k, v in VIOLATING_ATTRIBUTES.items()
    }
    assert span.resource.attributes["service.name"] == "sloscope"
    assert span.resource.attributes["service.version"] == __version__
    assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "sloscope"
    assert counts(registry) == {"written": 1, "filtered": 0, "dropped": 0, "failed": 0}
    assert queued(registry) == 0


def test_link_relation_starts_a_trace_of_its_own() -> None:
    memory = InMemorySpanExporter()
    sink = MemoryExport(settings(relation="link"), SinkMetrics(CollectorRegistry()), memory)
    sink.start()
    sink.emit(met_record())
    assert sink.shutdown(10)

    (span,) = exported(memory)
    assert span.parent is None
    assert span.context is not None and format(span.context.trace_id, "032x") != TRACE_ID
    assert [(format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")) for link in span.links] == [
        (TRACE_ID, SPAN_ID)
    ]
    assert span.status.status_code is StatusCode.UNSET
    assert (span.start_time, span.end_time) == (ARRIVAL_NS, END_NS)


def test_start_falls_back_to_the_model_server_span_and_bad_ids_give_an_unlinked_root() -> None:
    memory = InMemorySpanExporter()
    sink = MemoryExport(settings(), SinkMetrics(CollectorRegistry()), memory)
    sink.start()
    sink.emit(bare_record(trace_id="not-hex", span_id=SPAN_ID))
    sink.emit(bare_record(trace_id="0" * 32, span_id=SPAN_ID))
    assert sink.shutdown(10)

    spans = exported(memory)
    assert len(spans) == 2
    for span in spans:
        assert span.parent is None and not span.links
        assert (span.start_time, span.end_time) == (START_NS, END_NS)


def test_only_violations_exports_violating_requests_and_counts_the_rest_filtered() -> None:
    registry, memory = CollectorRegistry(), InMemorySpanExporter()
    sink = MemoryExport(settings(only_violations=True), SinkMetrics(registry), memory)
    sink.start()
    for record in (met_record(), violating_record(), bare_record(), violating_record()):
        sink.emit(record)
    assert sink.shutdown(10)

    assert [span.attributes["sloscope.slo_class"] for span in exported(memory) if span.attributes] == [
        "interactive",
        "interactive",
    ]
    assert counts(registry) == {"written": 2, "filtered": 2, "dropped": 0, "failed": 0}


def test_a_table_of_records_is_filtered_queued_and_dropped_row_by_row() -> None:
    """A table of records (the prediction tracker hands a batch's at once) is counted and queued as its rows one
    at a time would be: the filter first, then the queue's room to the first rows it keeps."""
    rows = [met_row(request_id="0"), violating_row(request_id="1"), bare_row(request_id="2")]
    rows.append(violating_row(request_id="3"))
    for only_violations, expected, kept in (
        (True, {"written": 0, "filtered": 2, "dropped": 0, "failed": 0}, ["1", "3"]),
        (False, {"written": 0, "filtered": 0, "dropped": 1, "failed": 0}, ["0", "1", "2"]),
    ):
        registry = CollectorRegistry()
        sink = OTLPExport(settings(only_violations=only_violations, max_queue_size=3), SinkMetrics(registry))
        sink._tracer = object()  # type: ignore[assignment]  # as if started, with no thread draining the queue
        sink.emit(pa.Table.from_batches([table(*rows[:2]), table(*rows[2:])]))  # a table of two chunks
        assert counts(registry) == expected
        assert queued(registry) == len(kept)
        assert [row["request_id"] for batch in sink._records for row in record_rows(batch)] == kept


def test_records_in_another_schema_are_counted_failed_and_nothing_is_queued() -> None:
    registry = CollectorRegistry()
    sink = OTLPExport(settings(), SinkMetrics(registry))
    sink._tracer = object()  # type: ignore[assignment]
    sink.emit(violating_record().drop_columns(["pod"]))
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 0, "failed": 1}
    assert not sink._records


def test_refused_exports_count_failed_per_span() -> None:
    registry, failing = CollectorRegistry(), FailingExporter()
    # No batch fills or falls due before shutdown: every export fails after it began, so all three are unwritten
    # (with batches of 2 the first could fail before, depending on the threads' timing).
    sink = MemoryExport(settings(max_batch_size=4, schedule_delay_seconds=3600), SinkMetrics(registry), failing)
    sink.start()
    for _ in range(3):
        sink.emit(violating_record())
    assert not sink.shutdown(10)  # the flush at shutdown failed: accepted spans were not sent
    assert failing.batches == [3]
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 0, "failed": 3}
    assert sink.unwritten == 3


class SwitchableExporter(FailingExporter):
    """Refuses batches while ``failing``, then accepts them."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    def export(self, spans: Any) -> SpanExportResult:
        super().export(spans)
        return SpanExportResult.FAILURE if self.failing else SpanExportResult.SUCCESS


def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("grace", "reported"),
    [pytest.param(0.0, True, id="no grace: the first failed export"), pytest.param(3600.0, False, id="within grace")],
)
def test_failing_exports_are_a_readiness_problem_after_the_grace_until_one_succeeds(
    grace: float, reported: bool
) -> None:
    registry, exporter = CollectorRegistry(), SwitchableExporter()
    endpoint = "http://user:secret@collector:4317"
    sink = MemoryExport(
        settings(endpoint=endpoint, failure_grace_seconds=grace, schedule_delay_seconds=0.01),
        SinkMetrics(registry),
        exporter,
    )
    sink.start()
    try:
        sink.emit(violating_record())
        _until(lambda: counts(registry)["failed"] == 1, "the failed export")
        expected = "exports to http://xxxxx@collector:4317 fail (the last one: 1 span(s), after its retries)"
        assert sink.problem() == (expected if reported else None)
        exporter.failing = False
        sink.emit(violating_record())
        _until(lambda: counts(registry)["written"] == 1, "the successful export")
        assert sink.problem() is None
    finally:
        assert sink.shutdown(10) and sink.unwritten == 0


def test_with_nothing_to_send_an_empty_export_finds_the_endpoint_back() -> None:
    """A replica that is not ready receives no spans; an empty export tells when the endpoint answers again."""
    registry, exporter = CollectorRegistry(), SwitchableExporter()
    sink = MemoryExport(settings(failure_grace_seconds=0, schedule_delay_seconds=0.01), SinkMetrics(registry), exporter)
    sink.probe_interval_seconds = 0.05
    sink.start()
    try:
        sink.emit(violating_record())
        _until(lambda: sink.problem() is not None, "the failed export")
        exporter.failing = False
        _until(lambda: sink.problem() is None, "a probe that succeeds")
        assert exporter.batches[0] == 1 and 0 in exporter.batches[1:]
        assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 0, "failed": 1}
    finally:
        assert sink.shutdown(10)


def test_the_series_exist_at_zero_and_emit_before_start_or_after_shutdown_is_a_drop() -> None:
    registry = CollectorRegistry()
    sink = MemoryExport(settings(), SinkMetrics(registry), InMemorySpanExporter())
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 0, "failed": 0}
    sink.emit(violating_record())  # not started
    sink.start()
    assert sink.shutdown(10)
    sink.emit(violating_record())  # shut down
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 2, "failed": 0}


# ---- bounds, with the endpoint down ------------------------------------------------------------


def down_endpoint() -> str:
    (port,) = free_ports(1)
    return f"127.0.0.1:{port}"


def test_a_full_queue_drops_exactly_what_did_not_fit_while_the_endpoint_is_down() -> None:
    """Queue of 2: the first two spans wait in one batch whose export fails (after retrying for about
    a second); the next three find the queue full. The batch being sent counts against the bound, so the
    numbers do not depend on when the processor's thread picks the batch up."""
    registry = CollectorRegistry()
    sink = OTLPExport(
        settings(endpoint=down_endpoint(), max_queue_size=2, max_batch_size=512, timeout_seconds=2.0),
        SinkMetrics(registry),
    )
    sink.start()
    for _ in range(5):
        sink.emit(violating_record())
    assert queued(registry) == 2
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 3, "failed": 0}

    # The failing export ends well within the deadline: everything is accounted for, and the two accepted
    # spans it failed are reported unwritten.
    assert not sink.shutdown(30)
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 3, "failed": 2}
    assert sink.unwritten == 2
    assert queued(registry) == 0


def test_shutdown_deadline_aborts_the_retrying_export_and_drops_what_never_left() -> None:
    """Queue of 4 in batches of 2; the export of the first batch would retry for 30 s. A 0.5 s shutdown
    aborts it (2 failed), the second batch is never sent (2 dropped) beside the one that found the queue
    full (1 dropped)."""
    registry = CollectorRegistry()
    sink = OTLPExport(
        settings(endpoint=down_endpoint(), max_queue_size=4, max_batch_size=2, timeout_seconds=30.0),
        SinkMetrics(registry),
    )
    sink.start()
    for _ in range(5):
        sink.emit(violating_record())
    assert counts(registry)["dropped"] == 1

    assert sink.shutdown(0.5) is False
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 3, "failed": 2}
    assert queued(registry) == 0


# ---- the docs ----------------------------------------------------------------------------------


def test_the_docs_describe_every_attribute_and_no_other() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `sloscope.")}
    names = [name for name, _ in ox.ATTRIBUTES]
    assert len(names) == len(set(names))
    assert rows == set(names)


def test_the_docs_describe_every_export_setting() -> None:
    text = DOC.read_text(encoding="utf-8")
    mentioned = set(re.findall(r"`export\.([a-z_]+)`", text))
    assert mentioned == set(Export.model_fields)


@pytest.mark.parametrize("name", [name for name, _ in ox.ATTRIBUTES])
def test_attribute_names_share_the_prefix(name: str) -> None:
    assert name.startswith("sloscope.") and name == name.lower()


def test_a_disabled_sdk_counts_every_span_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    registry, memory = CollectorRegistry(), InMemorySpanExporter()
    sink = MemoryExport(settings(), SinkMetrics(registry), memory)
    sink.start()
    sink.emit(violating_record())
    assert sink.shutdown(10)
    assert exported(memory) == []
    assert counts(registry) == {"written": 0, "filtered": 0, "dropped": 1, "failed": 0}


def test_the_docs_links_resolve() -> None:
    """Links to sibling docs and their headings (GitHub's anchors: lowercase, punctuation dropped, - for space)."""
    text = DOC.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", text)
    assert links
    for target, anchor in links:
        if target.startswith(("http://", "https://")):
            continue
        path = DOC.parent / (target or DOC.name)
        assert path.is_file(), f"broken link to {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, f"no heading #{anchor} in {target}"
