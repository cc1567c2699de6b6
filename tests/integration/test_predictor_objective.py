"""The predictor's objective (quantile or mean) and its reset detection, against the recorded llm-d predictor.

The stand-ins serve the bytes captured from the llm-d latency predictor at b5d19f1 in both objectives
(``fixtures/predictor/llm-d/{quantile,mean}/``, see the fixtures README). Shapes pinned, in that commit:

- ``objective_type`` in every prediction answer and in ``/status``: prediction/prediction_server.py:913-919
  (PredictionResponse), :922-930 (StatusResponse), :966-995 (``/status``: ``ensemble_active`` and the gated
  models in ``models_exist`` only with ensemble mode on), :1034-1047 (``/predict/bulk/strict``);
- ``objective_type{type="mean"} 1``, ``model_quantile{}``, ``ensemble_active{}``, ``ensemble_mode{}``:
  training/training_server.py:1522-1526; the mean-mode rings ``ttft_mae{idx}``/``ttft_rmse{idx}`` (ms):
  :1727-1737, computed at :774-777; the quantile-mode coverage rings: :1746-1749; sample buckets: :1628-1640;
- the default model a training server without model files starts from (one sample, target 10 ms, so every
  prediction is the same): training/training_server.py:794-832, used by load_models at :1486 and :1499.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Predictions, PredictorServers
from sloscope.predictor.client import PredictionClient, _prediction
from sloscope.predictor.features import Features
from sloscope.predictor.health import PredictorHealth, PredictorSnapshot
from sloscope.predictor.reset import MARKER_CONSTANT, MARKER_NO_SAMPLES, PROBE
from sloscope.processors.prediction_series import PredictionSeries
from sloscope.processors.streaming_modes import StreamingModes
from sloscope.publishers.predictor_health import PredictorHealthCollector
from sloscope.telemetry import Telemetry
from tests.support.prediction_server import PredictionBehaviour, PredictionServer, predicted_tpot_ms, predicted_ttft_ms
from tests.support.serving import RunningServer
from tests.support.training_server import TrainingBehaviour, TrainingServer, recorded_metrics_page, without_samples

pytestmark = pytest.mark.integration

POOL = "pool-a"
BOTH = {c.SIGNAL_TTFT: (), c.SIGNAL_TPOT: ()}


def llmd(shared: Path, objective: str, name: str) -> str:
    return (shared / "fixtures" / "predictor" / "llm-d" / objective / name).read_text()


def polls(
    servers: PredictorServers, count: int = 1, between: Callable[[int], None] | None = None, *, probe: bool = True
) -> list[Any]:
    """``count`` polls of one PredictorHealth; ``between(i)`` runs before poll i > 0. The snapshots and the
    published samples after the last poll."""

    async def run() -> list[Any]:
        async with httpx.AsyncClient() as http:
            registry = CollectorRegistry()
            health = PredictorHealth(POOL, servers, http, Telemetry(registry), 5.0, probe=probe)
            snapshots = []
            for index in range(count):
                if index and between is not None:
                    between(index)
                snapshots.append(await health.poll_once())
            return [
                snapshots,
                PredictorHealthCollector(lambda: [health.snapshot], StreamingModes({}, default=True).streaming),
            ]

    return asyncio.run(run())


def published(collector: PredictorHealthCollector, definition: c.MetricDef) -> dict[tuple[str, ...], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    out: dict[tuple[str, ...], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == definition.name:
                out[tuple(v for k, v in sorted(sample.labels.items()) if k != c.POOL)] = sample.value
    return out


def one_poll(servers: PredictorServers, *, probe: bool = True) -> tuple[PredictorSnapshot, PredictorHealthCollector]:
    snapshots, collector = polls(servers, probe=probe)
    return snapshots[-1], collector


# The objective, from each source.


@pytest.mark.parametrize("objective", c.OBJECTIVES)
def test_the_objective_of_the_training_server_metrics_page(
    shared: Path, start: Callable[[RunningServer], RunningServer], objective: str
) -> None:
    training = start(TrainingServer(shared, TrainingBehaviour(llmd=objective)))
    snapshot, collector = one_poll(PredictorServers(training_url=training.url))
    assert snapshot.objective == objective
    assert snapshot.quantile == 0.9  # written in both objectives
    assert published(collector, c.PREDICTOR_OBJECTIVE) == {
        (c.OBJECTIVE_QUANTILE,): 1.0 if objective == c.OBJECTIVE_QUANTILE else 0.0,
        (c.OBJECTIVE_MEAN,): 1.0 if objective == c.OBJECTIVE_MEAN else 0.0,
    }


def test_the_late_2025_training_server_states_no_objective_and_predicts_a_quantile(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    training = start(TrainingServer(shared, TrainingBehaviour()))
    snapshot, _ = one_poll(PredictorServers(training_url=training.url))
    assert snapshot.objective == c.OBJECTIVE_QUANTILE


@pytest.mark.parametrize("objective", c.OBJECTIVES)
def test_the_objective_of_a_prediction_servers_status(
    shared: Path, start: Callable[[RunningServer], RunningServer], objective: str
) -> None:
    # /readyz refused: the server is not probed, so the objective can only come from the recorded /status.
    body = llmd(shared, objective, "prediction-server-status.json")
    prediction = start(PredictionServer(PredictionBehaviour(ready=False, status_body=body)))
    snapshot, _ = one_poll(PredictorServers(prediction_urls=[prediction.url]))
    assert snapshot.objective == objective
    assert "/predict" not in prediction.behaviour.calls


def test_the_objective_of_a_prediction_answer_wins_over_the_training_servers(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    training = start(TrainingServer(shared, TrainingBehaviour(llmd=c.OBJECTIVE_QUANTILE)))
    prediction = start(PredictionServer(PredictionBehaviour(objective=c.OBJECTIVE_MEAN)))
    snapshot, _ = one_poll(PredictorServers(training_url=training.url, prediction_urls=[prediction.url]))
    assert snapshot.objective == c.OBJECTIVE_MEAN  # the prediction servers make the predictions
    assert prediction.behaviour.calls.count("/predict") == len(PROBE)


@pytest.mark.parametrize("objective", c.OBJECTIVES)
def test_the_recorded_prediction_answers_carry_the_objective(shared: Path, objective: str) -> None:
    for name in ("predict-bulk-strict-response-new-fields.json", "predict-bulk-response-new-fields.json"):
        entries = json.loads(llmd(shared, objective, name))["predictions"]
        parsed = [_prediction(entry) for entry in entries]
        assert [p.objective if p else None for p in parsed] == [objective] * len(entries)
    late = json.loads((shared / "fixtures" / "predictor" / "predict-bulk-response.json").read_text())
    assert {_prediction(entry).objective for entry in late["predictions"]} == {c.OBJECTIVE_QUANTILE}  # type: ignore[union-attr]
    assert _prediction({**entries[0], "objective_type": "median"}) is None  # an unknown objective is unreadable


def test_the_client_reads_the_objective_of_each_answer(start: Callable[[RunningServer], RunningServer]) -> None:
    server = start(PredictionServer(PredictionBehaviour(objective=c.OBJECTIVE_MEAN)))

    async def ask() -> list[Any]:
        async with httpx.AsyncClient() as http:
            client = PredictionClient([server.url], Predictions(), http)
            return await client.predict(list(PROBE), c.PURPOSE_SHADOW)

    assert [p.objective for p in asyncio.run(ask())] == [c.OBJECTIVE_MEAN, c.OBJECTIVE_MEAN]


# Mean predictions: bias, MAE and RMSE as sums.


def test_mean_predictions_feed_the_error_sums_and_not_coverage(
    start: Callable[[RunningServer], RunningServer],
) -> None:
    server = start(PredictionServer(PredictionBehaviour(objective=c.OBJECTIVE_MEAN)))
    requests = [
        Features(0.0, 0, 0, 0, 1, 0.0),  # ttft 20 ms
        Features(0.5, 100, 2, 10, 1, 0.0),  # ttft 20 + 20 + 10 + 50 = 100 ms
    ]

    async def ask() -> list[Any]:
        async with httpx.AsyncClient() as http:
            return await PredictionClient([server.url], Predictions(), http).predict(requests, c.PURPOSE_SHADOW)

    predictions = asyncio.run(ask())
    assert [p.ttft_ms for p in predictions] == [predicted_ttft_ms(r.to_json()) for r in requests] == [20.0, 100.0]
    registry = CollectorRegistry()
    series = PredictionSeries(registry, [POOL])
    labels = ("m", POOL)
    actuals = [0.025, 0.090]  # seconds: 5 ms over the first prediction, 10 ms under the second
    for prediction, actual in zip(predictions, actuals, strict=True):
        assert series.compared(
            labels=labels,
            signal=c.SIGNAL_TTFT,
            source=c.SOURCE_SHADOW,
            actual=actual,
            predicted=prediction.ttft_ms / 1000.0,
            quantile=prediction.quantile,
            trace_id="0" * 32,
            objective=prediction.objective,
        )
    key = {c.MODEL: "m", c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT, c.SOURCE: c.SOURCE_SHADOW}

    def value(definition: c.MetricDef) -> float | None:
        return registry.get_sample_value(definition.exposed_name, key)

    # By hand: errors +0.005 and -0.010 s over 2 predictions of 0.020 and 0.100 s: too low by 0.005 s, too high by
    # 0.010 s, so bias (under - over) / n = -0.0025 s (too high) and MAE (under + over) / n = 0.0075 s.
    assert value(c.MEAN_PREDICTIONS) == 2.0
    assert value(c.MEAN_PREDICTION_PREDICTED) == pytest.approx(0.120, abs=1e-12)
    assert value(c.MEAN_PREDICTION_UNDERESTIMATE) == pytest.approx(0.005, abs=1e-12)
    assert value(c.MEAN_PREDICTION_OVERESTIMATE) == pytest.approx(0.010, abs=1e-12)
    assert value(c.MEAN_PREDICTION_SQUARED_ERROR) == pytest.approx(0.000125, abs=1e-15)  # 25e-6 + 100e-6
    rmse = math.sqrt(value(c.MEAN_PREDICTION_SQUARED_ERROR) or 0.0) / math.sqrt(2.0)
    assert rmse == pytest.approx(math.sqrt(62.5e-6), abs=1e-12)
    for quantile_family in (c.PREDICTIONS, c.PREDICTION_COVERED, c.PREDICTION_PINBALL_LOSS):
        assert value(quantile_family) is None  # never judged against a quantile it does not predict
    assert registry.get_sample_value(c.PREDICTION_RATIO.name + "_count", key) is None
    # A quantile prediction of the same pool goes to the coverage families and leaves the sums alone.
    series.compared(
        labels=labels,
        signal=c.SIGNAL_TTFT,
        source=c.SOURCE_SHADOW,
        actual=0.025,
        predicted=predicted_tpot_ms(requests[0].to_json()) / 1000.0 * 10,
        quantile=0.9,
        trace_id="0" * 32,
    )
    assert value(c.PREDICTIONS) == 1.0
    assert value(c.MEAN_PREDICTIONS) == 2.0


# The training server's own accuracy.


def test_the_mean_training_servers_mae_and_rmse_are_published_in_seconds(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    training = start(TrainingServer(shared, TrainingBehaviour(llmd=c.OBJECTIVE_MEAN)))
    snapshot, collector = one_poll(PredictorServers(training_url=training.url))
    # ttft_mae{idx="1"} 114.851140, tpot_mae 4.470668, ttft_rmse 159.126286, tpot_rmse 5.932218 (ms).
    assert snapshot.mae_offline == pytest.approx({"ttft": 0.11485114, "tpot": 0.004470668}, abs=1e-12)
    assert snapshot.rmse_offline == pytest.approx({"ttft": 0.159126286, "tpot": 0.005932218}, abs=1e-12)
    assert snapshot.coverage == {}  # a mean-mode page has no coverage ring
    assert published(collector, c.PREDICTOR_MAE_OFFLINE_SECONDS) == pytest.approx(
        {("ttft",): 0.11485114, ("tpot",): 0.004470668}, abs=1e-12
    )
    assert published(collector, c.PREDICTOR_RMSE_OFFLINE_SECONDS) == pytest.approx(
        {("ttft",): 0.159126286, ("tpot",): 0.005932218}, abs=1e-12
    )
    assert published(collector, c.PREDICTOR_COVERAGE_OFFLINE_RATIO) == {}


def test_the_quantile_training_server_gives_coverage_and_no_mae(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    training = start(TrainingServer(shared, TrainingBehaviour(llmd=c.OBJECTIVE_QUANTILE)))
    snapshot, _ = one_poll(PredictorServers(training_url=training.url))
    assert snapshot.coverage == pytest.approx({"ttft": 0.85333333, "tpot": 0.82214765}, abs=1e-12)
    assert snapshot.mae_offline == {} and snapshot.rmse_offline == {}
    assert snapshot.untrained == BOTH  # seeded: samples held, ensemble active


# A predictor that changes objective.


def test_a_change_of_objective_is_followed_and_logged_once(
    shared: Path, start: Callable[[RunningServer], RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    behaviour = TrainingBehaviour(llmd=c.OBJECTIVE_QUANTILE)
    training = start(TrainingServer(shared, behaviour))

    def restart_in_mean_mode(index: int) -> None:
        if index == 1:
            training.behaviour.metrics = recorded_metrics_page(shared, c.OBJECTIVE_MEAN)

    with caplog.at_level(logging.WARNING, logger="sloscope.predictor.health"):
        snapshots, collector = polls(PredictorServers(training_url=training.url), 3, restart_in_mean_mode)
    assert [s.objective for s in snapshots] == [c.OBJECTIVE_QUANTILE, c.OBJECTIVE_MEAN, c.OBJECTIVE_MEAN]
    assert snapshots[-1].coverage == {}
    assert snapshots[-1].mae_offline["ttft"] == pytest.approx(0.11485114, abs=1e-12)
    assert published(collector, c.PREDICTOR_OBJECTIVE) == {(c.OBJECTIVE_QUANTILE,): 0.0, (c.OBJECTIVE_MEAN,): 1.0}
    changes = [r.getMessage() for r in caplog.records if "now predicts" in r.getMessage()]
    assert changes == [f"latency predictor of pool {POOL} now predicts the mean (was the quantile)"]


# A predictor that was reset.


def test_a_prediction_server_without_its_gated_ensemble_is_not_untrained(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    """The gated ensemble is built only once each of four sample splits holds 200 samples (training_server.py
    :1014-1075 at b5d19f1): a trained predictor of a pool that rarely queues, or that gets no TPOT sample (the EPP's
    streaming off), never has it. Its /status (gated models false, the fresh capture's) is no reset marker; the
    probe, which finds its predictions vary, says it is trained."""
    for objective in c.OBJECTIVES:
        fresh = llmd(shared, objective, "fresh-prediction-server-status.json")
        server = start(PredictionServer(PredictionBehaviour(status_body=fresh)))
        snapshot, collector = one_poll(PredictorServers(prediction_urls=[server.url]))
        assert snapshot.untrained == BOTH
        assert published(collector, c.PREDICTOR_TRAINED) == {("ttft",): 1.0, ("tpot",): 1.0}


def test_a_training_server_with_no_samples_is_untrained(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    page = without_samples(recorded_metrics_page(shared, c.OBJECTIVE_MEAN))
    training = start(TrainingServer(shared, TrainingBehaviour(llmd=c.OBJECTIVE_MEAN, metrics=page)))
    snapshot, collector = one_poll(PredictorServers(training_url=training.url))
    assert snapshot.training_samples == {"ttft": 0.0, "tpot": 0.0}
    assert snapshot.untrained == {"ttft": (MARKER_NO_SAMPLES,), "tpot": (MARKER_NO_SAMPLES,)}
    assert published(collector, c.PREDICTOR_TRAINED) == {("ttft",): 0.0, ("tpot",): 0.0}


def test_a_training_server_whose_gated_models_are_inactive_is_trained(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    """``ensemble_active{} 0`` with samples held: the single models are trained (training_server.py:1014-1075)."""
    page = recorded_metrics_page(shared, c.OBJECTIVE_QUANTILE).replace("ensemble_active{} 1", "ensemble_active{} 0")
    training = start(TrainingServer(shared, TrainingBehaviour(metrics=page, llmd=c.OBJECTIVE_QUANTILE)))
    snapshot, collector = one_poll(PredictorServers(training_url=training.url))
    assert snapshot.untrained == BOTH
    assert published(collector, c.PREDICTOR_TRAINED) == {("ttft",): 1.0, ("tpot",): 1.0}


def test_a_constant_prediction_for_different_features_is_untrained(
    start: Callable[[RunningServer], RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    # The default models predict their one training target, 10 ms, for every request.
    server = start(PredictionServer(PredictionBehaviour(constant_ms=(10.0, 10.0))))

    def retrained(index: int) -> None:
        if index == 2:
            server.behaviour.constant_ms = None

    with caplog.at_level(logging.INFO, logger="sloscope.predictor.health"):
        snapshots, collector = polls(PredictorServers(prediction_urls=[server.url]), 3, retrained)
    assert [s.untrained for s in snapshots] == [
        {"ttft": (MARKER_CONSTANT,), "tpot": (MARKER_CONSTANT,)},
        {"ttft": (MARKER_CONSTANT,), "tpot": (MARKER_CONSTANT,)},
        BOTH,
    ]
    assert published(collector, c.PREDICTOR_TRAINED) == {("ttft",): 1.0, ("tpot",): 1.0}
    resets = [r.getMessage() for r in caplog.records if "looks reset" in r.getMessage()]
    assert resets == [
        f"latency predictor of pool {POOL}: the tpot model looks reset to its default (constant)",
        f"latency predictor of pool {POOL}: the ttft model looks reset to its default (constant)",
    ]
    assert sum("trained again" in r.getMessage() for r in caplog.records) == 2


def test_nothing_is_said_of_training_without_a_source(start: Callable[[RunningServer], RunningServer]) -> None:
    server = start(PredictionServer(PredictionBehaviour(ready=False)))  # late-2025 /status, not probed
    snapshot, collector = one_poll(PredictorServers(prediction_urls=[server.url]))
    assert snapshot.untrained == {}
    assert published(collector, c.PREDICTOR_TRAINED) == {}


def test_without_the_reset_probe_nothing_is_predicted_and_the_status_gives_the_objective(
    shared: Path, start: Callable[[RunningServer], RunningServer]
) -> None:
    # A reset llm-d prediction server in mean mode: constant predictions, its gated models absent.
    body = llmd(shared, c.OBJECTIVE_MEAN, "fresh-prediction-server-status.json")
    behaviour = PredictionBehaviour(objective=c.OBJECTIVE_MEAN, constant_ms=(10.0, 10.0), status_body=body)
    server = start(PredictionServer(behaviour))
    snapshot, collector = one_poll(PredictorServers(prediction_urls=[server.url]), probe=False)
    assert "/predict" not in server.behaviour.calls and server.behaviour.received == []
    assert snapshot.objective == c.OBJECTIVE_MEAN  # from /status alone
    # without the probe, and without the training server's sample counts, nothing tells a reset: nothing is said
    assert snapshot.untrained == {}
    assert published(collector, c.PREDICTOR_TRAINED) == {}
