"""OTLP export of evaluation spans: one span per evaluated request, carrying its SLO verdict.

The span lets a trace backend (Tempo, Jaeger, anything behind an OpenTelemetry Collector) show,
beside the request's own trace, what sloscope concluded: the targets, the actual and predicted
latencies, the headroom at routing and which SLOs were missed. docs/otlp-export.md is the user
reference; :data:`ATTRIBUTES` is the one list of attribute names, which the docs are tested against.

Sending uses the OpenTelemetry SDK unchanged: a private :class:`TracerProvider` (never the global
one, which the service's own instrumentation may use), sampler ALWAYS_ON (the request was already
sampled by whoever traced it; a second coin toss would only lose verdicts), a
:class:`BatchSpanProcessor` and the SDK's OTLP span exporter, which retries transient failures with
exponential backoff within ``timeout_seconds``.

Accounting (``sloscope_records_total{sink="otlp",result}``): the SDK's batch processor drops silently
when its queue is full (and drops the *oldest* span, so its own count could not be attributed), so
this sink keeps a count of its own in front of it. A span is *in flight* from the moment it is accepted
until the export call that carries it returns; the batch being sent counts too. At most
``max_queue_size`` spans are in flight: a record beyond that is counted ``dropped`` before a span is
even built, and since the SDK queue (of the same size) only ever holds a subset of the in-flight
spans, the SDK never drops one on its own. The exporter is wrapped so every span of a finished export
is counted ``written`` or ``failed``. The invariant, once shut down:
accepted = written + failed + dropped-at-shutdown, and emitted = accepted + filtered + dropped.
Counting the in-flight batch against the bound keeps the memory bound honest while an endpoint is
down and makes the drop count independent of thread timing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from sloscope import __version__
from sloscope import conventions as c
from sloscope.config import Export
from sloscope.publishers.sinks import SinkMetrics
from sloscope.records import RequestRecord, Verdict

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = [
    "ATTRIBUTES",
    "SPAN_NAME",
    "OTLPExport",
    "evaluation_attributes",
    "violated_slos",
]

log = logging.getLogger(__name__)

# One name for every evaluation span: low cardinality, as OpenTelemetry asks of span names, and it names
# the operation (sloscope evaluating a request against its SLOs) under the same prefix as the attributes,
# so a backend query `name = "sloscope.evaluation"` finds exactly these spans and nothing a model server sent.
SPAN_NAME = "sloscope.evaluation"
SCOPE_NAME = "sloscope"

# Attribute names, defined once. Durations are milliseconds (the unit of the SLO headers), rounded to the
# nanosecond so that 1.1 s reads 1100.0, not 1100.0000000000002.
SLO_CLASS = "sloscope.slo_class"
MODEL = "sloscope.model"
POOL = "sloscope.pool"
POD = "sloscope.pod"
ROUTING = "sloscope.routing"
REQUEST_ID = "sloscope.request.id"
JOIN_OUTCOME = "sloscope.join.outcome"
TARGET_SOURCE = "sloscope.target_source"
TTFT_TARGET = "sloscope.ttft.target_ms"
TTFT_ACTUAL = "sloscope.ttft.actual_ms"
TTFT_SOURCE = "sloscope.ttft.source"
TTFT_PREDICTED = "sloscope.ttft.predicted_ms"
TTFT_HEADROOM = "sloscope.ttft.headroom_ms"
TTFT_MET = "sloscope.ttft.met"
TPOT_TARGET = "sloscope.tpot.target_ms"
TPOT_ACTUAL = "sloscope.tpot.actual_ms"
TPOT_PREDICTED = "sloscope.tpot.predicted_ms"
TPOT_HEADROOM = "sloscope.tpot.headroom_ms"
TPOT_MET = "sloscope.tpot.met"
GOODPUT_MET = "sloscope.goodput.met"
VIOLATED = "sloscope.violated"
INVALID_FIELDS = "sloscope.invalid_fields"
PREDICTION_SOURCE = "sloscope.prediction.source"
PREDICTION_QUANTILE = "sloscope.prediction.quantile"
PREDICTION_SKIPPED = "sloscope.prediction.skipped"
POD_WAITING = "sloscope.pod.waiting"
POD_RUNNING = "sloscope.pod.running"
POD_KV_CACHE = "sloscope.pod.kv_cache_utilization"
POD_STATE_AGE = "sloscope.pod.state_age_ms"

ATTRIBUTES: tuple[tuple[str, str], ...] = (
    (SLO_CLASS, "SLO class the request was counted in (always set)."),
    (MODEL, "Model that served the request, else the requested one."),
    (POOL, "Pool the request is counted in (always set)."),
    (POD, "Model-server pod that served the request."),
    (ROUTING, "predicted, default or unknown: the routing profile, as the `routing` label (always set)."),
    (REQUEST_ID, "The request's x-request-id / gen_ai.request.id."),
    (JOIN_OUTCOME, "How the request's spans were joined, as the `outcome` label of sloscope_traces_joined_total."),
    (TARGET_SOURCE, "request (SLO headers), class_default or none (always set)."),
    (TTFT_TARGET, "TTFT target, ms."),
    (TTFT_ACTUAL, "Measured TTFT, ms."),
    (TTFT_SOURCE, "Where the measured TTFT came from: gateway or model_server."),
    (TTFT_PREDICTED, "Predicted TTFT, ms (the predictor's quantile, not a mean)."),
    (TTFT_HEADROOM, "TTFT target minus predicted TTFT at routing, ms; negative when the pod was predicted to miss."),
    (TTFT_MET, "Whether TTFT met its target; set only when the request was eligible for the TTFT SLO."),
    (TPOT_TARGET, "TPOT target, ms."),
    (TPOT_ACTUAL, "Measured TPOT, (e2e - TTFT) / (completion tokens - 1), ms."),
    (TPOT_PREDICTED, "Predicted TPOT, ms."),
    (TPOT_HEADROOM, "TPOT target minus predicted TPOT at routing, ms."),
    (TPOT_MET, "Whether TPOT met its target; set only when the request was eligible for the TPOT SLO."),
    (GOODPUT_MET, "Whether every SLO the request carries was met; set only when eligible for goodput."),
    (VIOLATED, "The SLOs missed (ttft, tpot, goodput), in that order; absent when none was."),
    (INVALID_FIELDS, "Inputs the evaluator found unusable (e.g. ttft_seconds); absent when none."),
    (PREDICTION_SOURCE, "span (the EPP's prediction), shadow (asked by sloscope) or none (always set)."),
    (PREDICTION_QUANTILE, "Quantile the predictor predicts (e.g. 0.9)."),
    (PREDICTION_SKIPPED, "Why there is no shadow prediction (sampled_out, no_pod_state, failed, ...)."),
    (POD_WAITING, "Requests waiting on the pod at arrival (scraped)."),
    (POD_RUNNING, "Requests running on the pod at arrival (scraped)."),
    (POD_KV_CACHE, "KV-cache utilization of the pod at arrival, 0..1 (scraped)."),
    (POD_STATE_AGE, "Age of that scraped sample at the request's arrival, ms."),
)


def _ms(seconds: float | None) -> float | None:
    """Seconds to milliseconds rounded to the nanosecond; None (unknown) for None, NaN or infinity."""
    if seconds is None or not math.isfinite(seconds):
        return None
    return round(seconds * 1000.0, 6)


def _known(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def violated_slos(record: RequestRecord) -> list[str]:
    """The SLOs the request was eligible for and missed, in the order of the ``slo`` label values."""
    evaluation = record.evaluation
    return [slo for slo in c.SLOS if (v := evaluation.verdict(slo)).eligible and not v.met]


def evaluation_attributes(record: RequestRecord) -> dict[str, Any]:
    """The span's attributes: only values that are known, so an absent attribute never reads as 0 or false."""
    request, evaluation = record.request, record.evaluation
    attributes: dict[str, Any] = {
        SLO_CLASS: evaluation.slo_class,
        POOL: record.pool,
        ROUTING: request.routing,
        TARGET_SOURCE: evaluation.target_source,
        PREDICTION_SOURCE: record.prediction_source,
    }
    optional: tuple[tuple[str, Any], ...] = (
        (MODEL, request.model),
        (POD, request.pod),
        (REQUEST_ID, request.request_id),
        (JOIN_OUTCOME, request.outcome or None),
        (TTFT_TARGET, _ms(evaluation.ttft.target)),
        (TTFT_ACTUAL, _ms(evaluation.ttft_seconds)),
        (TTFT_SOURCE, request.ttft_source if evaluation.ttft_seconds is not None else None),
        (TTFT_PREDICTED, _ms(record.predicted_ttft_seconds)),
        (TTFT_HEADROOM, _ms(record.ttft_headroom_seconds)),
        (TTFT_MET, _met(evaluation.ttft)),
        (TPOT_TARGET, _ms(evaluation.tpot.target)),
        (TPOT_ACTUAL, _ms(evaluation.tpot_seconds)),
        (TPOT_PREDICTED, _ms(record.predicted_tpot_seconds)),
        (TPOT_HEADROOM, _ms(record.tpot_headroom_seconds)),
        (TPOT_MET, _met(evaluation.tpot)),
        (GOODPUT_MET, _met(evaluation.goodput)),
        (VIOLATED, violated_slos(record) or None),
        (INVALID_FIELDS, list(evaluation.invalid_fields) or None),
        (PREDICTION_QUANTILE, _known(record.prediction_quantile)),
        (PREDICTION_SKIPPED, record.prediction_skipped),
    )
    attributes.update((name, value) for name, value in optional if value is not None)
    state = record.pod_state
    if state is not None:
        pod: tuple[tuple[str, Any], ...] = (
            (POD_WAITING, _known(state.waiting)),
            (POD_RUNNING, _known(state.running)),
            (POD_KV_CACHE, _known(state.kv_cache_utilization)),
            (POD_STATE_AGE, _ms(state.age_seconds)),
        )
        attributes.update((name, value) for name, value in pod if value is not None)
    return attributes


def _met(verdict: Verdict) -> bool | None:
    return verdict.met if verdict.eligible else None


def status_description(record: RequestRecord) -> str | None:
    """``SLO violated: ttft 250 ms > 200 ms, ...`` for a request that missed an SLO, else None."""
    parts = []
    for slo in violated_slos(record):
        verdict = record.evaluation.verdict(slo)
        actual, target = _ms(verdict.actual), _ms(verdict.target)
        if slo == c.SLO_GOODPUT or actual is None or target is None:
            parts.append(slo)
        else:
            parts.append(f"{slo} {actual:g} ms > {target:g} ms")
    return "SLO violated: " + ", ".join(parts) if parts else None


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

    ``emit`` only counts and queues the record (about a microsecond): building a span with the SDK
    costs some 0.2 ms, too much for the pipeline worker, so a builder thread of the sink's own makes
    the spans and hands them to the batch processor, whose thread sends them. Nothing on the caller's
    thread waits for the SDK or the network.
    """

    name = c.SINK_OTLP

    def __init__(self, settings: Export, metrics: SinkMetrics) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._in_flight = 0  # accepted, and not through an export call yet
        self._exporting = 0  # of those, in an export call right now
        self._closed = False
        self._abandoned = False
        self._count = metrics.sink(c.SINK_OTLP, lambda: self._in_flight)
        self._provider: TracerProvider | None = None
        self._exporter: _CountingExporter | None = None
        self._tracer: trace.Tracer | None = None
        self._records: deque[RequestRecord] = deque()  # accepted, waiting for the builder thread
        self._wake = threading.Event()
        self._builder: threading.Thread | None = None

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
        self._builder = threading.Thread(target=self._build, args=(tracer,), name="sloscope-otlp-spans", daemon=True)
        self._builder.start()
        log.info(
            "OTLP export of evaluation spans to %s (%s, relation=%s, only_violations=%s)",
            s.endpoint,
            s.protocol,
            s.relation,
            s.only_violations,
        )

    # ---- the hot path -------------------------------------------------------------------------

    def emit(self, record: RequestRecord) -> None:
        """Counts the record filtered or dropped, or sends its span; never blocks on the network."""
        violated = violated_slos(record)
        if self.settings.only_violations and not violated:
            self._count(c.RECORD_FILTERED, 1)
            return
        tracer = self._tracer
        with self._lock:
            accepted = tracer is not None and not self._closed and self._in_flight < self.settings.max_queue_size
            if accepted:
                self._in_flight += 1
        if not accepted or tracer is None:
            self._count(c.RECORD_DROPPED, 1)
            return
        self._records.append(record)
        self._wake.set()

    def _build(self, tracer: trace.Tracer) -> None:
        """The builder thread: spans for the queued records, until shutdown has emptied the queue."""
        records = self._records
        while True:
            self._wake.wait()
            self._wake.clear()
            while records:
                record = records.popleft()
                if self._abandoned:  # past the shutdown deadline: never built, never sent
                    self._finished(c.RECORD_DROPPED, 1, exporting=False)
                    continue
                try:
                    self._send(tracer, record)
                except Exception:
                    log.exception("building the evaluation span of trace %s failed", record.request.trace_id)
                    self._finished(c.RECORD_FAILED, 1, exporting=False)
            if self._closed:
                return

    def _send(self, tracer: trace.Tracer, record: RequestRecord) -> None:
        request = record.request
        anchor = _span_context(request.trace_id, request.span_id)
        parent: Context | None = None
        if anchor is not None and self.settings.relation == "child":
            parent = trace.set_span_in_context(NonRecordingSpan(anchor))
        elif anchor is None:
            log.debug("evaluation span of trace %r has no valid anchor ids: exported unlinked", request.trace_id)
        start = request.arrival_ns or request.start_ns
        end = max(request.end_ns, start)
        span = tracer.start_span(
            SPAN_NAME,
            context=parent if parent is not None else _ROOT,
            kind=SpanKind.INTERNAL,
            attributes=evaluation_attributes(record),
            links=[Link(anchor)] if anchor is not None else None,
            start_time=start or None,
        )
        description = status_description(record)
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
        self._count(result, n)

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
        done = threading.Thread(target=provider.shutdown, name="sloscope-otlp-export-shutdown", daemon=True)
        done.start()
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
        return self._count_stranded() == 0 and flushed

    def _count_stranded(self) -> int:
        """Counts ``dropped`` the spans the processor will never export, and returns how many there were.

        The SDK's processor gives its own shutdown 30 s; past that it stops exporting and leaves what is
        still queued where it is. Those spans are accepted, not in an export call, and never will be.
        """
        with self._lock:
            stranded = max(self._in_flight - self._exporting, 0)
            self._in_flight -= stranded
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


def http_traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: ``endpoint`` as given, or with ``/v1/traces`` added when it has no path."""
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    if urlparse(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint
