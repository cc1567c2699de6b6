"""Tracing of sloscope's own HTTP API with opentelemetry-instrumentation-fastapi.

A private TracerProvider (never the global one): sloscope must not pick up, or export into
itself, spans of whatever else runs in the process. Without an endpoint, spans are created
(so the cost is real and measured by ``make bench``) but kept in-process. The SDK and the FastAPI
instrumentation are imported only when self-tracing is on: off, they cost ``serve`` 2 MiB of
resident memory for nothing (docs/performance.md).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.http import sanitize_method

from sloscope import __version__
from sloscope.config import SelfTracing

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import TracerProvider

_EXCLUDED = "healthz,readyz,metrics"  # probes and scrapes would drown the interesting spans


def tracer_provider(config: SelfTracing) -> TracerProvider | None:
    if not config.enabled:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "sloscope", "service.version": __version__}))
    if config.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.otlp_endpoint, insecure=True)))
    return provider


def instrument(app: FastAPI, provider: TracerProvider | None) -> None:
    if provider is not None:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        # One server span per request; the per-ASGI-message "receive"/"send" child spans would add
        # several spans per OTLP export (a large body arrives in many chunks) and say nothing useful.
        FastAPIInstrumentor.instrument_app(
            app, tracer_provider=provider, excluded_urls=_EXCLUDED, exclude_spans=["receive", "send"]
        )


class ServerSpans:
    """Server spans of the requests the native OTLP/HTTP front serves, where FastAPI's instrumentation never runs:
    named and attributed as that instrumentation names and attributes its own (its default HTTP conventions), so a
    trace backend shows the two servers' requests alike.

    Made once the answer is known, from the request's duration, and without the caller's context: exporters send
    their exports without one (an exporter's own export is never traced), so a root span is what either server
    makes of them. Requests refused before routing (a missing credential, a connection over the cap) get none, as
    on the uvicorn listener, whose guard answers them before FastAPI.
    """

    def __init__(self, provider: TracerProvider, *, scheme: str, port: int) -> None:
        self._tracer = provider.get_tracer("sloscope.receivers.otlp_http_native", __version__)
        self._fixed: dict[str, str | int] = {"http.scheme": scheme, "http.flavor": "1.1", "net.host.port": port}

    def record(self, method: str, path: str, route: str | None, status: int, seconds: float) -> None:
        """``route``: the path's route, None for a path no route serves."""
        end = time.time_ns()
        method = sanitize_method(method)  # a method of the client's own is "_OTHER", as the instrumentation has it
        attributes: dict[str, str | int] = {
            **self._fixed,
            "http.method": method,
            "http.target": path,
            "http.status_code": status,
        }
        if route is not None:
            attributes["http.route"] = route
        shown = "HTTP" if method == "_OTHER" else method
        name = shown if route is None else f"{shown} {route}"
        span = self._tracer.start_span(
            name, kind=SpanKind.SERVER, attributes=attributes, start_time=end - round(seconds * 1e9)
        )
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=end)
