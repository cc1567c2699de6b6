"""Predicted versus actual, per request: the stage that feeds the series (:mod:`.prediction_series`).

:class:`PredictionTracker` is a publisher (it runs on the pipeline worker, handed each evaluated batch). For
each request of the batch it:

1. notes the request's TPOT SLO on its pod, for the "tightest TPOT SLO running there" of headroom;
2. compares the predictions carried on its spans, when there are any (``source="span"``), at the objective
   the pool's predictor was last polled with;
3. otherwise queues it for a shadow prediction (``source="shadow"``, see
   :mod:`sloscope.processors.shadow`), subject to the configured share, or counts why not.

A comparison is counted by the objective of its prediction: a quantile prediction feeds coverage, the
ratio histogram and the pinball loss; a mean one the error sums of bias, MAE and RMSE (never coverage
against a quantile it does not predict). A pool whose predictor changes objective is logged once per change.

With record sinks, each request's record (:mod:`sloscope.processors.record_parts`) is handed on once its
prediction is settled: those of a batch settled at once as one table, those queued for a shadow prediction when
their call settles them, built together from their rows of their batches.

Nothing here waits on the network: the worker only appends to a bounded deque (one per pool), so a slow
or dead predictor can never hold up the SLO series, nor fill the queue of another pool.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sloscope import conventions as c
from sloscope.columnar.batch import FloatColumn
from sloscope.columnar.columns import Codes, Floats, Mask, group
from sloscope.config import Headroom, Predictions
from sloscope.processors import prediction_batch
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.processors.pod_history import PodHistory, PodKey
from sloscope.processors.prediction_series import PredictionSeries, TraceIds
from sloscope.processors.record_parts import (
    BatchRows,
    Settled,
    batch_rows,
    pod_part,
    prediction_part,
    settled_records,
)
from sloscope.processors.record_parts import records as build_records
from sloscope.processors.running_slos import RunningSLOs
from sloscope.processors.streaming_modes import first_signal
from sloscope.processors.tracker_rows import TrackerRows, e2e_seconds, leg_ttft
from sloscope.records import Evaluation, JoinedRequest

if TYPE_CHECKING:
    import pyarrow as pa
from sloscope.slo.headroom import tpot_headroom
from sloscope.slo.headroom import ttft_headroom as ttft_headroom_of
from sloscope.slo.spec import is_valid_target

__all__ = ["Pending", "PredictionTracker"]

DEFAULT_QUANTILE = 0.9  # the predictor's default, used until a server has said otherwise

log = logging.getLogger(__name__)


class SpanColumns(NamedTuple):
    """What the records of the rows compared with their span predictions add, per row of the batch: the
    predictions (seconds), their objective (codes into ``c.OBJECTIVES``) and quantile, and the headrooms. With
    streaming off the predicted "TTFT" is ``e2e`` and its headroom ``e2e_headroom``; the others hold none."""

    ttft: FloatColumn
    tpot: FloatColumn
    e2e: FloatColumn
    ttft_headroom: FloatColumn
    tpot_headroom: FloatColumn
    e2e_headroom: FloatColumn
    objective: Codes
    quantile: Floats


@dataclass(slots=True)
class Pending:
    """A request waiting for its shadow prediction, with everything needed once the answer comes."""

    request: JoinedRequest
    evaluation: Evaluation
    labels: tuple[str, str]  # (model, pool) label values, already capped
    pool: str  # the configured pool whose predictor is asked
    key: PodKey | None
    arrival: float  # unix seconds
    tightest_running: float | None  # seconds, the tightest TPOT SLO running on the pod at arrival
    # its row of the evaluated batch, its record's batch parts (None: there are no record sinks)
    rows: BatchRows | None = field(default=None, repr=False, compare=False)


class PredictionTracker:
    def __init__(
        self,
        *,
        settings: Predictions,
        headroom: Headroom,
        history: PodHistory,
        running: RunningSLOs,
        series: PredictionSeries,
        predicted_pools: set[str],
        streaming_of: Callable[[str], bool],
        quantile_of: Callable[[str], float | None] = lambda pool: None,
        objective_of: Callable[[str], str | None] = lambda pool: None,
        rng: random.Random | None = None,
        sink: Callable[[pa.RecordBatch], None] | None = None,
    ) -> None:
        """``streaming_of(pool)``: whether the pool's EPP runs its latency plugin with streaming on
        (:class:`~sloscope.processors.streaming_modes.StreamingModes`); off, its predicted TTFT is compared with the
        request's end-to-end latency as signal ``e2e`` and its TPOT is not compared."""
        self._settings = settings
        self._buffer = headroom.slo_buffer_factor
        self._history = history
        self._running = running
        self.series = series
        self._predicted_pools = predicted_pools
        self._quantile_of = quantile_of
        self._objective_of = objective_of
        self._objectives: dict[str, str] = {}  # pool -> objective of its last comparison, to log a change once
        self._rng = rng or random.Random()
        self._sink = sink  # the record sinks (store, OTLP export), handed record batches in order; None: no records
        self._streaming_of = streaming_of
        # the requests settled in a settling() block of the running task or thread, their records built at its end
        self._settling: contextvars.ContextVar[list[tuple[Pending, Settled]] | None] = contextvars.ContextVar(
            "settling", default=None
        )
        # One queue per pool, each of at most max_pending: a pool whose predictor is slow fills its own only.
        self._pending: dict[str, deque[Pending]] = {}
        self._lock = threading.Lock()

    def publish(self, batch: EvaluatedBatch) -> None:
        """Every request of the batch noted, compared, queued or skipped: the series, records (in request order)
        and shadow queue that taking them one at a time would give (held to it by the differential tests, against
        the reference in ``tests/support/reference.py``). Discovery is asked once per distinct pod of the batch,
        comparisons and skips are counted per label set, and with a sink the records of the rows settled now are
        one table built from the batch's columns (:meth:`_records`); only what is per request by nature stays so:
        the running TPOT SLOs of requests with one on a known pod, the sampling draws, the queued requests."""
        n = len(batch)
        if not n:
            return
        rows = TrackerRows(batch, batch.labels.model, batch.labels.pool, self._history)
        tightest = self._note_running(rows)
        fate = np.full(n, _SPAN, dtype=np.intp)
        read = self._read_as(rows)
        quantile, mean, lost = self._objectives_by_row(rows, read)
        fate[lost] = _LOST
        spans = self._span_predictions(rows, read, fate == _SPAN, quantile=quantile, mean=mean, tightest=tightest)
        self._choose_shadowed(rows, fate)
        pending = self._pendings(rows, np.flatnonzero(fate == _QUEUED), tightest)
        self._enqueue_all(pending, fate)
        self._count_skips(rows, fate)
        if self._sink is not None:
            recorded = np.flatnonzero((fate != _LOST) & (fate != _QUEUED))
            if len(recorded):
                self._sink(self._records(rows, recorded, fate[recorded], spans()))

    def _records(self, rows: TrackerRows, recorded: Codes, fate: Codes, spans: SpanColumns) -> pa.RecordBatch:
        """The records of the ``recorded`` rows (``fate``: theirs), built at once from the batch's columns, the
        predictions and headrooms of those compared with their span predictions, and their pods' states."""
        from sloscope.columnar import arrow_arrays  # Arrow only with record sinks (record_parts)

        span = fate == _SPAN
        quantile = FloatColumn(spans.quantile[recorded], span & (spans.objective[recorded] == _QUANTILE))

        def held(values: FloatColumn) -> pa.Array:
            return arrow_arrays.float_column(values.take(recorded).where(span))

        prediction = prediction_part(
            pool=arrow_arrays.coded_strings(rows.pool.codes[recorded], rows.pool.values),
            source=arrow_arrays.coded_strings(np.where(span, 0, 1), (c.SOURCE_SPAN, c.SOURCE_NONE)),
            skipped=arrow_arrays.coded_strings(_REASON_CODES[fate], c.SKIP_REASONS),
            objective=arrow_arrays.coded_strings(np.where(span, spans.objective[recorded], -1), c.OBJECTIVES),
            quantile=arrow_arrays.float_column(quantile),
            ttft=held(spans.ttft),
            tpot=held(spans.tpot),
            e2e=held(spans.e2e),
            ttft_headroom=held(spans.ttft_headroom),
            tpot_headroom=held(spans.tpot_headroom),
            e2e_headroom=held(spans.e2e_headroom),
        )
        pod = pod_part(self._history, rows.keys, rows.key[recorded], rows.arrival[recorded])
        return build_records(batch_rows(rows.batch, recorded), prediction, pod)

    def _note_running(self, rows: TrackerRows) -> Floats:
        """Each row's tightest TPOT SLO running on its pod at arrival (NaN: none), noting its own as it goes, in
        request order: only the rows with a TPOT SLO on a known pod."""
        tightest = np.full(len(rows), np.nan)
        arrival, slo = rows.arrival, rows.slo_tpot
        for row in np.flatnonzero((rows.key >= 0) & ~np.isnan(slo)).tolist():
            key, at = rows.keys[rows.key[row]], float(arrival[row])
            running = self._running.tightest_at(key, at)
            if running is not None:
                tightest[row] = running
            if rows.end_ns[row]:
                self._running.add(key, at, rows.end_ns[row] / 1e9, float(slo[row]))
        return tightest

    def _read_as(self, rows: TrackerRows) -> _ReadAs:
        """What each row's span predictions are compared with, by its pool's streaming mode (asked once a pool)."""
        pool = rows.pool
        off = ~np.array([self._streaming_of(name) for name in pool.values], dtype=bool)[pool.codes]
        verdicts = rows.batch.verdicts
        return _ReadAs(
            off,
            (np.where(off, rows.e2e, rows.leg_ttft), verdicts.tpot_seconds),
            (rows.predicted_ttft, np.where(off, np.nan, rows.predicted_tpot)),
        )

    def _objectives_by_row(self, rows: TrackerRows, read: _ReadAs) -> tuple[Floats, Mask, Mask]:
        """Per row carrying a prediction: the quantile and whether the objective is the mean (asked once per pool,
        each pool's objective noted in order of first appearance); and the rows :meth:`record` would fail on (a
        usable quantile prediction at a quantile outside (0, 1)), which are lost as they would be there."""
        pool, span = rows.pool, rows.carries_prediction
        quantiles, means = np.full(len(pool.values), DEFAULT_QUANTILE), np.zeros(len(pool.values), dtype=bool)
        for code in dict.fromkeys(pool.codes[span].tolist()):
            name = pool.values[code]
            objective = self._objective_of(name) or c.OBJECTIVE_QUANTILE
            quantiles[code], means[code] = self._quantile_of(name) or DEFAULT_QUANTILE, objective == c.OBJECTIVE_MEAN
            self._note_objective(name, objective)
        quantile, mean = quantiles[pool.codes], means[pool.codes]
        (first, tpot), (predicted_first, predicted_tpot) = read.actual, read.predicted
        any_usable = prediction_batch.usable(first, predicted_first) | prediction_batch.usable(tpot, predicted_tpot)
        lost = span & ~mean & ~((quantile > 0.0) & (quantile < 1.0)) & any_usable
        if lost.any():
            log.error("%d request(s) with predictions at a quantile outside (0, 1) were not compared", int(lost.sum()))
        return quantile, mean, lost

    def _span_predictions(
        self, rows: TrackerRows, read: _ReadAs, span: Mask, *, quantile: Floats, mean: Mask, tightest: Floats
    ) -> Callable[[], SpanColumns]:
        """:meth:`record`'s series for the rows carrying predictions; returns what their records add (their
        predictions, objective and headrooms), made when asked: only with a sink."""
        trace_ids = _trace_ids(rows)
        off = read.off
        found = prediction_batch.comparisons(read.actual, read.predicted, span, quantile, mean, e2e=off)
        self.series.compared_batch(found, rows.model, rows.pool_label, c.SOURCE_SPAN, trace_ids)
        first_on = span & rows.has_ttft & ~np.isnan(rows.slo_ttft)  # TTFT, or e2e with streaming off
        tpot_on = span & rows.has_tpot & ~np.isnan(rows.slo_tpot) & ~off
        first = rows.slo_ttft - rows.predicted_ttft
        tpot = prediction_batch.tpot_headrooms(rows.slo_tpot, rows.predicted_tpot, self._buffer, tightest)
        found_headroom = prediction_batch.events(first_on, tpot_on, e2e=off)
        values = found_headroom.pick((first, tpot))
        self.series.headroom_batch(found_headroom, values, rows.model, rows.pool_label, trace_ids)

        def every_row() -> SpanColumns:
            on = ~off
            return SpanColumns(
                ttft=FloatColumn(rows.predicted_ttft, rows.has_ttft & on),
                tpot=FloatColumn(rows.predicted_tpot, rows.has_tpot & on),
                e2e=FloatColumn(rows.predicted_ttft, rows.has_ttft & off),
                ttft_headroom=FloatColumn(first, first_on & on),
                tpot_headroom=FloatColumn(tpot, tpot_on),
                e2e_headroom=FloatColumn(first, first_on & off),
                objective=np.where(mean, _MEAN, _QUANTILE),
                quantile=quantile,
            )

        return every_row

    def _choose_shadowed(self, rows: TrackerRows, fate: Codes) -> None:
        """The fate of each row carrying no prediction: shadowing off, no predictor, sampled out or queued (in
        request order, one draw per request reaching the share, as :meth:`publish` draws)."""
        rest = fate == _SPAN
        rest &= ~rows.carries_prediction
        if not self._settings.shadow:
            fate[rest] = _NONE
            return
        pool = rows.pool
        predicted = np.array([name in self._predicted_pools for name in pool.values], dtype=bool)[pool.codes]
        fate[rest & ~predicted] = _NO_PREDICTOR
        candidates = np.flatnonzero(rest & predicted)
        share = self._settings.share
        if share < 1.0 and len(candidates):
            draws = np.array([self._rng.random() for _ in range(len(candidates))])
            fate[candidates[draws >= share]] = _SAMPLED_OUT
            candidates = candidates[draws < share]
        fate[candidates] = _QUEUED

    def _pendings(self, rows: TrackerRows, queued: Codes, tightest: Floats) -> dict[int, Pending]:
        """The rows queued for a shadow prediction, as :class:`Pending`: only those rows are read, and with a sink
        each keeps its row of the batch parts for its record."""
        if not len(queued):  # nothing queued: the usual batch of a deployment without a predictor
            return {}
        pairs = rows.batch.pairs() if len(queued) == len(rows) else rows.batch.pairs_at(queued.tolist())
        arrival, running = rows.arrival[queued].tolist(), tightest[queued].tolist()
        models, labels, pools = (
            [column.values[i] for i in column.codes[queued].tolist()]
            for column in (rows.model, rows.pool_label, rows.pool)
        )
        keys = [rows.keys[i] if i >= 0 else None for i in rows.key[queued].tolist()]
        parts = batch_rows(rows.batch, queued) if self._sink is not None else None
        return {
            row: Pending(
                request,
                evaluation,
                (model, label),
                pool,
                key,
                at,
                None if math.isnan(tight) else tight,
                parts.row(n) if parts is not None else None,
            )
            for n, (row, (request, evaluation), model, label, pool, key, at, tight) in enumerate(
                zip(queued.tolist(), pairs, models, labels, pools, keys, arrival, running, strict=True)
            )
        }

    def _enqueue_all(self, pending: dict[int, Pending], fate: Codes) -> None:
        """:meth:`_enqueue` of every queued row, in order under one lock: a full queue turns the rest of its pool's
        rows into ``queue_full``."""
        with self._lock:
            for row in np.flatnonzero(fate == _QUEUED).tolist():
                queue = self._pending.setdefault(pending[row].pool, deque())
                if len(queue) >= self._settings.max_pending:
                    fate[row] = _QUEUE_FULL
                else:
                    queue.append(pending[row])

    def _count_skips(self, rows: TrackerRows, fate: Codes) -> None:
        """The skipped rows counted per (pool label, reason), label sets in order of first request."""
        skipped = (fate >= _NO_PREDICTOR) & (fate <= _QUEUE_FULL)
        groups = group([rows.pool_label.codes, fate], skipped)
        for row, count in zip(groups.first.tolist(), groups.counts, strict=True):
            reason = _REASONS[fate[row]]
            assert reason is not None
            self.series.skipped(rows.pool_label.values[rows.pool_label.codes[row]], reason, count)

    def _enqueue(self, pending: Pending) -> None:
        with self._lock:
            queue = self._pending.setdefault(pending.pool, deque())
            full = len(queue) >= self._settings.max_pending
            if not full:
                queue.append(pending)
        if full:
            self.unpredicted(pending, c.SKIP_QUEUE_FULL)

    def take(self, limit: int, pool: str | None = None) -> list[Pending]:
        """Up to ``limit`` queued requests of ``pool`` (of every pool: None), oldest first (the shadow predictor)."""
        with self._lock:
            queues = [self._pending.get(pool, deque())] if pool is not None else list(self._pending.values())
            out: list[Pending] = []
            for queue in queues:
                count = min(limit - len(out), len(queue))
                out += [queue.popleft() for _ in range(count)]
            return out

    def waiting(self, pool: str | None = None) -> int:
        """Requests queued for ``pool`` (for every pool: None)."""
        with self._lock:
            if pool is not None:
                return len(self._pending.get(pool, ()))
            return sum(len(queue) for queue in self._pending.values())

    def abandon(self, reason: str, pool: str | None = None) -> int:
        """Gives up on every queued request of ``pool`` (every pool: None), at shutdown: counted, and recorded
        without a prediction."""
        abandoned = self.take(self.waiting(pool), pool)
        with self.settling():
            for pending in abandoned:
                self.unpredicted(pending, reason)
        return len(abandoned)

    @contextlib.contextmanager
    def settling(self) -> Iterator[None]:
        """The records of the requests settled in the block (:meth:`record`, :meth:`unpredicted`) built together
        and handed to the sinks as one table when it ends, in the order they settled: a shadow call settles many
        requests at once, and their records cost together about what one costs alone. A block within another
        (of the same task or thread) adds to the outer one."""
        if self._sink is None or self._settling.get() is not None:
            yield
            return
        settled: list[tuple[Pending, Settled]] = []
        token = self._settling.set(settled)
        try:
            yield
        finally:
            self._settling.reset(token)
            if settled:
                self._sink(self._settled_records(settled))

    def unpredicted(self, pending: Pending, reason: str | None) -> None:
        """A request that gets no prediction: counted by reason (None: shadowing is off), and recorded."""
        if reason is not None:
            self.series.skipped(pending.labels[1], reason)
        self._settle(pending, Settled(pending.pool, c.SOURCE_NONE, skipped=reason))

    def record(
        self,
        pending: Pending,
        *,
        source: str,
        predicted_ttft: float | None,
        predicted_tpot: float | None,
        quantile: float,
        objective: str = c.OBJECTIVE_QUANTILE,
    ) -> None:
        """Compare a request's predictions (seconds) with its actuals at ``objective``, and its headroom at routing."""
        request, evaluation, labels = pending.request, pending.evaluation, pending.labels
        self._note_objective(pending.pool, objective)
        trace_id = request.trace_id
        series = self.series
        streaming = self._streaming_of(pending.pool)
        compared: tuple[tuple[str, float | None, float | None], ...]
        if streaming:
            compared = (
                (c.SIGNAL_TTFT, leg_ttft(request, evaluation.ttft_seconds), predicted_ttft),
                (c.SIGNAL_TPOT, evaluation.tpot_seconds, predicted_tpot),
            )
        else:  # the predicted "TTFT" is end-to-end latency, the TPOT prediction means nothing
            e2e = e2e_seconds(request) if evaluation.ttft_seconds is not None else None
            compared = ((c.SIGNAL_E2E, e2e, predicted_ttft),)
        for signal, actual, predicted in compared:
            series.compared(
                labels=labels,
                signal=signal,
                source=source,
                actual=actual,
                predicted=predicted,
                quantile=quantile,
                trace_id=trace_id,
                objective=objective,
            )
        slo_ttft, slo_tpot = _target_seconds(request.slo_ttft_ms), _target_seconds(request.slo_tpot_ms)
        first_headroom = tpot_headroom_value = None
        if predicted_ttft is not None and slo_ttft is not None:  # with streaming off, as the EPP: e2e against TTFT
            first_headroom = ttft_headroom_of(slo_ttft, predicted_ttft)
            series.headroom(labels, first_signal(streaming), first_headroom, trace_id)
        if streaming and predicted_tpot is not None and slo_tpot is not None:
            tpot_headroom_value = tpot_headroom(slo_tpot, predicted_tpot, self._buffer, pending.tightest_running)
            series.headroom(labels, c.SIGNAL_TPOT, tpot_headroom_value, trace_id)
        off = not streaming  # the predicted "TTFT" is end-to-end latency, as its headroom
        settled = Settled(
            pending.pool,
            source,
            objective=objective,
            quantile=quantile if objective == c.OBJECTIVE_QUANTILE else None,
            ttft=None if off else predicted_ttft,
            tpot=None if off else predicted_tpot,
            e2e=predicted_ttft if off else None,
            ttft_headroom=None if off else first_headroom,
            tpot_headroom=tpot_headroom_value,
            e2e_headroom=first_headroom if off else None,
        )
        self._settle(pending, settled)

    def _settle(self, pending: Pending, settled: Settled) -> None:
        """The request's record, with a sink: held to the end of the :meth:`settling` block, else made now."""
        if self._sink is None:
            return
        held = self._settling.get()
        if held is not None:
            held.append((pending, settled))
        else:
            self._sink(self._settled_records([(pending, settled)]))

    def _settled_records(self, settled: list[tuple[Pending, Settled]]) -> pa.RecordBatch:
        """The records of queued requests once their predictions settled: their rows of their batches, their
        predictions and their pods' states as of arrival, through the builder of :meth:`publish`."""
        rows: list[BatchRows] = []
        for pending, _ in settled:
            assert pending.rows is not None, "a request queued while there were no record sinks"
            rows.append(pending.rows)
        return settled_records(
            self._history,
            rows,
            [pending.key for pending, _ in settled],
            [pending.arrival for pending, _ in settled],
            [values for _, values in settled],
        )

    def _note_objective(self, pool: str, objective: str) -> None:
        with self._lock:
            before = self._objectives.get(pool)
            self._objectives[pool] = objective
        if before is not None and before != objective:
            log.warning("predictions of pool %s are now %s predictions (were %s)", pool, objective, before)


class _ReadAs(NamedTuple):
    """Per row of a batch, by its pool's streaming mode: off, and the (first, TPOT) actuals and span predictions
    compared (off: the first is the end-to-end latency, the TPOT prediction is NaN and so never compared)."""

    off: Mask
    actual: tuple[Floats, Floats]
    predicted: tuple[Floats, Floats]


# A row's fate in a batch: compared with its span predictions, or why it got none, or queued for a shadow one.
_SPAN, _NONE, _NO_PREDICTOR, _SAMPLED_OUT, _QUEUE_FULL, _QUEUED, _LOST = range(7)
_REASONS: tuple[str | None, ...] = (None, None, c.SKIP_NO_PREDICTOR, c.SKIP_SAMPLED_OUT, c.SKIP_QUEUE_FULL, None, None)
_REASON_CODES = np.array([c.SKIP_REASONS.index(r) if r is not None else -1 for r in _REASONS], dtype=np.intp)
_QUANTILE, _MEAN = c.OBJECTIVES.index(c.OBJECTIVE_QUANTILE), c.OBJECTIVES.index(c.OBJECTIVE_MEAN)


def _trace_ids(rows: TrackerRows) -> TraceIds:
    """The trace ids of rows of the batch, read only for the positions asked (those an exemplar keeps)."""
    records = rows.batch.records

    def of(batch_rows: Codes) -> Callable[[Codes], list[str]]:
        return lambda positions: records.ids("trace_id", batch_rows[positions].tolist())

    return of


def _target_seconds(ms: float | None) -> float | None:
    """A request's SLO target in seconds, None when it carries none or an unusable one."""
    return ms / 1000.0 if ms is not None and is_valid_target(ms) else None
