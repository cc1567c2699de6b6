"""Stand-ins for the latency predictor's prediction and training servers, run on loopback.

They follow the API of ``prediction_server.py`` / ``training_server.py`` of the latency predictor
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

Every request's path is recorded in ``calls`` (even when failing), the validated ``requests`` list
of each ``/predict/bulk`` call in ``bulk_requests``.

The training stand-in serves the recorded ``/metrics`` page and ``/models/list``, ``/readyz`` and
the other GET bodies of ``training-server-get-endpoints.txt``, read from the shared fixtures folder
given to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import uvicorn
from fastapi import FastAPI, HTTPException, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from sloscope.predictor.features import Features, Prediction

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


# --- the prediction server's models (same fields and constraints as the real one) ---


class PredictionRequest(BaseModel):
    kv_cache_percentage: float = Field(..., ge=0.0, le=1.0)
    input_token_length: int = Field(..., ge=0)
    num_request_waiting: int = Field(..., ge=0)
    num_request_running: int = Field(..., ge=0)
    num_tokens_generated: int = Field(..., ge=0)
    prefix_cache_score: float = Field(..., ge=0.0, le=1.0)


class PredictionResponse(BaseModel):
    ttft_ms: float
    tpot_ms: float
    predicted_at: datetime
    model_type: str
    quantile: float
    last_model_load: datetime | None


class StatusResponse(BaseModel):
    is_ready: bool
    model_type: str
    quantile: float
    last_model_load: datetime | None
    training_server_url: str
    models_exist: dict[str, bool]


class BulkPredictionRequest(BaseModel):
    requests: list[PredictionRequest] = Field(..., min_length=1, max_length=10000)


class BulkPredictionResponse(BaseModel):
    predictions: list[PredictionResponse]
    total_requests: int
    successful_predictions: int
    failed_predictions: int
    processing_time_ms: float


class BulkPredictionError(BaseModel):
    index: int
    error: str
    request: PredictionRequest


class BulkPredictionResponseWithErrors(BaseModel):
    predictions: list[PredictionResponse | None]
    errors: list[BulkPredictionError]
    total_requests: int
    successful_predictions: int
    failed_predictions: int
    processing_time_ms: float


@dataclass
class PredictionBehaviour:
    """Switches of a prediction stand-in and what it received (see the module docstring)."""

    ready: bool = True
    fail: bool = False
    delay_seconds: float = 0.0
    item_errors: set[int] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    bulk_requests: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def bulk_sizes(self) -> list[int]:
        return [len(requests) for requests in self.bulk_requests]


_NOT_READY = "Models not ready"


def _predict(request: PredictionRequest, now: datetime) -> PredictionResponse:
    features = request.model_dump()
    return PredictionResponse(
        ttft_ms=max(0.0, predicted_ttft_ms(features)),
        tpot_ms=max(0.0, predicted_tpot_ms(features)),
        predicted_at=now,
        model_type=MODEL_TYPE,
        quantile=QUANTILE,
        last_model_load=LAST_MODEL_LOAD,
    )


def create_prediction_app(behaviour: PredictionBehaviour, release: asyncio.Event | None = None) -> FastAPI:
    """The prediction server's routes, driven by ``behaviour``; ``release`` cuts delays short."""
    app = FastAPI(title="stand-in prediction server")
    _install_switches(app, behaviour, release)

    @app.get("/status", response_model=StatusResponse)
    async def status_endpoint() -> StatusResponse:
        return StatusResponse(
            is_ready=behaviour.ready,
            model_type=MODEL_TYPE,
            quantile=QUANTILE,
            last_model_load=LAST_MODEL_LOAD,
            training_server_url=TRAINING_SERVER_URL,
            models_exist={"ttft_model": behaviour.ready, "tpot_model": behaviour.ready},
        )

    @app.post("/predict", response_model=PredictionResponse)
    async def predict_endpoint(request: PredictionRequest) -> PredictionResponse:
        if not behaviour.ready:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        return _predict(request, datetime.now(UTC))

    @app.post("/predict/bulk/strict", response_model=BulkPredictionResponse)
    async def predict_bulk_strict_endpoint(request: BulkPredictionRequest) -> BulkPredictionResponse:
        if not behaviour.ready:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        now = datetime.now(UTC)
        predictions = [_predict(r, now) for r in request.requests]
        return BulkPredictionResponse(
            predictions=predictions,
            total_requests=len(request.requests),
            successful_predictions=len(predictions),
            failed_predictions=0,
            processing_time_ms=0.1,
        )

    @app.post("/predict/bulk", response_model=BulkPredictionResponseWithErrors)
    async def predict_bulk_endpoint(request: BulkPredictionRequest) -> BulkPredictionResponseWithErrors:
        behaviour.bulk_requests.append([r.model_dump() for r in request.requests])
        now = datetime.now(UTC)
        predictions: list[PredictionResponse | None] = []
        errors: list[BulkPredictionError] = []
        for index, item in enumerate(request.requests):
            if not behaviour.ready:
                error = f"Batch prediction error: 503: {_NOT_READY}"
            elif index in behaviour.item_errors:
                error = "stand-in: error asked for by the test"
            else:
                predictions.append(_predict(item, now))
                continue
            predictions.append(None)
            errors.append(BulkPredictionError(index=index, error=error, request=item))
        return BulkPredictionResponseWithErrors(
            predictions=predictions,
            errors=errors,
            total_requests=len(request.requests),
            successful_predictions=len(request.requests) - len(errors),
            failed_predictions=len(errors),
            processing_time_ms=0.1,
        )

    @app.get("/healthz", status_code=status.HTTP_200_OK)
    async def health_check() -> dict[str, str]:
        return {"status": "ok", "service": "http-based-quantile-latency-predictor"}

    @app.get("/readyz", status_code=status.HTTP_200_OK)
    async def readiness_check() -> dict[str, Any]:
        if not behaviour.ready:
            raise HTTPException(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, detail="Models are not ready")
        return {"status": "ready", "model_type": MODEL_TYPE, "quantile": QUANTILE}

    return app


# --- the training server ---


@dataclass
class TrainingBehaviour:
    """Switches of a training stand-in. ``metrics`` / ``models_list`` replace the recorded bodies when set."""

    ready: bool = True
    fail: bool = False
    delay_seconds: float = 0.0
    metrics: str | None = None
    models_list: str | None = None
    calls: list[str] = field(default_factory=list)


def recorded_get_bodies(shared: Path) -> dict[str, str]:
    """The bodies of ``training-server-get-endpoints.txt`` by path (sections start with ``== GET <path>``)."""
    bodies: dict[str, str] = {}
    path: str | None = None
    lines: list[str] = []
    text = (shared / "fixtures" / "predictor" / "training-server-get-endpoints.txt").read_text()
    for line in [*text.splitlines(), "== GET"]:
        if line.startswith("== GET"):
            if path is not None:
                bodies[path] = "\n".join(lines).strip()
            path, lines = line.removeprefix("== GET").strip(), []
        else:
            lines.append(line)
    return bodies


def recorded_metrics_page(shared: Path) -> str:
    """The recorded training-server ``/metrics`` page without the capture's header comments.

    The real server writes no comment lines; the three at the top of the fixture are provenance notes.
    """
    text = (shared / "fixtures" / "predictor" / "training-server-metrics-xgboost.txt").read_text()
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def create_training_app(behaviour: TrainingBehaviour, shared: Path, release: asyncio.Event | None = None) -> FastAPI:
    """The training server's health routes with the recorded bodies, driven by ``behaviour``."""
    app = FastAPI(title="stand-in training server")
    _install_switches(app, behaviour, release)
    bodies = recorded_get_bodies(shared)
    page = recorded_metrics_page(shared)

    @app.get("/metrics", status_code=status.HTTP_200_OK)
    async def metrics() -> Response:
        text = behaviour.metrics if behaviour.metrics is not None else page
        return Response(text, media_type="text/plain; version=0.0.4")

    @app.get("/readyz", status_code=status.HTTP_200_OK)
    async def readiness_check() -> Response:
        if not behaviour.ready:
            raise HTTPException(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, detail="Models are not ready.")
        return Response(bodies["/readyz"], media_type="application/json")

    @app.get("/models/list")
    async def list_models() -> Response:
        text = behaviour.models_list if behaviour.models_list is not None else bodies["/models/list"]
        return Response(text, media_type="application/json")

    for path in ("/healthz", "/model/download/info", "/model/ttft/info", "/"):
        app.add_api_route(path, _recorded(bodies[path]), methods=["GET"])
    return app


def _recorded(body: str) -> Callable[[], Awaitable[Response]]:
    async def endpoint() -> Response:
        return Response(body, media_type="application/json")

    return endpoint


def _install_switches(app: FastAPI, behaviour: Any, release: asyncio.Event | None) -> None:
    """Records every call, then applies ``delay_seconds`` and ``fail`` before the route runs."""

    @app.middleware("http")
    async def switches(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        behaviour.calls.append(request.url.path)
        if behaviour.delay_seconds > 0:
            if release is None:
                await asyncio.sleep(behaviour.delay_seconds)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), behaviour.delay_seconds)
        if behaviour.fail:
            return JSONResponse({"detail": "Internal Server Error"}, status_code=500)
        return await call_next(request)


# --- running them ---


class _Server(uvicorn.Server):
    """Tells the starting thread when it listens, and remembers its loop for a thread-safe stop."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)
        self.listening.set()


class RunningServer:
    """A FastAPI app served by uvicorn on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app_factory: Callable[[asyncio.Event], FastAPI]) -> None:
        self._release = asyncio.Event()
        self._app = app_factory(self._release)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self._app, log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
        self._server = _Server(config)
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._sock.listen(128)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name=f"stand-in:{self.port}", daemon=True
        )
        self._thread.start()
        if not self._server.listening.wait(10):
            self.stop()
            raise RuntimeError(f"stand-in server on port {self.port} did not start")
        return self

    def stop(self) -> None:
        """Releases delayed answers, stops the server and joins its thread; safe twice and without start."""
        loop = self._server.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._release.set)
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)
            if self._thread.is_alive():
                raise RuntimeError(f"stand-in server on port {self.port} did not stop")
            self._thread = None
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PredictionServer(RunningServer):
    """A prediction stand-in; change ``behaviour`` to switch what it does."""

    def __init__(self, behaviour: PredictionBehaviour | None = None) -> None:
        self.behaviour = behaviour or PredictionBehaviour()
        super().__init__(lambda release: create_prediction_app(self.behaviour, release))


class TrainingServer(RunningServer):
    """A training stand-in serving the recorded bodies from ``shared`` (the folder holding ``fixtures/``)."""

    def __init__(self, shared: Path, behaviour: TrainingBehaviour | None = None) -> None:
        self.behaviour = behaviour or TrainingBehaviour()
        super().__init__(lambda release: create_training_app(self.behaviour, shared, release))
