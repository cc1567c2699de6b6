"""The latency predictors' health as gauges, rendered from the latest poll of every pool at scrape time.

``sloscope_predictor_up{pool,server,role}``, ``sloscope_predictor_model_age_seconds{pool,signal}``,
``sloscope_predictor_coverage_offline_ratio{pool,signal}``, ``sloscope_predictor_quantile{pool}``,
``sloscope_predictor_training_samples{pool,signal}``, ``sloscope_predictor_objective{pool,objective}`` (1 for
the objective of the newest answer, 0 for the other, so a change shows as two crossing lines),
``sloscope_predictor_{mae,rmse}_offline_seconds{pool,signal}`` (mean-objective training servers) and
``sloscope_predictor_trained{pool,signal}`` (0 while any reset marker is found).
A pool whose EPP runs with streaming off never trains its TPOT model (docs/predictions.md#streaming-mode): its TPOT
model age and trained marker are left out, so neither reads as a stale or reset model.
The model age is computed when Prometheus reads it, from the model's write time, so it grows between
polls and is exact at scrape time. A value the poller never got has no series (never a 0), and a
pool not polled yet has none at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sloscope import conventions as c
from sloscope.conventions import MetricDef
from sloscope.predictor.health import PredictorSnapshot

__all__ = ["PredictorHealthCollector"]

_DEFINITIONS = (
    c.PREDICTOR_UP,
    c.PREDICTOR_MODEL_AGE_SECONDS,
    c.PREDICTOR_COVERAGE_OFFLINE_RATIO,
    c.PREDICTOR_QUANTILE,
    c.PREDICTOR_TRAINING_SAMPLES,
    c.PREDICTOR_OBJECTIVE,
    c.PREDICTOR_MAE_OFFLINE_SECONDS,
    c.PREDICTOR_RMSE_OFFLINE_SECONDS,
    c.PREDICTOR_TRAINED,
)


def _family(definition: MetricDef) -> GaugeMetricFamily:
    return GaugeMetricFamily(definition.name, definition.help, labels=definition.labels)


class PredictorHealthCollector(Collector):
    """``snapshots()`` gives the latest snapshot of each pool (e.g. ``PredictorHealth.snapshot`` of each)."""

    def __init__(
        self,
        snapshots: Callable[[], Iterable[PredictorSnapshot | None]],
        streaming_of: Callable[[str], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``streaming_of(pool)``: whether the pool's EPP streams (off: its TPOT model is never trained)."""
        self._snapshots = snapshots
        self._clock = clock
        self._streaming_of = streaming_of

    def describe(self) -> Iterator[Metric]:
        for definition in _DEFINITIONS:
            yield _family(definition)

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        up, age, coverage, quantile, samples, objective, mae, rmse, trained = (_family(d) for d in _DEFINITIONS)
        for snapshot in self._snapshots():
            if snapshot is None:
                continue  # not polled yet: nothing is known
            pool = snapshot.pool
            untrainable = () if self._streaming_of(pool) else (c.SIGNAL_TPOT,)  # streaming off: no TPOT sample
            for server in snapshot.servers:
                up.add_metric([pool, server.server, server.role], 1.0 if server.up else 0.0)
            _per_signal(age, pool, snapshot.model_age_seconds(now), untrainable)
            _per_signal(coverage, pool, snapshot.coverage)
            # a mean predictor still reports its configured quantile (0.9 in the llm-d predictor's /status and
            # model_quantile{}); it predicts no quantile, so none is published
            if snapshot.quantile is not None and snapshot.objective != c.OBJECTIVE_MEAN:
                quantile.add_metric([pool], snapshot.quantile)
            _per_signal(samples, pool, snapshot.training_samples)
            if snapshot.objective is not None:
                for each in c.OBJECTIVES:
                    objective.add_metric([pool, each], 1.0 if each == snapshot.objective else 0.0)
            _per_signal(mae, pool, snapshot.mae_offline)
            _per_signal(rmse, pool, snapshot.rmse_offline)
            markers = {s: 0.0 if found else 1.0 for s, found in snapshot.untrained.items()}
            _per_signal(trained, pool, markers, untrainable)
        yield from (up, age, coverage, quantile, samples, objective, mae, rmse, trained)


def _per_signal(
    family: GaugeMetricFamily, pool: str, values: Mapping[str, float], left_out: tuple[str, ...] = ()
) -> None:
    for signal, value in sorted(values.items()):
        if signal not in left_out:
            family.add_metric([pool, signal], value)
