"""A stand-in for the latency predictor's training server: the recorded health bodies, on loopback.

It serves the recorded ``/metrics`` page (``training-server-metrics-xgboost.txt``) and ``/models/list``,
``/readyz`` and the other GET bodies of ``training-server-get-endpoints.txt``, read from the shared
fixtures folder given to it. Switches (:class:`TrainingBehaviour`): ``ready=False`` makes ``/readyz``
answer 503 ``{"detail": "Models are not ready."}`` as the real server does before it has models;
``fail`` and ``delay_seconds`` as for the prediction stand-in; ``metrics`` and ``models_list`` replace
the recorded bodies.
"""

from __future__ import annotations

import asyncio
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
    install_switches(app, behaviour, release)
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


class TrainingServer(RunningServer):
    """A training stand-in serving the recorded bodies from ``shared`` (the folder holding ``fixtures/``)."""

    def __init__(self, shared: Path, behaviour: TrainingBehaviour | None = None) -> None:
        self.behaviour = behaviour or TrainingBehaviour()
        super().__init__(lambda release: create_training_app(self.behaviour, shared, release))
