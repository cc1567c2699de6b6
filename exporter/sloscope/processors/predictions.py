"""Predicted versus actual, per request: the series, and the stage that feeds them.

:class:`PredictionTracker` is a request publisher (it runs on the pipeline worker after the SLO
evaluator). For each evaluated request it:

1. notes the request's TPOT SLO on its pod, for the "tightest TPOT SLO running there" of headroom;
2. compares the predictions carried on its spans, when there are any (``source="span"``), at the objective
   the pool's predictor was last polled with;
3. otherwise queues it for a shadow prediction (``source="shadow"``, see
   :mod:`sloscope.processors.shadow`), subject to the configured share, or counts why not.

A comparison is counted by the objective of its prediction: a quantile prediction feeds coverage, the
ratio histogram and the pinball loss; a mean one the error sums of bias, MAE and RMSE (never coverage
against a quantile it does not predict). A pool whose predictor changes objective is logged once per change.

Nothing here waits on the network: the worker only appends to a bounded deque (one per pool), so a slow
or dead predictor can never hold up the SLO series, nor fill the queue of another pool.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Headroom, Predictions
from sloscope.processors.pod_history import PodHistory, PodKey
from sloscope.processors.running_slos import RunningSLOs
from sloscope.publishers.buckets import HEADROOM_BUCKETS, RATIO_BUCKETS
from sloscope.publishers.cardinality import SeriesBudget
from sloscope.publishers.series import CounterFamily, SeriesCollector
from sloscope.records import Evaluation, JoinedRequest, PodStateAtArrival, RequestRecord
from sloscope.slo.accuracy import compare, compare_mean
from sloscope.slo.headroom import tpot_headroom
from sloscope.slo.headroom import ttft_headroom as ttft_headroom_of
from sloscope.slo.spec import is_valid_target

__all__ = ["Pending", "PredictionSeries", "PredictionTracker"]

DEFAULT_QUANTILE = 0.9  # the predictor's default, used until a server has said otherwise

log = logging.getLogger(__name__)


class PredictionSeries:
    """The families of this stage on one SeriesCollector; every method takes the lock itself."""

    def __init__(self, registry: CollectorRegistry, pools: Iterable[str], budget: SeriesBudget | None = None) -> None:
        series = self._series = SeriesCollector(budget)
        self._ratio = series.histogram(c.PREDICTION_RATIO, RATIO_BUCKETS)
        self._predictions = series.counter(c.PREDICTIONS)
        self._covered = series.counter(c.PREDICTION_COVERED, ratio_of=self._predictions)  # coverage, mean loss
        self._loss = series.counter(c.PREDICTION_PINBALL_LOSS, ratio_of=self._predictions)
        self._mean_count = series.counter(c.MEAN_PREDICTIONS)  # the denominator of bias, MAE and RMSE
        self._mean_predicted = series.counter(c.MEAN_PREDICTION_PREDICTED, ratio_of=self._mean_count)
        self._mean_under = series.counter(c.MEAN_PREDICTION_UNDERESTIMATE, ratio_of=self._mean_count)
        self._mean_over = series.counter(c.MEAN_PREDICTION_OVERESTIMATE, ratio_of=self._mean_count)
        self._mean_squared = series.counter(c.MEAN_PREDICTION_SQUARED_ERROR, ratio_of=self._mean_count)
        self._headroom = series.histogram(c.HEADROOM_SECONDS, HEADROOM_BUCKETS)
        self._skipped = series.counter(c.SHADOW_SKIPPED)
        self._calls = series.counter(c.PREDICTOR_REQUESTS)
        self._retries = series.counter(c.PREDICTOR_RETRIES)
        self._quantile_families = (self._predictions, self._covered, self._loss)
        self._mean_families = (
            self._mean_count,
            self._mean_predicted,
            self._mean_under,
            self._mean_over,
            self._mean_squared,
        )
        self._pools: set[str] = set()
        for pool in pools:  # the vocabulary exists at zero, so rate() works from the first failure
            self._start_pool(pool)
        registry.register(series)

    def _start_pool(self, pool: str) -> None:
        """Every skip reason and call result of a pool at 0 (a pool label no setting names: with its first count)."""
        self._pools.add(pool)
        for reason in c.SKIP_REASONS:
            self._skipped.start((pool, reason))
        for purpose in (c.PURPOSE_SHADOW, c.PURPOSE_HEADROOM):
            for result in c.PREDICTOR_RESULTS:
                self._calls.start((pool, purpose, result))
            self._retries.start((pool, purpose))

    def _start_comparisons(self, families: tuple[CounterFamily, ...], labels: tuple[str, str], source: str) -> None:
        """The first comparison of (model, pool, source) creates every family of its objective at 0 for both
        signals: a first uncovered TPOT, or a first covered request after misses, is then an increase."""
        for signal in c.SIGNALS:
            key = (*labels, signal, source)
            for family in families:
                family.start(key)

    def compared(
        self,
        *,
        labels: tuple[str, str],
        signal: str,
        source: str,
        actual: float | None,
        predicted: float | None,
        quantile: float,
        trace_id: str,
        objective: str = c.OBJECTIVE_QUANTILE,
    ) -> bool:
        """Counts one prediction against its actual (seconds) by its objective; False when either was unusable."""
        key = (*labels, signal, source)
        if objective == c.OBJECTIVE_MEAN:
            terms = compare_mean(actual, predicted)
            if terms is None:
                return False
            with self._series.lock:
                if key not in self._mean_count.values:
                    self._start_comparisons(self._mean_families, labels, source)
                self._mean_count.inc(key)
                self._mean_predicted.inc(key, terms.predicted)
                self._mean_under.inc(key, terms.under)
                self._mean_over.inc(key, terms.over)
                self._mean_squared.inc(key, terms.squared)
            return True
        comparison = compare(actual, predicted, quantile)
        if comparison is None:
            return False
        with self._series.lock:
            if key not in self._predictions.values:
                self._start_comparisons(self._quantile_families, labels, source)
            self._predictions.inc(key)
            if comparison.covered:
                self._covered.inc(key)
            self._loss.inc(key, comparison.loss)
            self._ratio.observe(key, comparison.ratio, trace_id)
        return True

    def headroom(self, labels: tuple[str, str], signal: str, seconds: float, trace_id: str) -> None:
        with self._series.lock:
            self._headroom.observe((*labels, signal), seconds, trace_id)

    def skipped(self, pool: str, reason: str, count: int = 1) -> None:
        with self._series.lock:
            if pool not in self._pools:  # the request's pool label: the default pool or __other__ may be new
                self._start_pool(pool)
            self._skipped.inc((pool, reason), float(count))

    def call(self, pool: str, purpose: str, result: str) -> None:
        with self._series.lock:
            if pool not in self._pools:
                self._start_pool(pool)
            self._calls.inc((pool, purpose, result))

    def retried(self, pool: str, purpose: str) -> None:
        with self._series.lock:
            if pool not in self._pools:
                self._start_pool(pool)
            self._retries.inc((pool, purpose))


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


class PredictionTracker:
    def __init__(
        self,
        *,
        settings: Predictions,
        headroom: Headroom,
        history: PodHistory,
        running: RunningSLOs,
        series: PredictionSeries,
        labels: Callable[[JoinedRequest], tuple[str, str]],
        predicted_pools: set[str],
        quantile_of: Callable[[str], float | None] = lambda pool: None,
        objective_of: Callable[[str], str | None] = lambda pool: None,
        rng: random.Random | None = None,
        sink: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self._settings = settings
        self._buffer = headroom.slo_buffer_factor
        self._history = history
        self._running = running
        self.series = series
        self._labels = labels
        self._predicted_pools = predicted_pools
        self._quantile_of = quantile_of
        self._objective_of = objective_of
        self._objectives: dict[str, str] = {}  # pool -> objective of its last comparison, to log a change once
        self._rng = rng or random.Random()
        self._sink = sink  # record sinks (store, OTLP export); None: nothing is recorded
        # One queue per pool, each of at most max_pending: a pool whose predictor is slow fills its own only.
        self._pending: dict[str, deque[Pending]] = {}
        self._lock = threading.Lock()

    def publish(self, request: JoinedRequest, evaluation: Evaluation) -> None:
        labels = self._labels(request)
        key = self._history.resolve(request.pool, request.pod, request.endpoint)
        pool = key[0] if key is not None else (request.pool or labels[1])
        arrival = (request.arrival_ns or request.start_ns) / 1e9
        slo_tpot = _target_seconds(request.slo_tpot_ms)
        tightest = None
        if key is not None and slo_tpot is not None:  # only TPOT headroom needs it, and only with a TPOT SLO
            tightest = self._running.tightest_at(key, arrival)
            if request.end_ns:
                self._running.add(key, arrival, request.end_ns / 1e9, slo_tpot)
        pending = Pending(request, evaluation, labels, pool, key, arrival, tightest)
        if request.predicted_ttft_ms is not None or request.predicted_tpot_ms is not None:
            self.record(
                pending,
                source=c.SOURCE_SPAN,
                predicted_ttft=_seconds(request.predicted_ttft_ms),
                predicted_tpot=_seconds(request.predicted_tpot_ms),
                quantile=self._quantile_of(pool) or DEFAULT_QUANTILE,
                objective=self._objective_of(pool) or c.OBJECTIVE_QUANTILE,
            )
        elif not self._settings.shadow:
            self.unpredicted(pending, None)
        elif pool not in self._predicted_pools:
            self.unpredicted(pending, c.SKIP_NO_PREDICTOR)
        elif self._settings.share < 1.0 and self._rng.random() >= self._settings.share:
            self.unpredicted(pending, c.SKIP_SAMPLED_OUT)
        else:
            self._enqueue(pending)

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
        for pending in abandoned:
            self.unpredicted(pending, reason)
        return len(abandoned)

    def unpredicted(self, pending: Pending, reason: str | None) -> None:
        """A request that gets no prediction: counted by reason (None: shadowing is off), and recorded."""
        if reason is not None:
            self.series.skipped(pending.labels[1], reason)
        if self._sink is not None:
            self._sink(self._record_of(pending, c.SOURCE_NONE, skipped=reason))

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
        for signal, actual, predicted in (
            (c.SIGNAL_TTFT, evaluation.ttft_seconds, predicted_ttft),
            (c.SIGNAL_TPOT, evaluation.tpot_seconds, predicted_tpot),
        ):
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
        ttft_headroom = tpot_headroom_value = None
        if predicted_ttft is not None and slo_ttft is not None:
            ttft_headroom = ttft_headroom_of(slo_ttft, predicted_ttft)
            series.headroom(labels, c.SIGNAL_TTFT, ttft_headroom, trace_id)
        if predicted_tpot is not None and slo_tpot is not None:
            tpot_headroom_value = tpot_headroom(slo_tpot, predicted_tpot, self._buffer, pending.tightest_running)
            series.headroom(labels, c.SIGNAL_TPOT, tpot_headroom_value, trace_id)
        if self._sink is not None:
            record = self._record_of(pending, source)
            record.predicted_ttft_seconds, record.predicted_tpot_seconds = predicted_ttft, predicted_tpot
            record.prediction_objective = objective
            record.prediction_quantile = quantile if objective == c.OBJECTIVE_QUANTILE else None
            record.ttft_headroom_seconds, record.tpot_headroom_seconds = ttft_headroom, tpot_headroom_value
            self._sink(record)

    def _note_objective(self, pool: str, objective: str) -> None:
        with self._lock:
            before = self._objectives.get(pool)
            self._objectives[pool] = objective
        if before is not None and before != objective:
            log.warning("predictions of pool %s are now %s predictions (were %s)", pool, objective, before)

    def _record_of(self, pending: Pending, source: str, skipped: str | None = None) -> RequestRecord:
        """The request's record, with the state of its pod as of its arrival when one was scraped."""
        sample = self._history.as_of(pending.key, pending.arrival) if pending.key is not None else None
        pod_state = None
        if sample is not None:
            state = sample.state
            pod_state = PodStateAtArrival(
                state.waiting, state.running, state.kv_cache_utilization, pending.arrival - sample.at
            )
        return RequestRecord(
            pending.request,
            pending.evaluation,
            pool=pending.pool,
            prediction_source=source,
            prediction_skipped=skipped,
            pod_state=pod_state,
        )


def _seconds(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None else None


def _target_seconds(ms: float | None) -> float | None:
    """A request's SLO target in seconds, None when it carries none or an unusable one."""
    return ms / 1000.0 if ms is not None and is_valid_target(ms) else None
