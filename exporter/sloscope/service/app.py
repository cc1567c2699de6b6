"""The two HTTP applications: OTLP/HTTP ingest (:4318) and metrics and health (:9464).

Factories only: importing this module starts nothing. The pipeline is built and owned by
:mod:`sloscope.service.server`, which serves both apps and the gRPC receiver on one event loop.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client.exposition import choose_encoder
from starlette.routing import Route

from sloscope import __version__
from sloscope.listeners.http_metrics import HttpMetrics
from sloscope.listeners.tracing import instrument
from sloscope.pipeline import Pipeline
from sloscope.receivers.otlp_http import OtlpHttpReceiver, otlp_route

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider


def _unprotected(app: Any) -> Any:
    return app


def create_otlp_app(
    pipeline: Pipeline,
    http_metrics: HttpMetrics,
    tracer: TracerProvider | None,
    *,
    protect: Callable[[Any], Any] = _unprotected,
) -> Any:
    """``protect`` wraps the app with the listener's credentials check (its 401s are still counted).

    Without self-tracing, an export goes straight to the receiver, past FastAPI (which still answers every
    other request: 404, 405); with it, through FastAPI, whose instrumentation makes the server span.
    """
    app = FastAPI(title="sloscope OTLP/HTTP receiver", version=__version__, docs_url=None, redoc_url=None)
    settings = pipeline.settings
    receiver = OtlpHttpReceiver(
        pipeline.intake, settings.limits.max_request_bytes, settings.listeners.body_timeout_seconds
    )
    route = otlp_route(receiver)
    app.router.routes.append(route)
    if tracer is not None:
        instrument(app, tracer)
        return http_metrics.middleware(protect(app))
    return http_metrics.middleware(protect(_straight_to(route, app)))


def _straight_to(route: Route, app: Any) -> Any:
    """POST to ``route``'s path goes to its ASGI app directly, anything else to ``app``."""
    receiver, path = route.app, route.path

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == path:
            scope["route"] = route  # as the router sets it: the HTTP metrics' handler label
            await receiver(scope, receive, send)
        else:
            await app(scope, receive, send)

    return asgi


def create_metrics_app(
    pipeline: Pipeline,
    http_metrics: HttpMetrics,
    tracer: TracerProvider | None,
    *,
    is_ready: Callable[[], bool],
    is_drained: Callable[[], bool] = lambda: False,
    on_final_scrape: Callable[[], None] = lambda: None,
    sinks: tuple[str, ...] = (),
    sink_problems: Callable[[], dict[str, str]] = dict,
    protect: Callable[[Any], Any] = _unprotected,
) -> Any:
    app = FastAPI(title="sloscope", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    registry = pipeline.registry

    @app.get("/metrics", summary="Prometheus exposition; OpenMetrics (with exemplars) when the scraper asks")
    async def metrics(request: Request) -> Response:
        final = is_drained()  # decided before rendering: only a scrape that starts after the drain is final
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        body = await asyncio.to_thread(encoder, registry)  # rendering is CPU work: keep the loop for ingest
        headers = {}
        if "gzip" in request.headers.get("accept-encoding", ""):
            body = gzip.compress(body, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        if final:
            on_final_scrape()
        return Response(body, media_type=content_type, headers=headers)

    @app.get("/healthz", response_class=PlainTextResponse, summary="Liveness: the process serves HTTP")
    async def healthz() -> str:
        return "ok\n"

    @app.get("/readyz", summary="Readiness: listeners up, pipeline worker running, record sinks writing")
    async def readyz() -> JSONResponse:
        checks = {"listeners": bool(is_ready()), "pipeline": pipeline.running, "accepting": not pipeline.queue.closed}
        reasons = sink_problems()  # one check per configured sink: false once it has failed beyond its grace
        checks.update({sink: sink not in reasons for sink in sinks})
        ready = all(checks.values())
        body = {"ready": ready, "checks": checks, "reasons": reasons}
        return JSONResponse(body, status_code=200 if ready else 503)

    instrument(app, tracer)
    return http_metrics.middleware(protect(app))
