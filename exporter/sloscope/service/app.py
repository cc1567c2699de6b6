"""The two HTTP applications: OTLP/HTTP ingest (:4318) and metrics and health (:9464).

Factories only: importing this module starts nothing. The pipeline is built and owned by
:mod:`sloscope.service.server`, which serves both apps and the gRPC receiver on one event loop.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import make_asgi_app
from starlette.routing import Route

from sloscope import __version__
from sloscope.pipeline import Pipeline
from sloscope.receivers.otlp_http import otlp_router
from sloscope.service.http_metrics import HttpMetrics
from sloscope.service.tracing import instrument


class _Asgi:
    """Marks an ASGI callable as an app for Starlette's Route (a plain function would be taken for an endpoint).

    A Route at exactly ``/metrics`` (not a Mount) avoids the redirect to ``/metrics/`` that
    scrapers would otherwise follow on every scrape.
    """

    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app(scope, receive, send)


def create_otlp_app(pipeline: Pipeline, http_metrics: HttpMetrics, tracer: TracerProvider | None) -> Any:
    app = FastAPI(title="sloscope OTLP/HTTP receiver", version=__version__, docs_url=None, redoc_url=None)
    app.include_router(otlp_router(pipeline.intake, pipeline.settings.limits.max_request_bytes))
    instrument(app, tracer)
    return http_metrics.middleware(app)


def create_metrics_app(
    pipeline: Pipeline, http_metrics: HttpMetrics, tracer: TracerProvider | None, is_ready: Any
) -> Any:
    app = FastAPI(title="sloscope", version=__version__)
    app.router.routes.append(Route("/metrics", _Asgi(make_asgi_app(pipeline.registry)), methods=["GET"]))

    @app.get("/healthz", response_class=PlainTextResponse, summary="Liveness: the process serves HTTP")
    async def healthz() -> str:
        return "ok\n"

    @app.get("/readyz", summary="Readiness: every listener is up and the pipeline worker runs")
    async def readyz() -> JSONResponse:
        checks = {"listeners": bool(is_ready()), "pipeline": pipeline.running, "accepting": not pipeline.queue.closed}
        ready = all(checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    instrument(app, tracer)
    return http_metrics.middleware(app)
