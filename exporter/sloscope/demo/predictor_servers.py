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
``log_config=None``, signals left to the caller). With ``record``, every POST body a prediction server receives is
appended to that file as a JSON line ``{"server", "path", "user_agent", "body"}``, the body as sent (parsed JSON,
its key order kept): what each caller really asked, for a body-level comparison of callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from sloscope import conventions as c
from sloscope.demo.body_recorder import BodyRecorder, OnBody
from sloscope.demo.prediction_server import PredictionState, create_prediction_app
from sloscope.demo.quantile_model import (
    OnlineQuantileModel,
)
from sloscope.demo.training_server import create_training_app

__all__ = ["PredictorFleet"]

log = logging.getLogger(__name__)


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


async def _serve(app: FastAPI, host: str, name: str, port: int = 0) -> _Running:
    """Serves ``app`` on ``host`` at ``port`` (0: one the kernel picks); returns once it accepts connections."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a fleet restarted on its ports
    sock.bind((host, port))
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

    Without ``model``, a fresh :class:`OnlineQuantileModel` at quantile 0.9 whose rng is seeded with ``seed``, of
    ``objective`` (quantile if None), starting from default models if ``default_models`` (as the real training
    server does: ready at once). With ``objective`` set the servers answer as the llm-d predictor's, which
    announce it (``objective_type`` on predictions, /status and the training /metrics page); without it, as the
    late-2025 ones, which do not.
    Background tasks retrain every ``retrain_seconds`` (when entries arrived) and sync every
    ``sync_seconds``; :meth:`retrain_now` and :meth:`sync_now` do the same on demand.
    """

    def __init__(
        self,
        model: OnlineQuantileModel | None = None,
        *,
        seed: int = 0,
        objective: str | None = None,
        default_models: bool = False,
        retrain_seconds: float = 5.0,
        sync_seconds: float = 2.0,
        scale: float = 1.0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.time,
        record: Path | None = None,
    ) -> None:
        if retrain_seconds <= 0 or sync_seconds <= 0:
            raise ValueError("retrain_seconds and sync_seconds must be > 0")
        self.model = (
            model
            if model is not None
            else OnlineQuantileModel(
                0.9, random.Random(seed), objective=objective or c.OBJECTIVE_QUANTILE, default_models=default_models
            )
        )
        self._announce = objective is not None
        self.training_url = ""
        self.prediction_urls: list[str] = []
        self._retrain_seconds = retrain_seconds
        self._sync_seconds = sync_seconds
        self._scale = scale  # every prediction multiplied by it (1: as the model predicts)
        self._record = record
        self._host = host
        self._clock = clock
        self._states: list[PredictionState] = []
        self._running: list[_Running] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self, n_prediction_servers: int = 2, ports: list[int] | None = None) -> None:
        """Starts the training server, then the prediction servers (each syncs once), then the loops. ``ports``:
        the training server's, then each prediction server's (None: the kernel picks), to come back where a
        stopped fleet was."""
        if self._running:
            raise RuntimeError("the predictor fleet is already started")
        if n_prediction_servers < 1:
            raise ValueError("a predictor fleet needs at least one prediction server")
        if ports is not None and len(ports) != 1 + n_prediction_servers:
            raise ValueError(f"{1 + n_prediction_servers} ports are needed: the training server's, then each other's")
        port_of = ports or [0] * (1 + n_prediction_servers)
        self._stopping.clear()
        try:
            app = create_training_app(self.model, self._clock, announce_objective=self._announce)
            training = await _serve(app, self._host, "training server", port_of[0])
            self._running.append(training)
            self.training_url = training.url
            for index in range(n_prediction_servers):
                objective = self.model.objective if self._announce else None
                state = PredictionState(training.url, self.model.quantile, objective=objective, scale=self._scale)
                state.sync(self.model, self._now())
                app = create_prediction_app(state, self._clock)
                if self._record is not None:
                    app.add_middleware(BodyRecorder, on_body=_appender(self._record, index))
                running = await _serve(app, self._host, f"prediction server {index}", port_of[1 + index])
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


def _appender(path: Path, server: int) -> OnBody:
    """Appends each body to ``path`` as one JSON line (a line is written whole: appends never interleave)."""

    def append(scope: MutableMapping[str, Any], body: bytes) -> None:
        headers = dict(scope.get("headers") or [])
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = body.decode(errors="replace")
        line = {
            "server": server,
            "path": scope["path"],
            "user_agent": headers.get(b"user-agent", b"").decode(errors="replace"),
            "body": parsed,
        }
        with path.open("a") as out:
            out.write(json.dumps(line) + "\n")

    return append
