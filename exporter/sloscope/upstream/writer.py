"""What the catalogue of upstream span shapes draws on: a process (an OpenTelemetry resource), an instrumentation
scope, and a writer that makes one span.

The catalogue (:mod:`sloscope.upstream.llmd_router`, :mod:`~sloscope.upstream.pd_sidecar`,
:mod:`~sloscope.upstream.coordinator`, :mod:`~sloscope.upstream.vllm`, :mod:`~sloscope.upstream.sglang`,
:mod:`~sloscope.upstream.gie_2025`, :mod:`~sloscope.upstream.envoy`) says which spans an upstream writes, with
which names, kinds, scopes and attributes, under which parent; a writer says what a span becomes: a decoded
:class:`~sloscope.records.Span` for unit tests and benchmarks (:class:`sloscope.testing.RecordWriter`), or a span
of the OpenTelemetry SDK, exported over OTLP like the real process would. So the tests, the demo and the
benchmarks draw one set of shapes, and a new upstream is one module here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

__all__ = ["AttributeValue", "Drawn", "Event", "Kind", "Process", "Scope", "SpanWriter"]

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int] | Sequence[float]
Kind = Literal["server", "internal", "client"]
Handle = TypeVar("Handle")


@dataclass(frozen=True)
class Process:
    """An instrumented process: its resource attributes and the schema URL of its semantic conventions."""

    attributes: Mapping[str, AttributeValue]
    schema_url: str = ""


@dataclass(frozen=True)
class Scope:
    """An instrumentation scope (a tracer): its name, version and attributes."""

    name: str
    version: str = ""
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Event:
    """A span event: its name, time (Unix nanoseconds) and attributes."""

    name: str
    at_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Drawn(Generic[Handle]):
    """One span as the catalogue draws it. ``status``: the span's status is Error with this description;
    ``error``: the upstream called RecordError (an exception event) and set the status to Error with the error's
    text. Times are Unix nanoseconds; ``parent`` None: a root, or the caller's parent as the writer knows it."""

    name: str
    parent: Handle | None
    start_ns: int
    end_ns: int
    kind: Kind = "internal"
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    status: str | None = None
    error: str | None = None
    links: Sequence[Handle] = ()  # spans this one follows from (SGLang's slices), as their handles
    events: Sequence[Event] = ()

    @property
    def failure(self) -> str | None:
        """The Error status's description, None for a span that did not fail."""
        return self.error if self.error is not None else self.status


class SpanWriter(Protocol[Handle]):
    """Makes one finished span of ``process`` in ``scope`` and returns what a child names as its parent."""

    def span(self, process: Process, scope: Scope, drawn: Drawn[Handle]) -> Handle: ...
