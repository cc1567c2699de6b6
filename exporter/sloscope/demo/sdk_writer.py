"""The catalogue's spans (:mod:`sloscope.upstream`) made by one process's TracerProvider of the OpenTelemetry SDK and
exported over OTLP like the real process's: a span's handle is the context its children are made in."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from sloscope.upstream.writer import Drawn, Process, Scope

__all__ = ["SdkWriter", "fail"]

_KINDS = {"server": SpanKind.SERVER, "internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}


class SdkWriter:
    """Spans of the process whose resource ``provider`` carries (the drawn process is not read), a tracer a scope."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracers: dict[str, trace.Tracer] = {}

    def span(self, process: Process, scope: Scope, drawn: Drawn[Context]) -> Context:
        del process  # the provider's resource
        tracer = self._tracers.get(scope.name)
        if tracer is None:
            tracer = self._provider.get_tracer(scope.name, scope.version, attributes=dict(scope.attributes))
            self._tracers[scope.name] = tracer
        links = [Link(trace.get_current_span(context).get_span_context()) for context in drawn.links]
        made = tracer.start_span(
            drawn.name, drawn.parent, _KINDS[drawn.kind], attributes=dict(drawn.attributes), links=links,
            start_time=drawn.start_ns,
        )  # fmt: skip
        for event in drawn.events:
            made.add_event(event.name, dict(event.attributes), timestamp=event.at_ns)
        if drawn.error is not None:
            fail(made, drawn.error, drawn.end_ns)
        elif drawn.status is not None:
            made.set_status(Status(StatusCode.ERROR, drawn.status))
        made.end(end_time=drawn.end_ns)
        return trace.set_span_in_context(made)


def fail(span: Span, message: str, at_ns: int) -> None:
    """span.RecordError(err) then span.SetStatus(codes.Error, err.Error()), as the EPP does."""
    span.add_event(
        "exception",
        {"exception.type": "github.com/llm-d/llm-d-router/pkg/common/error.Error", "exception.message": message},
        timestamp=at_ns,
    )
    span.set_status(Status(StatusCode.ERROR, message))
