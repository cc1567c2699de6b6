"""A stand-in for the latency predictor's prediction server, run on loopback.

It follows the API of ``prediction_server.py`` of the latency predictor
(at the commit the fixtures in ``fixtures/predictor/`` were recorded from): the same routes, the
same request models with the same pydantic constraints (so a feature out of range gets FastAPI's
422 with the body shape of ``prediction-server-422-validation-error.json``), and responses with the
same fields as the recorded ones. Only the predictions differ: instead of a model, a documented
formula of the features that tests compute with :func:`predicted_ttft_ms` / :func:`predicted_tpot_ms`:

    ttft_ms = 20 + 10 * num_request_waiting + 0.1 * input_token_length + 100 * kv_cache_percentage
    tpot_ms = 5 + 0.5 * num_request_running + 10 * kv_cache_percentage

at quantile 0.9 with model_type "xgboost".

Switches (:class:`PredictionBehaviour`, changed by tests at any time):

- ``ready=False``: what the real server does without models. ``/readyz`` answers 503
  ``{"detail": "Models are not ready"}``, ``/status`` says ``is_ready: false``, ``/predict`` and
  ``/predict/bulk/strict`` answer 503 ``{"detail": "Models not ready"}``, and ``/predict/bulk`` answers
  200 with every prediction ``null`` and one error per item ("Batch prediction error: 503: Models not
  ready"), because the real endpoint catches the 503 its batch prediction raises.
- ``fail=True``: every route answers 500 ``{"detail": "Internal Server Error"}`` (a crashing server or
  a proxy in front of it; the real server turns its own prediction errors into 200s with errors).
- ``delay_seconds``: every answer waits that long first (released at once by ``stop()``).
- ``item_errors``: indexes of a ``/predict/bulk`` request answered with a per-item error in the
  documented shape (``predictions[i]`` null, ``errors`` gets ``{"index", "error", "request"}``). The
  real server reports per-item errors in this shape; it fails a subset only in its pre-validation.
- ``require_token``: when set, every route answers 401 without ``Authorization: Bearer <token>``.
- ``objective``: when set ("quantile" or "mean"), every prediction answer carries ``objective_type`` as the
  llm-d latency predictor's do (prediction/prediction_server.py:913-919 at b5d19f1); unset, none does,
  as with the late-2025 predictor.
- ``constant_ms``: when set, every prediction is this (ttft_ms, tpot_ms), whatever the features: what a
  prediction server serving the default models of a reset training server answers.
- ``status_body``: when set, ``/status`` answers these bytes (e.g. a recorded llm-d ``/status``).

Requests are validated with the llm-d predictor's request model (``LlmdPredictionRequest``: the six
features and ``pod_type``, ``prefill_tokens_in_flight``, ``decode_tokens_in_flight``,
``encoder_matched_size``, ``encoder_input_size`` with their constraints), which a late-2025 server's
looser model accepts too. ``/predict/bulk/strict`` behaves as the real one
(``predict_bulk_strict_endpoint`` of llm-d-latency-predictor ``prediction/prediction_server.py`` at
b5d19f17): every item predicted, or the whole call refused (503 "Models not ready", 422 for a
feature out of range); its answer has no ``errors``.

Every request's path is recorded in ``calls`` (even when failing), every POST body as received (the
parsed JSON, or the raw bytes when it is not JSON) in ``received`` as ``(path, body)``, before any
switch applies, and the validated ``requests`` list of each ``/predict/bulk`` and
``/predict/bulk/strict`` call that got through validation in ``bulk_requests`` (the fields the
request set, as sent).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, HTTPException, Response, status
from starlette.types import Scope

from sloscope.demo.body_recorder import BodyRecorder, OnBody
from sloscope.predictor.api import (
    BulkPredictionError,
    LlmdBulkPredictionRequest,
    LlmdPredictionRequest,
    PredictionResponse,
    StatusResponse,
)
from sloscope.predictor.features import Features, Prediction
from tests.support.serving import RunningServer, install_switches
from tests.support.training_server import TrainingBehaviour, TrainingServer

# The training stand-in lives in training_server.py; importable from here too, as the two go together.
__all__ = [
    "MODEL_TYPE",
    "QUANTILE",
    "PredictionBehaviour",
    "PredictionServer",
    "TrainingBehaviour",
    "TrainingServer",
    "create_prediction_app",
    "expected_prediction",
    "predicted_tpot_ms",
    "predicted_ttft_ms",
]

QUANTILE = 0.9
MODEL_TYPE = "xgboost"
LAST_MODEL_LOAD = datetime(2026, 11, 30, 10, 22, 25, 42983, tzinfo=UTC)
TRAINING_SERVER_URL = "http://127.0.0.1:18000"  # what /status reports; nothing is fetched from it


def predicted_ttft_ms(features: Mapping[str, float]) -> float:
    """The stand-in's TTFT prediction for one request object (``Features.to_json()``)."""
    return (
        20.0
        + 10.0 * features["num_request_waiting"]
        + 0.1 * features["input_token_length"]
        + 100.0 * features["kv_cache_percentage"]
    )


def predicted_tpot_ms(features: Mapping[str, float]) -> float:
    """The stand-in's TPOT prediction for one request object (``Features.to_json()``)."""
    return 5.0 + 0.5 * features["num_request_running"] + 10.0 * features["kv_cache_percentage"]


def expected_prediction(features: Features) -> Prediction:
    """What the client should return for ``features`` from a ready stand-in."""
    request = features.to_json()
    return Prediction(predicted_ttft_ms(request), predicted_tpot_ms(request), QUANTILE, MODEL_TYPE)


@dataclass
class PredictionBehaviour:
    """Switches of a prediction stand-in and what it received (see the module docstring)."""

    ready: bool = True
    fail: bool = False
    delay_seconds: float = 0.0
    require_token: str | None = None
    item_errors: set[int] = field(default_factory=set)
    objective: str | None = None
    constant_ms: tuple[float, float] | None = None
    status_body: str | None = None
    calls: list[str] = field(default_factory=list)
    received: list[tuple[str, Any]] = field(default_factory=list)
    bulk_requests: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def bulk_sizes(self) -> list[int]:
        return [len(requests) for requests in self.bulk_requests]


_NOT_READY = "Models not ready"


def _recorder(behaviour: PredictionBehaviour) -> OnBody:
    """Records each POST body in ``behaviour.received``: the parsed JSON, or the raw bytes when it is not JSON."""

    def record(scope: Scope, body: bytes) -> None:
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = body
        behaviour.received.append((scope["path"], parsed))

    return record


def _sent(request: LlmdBulkPredictionRequest) -> list[dict[str, Any]]:
    return [r.model_dump(exclude_unset=True) for r in request.requests]


def _predict(request: LlmdPredictionRequest, now: datetime, behaviour: PredictionBehaviour) -> dict[str, Any]:
    features = request.model_dump()
    ttft, tpot = behaviour.constant_ms or (predicted_ttft_ms(features), predicted_tpot_ms(features))
    answer = PredictionResponse(
        ttft_ms=max(0.0, ttft),
        tpot_ms=max(0.0, tpot),
        predicted_at=now,
        model_type=MODEL_TYPE,
        quantile=QUANTILE,
        last_model_load=LAST_MODEL_LOAD,
    ).model_dump(mode="json")
    if behaviour.objective is not None:
        answer["objective_type"] = behaviour.objective
    return answer


def create_prediction_app(behaviour: PredictionBehaviour, release: asyncio.Event | None = None) -> FastAPI:
    """The prediction server's routes, driven by ``behaviour``; ``release`` cuts delays short."""
    app = FastAPI(title="stand-in prediction server")
    install_switches(app, behaviour, release)
    app.add_middleware(BodyRecorder, on_body=_recorder(behaviour))  # added last: outermost, sees every body

    @app.get("/status", response_model=None)
    async def status_endpoint() -> StatusResponse | Response:
        if behaviour.status_body is not None:
            return Response(behaviour.status_body, media_type="application/json")
        return StatusResponse(
            is_ready=behaviour.ready,
            model_type=MODEL_TYPE,
            quantile=QUANTILE,
            last_model_load=LAST_MODEL_LOAD,
            training_server_url=TRAINING_SERVER_URL,
            models_exist={"ttft_model": behaviour.ready, "tpot_model": behaviour.ready},
        )

    @app.post("/predict")
    async def predict_endpoint(request: LlmdPredictionRequest) -> dict[str, Any]:
        if not behaviour.ready:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        return _predict(request, datetime.now(UTC), behaviour)

    @app.post("/predict/bulk/strict")
    async def predict_bulk_strict_endpoint(request: LlmdBulkPredictionRequest) -> dict[str, Any]:
        behaviour.bulk_requests.append(_sent(request))
        if not behaviour.ready:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        now = datetime.now(UTC)
        predictions = [_predict(r, now, behaviour) for r in request.requests]
        return {
            "predictions": predictions,
            "total_requests": len(request.requests),
            "successful_predictions": len(predictions),
            "failed_predictions": 0,
            "processing_time_ms": 0.1,
        }

    @app.post("/predict/bulk")
    async def predict_bulk_endpoint(request: LlmdBulkPredictionRequest) -> dict[str, Any]:
        behaviour.bulk_requests.append(_sent(request))
        now = datetime.now(UTC)
        predictions: list[dict[str, Any] | None] = []
        errors: list[dict[str, Any]] = []
        for index, item in enumerate(request.requests):
            if not behaviour.ready:
                error = f"Batch prediction error: 503: {_NOT_READY}"
            elif index in behaviour.item_errors:
                error = "stand-in: error asked for by the test"
            else:
                predictions.append(_predict(item, now, behaviour))
                continue
            predictions.append(None)
            errors.append(BulkPredictionError(index=index, error=error, request=item).model_dump(mode="json"))
        return {
            "predictions": predictions,
            "errors": errors,
            "total_requests": len(request.requests),
            "successful_predictions": len(request.requests) - len(errors),
            "failed_predictions": len(errors),
            "processing_time_ms": 0.1,
        }

    @app.get("/healthz", status_code=status.HTTP_200_OK)
    async def health_check() -> dict[str, str]:
        return {"status": "ok", "service": "http-based-quantile-latency-predictor"}

    @app.get("/readyz", status_code=status.HTTP_200_OK)
    async def readiness_check() -> dict[str, Any]:
        if not behaviour.ready:
            raise HTTPException(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, detail="Models are not ready")
        return {"status": "ready", "model_type": MODEL_TYPE, "quantile": QUANTILE}

    return app


class PredictionServer(RunningServer):
    """A prediction stand-in; change ``behaviour`` to switch what it does."""

    def __init__(self, behaviour: PredictionBehaviour | None = None) -> None:
        self.behaviour = behaviour or PredictionBehaviour()
        super().__init__(lambda release: create_prediction_app(self.behaviour, release))
