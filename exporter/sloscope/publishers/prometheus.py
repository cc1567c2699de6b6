"""Per-request results as Prometheus series, on a registry the publisher is given.

Counters and histograms of joined, evaluated requests (see ``docs/metrics.md``). Histograms carry
the trace id as an exemplar; exemplars appear when the scraper asks for OpenMetrics. Labelled
children are cached by label tuple: the hot path does a dict lookup, not a registry lookup.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sloscope import conventions as c
from sloscope.config import Limits
from sloscope.publishers.cardinality import LabelGuard
from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.spec import SLOSpec
from sloscope.telemetry import Telemetry

# vLLM's TTFT buckets (seconds) and its inter-token-latency buckets, so the two line up in Grafana.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
TPOT_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)


def buckets_with_targets(base: tuple[float, ...], targets_ms: list[float]) -> tuple[float, ...]:
    """Add the spec's targets as boundaries, so the share of requests under a target is exact."""
    return tuple(sorted(set(base) | {t / 1000.0 for t in targets_ms}))


def _spec_targets(spec: SLOSpec, slo: str) -> list[float]:
    out: list[float] = []
    for cls in spec.classes:
        default = cls.defaults.ttft_ms if slo == c.SLO_TTFT else cls.defaults.tpot_ms
        rng = cls.match.ttft_ms if slo == c.SLO_TTFT else cls.match.tpot_ms
        out.extend(v for v in (default, rng.min if rng else None, rng.max if rng else None) if v)
    return out


class PrometheusPublisher:
    """Turns (request, evaluation) pairs into counter increments and histogram observations."""

    def __init__(
        self, registry: CollectorRegistry, spec: SLOSpec, limits: Limits, telemetry: Telemetry, default_pool: str
    ) -> None:
        self._telemetry = telemetry
        self._default_pool = default_pool
        self._guard = LabelGuard(
            limits.max_label_values, lambda label: telemetry.label_values_folded.labels(label).inc()
        )
        self._requests = Counter(c.REQUESTS.name, c.REQUESTS.help, c.REQUESTS.labels, registry=registry)
        self._slo_requests = Counter(c.SLO_REQUESTS.name, c.SLO_REQUESTS.help, c.SLO_REQUESTS.labels, registry=registry)
        self._slo_violations = Counter(
            c.SLO_VIOLATIONS.name, c.SLO_VIOLATIONS.help, c.SLO_VIOLATIONS.labels, registry=registry
        )
        self._ttft = Histogram(
            c.TTFT_SECONDS.name,
            c.TTFT_SECONDS.help,
            c.TTFT_SECONDS.labels,
            registry=registry,
            buckets=buckets_with_targets(TTFT_BUCKETS, _spec_targets(spec, c.SLO_TTFT)),
        )
        self._tpot = Histogram(
            c.TPOT_SECONDS.name,
            c.TPOT_SECONDS.help,
            c.TPOT_SECONDS.labels,
            registry=registry,
            buckets=buckets_with_targets(TPOT_BUCKETS, _spec_targets(spec, c.SLO_TPOT)),
        )
        self._pod_requests = Counter(c.POD_REQUESTS.name, c.POD_REQUESTS.help, c.POD_REQUESTS.labels, registry=registry)
        self._pod_violations = Counter(
            c.POD_SLO_VIOLATIONS.name, c.POD_SLO_VIOLATIONS.help, c.POD_SLO_VIOLATIONS.labels, registry=registry
        )
        self._children: dict[tuple[Any, ...], Any] = {}
        _publish_spec(registry, spec)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def publish(self, request: JoinedRequest, evaluation: Evaluation) -> None:
        admit = self._guard.admit
        model = admit(c.MODEL, request.model or c.UNKNOWN)
        pool = admit(c.POOL, request.pool or self._default_pool)
        slo_class = admit(c.SLO_CLASS, evaluation.slo_class)
        pod = admit(c.POD, request.pod or request.endpoint or c.UNKNOWN)
        base = (model, pool, slo_class, request.routing)
        child = self._child
        child(self._requests, base).inc()
        child(self._pod_requests, (pool, pod)).inc()
        for field in evaluation.invalid_fields:
            child(self._telemetry.invalid_values, (field,)).inc()
        for slo in c.SLOS:
            verdict = evaluation.verdict(slo)
            if not verdict.eligible:
                continue
            child(self._slo_requests, (*base, slo)).inc()
            if not verdict.met:
                child(self._slo_violations, (*base, slo)).inc()
                child(self._pod_violations, (pool, pod, slo)).inc()
        exemplar = {"trace_id": request.trace_id}
        if evaluation.ttft_seconds is not None:
            child(self._ttft, (model, pool, slo_class)).observe(evaluation.ttft_seconds, exemplar)
        if evaluation.tpot_seconds is not None:
            child(self._tpot, (model, pool, slo_class)).observe(evaluation.tpot_seconds, exemplar)


def _publish_spec(registry: CollectorRegistry, spec: SLOSpec) -> None:
    """The spec as series: objectives, default targets and compliance periods, for dashboards and rules."""
    objective = Gauge(
        c.SLO_OBJECTIVE_RATIO.name, c.SLO_OBJECTIVE_RATIO.help, c.SLO_OBJECTIVE_RATIO.labels, registry=registry
    )
    target = Gauge(c.SLO_TARGET_SECONDS.name, c.SLO_TARGET_SECONDS.help, c.SLO_TARGET_SECONDS.labels, registry=registry)
    period = Gauge(
        c.SLO_COMPLIANCE_PERIOD_SECONDS.name,
        c.SLO_COMPLIANCE_PERIOD_SECONDS.help,
        c.SLO_COMPLIANCE_PERIOD_SECONDS.labels,
        registry=registry,
    )
    for cls in spec.classes:
        period.labels(cls.name).set(spec.period_of(cls))
        for model in cls.match.models:
            for slo in c.SLOS:
                objective.labels(model, cls.name, slo).set(cls.objectives.of(slo))
            for slo, ms in ((c.SLO_TTFT, cls.defaults.ttft_ms), (c.SLO_TPOT, cls.defaults.tpot_ms)):
                if ms is not None:
                    target.labels(model, cls.name, slo).set(ms / 1000.0)
