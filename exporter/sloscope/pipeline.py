"""Builds the processing stages from settings and runs the worker that drives them.

receivers -> Intake -> SpanQueue -> [worker thread] TraceAssembler -> SLOEvaluator -> publishers

The worker is the only thread that touches the assembler. The requests one call of the assembler
emits (a consume of a span batch, an expiry, the final flush) reach the evaluator together, as one
batch. Shutdown closes the queue (receivers then answer "shutting down"), drains what was accepted,
flushes every waiting request with what it has, and only then returns: nothing accepted is lost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pyarrow as pa
from prometheus_client import CollectorRegistry

from sloscope.attributes import Mapping
from sloscope.config import Settings
from sloscope.processors import arrow_arrays, joined_batch, span_shapes
from sloscope.processors.assembler import TraceAssembler
from sloscope.processors.evaluator import MIN_BATCH, RequestPublisher, SLOEvaluator
from sloscope.processors.native_assembler import NativeTraceAssembler
from sloscope.processors.queue import Batch, SpanQueue
from sloscope.publishers.prometheus import PrometheusPublisher
from sloscope.receivers.intake import Intake
from sloscope.records import JoinedRequest
from sloscope.slo.spec import SLOSpec
from sloscope.telemetry import Telemetry

log = logging.getLogger(__name__)

_TICK_SECONDS = 0.25  # how often join windows are checked when no spans arrive


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        spec: SLOSpec,
        registry: CollectorRegistry,
        extra_publishers: tuple[RequestPublisher, ...] = (),
        pool_of_pod: Callable[[JoinedRequest], str | None] | None = None,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.registry = registry
        self.telemetry = Telemetry(registry, settings.limits)
        mapping = Mapping(settings.attributes)
        self.queue = SpanQueue(settings.limits.queue_spans)
        self.publisher = publisher = PrometheusPublisher(
            registry,
            spec,
            settings.limits,
            self.telemetry,
            mapping.default_pool,
            pool_of_pod=pool_of_pod,
            model_of_pool={pool.name: pool.model for pool in settings.pools if pool.model},
        )
        self.evaluator = SLOEvaluator(spec, (publisher, *extra_publishers))
        arrow_arrays.warm_up()  # the batch path's Arrow kernels, initialised before any load
        self._emitted: list[JoinedRequest] = []  # the reference's requests, one object each
        self._records: list[pa.RecordBatch] = []  # the native join's, one record batch per call
        # join.engine: the native core, or the Python reference it is tested against (the same rules).
        dropped, outcome = self.telemetry.dropped, self.telemetry.outcome
        self.assembler: TraceAssembler | NativeTraceAssembler = (
            NativeTraceAssembler(
                settings.join,
                mapping,
                self._emitted.append,
                count_dropped=dropped,
                count_outcome=outcome,
                records=self._records.append,
            )
            if settings.join.engine == "native"
            else TraceAssembler(
                settings.join, mapping, self._emitted.append, count_dropped=dropped, count_outcome=outcome
            )
        )
        self.intake = Intake(
            mapping,
            self.queue,
            self.telemetry,
            settings.limits.retry_after_seconds,
            keep=mapping.span_keys(settings.join.anchor_attribute, *span_shapes.KEYS),
            limits=settings.limits,
            engine=settings.join.engine,
        )
        self.telemetry.watch(
            lambda: len(self.queue),
            self.queue.capacity,
            lambda: self.assembler.pending,
            lambda: self.assembler.pending_bytes,
        )
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="sloscope-pipeline", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        queue, assembler = self.queue, self.assembler
        while True:
            batches = queue.take(_TICK_SECONDS)
            for batch in batches:
                try:
                    self._consume(batch)
                except Exception:  # keep the worker alive; the batch is lost and logged
                    log.exception("trace assembler failed on a batch of %d spans", len(batch))
                self._hand_over()
            if not batches:
                assembler.expire()
                self._hand_over()
                if queue.closed:
                    break
        self._flush()
        self._stopped.set()

    def _consume(self, batch: Batch) -> None:
        assembler = self.assembler
        if isinstance(assembler, TraceAssembler):  # the reference takes Span objects, not a native decoder's batch
            assembler.consume(batch if isinstance(batch, list) else batch.to_spans())
        else:
            assembler.consume(batch)

    def _hand_over(self) -> None:
        """The requests the assembler emitted since the last call, to the evaluator as one batch."""
        for records in self._records:
            self._evaluate(records=records)
        self._records.clear()
        if self._emitted:
            requests = self._emitted.copy()
            self._emitted.clear()
            self._evaluate(requests=requests)

    def _evaluate(self, *, records: pa.RecordBatch | None = None, requests: list[JoinedRequest] | None = None) -> None:
        """One batch, as the native join's record batch or the reference's objects. A small record batch is
        published as objects one at a time, as a small batch of objects is (``SLOEvaluator.batch``): that is
        cheaper than the vectorized path below MIN_BATCH rows (bench/columnar.py), and the series are the same."""
        try:
            if records is None:
                self.evaluator.batch(requests or [])
            elif records.num_rows < MIN_BATCH:
                requests = joined_batch.to_requests(records)
                self.evaluator.batch(requests)
            else:
                self.evaluator.records(records)
        except Exception:  # a batch the vectorized path cannot take still counts, one request at a time
            if requests is None:
                requests = joined_batch.to_requests(records) if records is not None else []
            log.exception("batch evaluation failed on %d requests; evaluating them one by one", len(requests))
            for request in requests:
                self.evaluator(request)

    def _flush(self) -> None:
        flushed = self.assembler.flush()
        self._hand_over()
        self._log_flush(flushed)

    @staticmethod
    def _log_flush(flushed: int) -> None:
        log.info("pipeline drained: %d waiting request(s) flushed with what they had", flushed)

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop accepting, drain, flush. Safe without start and safe twice. True when fully drained."""
        self.queue.close()
        self.intake.close()
        if self._thread is None:
            if not self._stopped.is_set():
                for batch in self.queue.take(0):
                    self._consume(batch)
                    self._hand_over()
                self._flush()
                self._stopped.set()
            return True
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("pipeline did not drain within %.1fs; %d spans left", timeout, len(self.queue))
            return False
        return True
