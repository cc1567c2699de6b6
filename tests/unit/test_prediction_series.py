"""The prediction series start at 0 with their label set, so the first miss or skip is an increase from 0."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.processors.predictions import PredictionSeries

LABELS = ("m", "pool-a")


def value(registry: CollectorRegistry, metric: c.MetricDef, **labels: str) -> float | None:
    return registry.get_sample_value(metric.exposed_name, labels)


def compare(series: PredictionSeries, signal: str, actual: float, predicted: float, objective: str) -> None:
    assert series.compared(
        labels=LABELS,
        signal=signal,
        source=c.SOURCE_SPAN,
        actual=actual,
        predicted=predicted,
        quantile=0.9,
        trace_id="ab" * 16,
        objective=objective,
    )


def test_a_first_uncovered_quantile_prediction_starts_its_families_at_zero_for_both_signals() -> None:
    registry = CollectorRegistry()
    series = PredictionSeries(registry, ["pool-a"])
    compare(series, c.SIGNAL_TTFT, actual=0.5, predicted=0.4, objective=c.OBJECTIVE_QUANTILE)  # a miss
    ttft = {"model": "m", "pool": "pool-a", "signal": "ttft", "source": "span"}
    tpot = {**ttft, "signal": "tpot"}
    assert value(registry, c.PREDICTIONS, **ttft) == 1
    assert value(registry, c.PREDICTION_COVERED, **ttft) == 0  # the first covered one will be an increase
    for metric in (c.PREDICTIONS, c.PREDICTION_COVERED, c.PREDICTION_PINBALL_LOSS):
        assert value(registry, metric, **tpot) == 0, metric.name
    for metric in (c.MEAN_PREDICTIONS, c.MEAN_PREDICTION_ERROR):  # the other objective's families stay absent
        assert value(registry, metric, **ttft) is None, metric.name
    compare(series, c.SIGNAL_TTFT, actual=0.3, predicted=0.4, objective=c.OBJECTIVE_QUANTILE)
    assert value(registry, c.PREDICTION_COVERED, **ttft) == 1


def test_a_first_mean_prediction_starts_the_mean_sums_at_zero_for_both_signals() -> None:
    registry = CollectorRegistry()
    series = PredictionSeries(registry, ["pool-a"])
    compare(series, c.SIGNAL_TPOT, actual=0.05, predicted=0.04, objective=c.OBJECTIVE_MEAN)
    ttft = {"model": "m", "pool": "pool-a", "signal": "ttft", "source": "span"}
    mean = (
        c.MEAN_PREDICTIONS,
        c.MEAN_PREDICTION_PREDICTED,
        c.MEAN_PREDICTION_ERROR,
        c.MEAN_PREDICTION_ABSOLUTE_ERROR,
        c.MEAN_PREDICTION_SQUARED_ERROR,
    )
    assert [value(registry, metric, **ttft) for metric in mean] == [0] * 5
    assert value(registry, c.MEAN_PREDICTIONS, **{**ttft, "signal": "tpot"}) == 1
    assert value(registry, c.PREDICTIONS, **ttft) is None


def test_a_pool_no_setting_names_starts_every_reason_and_result_with_its_first_skip() -> None:
    """The skip counter is labelled with the request's pool, which may be the default pool or __other__."""
    registry = CollectorRegistry()
    series = PredictionSeries(registry, ["pool-a"])
    assert value(registry, c.SHADOW_SKIPPED, pool="unknown", reason=c.SKIP_NO_PREDICTOR) is None
    series.skipped("unknown", c.SKIP_NO_PREDICTOR)
    assert value(registry, c.SHADOW_SKIPPED, pool="unknown", reason=c.SKIP_NO_PREDICTOR) == 1
    for reason in c.SKIP_REASONS:
        if reason != c.SKIP_NO_PREDICTOR:
            assert value(registry, c.SHADOW_SKIPPED, pool="unknown", reason=reason) == 0, reason
    for purpose in (c.PURPOSE_SHADOW, c.PURPOSE_HEADROOM):
        assert value(registry, c.PREDICTOR_RETRIES, pool="unknown", purpose=purpose) == 0
        for result in c.PREDICTOR_RESULTS:
            assert value(registry, c.PREDICTOR_REQUESTS, pool="unknown", purpose=purpose, result=result) == 0
