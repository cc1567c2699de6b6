"""The prediction series start at 0 with their label set, so the first miss or skip is an increase from 0."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.processors.prediction_series import PredictionSeries

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
    for metric in (c.MEAN_PREDICTIONS, c.MEAN_PREDICTION_UNDERESTIMATE):  # the other objective's families stay absent
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
        c.MEAN_PREDICTION_UNDERESTIMATE,
        c.MEAN_PREDICTION_OVERESTIMATE,
        c.MEAN_PREDICTION_SQUARED_ERROR,
    )
    assert [value(registry, metric, **ttft) for metric in mean] == [0] * 5
    tpot = {**ttft, "signal": "tpot"}
    assert value(registry, c.MEAN_PREDICTIONS, **tpot) == 1
    # Too low by 0.01 s: the overestimate sum exists at 0, so a first prediction too high is an increase from it.
    assert value(registry, c.MEAN_PREDICTION_UNDERESTIMATE, **tpot) == pytest.approx(0.01, abs=1e-12)
    assert value(registry, c.MEAN_PREDICTION_OVERESTIMATE, **tpot) == 0
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


def test_predictions_too_high_grow_the_overestimate_sum_and_no_sum_ever_falls() -> None:
    """Predictions 20 and 100 ms against actuals 25 and 90 ms: under 0.005 s, over 0.010 s, so bias
    (under - over) / n = -0.0025 s and MAE (under + over) / n = 0.0075 s; every sum only grew on the way."""
    registry = CollectorRegistry()
    series = PredictionSeries(registry, ["pool-a"])
    ttft = {"model": "m", "pool": "pool-a", "signal": "ttft", "source": "span"}
    sums = (c.MEAN_PREDICTION_UNDERESTIMATE, c.MEAN_PREDICTION_OVERESTIMATE, c.MEAN_PREDICTION_SQUARED_ERROR)
    seen: list[list[float | None]] = []
    for actual, predicted in ((0.025, 0.020), (0.090, 0.100)):
        compare(series, c.SIGNAL_TTFT, actual=actual, predicted=predicted, objective=c.OBJECTIVE_MEAN)
        seen.append([value(registry, metric, **ttft) for metric in sums])
    assert seen[0] == pytest.approx([0.005, 0.0, 0.005**2], abs=1e-12)
    assert seen[1] == pytest.approx([0.005, 0.010, 0.005**2 + 0.010**2], abs=1e-12)
    under, over = seen[1][0], seen[1][1]
    assert under is not None and over is not None
    assert (under - over) / 2 == pytest.approx(-0.0025, abs=1e-12)
    assert (under + over) / 2 == pytest.approx(0.0075, abs=1e-12)
