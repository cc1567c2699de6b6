"""The demo's latency predictor on loopback: one training server and N prediction servers, over HTTP.

They answer the API of the latency predictor's ``training_server.py`` and ``prediction_server.py``
(gateway-api-inference-extension ``latencypredictor/``, the commit ``fixtures/predictor/`` was recorded
from): the same routes, request models with the same pydantic constraints (so a bad request gets FastAPI's
422 with the body of ``prediction-server-422-validation-error.json``), the same response fields, the same
not-ready answers, and a training ``/metrics`` page in the same untyped line formats. The model behind
them is :class:`OnlineQuantileModel`, reported as ``model_type`` ``online-linear-quantile``.

- Training server: ``POST /add_training_data_bulk`` buffers entries (202); a background task retrains
  every ``retrain_seconds`` when entries arrived since the last fit (the real one retrains every
  ``LATENCY_RETRAINING_INTERVAL_SEC`` whatever arrived), in a worker thread so the demo's event loop
  keeps running. ``/readyz`` is 503 ``{"detail": "Models are not ready."}`` until both models exist.
  ``/models/list`` and ``/model/{name}/info`` give each model's last fit as ``last_modified`` (the real
  server gives the mtime of the model file); ``size_bytes`` is the size of the model's coefficients as
  JSON, and the scalers are reported absent because the standardization lives inside each model.
  ``/model/download/info`` has the real server's shape for its linear model type (coefficients on
  ``/metrics``), as there are no trees to download.
- Prediction servers: every ``sync_seconds`` each takes the training model's :meth:`snapshot` if a
  model was fitted since its last one (the real server polls ``/model/{name}/info`` and downloads the
  newer file; here the copy is in-process, as both sides live in the demo) and serves that copy, not the
  live model, until the next sync. ``last_model_load`` is when it last loaded (at start, as the real one
  loads at startup, and on every newer snapshot). Not ready, as the real one, before a snapshot with both
  models: ``/predict`` and ``/predict/bulk/strict`` answer 503 ``{"detail": "Models not ready"}``,
  ``/predict/bulk`` 200 with every prediction null and one error per item.

Each app is served by uvicorn in the running event loop on a socket bound to port 0 (``lifespan="off"``,
``log_config=None``, signals left to the caller).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import statistics
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Response, status

from sloscope import conventions as c
from sloscope.demo.quantile_model import (
    MODEL_TYPE,
    PREFIX_BUCKETS,
    TPOT_FEATURES,
    TTFT_FEATURES,
    ModelMetrics,
    ModelSnapshot,
    OnlineQuantileModel,
    Rings,
    TrainingEntry,
    prefill_score_bucket,
)
from sloscope.predictor import api
from sloscope.predictor.features import Features

__all__ = [
    "PredictionState",
    "PredictorFleet",
    "create_prediction_app",
    "create_training_app",
    "training_metrics_page",
]

log = logging.getLogger(__name__)

_NOT_READY = "Models not ready"
_MODEL_NAMES = (c.SIGNAL_TTFT, c.SIGNAL_TPOT, "ttft_scaler", "tpot_scaler")
_SERVICE = "http-based-quantile-latency-predictor"
_TEXT = "text/plain; version=0.0.4"


# --- the training server ---


def create_training_app(model: OnlineQuantileModel, clock: Callable[[], float] = time.time) -> FastAPI:
    """The training server's routes over ``model`` (retraining is the caller's: see :class:`PredictorFleet`)."""
    app = FastAPI(title="sloscope demo: latency predictor training server")
    quantile = model.quantile

    @app.post("/add_training_data_bulk", status_code=status.HTTP_202_ACCEPTED)
    async def add_training_data_bulk(batch: api.BulkTrainingRequest) -> dict[str, str]:
        model.add([TrainingEntry(**entry.model_dump()) for entry in batch.entries])
        return {"message": f"Accepted {len(batch.entries)} training samples."}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(training_metrics_page(model.metrics()), media_type=_TEXT)

    @app.get("/readyz")
    async def readiness_check() -> dict[str, str]:
        if not model.ready:
            raise HTTPException(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, detail="Models are not ready.")
        return {"status": "ready"}

    @app.get("/healthz")
    async def health_check() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/", include_in_schema=False)
    async def root() -> dict[str, Any]:
        return {
            "message": "Latency Predictor is running.",
            "model_type": MODEL_TYPE,
            "quantile": quantile,
            "description": f"Predicting {quantile:.0%} quantile for TTFT and TPOT latencies",
        }

    @app.get("/models/list")
    async def list_models() -> dict[str, Any]:
        files = _model_files(model.snapshot())
        return {
            "models": {name: _file_entry(files.get(name)) for name in _MODEL_NAMES},
            "model_type": MODEL_TYPE,
            "quantile": quantile,
            "server_time": _iso(clock()),
            "evaluation_metrics": {
                "quantile_loss": "Lower is better",
                "coverage_percent": f"Target: {quantile * 100:.1f}%",
                "violation_rate_percent": f"Target: {(1 - quantile) * 100:.1f}%",
            },
        }

    @app.get("/model/download/info")
    async def model_download_info() -> dict[str, Any]:
        snapshot = model.snapshot()
        ttft, tpot = snapshot.ttft is not None, snapshot.tpot is not None
        return {
            "model_type": MODEL_TYPE,
            "quantile": quantile,
            "available_endpoints": {"coefficients": "/metrics"},
            "coefficients_info": {
                "ttft_coefficients_available": ttft,
                "tpot_coefficients_available": tpot,
                "description": "Descaled coefficients available in Prometheus metrics endpoint",
            },
            "model_status": {
                "ttft_model_ready": ttft,
                "tpot_model_ready": tpot,
                "ttft_coefficients_ready": ttft,
                "tpot_coefficients_ready": tpot,
            },
            "evaluation_info": {
                "quantile_loss": "Pinball loss for quantile regression evaluation",
                "coverage_percent": f"Percentage of actual values below predicted {quantile:.0%} quantile "
                f"(target: {quantile * 100:.1f}%)",
                "violation_rate_percent": f"Percentage of actual values above predicted {quantile:.0%} quantile "
                f"(target: {(1 - quantile) * 100:.1f}%)",
            },
        }

    @app.get("/model/{model_name}/info")
    async def model_info(model_name: str) -> dict[str, Any]:
        if model_name not in _MODEL_NAMES:
            raise HTTPException(status_code=404, detail=f"Unknown model: {model_name}")
        file = _model_files(model.snapshot()).get(model_name)
        if file is None:
            raise HTTPException(status_code=404, detail=f"Model {model_name} not found")
        return {
            "model_name": model_name,
            "path": f"memory:{model_name}",
            **_file_entry(file),
            "model_type": MODEL_TYPE,
            "quantile": quantile if model_name in c.SIGNALS else None,
        }

    return app


def _model_files(snapshot: ModelSnapshot) -> dict[str, tuple[int, float]]:
    """(size in bytes of the coefficients as JSON, last fit) of each existing model."""
    files: dict[str, tuple[int, float]] = {}
    for signal, regressor in ((c.SIGNAL_TTFT, snapshot.ttft), (c.SIGNAL_TPOT, snapshot.tpot)):
        if regressor is not None:
            files[signal] = (len(json.dumps(regressor.coefficients())), snapshot.last_modified[signal])
    return files


def _file_entry(file: tuple[int, float] | None) -> dict[str, Any]:
    if file is None:
        return {"exists": False, "size_bytes": 0, "last_modified": None}
    return {"exists": True, "size_bytes": file[0], "last_modified": _iso(file[1])}


def _iso(seconds: float) -> str:
    """ISO 8601 with the UTC offset, as the real server writes ``last_modified`` and ``server_time``."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


# --- the training server's /metrics page ---

_QUEUE_BUCKETS = 5  # waiting requests: 0, 1-2, 3-5, 6-10, 11+
_CACHE_BUCKETS = 20  # KV-cache utilization in steps of 5%


def training_metrics_page(metrics: ModelMetrics) -> str:
    """The training server's ``/metrics``: the real page's series and line formats, no HELP or TYPE lines.

    As the real server's linear model type: ``<signal>_intercept{}`` and ``<signal>_coef{feature=...}`` in
    raw feature units (placeholders 0.0 before a model exists); sample counts of the training buffer by
    (queue, cache, prefix) bucket; prefix-score statistics of the TTFT buffer; the rings of the last five
    evaluations with ``idx`` 0 the oldest; the targets.
    """
    snapshot, q = metrics.snapshot, metrics.snapshot.quantile
    lines = [f'model_type{{type="{MODEL_TYPE}"}} 1', f"model_quantile{{}} {q}"]
    for signal, regressor, names in (
        (c.SIGNAL_TTFT, snapshot.ttft, TTFT_FEATURES),
        (c.SIGNAL_TPOT, snapshot.tpot, TPOT_FEATURES),
    ):
        if regressor is None:
            lines.append(f"{signal}_intercept{{}} 0.0")
            lines.extend(f'{signal}_coef{{feature="{name}"}} 0.0' for name in names)
        else:
            coefficients = regressor.coefficients()
            lines.append(f"{signal}_intercept{{}} {coefficients['intercept']:.6f}")
            lines.extend(f'{signal}_coef{{feature="{name}"}} {coefficients[name]:.6f}' for name in names)
    counts = {signal: _bucket_counts(metrics.training[signal]) for signal in c.SIGNALS}
    for signal in c.SIGNALS:
        lines.extend(
            f'training_samples_count{{model="{signal}",queue_bucket="{qb}",cache_bucket="{cb}",prefix_bucket="{pb}"}} '
            f"{counts[signal].get((qb, cb, pb), 0)}"
            for qb in range(_QUEUE_BUCKETS)
            for cb in range(_CACHE_BUCKETS)
            for pb in range(PREFIX_BUCKETS)
        )
    for axis, size, label in (
        (0, _QUEUE_BUCKETS, "queue"),
        (1, _CACHE_BUCKETS, "cache"),
        (2, PREFIX_BUCKETS, "prefix"),
    ):
        for bucket in range(size):
            extra = f',range="{bucket / size:.2f}-{(bucket + 1) / size:.2f}"' if label == "prefix" else ""
            for signal in c.SIGNALS:
                total = sum(n for key, n in counts[signal].items() if key[axis] == bucket)
                lines.append(
                    f'training_samples_{label}_total{{model="{signal}",{label}_bucket="{bucket}"{extra}}} {total}'
                )
    lines.extend(_prefix_lines(metrics.training[c.SIGNAL_TTFT]))
    for position, family in enumerate(Rings._fields):  # quantile_loss, coverage_percent, violation_rate_percent
        for signal in c.SIGNALS:
            ring = metrics.rings[signal][position]
            lines.extend(f'{signal}_{family}{{idx="{i}"}} {value:.6f}' for i, value in enumerate(ring))
    lines.append(f"target_coverage_percent{{}} {q * 100:.1f}")
    lines.append(f"target_violation_rate_percent{{}} {(1 - q) * 100:.1f}")
    return "\n".join(lines) + "\n"


def _bucket_counts(entries: Sequence[TrainingEntry]) -> dict[tuple[int, int, int], int]:
    """Entries per (queue, cache, prefix) bucket, bucketed as the real server files its samples."""
    counts: dict[tuple[int, int, int], int] = {}
    for entry in entries:
        waiting = entry.num_request_waiting
        queue = 0 if waiting == 0 else 1 if waiting <= 2 else 2 if waiting <= 5 else 3 if waiting <= 10 else 4
        cache = min(int(min(max(entry.kv_cache_percentage, 0.0), 1.0) * _CACHE_BUCKETS), _CACHE_BUCKETS - 1)
        key = (queue, cache, prefill_score_bucket(entry.prefix_cache_score))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _prefix_lines(entries: Sequence[TrainingEntry]) -> list[str]:
    """Prefix-score statistics and TTFT by prefix quarter (the last quarter includes 1.0), if any entries."""
    if not entries:
        return []
    scores = [e.prefix_cache_score for e in entries]
    lines = [
        f"prefix_score_mean{{}} {statistics.fmean(scores):.4f}",
        f"prefix_score_std{{}} {statistics.pstdev(scores):.4f}",
        f"prefix_score_min{{}} {min(scores):.4f}",
        f"prefix_score_max{{}} {max(scores):.4f}",
    ]
    for bucket in range(PREFIX_BUCKETS):
        low, high = bucket / PREFIX_BUCKETS, (bucket + 1) / PREFIX_BUCKETS
        last = bucket == PREFIX_BUCKETS - 1
        ttfts = [
            e.actual_ttft_ms
            for e in entries
            if low <= e.prefix_cache_score < high or (last and e.prefix_cache_score == high)
        ]
        if ttfts:
            labels = f'prefix_bucket="{bucket}",range="{low:.2f}-{high:.2f}"'
            lines.append(f"avg_ttft_by_prefix{{{labels}}} {statistics.fmean(ttfts):.2f}")
            lines.append(f"median_ttft_by_prefix{{{labels}}} {statistics.median(ttfts):.2f}")
    return lines


# --- the prediction servers ---


@dataclass
class PredictionState:
    """What one prediction server serves: the snapshot it last loaded, and when."""

    training_server_url: str
    quantile: float
    snapshot: ModelSnapshot | None = None
    last_load: datetime | None = None

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

    def ready() -> ModelSnapshot | None:
        return state.snapshot if state.snapshot is not None and state.snapshot.ready else None

    def answer(snapshot: ModelSnapshot, request: api.PredictionRequest, now: datetime) -> api.PredictionResponse:
        prediction = snapshot.predict(Features(**request.model_dump()))
        assert prediction is not None  # the snapshot is ready
        return api.PredictionResponse(
            ttft_ms=prediction.ttft_ms,
            tpot_ms=prediction.tpot_ms,
            predicted_at=now,
            model_type=MODEL_TYPE,
            quantile=prediction.quantile,
            last_model_load=state.last_load,
        )

    def now() -> datetime:
        return datetime.fromtimestamp(clock(), UTC)

    @app.get("/status", response_model=api.StatusResponse)
    async def status_endpoint() -> api.StatusResponse:
        snapshot = state.snapshot
        return api.StatusResponse(
            is_ready=ready() is not None,
            model_type=MODEL_TYPE,
            quantile=state.quantile,
            last_model_load=state.last_load,
            training_server_url=state.training_server_url,
            models_exist={
                "ttft_model": snapshot is not None and snapshot.ttft is not None,
                "tpot_model": snapshot is not None and snapshot.tpot is not None,
            },
        )

    @app.post("/predict", response_model=api.PredictionResponse)
    async def predict_endpoint(request: api.PredictionRequest) -> api.PredictionResponse:
        snapshot = ready()
        if snapshot is None:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        return answer(snapshot, request, now())

    @app.post("/predict/bulk/strict", response_model=api.BulkPredictionResponse)
    async def predict_bulk_strict_endpoint(request: api.BulkPredictionRequest) -> api.BulkPredictionResponse:
        started = time.perf_counter()
        snapshot = ready()
        if snapshot is None:
            raise HTTPException(status_code=503, detail=_NOT_READY)
        moment = now()
        predictions = [answer(snapshot, item, moment) for item in request.requests]
        return api.BulkPredictionResponse(
            predictions=predictions,
            total_requests=len(predictions),
            successful_predictions=len(predictions),
            failed_predictions=0,
            processing_time_ms=(time.perf_counter() - started) * 1000,
        )

    @app.post("/predict/bulk", response_model=api.BulkPredictionResponseWithErrors)
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
        return api.BulkPredictionResponseWithErrors(
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


# --- serving and the fleet ---


class _Server(uvicorn.Server):
    """uvicorn in the caller's event loop: signals stay the caller's, and ``listening`` says it accepts."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@dataclass
class _Running:
    url: str
    server: _Server
    task: asyncio.Task[None]
    sock: socket.socket

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(Exception):  # a server that failed has nothing left to stop
            await self.task
        self.sock.close()


async def _serve(app: FastAPI, host: str, name: str) -> _Running:
    """Serves ``app`` on ``host`` port 0; returns once it accepts connections."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    config = uvicorn.Config(
        app, host=host, port=0, lifespan="off", log_config=None, access_log=False, timeout_graceful_shutdown=2
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name=f"demo {name}")
    listening = asyncio.create_task(server.listening.wait())
    await asyncio.wait({task, listening}, return_when=asyncio.FIRST_COMPLETED)
    if not server.listening.is_set():
        listening.cancel()
        sock.close()
        raise RuntimeError(f"demo {name} did not start") from task.exception()
    listening.cancel()
    url = f"http://{host}:{sock.getsockname()[1]}"
    log.info("demo %s listening on %s", name, url)
    return _Running(url, server, task, sock)


class PredictorFleet:
    """A training server over ``model`` and prediction servers syncing from it, on loopback.

    Without ``model``, a fresh :class:`OnlineQuantileModel` at quantile 0.9 whose rng is seeded with ``seed``.
    Background tasks retrain every ``retrain_seconds`` (when entries arrived) and sync every
    ``sync_seconds``; :meth:`retrain_now` and :meth:`sync_now` do the same on demand.
    """

    def __init__(
        self,
        model: OnlineQuantileModel | None = None,
        *,
        seed: int = 0,
        retrain_seconds: float = 5.0,
        sync_seconds: float = 2.0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if retrain_seconds <= 0 or sync_seconds <= 0:
            raise ValueError("retrain_seconds and sync_seconds must be > 0")
        self.model = model if model is not None else OnlineQuantileModel(0.9, random.Random(seed))
        self.training_url = ""
        self.prediction_urls: list[str] = []
        self._retrain_seconds = retrain_seconds
        self._sync_seconds = sync_seconds
        self._host = host
        self._clock = clock
        self._states: list[PredictionState] = []
        self._running: list[_Running] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self, n_prediction_servers: int = 2) -> None:
        """Starts the training server, then the prediction servers (each syncs once), then the loops."""
        if self._running:
            raise RuntimeError("the predictor fleet is already started")
        if n_prediction_servers < 1:
            raise ValueError("a predictor fleet needs at least one prediction server")
        self._stopping.clear()
        try:
            training = await _serve(create_training_app(self.model, self._clock), self._host, "training server")
            self._running.append(training)
            self.training_url = training.url
            for index in range(n_prediction_servers):
                state = PredictionState(training.url, self.model.quantile)
                state.sync(self.model, self._now())
                app = create_prediction_app(state, self._clock)
                running = await _serve(app, self._host, f"prediction server {index}")
                self._running.append(running)
                self._states.append(state)
                self.prediction_urls.append(running.url)
        except BaseException:
            await self.stop()
            raise
        self._tasks = [
            asyncio.create_task(self._every(self._retrain_seconds, self._retrain_if_new), name="demo retrain"),
            asyncio.create_task(self._every(self._sync_seconds, self.sync_now), name="demo model sync"),
        ]

    async def retrain_now(self) -> bool:
        """One retrain in a worker thread; True if both models exist afterwards."""
        return await asyncio.to_thread(self.model.retrain)

    async def sync_now(self) -> None:
        """Every prediction server takes the training model's snapshot if it has a newer fit."""
        now = self._now()
        for state in self._states:
            state.sync(self.model, now)

    async def stop(self) -> None:
        """Stops the loops (a retrain under way finishes first), then the servers. Safe twice, and unstarted."""
        self._stopping.set()
        tasks, self._tasks = self._tasks, []
        await asyncio.gather(*tasks, return_exceptions=True)
        running, self._running = self._running, []
        await asyncio.gather(*(each.stop() for each in running))
        self._states, self.prediction_urls, self.training_url = [], [], ""

    async def _retrain_if_new(self) -> None:
        if self.model.pending:
            await self.retrain_now()

    async def _every(self, seconds: float, action: Callable[[], Awaitable[None]]) -> None:
        """Runs ``action`` every ``seconds`` until stopped; an error is logged and the loop goes on."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), seconds)
            if self._stopping.is_set():
                return
            try:
                await action()
            except Exception:
                log.exception("demo predictor: background step failed")

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)
