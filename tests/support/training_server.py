"""A stand-in for the latency predictor's training server: the recorded health bodies, on loopback.

It serves the recorded ``/metrics`` page (``training-server-metrics-xgboost.txt``) and ``/models/list``,
``/readyz`` and the other GET bodies of ``training-server-get-endpoints.txt``, read from the shared
fixtures folder given to it. Switches (:class:`TrainingBehaviour`): ``ready=False`` makes ``/readyz``
answer 503 ``{"detail": "Models are not ready."}`` as the real server does before it has models;
``fail`` and ``delay_seconds`` as for the prediction stand-in; ``metrics`` and ``models_list`` replace
the recorded bodies. ``llmd="quantile"`` or ``"mean"`` serves the capture of the llm-d latency predictor
run in that objective instead (``fixtures/predictor/llm-d/<objective>/training-server-metrics.txt`` and
``training-server-get-endpoints.txt``, training/training_server.py at b5d19f1).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, HTTPException, Response, status

from tests.support.serving import RunningServer, install_switches


@dataclass
class TrainingBehaviour:
    """Switches of a training stand-in. ``metrics`` / ``models_list`` replace the recorded bodies when set."""

    ready: bool = True
    fail: bool = False
    delay_seconds: float = 0.0
    metrics: str | None = None
    models_list: str | None = None
    llmd: str | None = None  # "quantile" or "mean": serve the llm-d capture of that objective
    calls: list[str] = field(default_factory=list)


def _folder(shared: Path, llmd: str | None) -> Path:
    base = shared / "fixtures" / "predictor"
    return base if llmd is None else base / "llm-d" / llmd


def recorded_get_bodies(shared: Path, llmd: str | None = None) -> dict[str, str]:
    """The bodies of ``training-server-get-endpoints.txt`` by path (sections start with ``== GET <path>``;
    the llm-d captures add `` -> <status> <content-type>``)."""
    bodies: dict[str, str] = {}
    path: str | None = None
    lines: list[str] = []
    text = (_folder(shared, llmd) / "training-server-get-endpoints.txt").read_text()
    for line in [*text.splitlines(), "== GET"]:
        if line.startswith("== GET"):
            if path is not None:
                bodies[path] = "\n".join(lines).strip()
            path, lines = line.removeprefix("== GET").split(" -> ")[0].strip(), []
        else:
            lines.append(line)
    return bodies


def recorded_metrics_page(shared: Path, llmd: str | None = None) -> str:
    """The recorded training-server ``/metrics`` page without the capture's header comments.

    The real server writes no comment lines; the three at the top of the late-2025 fixture are provenance
    notes (the llm-d captures have none).
    """
    name = "training-server-metrics-xgboost.txt" if llmd is None else "training-server-metrics.txt"
    text = (_folder(shared, llmd) / name).read_text()
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def without_samples(page: str) -> str:
    """``page`` with every ``training_samples_count`` line at 0: a training server restarted, its samples lost
    (they live in memory, training/training_server.py:1628-1640 at b5d19f1)."""
    emptied, count = re.subn(r"^(training_samples_count\{[^}]*\}) \d+$", r"\1 0", page, flags=re.M)
    assert count, "the page has no training_samples_count line"
    return emptied


def create_training_app(behaviour: TrainingBehaviour, shared: Path, release: asyncio.Event | None = None) -> FastAPI:
    """The training server's health routes with the recorded bodies, driven by ``behaviour``."""
    app = FastAPI(title="stand-in training server")
    install_switches(app, behaviour, release)
    bodies = recorded_get_bodies(shared, behaviour.llmd)
    page = recorded_metrics_page(shared, behaviour.llmd)

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


class TrainingServer(RunningServer):
    """A training stand-in serving the recorded bodies from ``shared`` (the folder holding ``fixtures/``)."""

    def __init__(self, shared: Path, behaviour: TrainingBehaviour | None = None) -> None:
        self.behaviour = behaviour or TrainingBehaviour()
        super().__init__(lambda release: create_training_app(self.behaviour, shared, release))
