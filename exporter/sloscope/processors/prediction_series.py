"""The series of predicted versus actual: comparisons by objective, headroom, shadow skips and predictor calls.

One :class:`PredictionSeries` per process holds every pool's families on one ``SeriesCollector``. A comparison is
counted by the objective of its prediction: a quantile prediction feeds coverage, the ratio histogram and the
pinball loss; a mean one the error sums of bias, MAE and RMSE (never coverage against a quantile it does not
predict). The tracker (:mod:`sloscope.processors.predictions`) and the shadow caller feed it, per batch or per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.columnar.buckets import HEADROOM_BUCKETS, RATIO_BUCKETS
from sloscope.columnar.cardinality import SeriesBudget
from sloscope.columnar.columns import Codes, Column, Floats
from sloscope.columnar.series import CounterFamily, SeriesCollector, observe_groups
from sloscope.processors import prediction_batch
from sloscope.processors.prediction_batch import Comparisons, Events
from sloscope.slo.accuracy import compare, compare_mean

__all__ = ["PredictionSeries", "TraceIds"]

_SIGNALS_WITH = {c.SIGNAL_TTFT: c.SIGNALS, c.SIGNAL_TPOT: c.SIGNALS, c.SIGNAL_E2E: (c.SIGNAL_E2E,)}
"""The signals a pool's comparisons are counted under, by one of them: TTFT and TPOT, or e2e alone (streaming off)."""

TraceIds = Callable[[Codes], Callable[[Codes], list[str]]]  # batch rows -> (positions among them -> trace ids)


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

    def _start_comparisons(
        self, families: tuple[CounterFamily, ...], labels: tuple[str, str], source: str, signal: str
    ) -> None:
        """The first comparison of (model, pool, source) creates every family of its objective at 0 for every signal
        its pool's predictions are read as (TTFT and TPOT; e2e alone with streaming off): a first uncovered TPOT, or
        a first covered request after misses, is then an increase."""
        for each in _SIGNALS_WITH[signal]:
            key = (*labels, each, source)
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
                    self._start_comparisons(self._mean_families, labels, source, signal)
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
                self._start_comparisons(self._quantile_families, labels, source, signal)
            self._predictions.inc(key)
            if comparison.covered:
                self._covered.inc(key)
            self._loss.inc(key, comparison.loss)
            self._ratio.observe(key, comparison.ratio, trace_id)
        return True

    def compared_batch(self, found: Comparisons, model: Column, pool: Column, source: str, trace_ids: TraceIds) -> None:
        """:meth:`compared` of every event at once: the label sets new to a family first, in event order and with
        the increments left out (so caps and budgets admit what one at a time would), then every family's
        increments per label set, summed in event order."""
        events, mean = found.events, found.mean
        quantile_keys, quantile = prediction_batch.keys(events, model, pool, ~mean, source)
        covered_keys, covered = prediction_batch.keys(events, model, pool, found.covered, source)
        mean_keys, means = prediction_batch.keys(events, model, pool, mean, source)
        with self._series.lock:
            new = {
                int(groups.first[g])
                for family, labels, groups in (
                    (self._predictions, quantile_keys, quantile),
                    (self._covered, covered_keys, covered),
                    (self._mean_count, mean_keys, means),
                    *((f, mean_keys, means) for f in self._mean_families[1:]),
                )
                for g, key in enumerate(labels)
                if key not in family.values
            }
            new.update(int(quantile.first[g]) for g, key in enumerate(quantile_keys) if key not in self._ratio.series)
            for event in sorted(new):
                self._replay(found, model, pool, source, event)
            for family, labels, groups, values in (
                (self._loss, quantile_keys, quantile, found.loss),
                (self._mean_predicted, mean_keys, means, found.predicted),
                (self._mean_under, mean_keys, means, found.under),
                (self._mean_over, mean_keys, means, found.over),
                (self._mean_squared, mean_keys, means, found.squared),
            ):
                rows = np.flatnonzero(groups.ids >= 0)
                family.add_all(labels, groups.counts, groups.ids[rows], values[rows])
            for family, labels, groups in (
                (self._predictions, quantile_keys, quantile),
                (self._covered, covered_keys, covered),
                (self._mean_count, mean_keys, means),
            ):
                for key, count in zip(labels, groups.counts, strict=True):
                    family.inc(key, float(count), events=count)
            observe_groups(self._ratio, quantile_keys, quantile, found.ratio, lambda at: trace_ids(events.row[at]))

    def _replay(self, found: Comparisons, model: Column, pool: Column, source: str, event: int) -> None:
        """What :meth:`compared` does to the series set for one event, increments left out."""
        row = int(found.events.row[event])
        labels = (model.values[model.codes[row]], pool.values[pool.codes[row]])
        signal = prediction_batch.SIGNALS[int(found.events.signal[event])]
        key = (*labels, signal, source)
        if found.mean[event]:
            if key not in self._mean_count.values:
                self._start_comparisons(self._mean_families, labels, source, signal)
            for family in self._mean_families:
                family.start(key)
            return
        if key not in self._predictions.values:
            self._start_comparisons(self._quantile_families, labels, source, signal)
        self._predictions.start(key)
        if found.covered[event]:
            self._covered.start(key)
        self._loss.start(key)
        self._ratio.touch(key)

    def headroom_batch(self, found: Events, values: Floats, model: Column, pool: Column, trace_ids: TraceIds) -> None:
        """:meth:`headroom` of every event (its value in ``values``) at once, in event order."""
        labels, groups = prediction_batch.keys(found, model, pool, np.ones(len(found), dtype=bool))
        with self._series.lock:
            if bool(np.isnan(values).any()):  # a NaN prediction: bisect and searchsorted bucket NaN apart
                ids = trace_ids(found.row)(np.arange(len(found)))
                for g, value, trace_id in zip(groups.ids.tolist(), values.tolist(), ids, strict=True):
                    self._headroom.observe(labels[g], value, trace_id)
                return
            for key in labels:  # a histogram's admission is its own: new label sets in order of first event
                self._headroom.touch(key)
            observe_groups(self._headroom, labels, groups, values, lambda at: trace_ids(found.row[at]))

    def headroom(self, labels: tuple[str, str], signal: str, seconds: float, trace_id: str) -> None:
        with self._series.lock:
            self._headroom.observe((*labels, signal), seconds, trace_id)

    def skipped(self, pool: str, reason: str, count: int = 1) -> None:
        with self._series.lock:
            if pool not in self._pools:  # the request's pool label: the default pool or __other__ may be new
                self._start_pool(pool)
            self._skipped.inc((pool, reason), float(count), events=count)

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
