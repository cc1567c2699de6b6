"""The demo's prediction servers: the latency predictor's prediction API over model snapshots.

Each serves the snapshot of the training model it last loaded (the real server polls
``/model/{name}/info`` and downloads newer files; here the copy is in-process), with the routes and
pydantic request models of the real ``prediction_server.py``, so a bad request gets FastAPI's 422 with the
body of ``prediction-server-422-validation-error.json``. Not ready before a snapshot with both models:
``/predict`` and ``/predict/bulk/strict`` answer 503 ``{"detail": "Models not ready"}``, ``/predict/bulk``
200 with every prediction null and one error per item. :mod:`sloscope.demo.predictor_servers` runs them.

With ``announce_objective`` they answer as the llm-d predictor's prediction server
(``prediction/prediction_server.py`` at llm-d-latency-predictor b5d19f17; ``fixtures/predictor/llm-d/mean/``):
every prediction and ``/status`` carry ``objective_type`` (``quantile`` or ``mean``), and ``quantile`` stays
the configured one in mean mode. Without it (the late-2025 server) no answer has the field.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, HTTPException, status

from sloscope.demo.quantile_model import (
    MODEL_TYPE,
    ModelSnapshot,
    OnlineQuantileModel,
)
from sloscope.predictor import api
from sloscope.predictor.features import Features

__all__ = ["PredictionState", "create_prediction_app"]

_NOT_READY = "Models not ready"
_SERVICE = "http-based-quantile-latency-predictor"


class _LlmdPredictionResponse(api.PredictionResponse):
    objective_type: str


class _LlmdBulkPredictionResponse(api.BulkPredictionResponse):
    predictions: list[_LlmdPredictionResponse]  # type: ignore[assignment]  # the llm-d server's items


class _LlmdBulkPredictionResponseWithErrors(api.BulkPredictionResponseWithErrors):
    predictions: list[_LlmdPredictionResponse | None]  # type: ignore[assignment]


class _LlmdStatusResponse(api.StatusResponse):
    objective_type: str


@dataclass
class PredictionState:
    """What one prediction server serves: the snapshot it last loaded, and when."""

    training_server_url: str
    quantile: float
    snapshot: ModelSnapshot | None = None
    last_load: datetime | None = None
    objective: str | None = None  # announced on every answer (the llm-d server); None: the late-2025 server
    scale: float = 1.0  # every prediction multiplied by it: a biased predictor, to test what sees one

    def sync(self, model: OnlineQuantileModel, now: datetime) -> bool:
        """Loads ``model``'s snapshot if it is the first or has a newer fit; True if it loaded one."""
        latest = model.snapshot()
        if self.snapshot is not None and latest.generation <= self.snapshot.generation:
            return False
        self.snapshot, self.last_load = latest, now
        return True


def create_prediction_app(state: PredictionState, clock: Callable[[], float] = time.time) -> FastAPI:
    """A prediction server's routes, serving ``state.snapshot``."""
    app = FastAPI(title="sloscope demo: latency predictor prediction server")
    llm_d = state.objective is not None
    item_model = _LlmdPredictionResponse if llm_d else api.PredictionResponse
    bulk_model = _LlmdBulkPredictionResponse if llm_d else api.BulkPredictionResponse
    bulk_errors_model = _LlmdBulkPredictionResponseWithErrors if llm_d else api.BulkPredictionResponseWithErrors
    status_model = _LlmdStatusResponse if llm_d else api.StatusResponse

    def ready() -> ModelSnapshot | None:
        return state.snapshot if state.snapshot is not None and state.snapshot.ready else None

    def answer(snapshot: ModelSnapshot, request: api.PredictionRequest, now: datetime) -> api.PredictionResponse:
        prediction = snapshot.predict(Features(**request.model_dump()))
        assert prediction is not None  # the snapshot is ready
        fields: dict[str, Any] = {
            "ttft_ms": prediction.ttft_ms * state.scale,
            "tpot_ms": prediction.tpot_ms * state.scale,
            "predicted_at": now,
            "model_type": MODEL_TYPE,
            "quantile": prediction.quantile,
            "last_model_load": state.last_load,
        }
        if llm_d:
            return _LlmdPredictionResponse(**fields, objective_type=prediction.objective)
        return api.PredictionResponse(**fields)

    def now() -> datetime:
        return datetime.fromtimestamp(clock(), UTC)

    @app.get("/status", response_model=status_model)
    async def status_endpoint() -> api.StatusResponse:
        snapshot = state.snapshot
        fields: dict[str, Any] = {
            "is_ready": ready() is not None,
            "model_type": MODEL_TYPE,
            "quantile": state.quantile,
            "last_model_load": state.last_load,
            "training_server_url": state.training_server_url,
            "models_exist": {
                "ttft_model": snapshot is not None and snapshot.ttft is not None,
                "tpot_model": snapshot is not None and snapshot.tpot is not None,
            },
        }
        if state.objective is not None:
            return _LlmdStatusResponse(**fields, objective_type=state.objective)
        return api.StatusResponse(**fields)

    @app.post("/predict", response_model=item_model)
    async def predict_endpoint(request: api.PredictionRequest) -> api.PredictionResponse:
        snapshot = ready()
        if snapshot is None:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        return answer(snapshot, request, now())

    @app.post("/predict/bulk/strict", response_model=bulk_model)
    async def predict_bulk_strict_endpoint(request: api.BulkPredictionRequest) -> api.BulkPredictionResponse:
        started = time.perf_counter()
        snapshot = ready()
        if snapshot is None:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        moment = now()
        predictions = [answer(snapshot, item, moment) for item in request.requests]
        return bulk_model(
            predictions=predictions,
            total_requests=len(predictions),
            successful_predictions=len(predictions),
            failed_predictions=0,
            processing_time_ms=(time.perf_counter() - started) * 1000,
        )

    @app.post("/predict/bulk", response_model=bulk_errors_model)
    async def predict_bulk_endpoint(request: api.BulkPredictionRequest) -> api.BulkPredictionResponseWithErrors:
        started = time.perf_counter()
        snapshot, moment, items = ready(), now(), request.requests
        predictions: list[api.PredictionResponse | None]
        if snapshot is None:  # the real endpoint turns the batch's 503 into one error per item
            error = f"Batch prediction error: {status.HTTP_503_SERVICE_UNAVAILABLE}: {_NOT_READY}"
            predictions = [None] * len(items)
            errors = [api.BulkPredictionError(index=i, error=error, request=item) for i, item in enumerate(items)]
        else:
            predictions, errors = [answer(snapshot, item, moment) for item in items], []
        return bulk_errors_model(
            predictions=predictions,
            errors=errors,
            total_requests=len(items),
            successful_predictions=len(items) - len(errors),
            failed_predictions=len(errors),
            processing_time_ms=(time.perf_counter() - started) * 1000,
        )

    @app.get("/healthz")
    async def health_check() -> dict[str, str]:
        return {"status": "ok", "service": _SERVICE}

    @app.get("/readyz")
    async def readiness_check() -> dict[str, Any]:
        if ready() is None:
            raise HTTPException(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, detail="Models are not ready")
        return {"status": "ready", "model_type": MODEL_TYPE, "quantile": state.quantile}

    return app
