"""sloscope's own health series: what every stage received, dropped and why.

One object per pipeline, owning its instruments on the registry it is given (never the global
one). Label sets with a fixed vocabulary are created up front so they exist at zero.
"""

from __future__ import annotations

import platform
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Info

from sloscope import __version__
from sloscope import conventions as c
from sloscope.columnar.cardinality import SeriesBudget
from sloscope.config import Limits


class Telemetry:
    def __init__(self, registry: CollectorRegistry, limits: Limits | None = None) -> None:
        limits = limits if limits is not None else Limits()
        self.series_budget = SeriesBudget(limits.max_series_per_family, limits.max_series_total)
        """The series caps every per-request family passes through (publisher, predictions, engine latency)."""
        registry.register(self.series_budget)
        self.spans_received = Counter(
            c.SPANS_RECEIVED.name, c.SPANS_RECEIVED.help, c.SPANS_RECEIVED.labels, registry=registry
        )
        self.spans_dropped = Counter(
            c.SPANS_DROPPED.name, c.SPANS_DROPPED.help, c.SPANS_DROPPED.labels, registry=registry
        )
        self.otlp_requests = Counter(
            c.OTLP_REQUESTS.name, c.OTLP_REQUESTS.help, c.OTLP_REQUESTS.labels, registry=registry
        )
        self.traces_joined = Counter(
            c.TRACES_JOINED.name, c.TRACES_JOINED.help, c.TRACES_JOINED.labels, registry=registry
        )
        self.label_values_folded = Counter(
            c.LABEL_VALUES_FOLDED.name, c.LABEL_VALUES_FOLDED.help, c.LABEL_VALUES_FOLDED.labels, registry=registry
        )
        self.scrapes = Counter(c.SCRAPES.name, c.SCRAPES.help, c.SCRAPES.labels, registry=registry)
        self.call_legs = Counter(c.CALL_LEGS.name, c.CALL_LEGS.help, c.CALL_LEGS.labels, registry=registry)
        without_pool = Counter(
            c.REQUESTS_WITHOUT_POOL.name,
            c.REQUESTS_WITHOUT_POOL.help,
            c.REQUESTS_WITHOUT_POOL.labels,
            registry=registry,
        )
        self._without_pool = {reason: without_pool.labels(reason) for reason in c.FAILURE_REASONS}
        self.queue_spans = Gauge(c.QUEUE_SPANS.name, c.QUEUE_SPANS.help, registry=registry)
        self.queue_capacity = Gauge(c.QUEUE_CAPACITY_SPANS.name, c.QUEUE_CAPACITY_SPANS.help, registry=registry)
        self.traces_pending = Gauge(c.TRACES_PENDING.name, c.TRACES_PENDING.help, registry=registry)
        self.awaiting_evaluation = Gauge(
            c.REQUESTS_AWAITING_EVALUATION.name, c.REQUESTS_AWAITING_EVALUATION.help, registry=registry
        )
        self.otlp_bytes_in_flight = Gauge(c.OTLP_BYTES_IN_FLIGHT.name, c.OTLP_BYTES_IN_FLIGHT.help, registry=registry)
        self.traces_pending_bytes = Gauge(c.TRACES_PENDING_BYTES.name, c.TRACES_PENDING_BYTES.help, registry=registry)
        info = Info(c.BUILD_INFO.name, c.BUILD_INFO.help, registry=registry)
        info.info({"version": __version__, "python": platform.python_version()})
        for transport in ("grpc", "http"):
            self.spans_received.labels(transport)
        for reason in c.DROP_REASONS:
            self.spans_dropped.labels(reason)
        for outcome in c.OUTCOMES:
            self.traces_joined.labels(outcome)
        for kind in c.SCRAPE_KINDS:
            for result in c.SCRAPE_RESULTS:
                self.scrapes.labels(kind, result)
        for phase in c.PHASES:
            for result in c.LEG_RESULTS:
                self.call_legs.labels(phase, result)
        self._dropped = {reason: self.spans_dropped.labels(reason) for reason in c.DROP_REASONS}
        self._outcomes = {outcome: self.traces_joined.labels(outcome) for outcome in c.OUTCOMES}

    def dropped(self, reason: str, count: int) -> None:
        if count:
            self._dropped[reason].inc(count)

    def outcome(self, outcome: str, count: int) -> None:
        self._outcomes[outcome].inc(count)

    def legs(self, phase: str, result: str, count: int) -> None:
        """Counts legs of coordinator calls (processors/calls.py)."""
        self.call_legs.labels(phase, result).inc(count)

    def without_pool(self, reason: str, count: int) -> None:
        """Counts failed requests no pool could be told for (processors/placement.py)."""
        self._without_pool[reason].inc(count)

    def scrape(self, kind: str, result: str) -> None:
        """Counts one scrape of a model server, the EPP or a predictor server (kinds and results in conventions)."""
        self.scrapes.labels(kind, result).inc()

    def watch(
        self,
        queue_len: Callable[[], int],
        capacity: int,
        pending: Callable[[], int],
        pending_bytes: Callable[[], int] = lambda: 0,
        awaiting_evaluation: Callable[[], int] = lambda: 0,
    ) -> None:
        """Gauges read at scrape time, so they are never stale."""
        self.awaiting_evaluation.set_function(lambda: float(awaiting_evaluation()))
        self.queue_spans.set_function(lambda: float(queue_len()))
        self.queue_capacity.set(capacity)
        self.traces_pending.set_function(lambda: float(pending()))
        self.traces_pending_bytes.set_function(lambda: float(pending_bytes()))
