"""Tracing of sloscope's own HTTP API with opentelemetry-instrumentation-fastapi.

A private TracerProvider (never the global one): sloscope must not pick up, or export into
itself, spans of whatever else runs in the process. Without an endpoint, spans are created
(so the cost is real and measured by ``make bench``) but kept in-process.
"""

from __future__ import annotations

from fastapi import FastAPI
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from sloscope import __version__
from sloscope.config import SelfTracing

_EXCLUDED = "healthz,readyz,metrics"  # probes and scrapes would drown the interesting spans


def tracer_provider(config: SelfTracing) -> TracerProvider | None:
    if not config.enabled:
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": "sloscope", "service.version": __version__}))
    if config.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.otlp_endpoint, insecure=True)))
    return provider


def instrument(app: FastAPI, provider: TracerProvider | None) -> None:
    if provider is not None:
        # One server span per request; the per-ASGI-message "receive"/"send" child spans would add
        # several spans per OTLP export (a large body arrives in many chunks) and say nothing useful.
        FastAPIInstrumentor.instrument_app(
            app, tracer_provider=provider, excluded_urls=_EXCLUDED, exclude_spans=["receive", "send"]
        )
