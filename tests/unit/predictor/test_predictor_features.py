"""The prediction API's request and answer shapes, checked against the recorded bodies."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sloscope.predictor.features import Features, Prediction, parse_objective


def recorded_requests(shared: Path) -> list[dict[str, Any]]:
    body = json.loads((shared / "fixtures" / "predictor" / "predict-bulk-request.json").read_text())
    return list(body["requests"])


def test_features_have_exactly_the_fields_of_a_recorded_request(shared: Path) -> None:
    """The late-2025 request object: the six fields, nothing else (a Features without in-flight counts)."""
    for request in recorded_requests(shared):
        assert [f.name for f in dataclasses.fields(Features)][:6] == list(request)
        assert Features(**request).to_json() == request


def test_the_llm_d_shape_is_the_llm_d_epps_request_object(shared: Path) -> None:
    """With in-flight counts, the fields of llm-d-router's PredictionRequest in its JSON order.

    latencypredictorclient/types.go:188-203 at llm-d-router ebab6879: the six, encoder_input_size,
    encoder_matched_size, pod_type (`omitempty`), prefill_tokens_in_flight, decode_tokens_in_flight; the
    recorded llm-d bodies carry the same names (fixtures/predictor/llm-d/requests/).
    """
    path = shared / "fixtures" / "predictor" / "llm-d" / "requests" / "predict-bulk-request-new-fields.json"
    recorded = json.loads(path.read_text())["requests"][1]
    features = Features(**recorded)
    assert features.to_json() == {**recorded, "encoder_input_size": 0, "encoder_matched_size": 0}
    assert list(features.to_json()) == [
        *list(recorded)[:6],
        "encoder_input_size",
        "encoder_matched_size",
        "pod_type",
        "prefill_tokens_in_flight",
        "decode_tokens_in_flight",
    ]
    monolithic = Features(0.1, 10, 0, 1, 1, 0.0, prefill_tokens_in_flight=0)
    assert "pod_type" not in monolithic.to_json()


def test_to_json_writes_every_field_by_its_api_name() -> None:
    features = Features(
        kv_cache_percentage=0.55,
        input_token_length=350,
        num_request_waiting=3,
        num_request_running=20,
        num_tokens_generated=1,
        prefix_cache_score=0.9,
    )
    assert features.to_json() == {
        "kv_cache_percentage": 0.55,
        "input_token_length": 350,
        "num_request_waiting": 3,
        "num_request_running": 20,
        "num_tokens_generated": 1,
        "prefix_cache_score": 0.9,
    }
    assert json.loads(json.dumps(features.to_json())) == features.to_json()


def test_features_and_predictions_are_immutable() -> None:
    features = Features(0.1, 10, 0, 1, 1, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        features.input_token_length = 11  # type: ignore[misc]
    prediction = Prediction(77.5, 16.8, 0.9, "xgboost")
    with pytest.raises(dataclasses.FrozenInstanceError):
        prediction.ttft_ms = 1.0  # type: ignore[misc]


def test_prediction_carries_the_recorded_response_fields_it_needs(shared: Path) -> None:
    body = json.loads((shared / "fixtures" / "predictor" / "prediction-server-predict-response.json").read_text())
    prediction = Prediction(body["ttft_ms"], body["tpot_ms"], body["quantile"], body["model_type"])
    assert prediction == Prediction(138.25979614257812, 21.054443359375, 0.9, "xgboost")
    # objective is read from objective_type, which only the llm-d predictor writes (absent here: quantile).
    assert {f.name for f in dataclasses.fields(Prediction)} - {"objective"} <= set(body)
    assert prediction.objective == "quantile"


def test_the_objective_of_an_answer(shared: Path) -> None:
    """``objective_type`` of the llm-d predictor (prediction/prediction_server.py:917 at b5d19f1)."""
    for objective in ("quantile", "mean"):
        path = shared / "fixtures" / "predictor" / "llm-d" / objective / "predict-response-new-fields.json"
        assert parse_objective(json.loads(path.read_text())["objective_type"]) == objective
    assert parse_objective(None) == "quantile"
    with pytest.raises(ValueError, match="unknown objective_type 'median'"):
        parse_objective("median")
