"""OTLP export of evaluation spans: one span per evaluated request, carrying its SLO verdict.

The span lets a trace backend (Tempo, Jaeger, anything behind an OpenTelemetry Collector) show,
beside the request's own trace, what sloscope concluded: the targets, the actual and predicted
latencies, the headroom at routing and which SLOs were missed. docs/otlp-export.md is the user
reference; the span's name and attributes are defined in :mod:`sloscope.publishers.evaluation_span`.

Sending uses the OpenTelemetry SDK unchanged: a private :class:`TracerProvider` (never the global
one, which the service's own instrumentation may use), sampler ALWAYS_ON (the request was already
sampled by whoever traced it; a second coin toss would only lose verdicts), a
:class:`BatchSpanProcessor` and the SDK's OTLP span exporter, which retries transient failures with
exponential backoff within ``timeout_seconds``.

Accounting (``sloscope_records_total{sink="otlp",result}``): the SDK's batch processor drops silently
when its queue is full (and drops the *oldest* span, so its own count could not be attributed), so
this sink keeps a count of its own in front of it. A span is *in flight* from the moment it is accepted
until the export call that carries it returns; the batch being sent counts too. At most
``max_queue_size`` spans are in flight: a record (a row of the record tables the sink is handed)
beyond that is counted ``dropped`` before a span is even built, and since the SDK queue (of the same
size) only ever holds a subset of the in-flight spans, the SDK never drops one on its own. The
exporter is wrapped so every span of a finished export is counted ``written`` or ``failed``.
The invariant, once shut down: accepted = written + failed + dropped-at-shutdown, and
emitted = accepted + filtered + dropped.
Counting the in-flight batch against the bound keeps the memory bound honest while an endpoint is
down and makes the drop count independent of thread timing.

Readiness: once every export since a failed one has failed for ``export.failure_grace_seconds``,
:meth:`OTLPExport.problem` gives the reason (``/readyz``); a successful export ends it. Spans
accepted and then failed or dropped after shutdown began are :attr:`OTLPExport.unwritten`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from sloscope import __version__, threads
from sloscope import conventions as c
from sloscope.columnar import arrow_arrays
from sloscope.config import Export
from sloscope.publishers.evaluation_span import (
    SCOPE_NAME,
    SPAN_NAME,
    Row,
    evaluation_attributes,
    record_rows,
    status_description,
)
from sloscope.publishers.sinks import FailureWindow, SinkMetrics, refused
from sloscope.redaction import redact_url
from sloscope.store.schema import Records, as_batch

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["OTLPExport", "http_traces_url"]

log = logging.getLogger(__name__)


def _span_context(trace_id: str, span_id: str) -> SpanContext | None:
    """The model-server span as a remote span context; None when its ids are not valid hex ids."""
    try:
        context = SpanContext(
            int(trace_id, 16),
            int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    except ValueError:
        return None
    if len(trace_id) != 32 or len(span_id) != 16 or not context.is_valid:
        return None
    return context


class _CountingExporter(SpanExporter):
    """Wraps the OTLP exporter: counts each finished export's spans and releases them from the in-flight bound."""

    def __init__(self, inner: SpanExporter, owner: OTLPExport) -> None:
        self._inner = inner
        self._owner = owner
        self._shut = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._owner._exporting_started(len(spans))
        if self._owner._abandoned:  # the shutdown deadline passed: these were never sent
            self._owner._finished(c.RECORD_DROPPED, len(spans))
            return SpanExportResult.FAILURE
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter bug must not kill the processor's worker thread
            log.exception("OTLP export of %d evaluation spans raised", len(spans))
            result = SpanExportResult.FAILURE
        written = result is SpanExportResult.SUCCESS
        self._owner._finished(c.RECORD_WRITTEN if written else c.RECORD_FAILED, len(spans))
        return result

    def probe(self) -> SpanExportResult:
        """An empty export straight to the endpoint, counted nowhere (it carries no record)."""
        return self._inner.export([])

    def shutdown(self) -> None:
        with self._lock:  # called by the processor and, past the deadline, by OTLPExport itself
            if self._shut:
                return
            self._shut = True
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class OTLPExport:
    """The ``otlp`` record sink: evaluation spans to an OTLP endpoint, batched, retried and bounded.

    ``emit`` only counts and queues the records (a table's rows at once): building a span with the SDK
    costs some 0.2 ms, too much for the pipeline worker, so a builder thread of the sink's own reads the
    tables' columns, makes the spans and hands them to the batch processor, whose thread sends them.
    Nothing on the caller's thread waits for the SDK or the network.
    """

    name = c.SINK_OTLP
    # While exports fail and nothing is left to send, an empty export this often tells when the endpoint is back
    # (a replica that is not ready receives no spans, so no real export would).
    probe_interval_seconds = 5.0

    def __init__(self, settings: Export, metrics: SinkMetrics) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._in_flight = 0  # accepted, and not through an export call yet
        self._exporting = 0  # of those, in an export call right now
        self._closed = False
        self._abandoned = False
        self._count = metrics.sink(c.SINK_OTLP, lambda: self._in_flight)
        self._fault = FailureWindow(self.name, settings.failure_grace_seconds)
        self._unwritten = 0  # accepted, then failed or dropped once shutdown began
        self._provider: TracerProvider | None = None
        self._exporter: _CountingExporter | None = None
        self._tracer: trace.Tracer | None = None
        self._records: deque[pa.RecordBatch] = deque()  # accepted rows, waiting for the builder thread
        self._wake = threading.Event()
        self._builder: threading.Thread | None = None
        self._prober: threading.Thread | None = None

    # ---- construction -------------------------------------------------------------------------

    def _span_exporter(self) -> SpanExporter:
        """The SDK's OTLP exporter for the configured protocol (tests override this to inject one)."""
        s = self.settings
        if s.protocol == "grpc":
            import grpc
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

            return GrpcSpanExporter(
                endpoint=s.endpoint,
                insecure=s.insecure,
                # gRPC metadata keys must be lowercase; HTTP header names are case-insensitive anyway.
                headers={k.lower(): v for k, v in s.headers.items()} or None,
                timeout=s.timeout_seconds,
                compression=grpc.Compression.Gzip if s.compression == "gzip" else grpc.Compression.NoCompression,
            )
        # Imported here: the HTTP exporter is a separate distribution, needed only by http/protobuf.
        from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        return HttpSpanExporter(
            endpoint=http_traces_url(s.endpoint),
            headers=dict(s.headers) or None,
            timeout=s.timeout_seconds,
            compression=HttpCompression.Gzip if s.compression == "gzip" else HttpCompression.NoCompression,
        )

    def start(self) -> None:
        """Builds the provider, processor and exporter; the processor's thread starts here."""
        if self._provider is not None:
            return
        s = self.settings
        queue = s.max_queue_size
        self._exporter = _CountingExporter(self._span_exporter(), self)
        processor = BatchSpanProcessor(
            self._exporter,
            max_queue_size=queue,
            schedule_delay_millis=s.schedule_delay_seconds * 1000.0,
            max_export_batch_size=min(s.max_batch_size, queue),  # the SDK refuses a batch larger than its queue
            export_timeout_millis=s.timeout_seconds * 1000.0,
        )
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=Resource.create({SERVICE_NAME: "sloscope", SERVICE_VERSION: __version__}),
            shutdown_on_exit=False,  # the service shuts the sink down, with its own deadline
        )
        provider.add_span_processor(processor)
        tracer = provider.get_tracer(SCOPE_NAME, __version__)
        self._provider = provider
        if not isinstance(tracer, SdkTracer):  # OTEL_SDK_DISABLED=true: spans would vanish, uncounted
            log.error("OTLP export: OTEL_SDK_DISABLED is set, every evaluation span is counted dropped")
            return
        self._tracer = tracer
        self._builder = threads.start(self._build, "sloscope-otlp-spans", tracer)
        log.info(
            "OTLP export of evaluation spans to %s (%s, relation=%s, only_violations=%s)",
            s.endpoint,
            s.protocol,
            s.relation,
            s.only_violations,
        )

    # ---- the hot path -------------------------------------------------------------------------

    def emit(self, records: Records) -> None:
        """Counts each row filtered or dropped, or queues it for its span, in order (the queue's room goes to the
        first ones); never blocks on the network."""
        if refused(records, "OTLP export", self._count):
            return
        batch = as_batch(records)
        if self.settings.only_violations:
            kept = batch.filter(arrow_arrays.bool_array(_violated(batch)))
            self._count(c.RECORD_FILTERED, batch.num_rows - kept.num_rows)
            batch = kept
        tracer = self._tracer
        with self._lock:
            room = self.settings.max_queue_size - self._in_flight
            accepted = max(min(room, batch.num_rows), 0) if tracer is not None and not self._closed else 0
            self._in_flight += accepted
        self._count(c.RECORD_DROPPED, batch.num_rows - accepted)
        if accepted:
            self._records.append(batch.slice(0, accepted))
            self._wake.set()

    def _build(self, tracer: trace.Tracer) -> None:
        """The builder thread: spans for the queued records, until shutdown has emptied the queue."""
        records = self._records
        while True:
            woken = self._wake.wait(self.probe_interval_seconds if self._fault.failing else None)
            self._wake.clear()
            if not woken and not self._closed and not self._in_flight:
                self._start_probe()
            while records:
                for row in record_rows(records.popleft()):
                    if self._abandoned:  # past the shutdown deadline: never built, never sent
                        self._finished(c.RECORD_DROPPED, 1, exporting=False)
                        continue
                    try:
                        self._send(tracer, row)
                    except Exception:
                        log.exception("building the evaluation span of trace %s failed", row["trace_id"])
                        self._finished(c.RECORD_FAILED, 1, exporting=False)
            if self._closed:
                return

    def _send(self, tracer: trace.Tracer, row: Row) -> None:
        trace_id, span_id = row["trace_id"], row["span_id"]
        anchor = _span_context(trace_id, span_id)
        parent: Context | None = None
        if anchor is not None and self.settings.relation == "child":
            parent = trace.set_span_in_context(NonRecordingSpan(anchor))
        elif anchor is None:
            log.debug("evaluation span of trace %r has no valid anchor ids: exported unlinked", trace_id)
        start = row["arrival_time"] or row["start_time"] or 0
        end = max(row["end_time"] or 0, start)
        span = tracer.start_span(
            SPAN_NAME,
            context=parent if parent is not None else _ROOT,
            kind=SpanKind.INTERNAL,
            attributes=evaluation_attributes(row),
            links=[Link(anchor)] if anchor is not None else None,
            start_time=start or None,
        )
        description = status_description(row)
        if description is not None:
            span.set_status(Status(StatusCode.ERROR, description))
        span.end(end_time=end or None)

    def _exporting_started(self, n: int) -> None:
        with self._lock:
            self._exporting += n

    def _finished(self, result: str, n: int, exporting: bool = True) -> None:
        """Spans whose export call returned (or that will never be sent) leave the in-flight bound."""
        with self._lock:
            self._in_flight = max(self._in_flight - n, 0)
            if exporting:
                self._exporting = max(self._exporting - n, 0)
            if self._closed and result != c.RECORD_WRITTEN:
                self._unwritten += n
        self._count(result, n)
        if exporting and result == c.RECORD_WRITTEN:
            self._fault.succeeded()
        elif exporting and result == c.RECORD_FAILED and not self._abandoned:
            endpoint = redact_url(self.settings.endpoint)
            self._fault.failed(f"exports to {endpoint} fail (the last one: {n} span(s), after its retries)")
            self._wake.set()  # the builder's wait now times out to probe the endpoint

    def _start_probe(self) -> None:
        """Probes on a thread of its own, so neither building spans nor shutdown waits on a down endpoint."""
        if self._prober is not None and self._prober.is_alive():
            return
        self._prober = threads.start(self._probe, "sloscope-otlp-probe")

    def _probe(self) -> None:
        """An export of no spans; its result ends or continues the failure."""
        exporter = self._exporter
        if exporter is None:
            return
        try:
            result = exporter.probe()
        except Exception:  # an exporter bug: the failure goes on
            log.debug("OTLP export: the probe export raised", exc_info=True)
            return
        if result is SpanExportResult.SUCCESS:
            self._fault.succeeded()

    def problem(self) -> str | None:
        return self._fault.problem()

    @property
    def unwritten(self) -> int:
        return self._unwritten

    # ---- shutdown -----------------------------------------------------------------------------

    def shutdown(self, timeout: float) -> bool:
        """Sends what was accepted within ``timeout`` seconds; past it, aborts retries and counts the rest.

        The SDK's processor shutdown waits up to 30 s on its own and its flush has no deadline, so it
        runs on a helper thread. When the deadline passes the OTLP exporter is shut down, which aborts
        the export under way (its spans count ``failed``) and every later batch is counted ``dropped``
        without being sent. Returns False when the deadline ran out first.
        """
        with self._lock:
            self._closed = True
        provider, exporter = self._provider, self._exporter
        if provider is None or exporter is None:
            return True
        deadline = time.monotonic() + max(timeout, 0.0)
        builder = self._builder
        if builder is not None:  # every accepted record becomes a span before the processor flushes
            self._wake.set()
            builder.join(max(timeout, 0.0))
        done = threads.start(provider.shutdown, "sloscope-otlp-export-shutdown")
        done.join(max(deadline - time.monotonic(), 0.0))
        flushed = not done.is_alive() and (builder is None or not builder.is_alive())
        if not flushed:
            log.warning("OTLP export: %d evaluation spans not sent by the shutdown deadline", self._in_flight)
            self._abandoned = True
            self._wake.set()
            exporter.shutdown()
            done.join(5.0)
            if builder is not None:
                builder.join(5.0)
        return self._count_stranded() == 0 and flushed and self._unwritten == 0

    def _count_stranded(self) -> int:
        """Counts ``dropped`` the spans the processor will never export, and returns how many there were.

        The SDK's processor gives its own shutdown 30 s; past that it stops exporting and leaves what is
        still queued where it is. Those spans are accepted, not in an export call, and never will be.
        """
        with self._lock:
            stranded = max(self._in_flight - self._exporting, 0)
            self._in_flight -= stranded
            self._unwritten += stranded
        if stranded:
            log.warning("OTLP export: %d evaluation spans left unsent by the SDK's batch processor", stranded)
            self._count(c.RECORD_DROPPED, stranded)
        return stranded

    @property
    def in_flight(self) -> int:
        """Spans accepted and not yet through an export call (the ``sloscope_records_queued`` value)."""
        return self._in_flight


# A context with no span in it: with relation "link" the evaluation span must start a new trace even when
# emit runs inside some active span (the service's own instrumentation).
_ROOT: Context = trace.set_span_in_context(trace.INVALID_SPAN)


def _violated(batch: pa.RecordBatch) -> np.ndarray:
    """The rows that missed an SLO they were eligible for (its ``<slo>_met`` false, not null)."""
    violated = np.zeros(batch.num_rows, dtype=bool)
    for slo in c.SLOS:
        met = batch.column(f"{slo}_met")
        violated |= arrow_arrays.present(met) & ~arrow_arrays.bools(met)
    return violated


def http_traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: ``endpoint`` as given, or with ``/v1/traces`` added when it has no path."""
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    if urlparse(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint
