"""The stand-in predictor servers answer in the shapes of the recorded bodies (fixtures/predictor/)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sloscope.predictor.features import Features
from tests.support.prediction_server import PredictionServer, expected_prediction
from tests.support.training_server import TrainingServer, recorded_get_bodies, recorded_metrics_page

pytestmark = pytest.mark.integration


def recorded(shared: Path, name: str) -> Any:
    return json.loads((shared / "fixtures" / "predictor" / name).read_text())


def shape(value: Any) -> Any:
    """Keys and value types, recursively: what must match between a recorded body and the stand-in's."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


@pytest.fixture
def prediction() -> Iterator[PredictionServer]:
    with PredictionServer() as server:
        yield server


@pytest.fixture
def training(shared: Path) -> Iterator[TrainingServer]:
    with TrainingServer(shared) as server:
        yield server


def test_the_validation_error_is_the_recorded_one(shared: Path, prediction: PredictionServer) -> None:
    body = {
        "kv_cache_percentage": 1.3,
        "input_token_length": 500,
        "num_request_waiting": 2,
        "num_request_running": 8,
        "num_tokens_generated": 1,
    }
    response = httpx.post(prediction.url + "/predict", json=body)
    assert response.status_code == 422
    assert response.json() == recorded(shared, "prediction-server-422-validation-error.json")


def test_a_bulk_validation_error_points_into_the_list(prediction: PredictionServer) -> None:
    good = Features(0.1, 1, 0, 0, 1, 0.0).to_json()
    response = httpx.post(
        prediction.url + "/predict/bulk", json={"requests": [good, {**good, "prefix_cache_score": 2}]}
    )
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert (error["type"], error["loc"]) == ("less_than_equal", ["body", "requests", 1, "prefix_cache_score"])


@pytest.mark.parametrize(
    ("path", "fixture"),
    [
        pytest.param("/predict/bulk", "predict-bulk-response.json", id="bulk"),
        pytest.param("/predict/bulk/strict", "predict-bulk-strict-response.json", id="bulk strict"),
    ],
)
def test_bulk_answers_have_the_recorded_shape(
    shared: Path, prediction: PredictionServer, path: str, fixture: str
) -> None:
    request = recorded(shared, "predict-bulk-request.json")
    response = httpx.post(prediction.url + path, json=request)
    assert response.status_code == 200
    body = response.json()
    assert shape(body) == shape(recorded(shared, fixture))
    expected = [expected_prediction(Features(**r)) for r in request["requests"]]
    assert [(p["ttft_ms"], p["tpot_ms"], p["quantile"], p["model_type"]) for p in body["predictions"]] == [
        (e.ttft_ms, e.tpot_ms, e.quantile, e.model_type) for e in expected
    ]


def test_predict_and_status_have_the_recorded_shape(shared: Path, prediction: PredictionServer) -> None:
    request = recorded(shared, "predict-bulk-request.json")["requests"][0]
    predicted = httpx.post(prediction.url + "/predict", json=request).json()
    assert shape(predicted) == shape(recorded(shared, "prediction-server-predict-response.json"))
    status = httpx.get(prediction.url + "/status").json()
    assert shape(status) == shape(recorded(shared, "prediction-server-status.json"))


def test_not_ready_as_the_real_server_is(prediction: PredictionServer) -> None:
    prediction.behaviour.ready = False
    ready = httpx.get(prediction.url + "/readyz")
    assert (ready.status_code, ready.json()) == (503, {"detail": "Models are not ready"})
    assert httpx.get(prediction.url + "/status").json()["is_ready"] is False
    request = Features(0.1, 1, 0, 0, 1, 0.0).to_json()
    single = httpx.post(prediction.url + "/predict", json=request)
    assert (single.status_code, single.json()) == (503, {"detail": "Models not ready"})
    bulk = httpx.post(prediction.url + "/predict/bulk", json={"requests": [request]})
    assert bulk.status_code == 200
    assert bulk.json()["predictions"] == [None]
    assert bulk.json()["errors"] == [
        {"index": 0, "error": "Batch prediction error: 503: Models not ready", "request": request}
    ]
    assert httpx.get(prediction.url + "/healthz").status_code == 200


def test_the_training_stand_in_serves_the_recorded_bodies(shared: Path, training: TrainingServer) -> None:
    bodies = recorded_get_bodies(shared)
    assert httpx.get(training.url + "/models/list").json() == json.loads(bodies["/models/list"])
    assert httpx.get(training.url + "/readyz").json() == {"status": "ready"}
    metrics = httpx.get(training.url + "/metrics")
    assert metrics.text == recorded_metrics_page(shared)
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    training.behaviour.ready = False
    ready = httpx.get(training.url + "/readyz")
    assert (ready.status_code, ready.json()) == (503, {"detail": "Models are not ready."})
