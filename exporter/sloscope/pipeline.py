"""Builds the processing stages from settings and runs the worker that drives them.

receivers -> Intake -> SpanQueue -> [worker thread] TraceAssembler -> CallJoiner -> SLOEvaluator -> publishers

The worker is the only thread that touches the assembler. The requests the assembler emits (on a
consume of a span batch, an expiry, the final flush) are gathered and reach the evaluator together, as
one batch (after the call joiner has made one call of a coordinator's legs, processors/calls.py):
``join.batch_requests`` of them, or fewer once the first has waited
``join.batch_timeout_seconds``, when the worker is idle, and at shutdown. The evaluation is vectorized
and a batch has a fixed cost, so batches of thousands cost a tenth per request of the few hundred one
export brings. Shutdown closes the queue (receivers then answer "shutting down"), drains what was accepted,
flushes every waiting request with what it has, and only then returns: nothing accepted is lost.

With ``join.workers`` above 1 there is one such worker per shard, each with its own queue and
assembler, and intake routes every span to its trace's shard (processors/shards.py). The joins run in
parallel (the native one releases the GIL); the hand-over to the evaluator takes one lock, so the
evaluator and every publisher still see one writer at a time. The workers' requests wait in one
shared list, and a hand-over takes all of them: the evaluator's batches stay as large as with one
worker (a batch has a fixed cost, so a larger one costs less per request).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from sloscope import threads
from sloscope._native import GatewayMemory as NativeGatewayMemory
from sloscope.attributes import Mapping
from sloscope.columnar.batch import Batch as Columns
from sloscope.config import Join, Settings
from sloscope.processors import joined_batch, shards, span_shapes
from sloscope.processors.assembler import GatewayMemory, TraceAssembler
from sloscope.processors.calls import CallJoiner
from sloscope.processors.evaluator import Publisher, SLOEvaluator
from sloscope.processors.labels import LabelAdmission
from sloscope.processors.native_assembler import NativeTraceAssembler
from sloscope.processors.placement import Placed, Placement, PoolPlace
from sloscope.processors.queue import SpanQueue
from sloscope.publishers.prometheus import PrometheusPublisher
from sloscope.receivers.consumers import Batch
from sloscope.receivers.intake import Intake
from sloscope.records import JoinedRequest
from sloscope.slo.spec import SLOSpec
from sloscope.telemetry import Telemetry

log = logging.getLogger(__name__)

_TICK_SECONDS = 0.25  # how often join windows are checked when no spans arrive
_IDLE_SECONDS = 5.0  # how long the worker sleeps with no trace pending (each wake-up costs an idle process CPU)
Assembler = TraceAssembler | NativeTraceAssembler


@dataclass
class _Shard:
    """One join worker's own: its queue and its assembler."""

    queue: SpanQueue
    assembler: Assembler
    thread: threading.Thread | None = None


class _Gathering:
    """How many joined requests wait for the evaluator, and since when: a batch is due when it is full or its
    first request has waited long enough. Counted up as the assemblers emit (any worker) and down once a batch
    is evaluated, so the count (``sloscope_requests_awaiting_evaluation``) is 0 only when every joined request
    is in the series."""

    def __init__(self, size: int, timeout: float) -> None:
        self.size, self.timeout = size, timeout
        self.rows = 0
        self.since: float | None = None
        self._lock = threading.Lock()

    def add(self, rows: int) -> None:
        with self._lock:
            if self.since is None:
                self.since = time.monotonic()
            self.rows += rows

    def due(self) -> bool:
        since = self.since
        return self.rows >= self.size or since is None or time.monotonic() - since >= self.timeout

    def evaluated(self, rows: int) -> None:
        with self._lock:
            self.rows -= rows
            self.since = time.monotonic() if self.rows > 0 else None  # what came meanwhile waits from now


def shard_join(join: Join, workers: int) -> Join:
    """The settings of one of ``workers`` shards: the pending caps are totals, divided among them."""
    if workers == 1:
        return join
    share = {
        key: max(1, getattr(join, key) // workers)
        for key in ("max_pending_traces", "max_pending_bytes", "max_done_traces")
    }
    return join.model_copy(update=share)


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        spec: SLOSpec,
        registry: CollectorRegistry,
        extra_publishers: tuple[Publisher, ...] = (),
        pool_of_pod: Callable[[Placed], str | None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` is the join's arrival clock (tests step it, with :meth:`drain`)."""
        self.settings = settings
        self.spec = spec
        self.registry = registry
        self.telemetry = Telemetry(registry, settings.limits)
        mapping = Mapping(settings.attributes)
        workers = settings.join.workers
        self.queue: SpanQueue | shards.ShardedQueue = (
            SpanQueue(settings.limits.queue_spans)
            if workers == 1
            else shards.ShardedQueue(settings.limits.queue_spans, workers)
        )
        admission = LabelAdmission(
            settings.limits.max_label_values,
            self.telemetry.label_values_folded,
            mapping.default_pool,
            pool_of_pod=pool_of_pod,
            model_of_pool={pool.name: pool.model for pool in settings.pools if pool.model},
        )
        self.publisher = publisher = PrometheusPublisher(
            registry, spec, self.telemetry, assumed_probability=settings.assumed_sampling_probability
        )
        self.evaluator = SLOEvaluator(spec, admission, (publisher, *extra_publishers))
        self.placement = Placement(  # the routing of each pool told by the EPP scrapers (GIE v1.5.0)
            mapping.default_pool,
            pool_of_pod,
            [PoolPlace(pool.name, pool.model, tuple(pool.gateways)) for pool in settings.pools],
            without_pool=self.telemetry.without_pool,
        )
        self.calls = CallJoiner(settings.join, self.telemetry.legs, clock=clock)  # under the publishing lock
        # join.engine: the native core, or the Python reference it is tested against (the same rules).
        join = shard_join(settings.join, workers)
        queues = self.queue.shards if isinstance(self.queue, shards.ShardedQueue) else [self.queue]
        # What the assemblers emitted since the last hand-over: appended by the workers, taken under the lock.
        self._emitted: deque[JoinedRequest] = deque()  # the reference's requests, one object each
        self._batch = _Gathering(settings.join.batch_requests, settings.join.batch_timeout_seconds)
        self._shards: list[_Shard] = []
        # When a gateway span last came, one for every shard (join.wait_for_gateway): the traffic's, not a shard's.
        native_memory, python_memory = NativeGatewayMemory(), GatewayMemory()
        for queue in queues:
            dropped, outcome = self.telemetry.dropped, self.telemetry.outcome
            assembler: TraceAssembler | NativeTraceAssembler = (
                NativeTraceAssembler(
                    join,
                    mapping,
                    self._emit,
                    count_dropped=dropped,
                    count_outcome=outcome,
                    clock=clock,
                    gathered=self._batch.add,  # the native join's stay in it until the hand-over takes them
                    gateway_memory=native_memory,
                )
                if settings.join.engine == "native"
                else TraceAssembler(
                    join,
                    mapping,
                    self._emit,
                    count_dropped=dropped,
                    count_outcome=outcome,
                    clock=clock,
                    gateway_memory=python_memory,
                )
            )
            self._shards.append(_Shard(queue, assembler))
        self.assembler = self._shards[0].assembler  # the only one with one worker
        self._publishing = threading.Lock()  # the evaluator and the publishers: one writer at a time
        if workers > 1 and settings.join.by_request_id:
            log.warning(
                "join.workers is %d: a model-server span and a gateway span in different traces are joined by "
                "request id only when both traces fall on the same worker (docs/scale-out.md)",
                workers,
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
            lambda: self.pending,
            lambda: sum(shard.assembler.pending_bytes for shard in self._shards),
            lambda: self._batch.rows,
        )
        self._started = False
        self._stopped = threading.Event()

    @property
    def pending(self) -> int:
        """Traces the join holds, over every worker."""
        return sum(shard.assembler.pending for shard in self._shards)

    @property
    def running(self) -> bool:
        return self._started and all(s.thread is not None and s.thread.is_alive() for s in self._shards)

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for i, shard in enumerate(self._shards):
            name = "sloscope-pipeline" if len(self._shards) == 1 else f"sloscope-pipeline-{i}"
            shard.thread = threads.start(self._run, name, shard)

    def _run(self, shard: _Shard) -> None:
        queue, assembler = shard.queue, shard.assembler
        wait = _TICK_SECONDS
        while True:
            batches = queue.take(wait)
            wait = _TICK_SECONDS
            for batch in batches:
                try:
                    self._consume(batch, shard)
                except Exception:  # keep the worker alive; the batch is lost and logged
                    log.exception("trace assembler failed on a batch of %d spans", len(batch))
                self._hand_over(shard)
            if not batches:  # idle: nothing to gather for, so whatever waits is published now
                assembler.expire()
                self._hand_over(shard, now=True)
                if queue.closed:
                    break
                if not assembler.pending and not self.calls.holding:  # no window to watch: sleep until spans come
                    wait = _IDLE_SECONDS
        self._flush(shard)

    def drain(self) -> None:
        """For a pipeline not started (tests, benchmarks): every shard joins what waits in its queue and
        expires what its clock says, in the caller's thread, as its worker would; then the call joiner lets go
        of the calls whose time is up, once every shard has handed over."""
        for shard in self._shards:
            for batch in shard.queue.take(0):
                self._consume(batch, shard)
                self._hand_over(shard, expire_calls=False)
            shard.assembler.expire()
            self._hand_over(shard, now=True, expire_calls=False)
        self._expire_calls()

    def _consume(self, batch: Batch, shard: _Shard) -> None:
        assembler = shard.assembler
        if isinstance(assembler, TraceAssembler):  # the reference takes Span objects, not a native decoder's batch
            assembler.consume(batch if isinstance(batch, list) else batch.to_spans())
        else:
            assembler.consume(batch)

    # Counted before they are appended: a hand-over on another worker takes only what it counts down.
    def _emit(self, request: JoinedRequest) -> None:
        self._batch.add(1)
        self._emitted.append(request)

    def _expire_calls(self) -> None:
        with self._publishing:
            calls = self.calls.expire()
            if calls:
                self._evaluate(requests=calls)

    def _hand_over(self, shard: _Shard, *, now: bool = False, expire_calls: bool = True) -> None:
        """What the assemblers emitted since the last hand-over, to the evaluator as one batch, once the batch is
        due (``now``: whatever there is): the requests the worker's native join gathered as one record batch
        (taken only by the worker that owns it; another worker's wait for its own next hand-over), the
        reference's objects together."""
        native = shard.assembler if isinstance(shard.assembler, NativeTraceAssembler) else None
        if not self._emitted and not (native is not None and native.gathered):
            if now and expire_calls and self.calls.holding:
                self._expire_calls()
            return
        with self._publishing:
            if not (now or self._batch.due()):
                return
            records = None if native is None else native.take()
            emitted = self._emitted
            requests = [emitted.popleft() for _ in range(len(emitted))]  # others may append meanwhile: kept
            taken = (0 if records is None else len(records)) + len(requests)
            try:
                calls: list[JoinedRequest] = []
                if records is not None:
                    records, calls = self.calls.records(records)
                calls = self.calls.requests(requests) + calls
                if expire_calls:
                    calls += self.calls.expire()
                if records is not None and len(records):
                    self._evaluate(records=records)
                if calls:
                    self._evaluate(requests=calls)
            finally:
                self._batch.evaluated(taken)

    def _evaluate(self, *, records: Columns | None = None, requests: list[JoinedRequest] | None = None) -> None:
        """One batch, as the native join's record batch or the reference's objects, placed in its pools."""
        try:
            if records is None:
                self.evaluator.batch(self.placement.place(requests or []))
            else:
                self.evaluator.records(self.placement.place_records(records))
        except Exception:  # a batch the evaluator cannot take still counts: each request as a batch of its own
            if records is None:
                records = joined_batch.from_requests(requests or [])
            log.exception("batch evaluation failed on %d requests; evaluating them one by one", len(records))
            for row in range(len(records)):
                try:
                    self.evaluator.records(self.placement.place_records(records.slice(row, 1)))
                except Exception:  # this request alone is lost, and said so
                    log.exception("evaluation failed on trace %s", records.ids("trace_id", [row])[0])

    def _flush(self, shard: _Shard) -> None:
        flushed = shard.assembler.flush()
        self._hand_over(shard, now=True)
        with self._publishing:
            held = self.calls.flush()
            if held:
                self._evaluate(requests=held)
        self._log_flush(flushed)

    @staticmethod
    def _log_flush(flushed: int) -> None:
        log.info("pipeline drained: %d waiting request(s) flushed with what they had", flushed)

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop accepting, drain, flush. Safe without start and safe twice. True when fully drained."""
        self.queue.close()
        self.intake.close()
        if not self._started:
            if not self._stopped.is_set():
                self.drain()
                for shard in self._shards:
                    self._flush(shard)
                self._stopped.set()
            return True
        deadline = time.monotonic() + timeout
        threads = [shard.thread for shard in self._shards if shard.thread is not None]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            log.error("pipeline did not drain within %.1fs; %d spans left", timeout, len(self.queue))
            return False
        self._stopped.set()
        return True
