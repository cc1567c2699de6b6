"""The demo's online quantile model: convergence to a known p90, routing and rings as the real server's."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest

from sloscope import conventions as c
from sloscope.demo.quantile_model import (
    DEFAULT_PREDICTION_MS,
    MIN_PREDICTION_MS,
    MODEL_TYPE,
    OnlineQuantileModel,
    TrainingEntry,
    prefill_score_bucket,
)
from sloscope.predictor.features import Features

LN10 = math.log(10.0)  # Exp(mean m) has its p90 at m * ln 10


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def base_entry(**changes: Any) -> TrainingEntry:
    entry = TrainingEntry(
        kv_cache_percentage=0.3,
        input_token_length=300,
        num_request_waiting=2,
        num_request_running=4,
        actual_ttft_ms=120.0,
        actual_tpot_ms=15.0,
        num_tokens_generated=40,
        prefix_cache_score=0.5,
    )
    return dataclasses.replace(entry, **changes)


# The synthetic load: TTFT = 20 + 0.1 * input_token_length + Exp(mean ttft_noise),
# TPOT = 5 + 0.5 * num_request_running + Exp(mean 4); every other feature varies but does not matter.
def true_p90_ttft(input_token_length: int, ttft_noise: float = 30.0) -> float:
    return 20.0 + 0.1 * input_token_length + ttft_noise * LN10


def true_p90_tpot(num_request_running: int) -> float:
    return 5.0 + 0.5 * num_request_running + 4.0 * LN10


def synthetic(rng: random.Random, n: int, ttft_noise: float = 30.0) -> list[TrainingEntry]:
    out = []
    for _ in range(n):
        length, running = rng.randint(100, 2000), rng.randint(0, 30)
        out.append(
            TrainingEntry(
                kv_cache_percentage=rng.random(),
                input_token_length=length,
                num_request_waiting=rng.randint(0, 10),
                num_request_running=running,
                actual_ttft_ms=20.0 + 0.1 * length + rng.expovariate(1.0 / ttft_noise),
                actual_tpot_ms=5.0 + 0.5 * running + rng.expovariate(1.0 / 4.0),
                num_tokens_generated=rng.randint(1, 500),
                prefix_cache_score=rng.random(),
            )
        )
    return out


def features_of(entry: TrainingEntry) -> Features:
    return Features(
        entry.kv_cache_percentage,
        entry.input_token_length,
        entry.num_request_waiting,
        entry.num_request_running,
        entry.num_tokens_generated,
        entry.prefix_cache_score,
    )


def trained(seed: int, batches: int = 5, size: int = 1000) -> tuple[OnlineQuantileModel, random.Random]:
    data = random.Random(seed)
    model = OnlineQuantileModel(0.9, random.Random(seed + 100))
    for _ in range(batches):
        model.add(synthetic(data, size))
        model.retrain()
    return model, data


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pinball_sgd_converges_to_the_known_p90(seed: int) -> None:
    model, data = trained(seed)
    fresh = synthetic(data, 5000)
    predictions = [model.predict(features_of(e)) for e in fresh]
    assert all(p is not None for p in predictions)
    ttft_coverage = sum(e.actual_ttft_ms <= p.ttft_ms for e, p in zip(fresh, predictions, strict=True) if p) / 5000
    tpot_coverage = sum(e.actual_tpot_ms <= p.tpot_ms for e, p in zip(fresh, predictions, strict=True) if p) / 5000
    # The sampling error of a coverage on 5000 draws is 0.004; the rest is the linear model's misfit
    # (its products of irrelevant features) and SGD's jitter. Seen: at most 0.015 off.
    assert ttft_coverage == pytest.approx(0.9, abs=0.025)
    assert tpot_coverage == pytest.approx(0.9, abs=0.025)
    middle = model.predict(Features(0.5, 1000, 5, 15, 100, 0.5))
    assert middle is not None
    assert middle.ttft_ms == pytest.approx(true_p90_ttft(1000), rel=0.05)
    assert middle.tpot_ms == pytest.approx(true_p90_tpot(15), rel=0.05)
    assert (middle.quantile, middle.model_type) == (0.9, MODEL_TYPE)


def test_predict_is_none_until_both_models_exist() -> None:
    model = OnlineQuantileModel(0.9, random.Random(0))
    features = Features(0.3, 300, 2, 4, 40, 0.5)
    assert model.predict(features) is None
    assert model.snapshot().predict(features) is None
    ttft_only = [dataclasses.replace(e, actual_tpot_ms=0.0) for e in synthetic(random.Random(1), 50)]
    model.add(ttft_only)
    assert model.retrain() is False
    snapshot = model.snapshot()
    assert (snapshot.ttft is not None, snapshot.tpot is not None, snapshot.ready) == (True, False, False)
    assert model.predict(features) is None
    tpot_only = [
        dataclasses.replace(e, actual_ttft_ms=0.0, num_tokens_generated=0) for e in synthetic(random.Random(2), 50)
    ]
    model.add(tpot_only)
    assert model.retrain() is True
    assert model.predict(features) is not None


def test_default_models_predict_ten_ms_until_a_signal_is_fitted_afresh() -> None:
    """As GIE v1.5.0's training server (training_server.py:745-777,1345-1380): ready at once with default models
    fitted to one 10 ms sample; a signal that never gets a sample keeps its default (TPOT with streaming off)."""
    clock = Clock()
    model = OnlineQuantileModel(0.9, random.Random(0), clock=clock, default_models=True)
    features = Features(0.3, 300, 2, 4, 40, 0.5)
    assert model.ready
    assert model.last_modified == {c.SIGNAL_TTFT: clock.now, c.SIGNAL_TPOT: clock.now}
    first = model.predict(features)
    assert first is not None and (first.ttft_ms, first.tpot_ms) == (DEFAULT_PREDICTION_MS, DEFAULT_PREDICTION_MS)

    data = random.Random(3)
    ttft_only = [dataclasses.replace(e, actual_tpot_ms=0.0) for e in synthetic(data, 1000)]
    fresh = OnlineQuantileModel(0.9, random.Random(7))
    defaulted = OnlineQuantileModel(0.9, random.Random(7), default_models=True)
    for each in (fresh, defaulted):
        each.add(ttft_only)
    assert (fresh.retrain(), defaulted.retrain()) == (False, True)
    after = defaulted.predict(features)
    assert after is not None and after.tpot_ms == DEFAULT_PREDICTION_MS  # no TPOT sample: still the default
    # the first fit of TTFT starts afresh, exactly as a model that never had a default
    assert defaulted.snapshot().ttft == fresh.snapshot().ttft


@pytest.mark.parametrize(
    ("ttft", "tpot", "signals"),
    [
        pytest.param(239.1, 0.0, {"ttft"}, id="a TTFT sample (actual_tpot_ms 0) trains TTFT only"),
        pytest.param(0.0, 13.26, {"tpot"}, id="a TPOT sample (actual_ttft_ms 0) trains TPOT only"),
        pytest.param(239.1, 13.26, {"ttft", "tpot"}, id="an entry with both actuals trains both"),
        pytest.param(0.0, 0.0, set(), id="an entry with neither trains nothing"),
    ],
)
def test_entries_are_routed_by_their_actuals_as_the_real_server_does(
    ttft: float, tpot: float, signals: set[str]
) -> None:
    model = OnlineQuantileModel(0.9, random.Random(0))
    entry = base_entry(actual_ttft_ms=ttft, actual_tpot_ms=tpot)
    model.add([entry])
    metrics = model.metrics()
    held = {s for s in ("ttft", "tpot") if entry in metrics.training[s] + metrics.test[s]}
    assert held == signals
    assert model.pending == 1


def test_the_test_split_is_a_stable_tenth_of_the_entries() -> None:
    model = OnlineQuantileModel(0.9, random.Random(0), train_capacity=6000, test_capacity=6000)
    entries = synthetic(random.Random(3), 4000)
    model.add(entries)
    model.add(entries[:200])  # the same entries again land on the same side
    metrics = model.metrics()
    test, training = metrics.test["ttft"], metrics.training["ttft"]
    assert set(test).isdisjoint(training)
    assert len(test) + len(training) == 4200
    assert 0.08 < len(set(test)) / 4000 < 0.12
    assert sum(e in set(test) for e in entries[:200]) == len(test) - len(set(test))
    assert metrics.test["tpot"] == test  # both actuals set: each entry on the same side for both signals


def test_rings_keep_the_five_newest_evaluations_newest_last() -> None:
    data = random.Random(4)
    model = OnlineQuantileModel(0.9, random.Random(5))
    newest: list[tuple[float, float, float]] = []
    for batch in range(7):
        model.add(synthetic(data, 600, ttft_noise=30.0 + 10.0 * batch))
        model.retrain()
        rings = model.metrics().rings["ttft"]
        newest.append((rings.quantile_loss[-1], rings.coverage_percent[-1], rings.violation_rate_percent[-1]))
    rings = model.metrics().rings["ttft"]
    assert len(rings.coverage_percent) == 5
    assert list(zip(*rings, strict=True)) == newest[-5:]
    assert len(set(newest)) == 7  # every evaluation differed, so the order above is really checked


def test_the_newest_evaluation_is_computed_on_the_held_out_entries() -> None:
    model, _ = trained(6, batches=2)
    metrics = model.metrics()
    for signal, regressor in (("ttft", metrics.snapshot.ttft), ("tpot", metrics.snapshot.tpot)):
        assert regressor is not None
        test = metrics.test[signal]
        actuals = [e.actual_ttft_ms if signal == "ttft" else e.actual_tpot_ms for e in test]
        predicted = [regressor.predict_inputs(e) for e in test]
        covered = sum(a <= p for a, p in zip(actuals, predicted, strict=True))
        losses = [0.9 * (a - p) if a >= p else (0.9 - 1.0) * (a - p) for a, p in zip(actuals, predicted, strict=True)]
        rings = metrics.rings[signal]
        assert rings.coverage_percent[-1] == covered / len(test) * 100.0
        assert rings.violation_rate_percent[-1] == (len(test) - covered) / len(test) * 100.0
        assert rings.quantile_loss[-1] == math.fsum(losses) / len(test)


def test_the_same_seed_and_inputs_give_the_same_model() -> None:
    first, _ = trained(7, batches=2, size=500)
    again, _ = trained(7, batches=2, size=500)
    assert (first.snapshot().ttft, first.snapshot().tpot) == (again.snapshot().ttft, again.snapshot().tpot)
    assert first.metrics().rings == again.metrics().rings
    other = OnlineQuantileModel(0.9, random.Random(999))
    data = random.Random(7)
    for _ in range(2):
        other.add(synthetic(data, 500))
        other.retrain()
    assert other.snapshot().ttft != first.snapshot().ttft  # same data, other shuffles


def test_retrain_needs_min_samples_and_stamps_each_fit() -> None:
    clock = Clock()
    model = OnlineQuantileModel(0.9, random.Random(0), clock=clock, min_samples=20)
    model.add(synthetic(random.Random(8), 15))
    assert model.retrain() is False
    assert model.last_modified == {}
    assert model.pending == 0
    assert model.snapshot().generation == 0  # nothing fitted: a prediction server has nothing new to load
    model.add(synthetic(random.Random(9), 30))
    clock.now += 60.0
    assert model.retrain() is True
    assert model.last_modified == {"ttft": clock.now, "tpot": clock.now}
    assert model.ready
    model.retrain()  # the same clock reading: the generation still tells the fits apart
    assert model.snapshot().generation == 2


def test_predictions_never_go_below_the_floor() -> None:
    model = OnlineQuantileModel(0.9, random.Random(0))
    falling = [
        dataclasses.replace(
            e,
            actual_ttft_ms=500.0 - 0.2 * e.input_token_length + e.actual_ttft_ms % 10,
            actual_tpot_ms=30.0 - 0.5 * e.num_request_running + e.actual_tpot_ms % 2,
        )
        for e in synthetic(random.Random(10), 1000)
    ]
    model.add(falling)
    model.retrain()
    # far outside the data both lines are far below zero
    prediction = model.predict(Features(0.5, 100_000, 5, 2_000, 100, 0.0))
    assert prediction is not None
    assert (prediction.ttft_ms, prediction.tpot_ms) == (MIN_PREDICTION_MS, MIN_PREDICTION_MS)
    inside = model.predict(Features(0.5, 1000, 5, 15, 100, 0.5))
    assert inside is not None
    assert inside.ttft_ms > 200.0
    assert inside.tpot_ms > 15.0


def test_coverage_drifts_when_the_load_shifts() -> None:
    data = random.Random(11)
    model = OnlineQuantileModel(0.9, random.Random(12))
    coverage: list[float] = []
    for batch in range(14):
        # the TTFT noise triples after batch 7: the recent test set sees the new load first
        model.add(synthetic(data, 500, ttft_noise=30.0 if batch < 7 else 90.0))
        model.retrain()
        coverage.append(model.metrics().rings["ttft"].coverage_percent[-1])
    settled, shifted = coverage[4:7], coverage[10:]
    assert all(85.0 < value < 95.0 for value in settled), coverage
    assert max(shifted) < min(settled) - 3.0, coverage


def test_a_snapshot_keeps_predicting_what_it_predicted() -> None:
    model, data = trained(13, batches=1)
    snapshot = model.snapshot()
    features = Features(0.5, 1000, 5, 15, 100, 0.5)
    before = snapshot.predict(features)
    model.add(synthetic(data, 1000, ttft_noise=200.0))
    model.retrain()
    assert snapshot.predict(features) == before
    assert model.predict(features) != before


def test_coefficients_are_the_same_line_in_raw_units() -> None:
    model, _ = trained(14, batches=1)
    regressor = model.snapshot().ttft
    assert regressor is not None
    coefficients = regressor.coefficients()
    entry = base_entry(prefix_cache_score=0.8, input_token_length=900)
    effective = (1 - 0.8) * 900
    raw = {
        "kv_cache_percentage": 0.3,
        "input_token_length": 900,
        "num_request_waiting": 2,
        "num_request_running": 4,
        "prefix_cache_score": 0.8,
        "effective_input_tokens": effective,
        "prefill_score_bucket": 3,
        "kv_cache_percentage^2": 0.09,
        "num_request_waiting*num_request_running": 8,
        "effective_input_tokens*num_request_running": effective * 4,
    }
    by_hand = coefficients["intercept"] + sum(coefficients[name] * value for name, value in raw.items())
    assert regressor.predict_inputs(entry) == pytest.approx(max(MIN_PREDICTION_MS, by_hand), rel=1e-9)


@pytest.mark.parametrize(
    ("score", "bucket"),
    [(0.0, 0), (0.2499, 0), (0.25, 1), (0.5, 2), (0.75, 3), (1.0, 3), (-0.1, 0), (1.5, 3)],
)
def test_prefill_score_buckets_are_the_real_servers(score: float, bucket: int) -> None:
    assert prefill_score_bucket(score) == bucket


@pytest.mark.parametrize("seed", [0, 1])
def test_the_mean_objective_converges_to_the_known_mean_and_measures_mae_and_rmse(seed: int) -> None:
    """Mean mode, as the llm-d predictor runs under llm-d-router's chart: squared-loss SGD, MAE/RMSE rings."""
    data = random.Random(seed)
    model = OnlineQuantileModel(0.9, random.Random(seed + 100), objective=c.OBJECTIVE_MEAN)
    for _ in range(5):
        model.add(synthetic(data, 1000))
        model.retrain()
    middle = model.predict(Features(0.5, 1000, 5, 15, 100, 0.5))
    assert middle is not None
    # the synthetic load's conditional means: Exp(mean m) adds m
    assert middle.ttft_ms == pytest.approx(20.0 + 0.1 * 1000 + 30.0, rel=0.05)
    assert middle.tpot_ms == pytest.approx(5.0 + 0.5 * 15 + 4.0, rel=0.05)
    assert (middle.objective, middle.quantile) == (c.OBJECTIVE_MEAN, 0.9)
    fresh = synthetic(data, 5000)
    errors = [e.actual_ttft_ms - p.ttft_ms for e in fresh if (p := model.predict(features_of(e)))]
    assert sum(errors) / len(errors) == pytest.approx(0.0, abs=2.0)  # unbiased, to 2 ms of a 30 ms noise
    rings = model.metrics().rings["ttft"]
    assert type(rings)._fields == ("mae", "rmse")
    # Exp(30 ms) noise around the mean: MAE 2/e * 30 = 22.1 ms, RMSE 30 ms, plus the model's misfit
    assert rings.mae[-1] == pytest.approx(22.1, rel=0.1)  # type: ignore[union-attr]
    assert rings.rmse[-1] == pytest.approx(30.0, rel=0.1)  # type: ignore[union-attr]


def test_an_unknown_objective_is_refused() -> None:
    with pytest.raises(ValueError, match="objective"):
        OnlineQuantileModel(0.9, objective="median")
