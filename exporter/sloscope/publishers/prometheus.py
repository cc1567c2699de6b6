"""Per-request results as Prometheus series, on a registry the publisher is given.

Counters and histograms of joined, evaluated requests (see ``docs/metrics.md``), kept in
:mod:`sloscope.columnar.series` for speed. Histograms carry the trace id as an exemplar;
exemplars appear when the scraper asks for OpenMetrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from prometheus_client import CollectorRegistry, Gauge

from sloscope import conventions as c
from sloscope.columnar.buckets import TOKEN_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS
from sloscope.columnar.columns import (
    Column,
    Mask,
    group,
)
from sloscope.columnar.series import CounterFamily, SeriesCollector, count_groups, observe_groups
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.publishers.batch_rows import AssumedProbability, BatchRows, CounterPlan, HistogramPlan
from sloscope.slo.evaluate_batch import valid_seconds_of, valid_tokens_of
from sloscope.slo.spec import SLOSpec
from sloscope.telemetry import Telemetry


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
    """Turns evaluated batches into counter increments and histogram observations, under the labels the batch's
    rows were admitted with (:attr:`EvaluatedBatch.labels`)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        spec: SLOSpec,
        telemetry: Telemetry,
        *,
        clock: Callable[[], float] = time.time,
        assumed_probability: AssumedProbability = lambda pool: 1.0,
    ) -> None:
        self._assumed = assumed_probability
        self._spec_classes = frozenset(cls.name for cls in spec.classes)  # those with an objective for every SLO
        series = self._series = SeriesCollector(telemetry.series_budget, clock)
        self._requests = series.counter(c.REQUESTS)
        self._slo_requests = series.counter(c.SLO_REQUESTS)
        self._slo_violations = series.counter(c.SLO_VIOLATIONS, ratio_of=self._slo_requests)
        self._sampled_requests = series.counter(c.SAMPLED_REQUESTS, ratio_of=self._requests)
        self._sampled_slo_requests = series.counter(c.SAMPLED_SLO_REQUESTS, ratio_of=self._slo_requests)
        self._sampled_slo_violations = series.counter(c.SAMPLED_SLO_VIOLATIONS, ratio_of=self._slo_requests)
        self._requests.twin = self._sampled_requests
        self._slo_requests.twin = self._sampled_slo_requests
        self._slo_violations.twin = self._sampled_slo_violations
        self._failed = series.counter(c.REQUESTS_FAILED)
        self._pod_requests = series.counter(c.POD_REQUESTS)
        self._pod_violations = series.counter(c.POD_SLO_VIOLATIONS)
        self._invalid = series.counter(c.INVALID_VALUES)
        for field in c.INVALID_FIELDS:  # a fixed vocabulary: at 0 from start-up
            self._invalid.start((field,))
        ttft_buckets = buckets_with_targets(TTFT_BUCKETS, _spec_targets(spec, c.SLO_TTFT))
        self._ttft = series.histogram(c.TTFT_SECONDS, ttft_buckets)
        self._server_ttft = series.histogram(c.MODEL_SERVER_TTFT_SECONDS, ttft_buckets)
        self._tpot = series.histogram(
            c.TPOT_SECONDS, buckets_with_targets(TPOT_BUCKETS, _spec_targets(spec, c.SLO_TPOT))
        )
        self._e2e = series.histogram(c.E2E_SECONDS, TTFT_BUCKETS)
        self._prompt_tokens = series.histogram(c.PROMPT_TOKENS, TOKEN_BUCKETS)
        self._completion_tokens = series.histogram(c.COMPLETION_TOKENS, TOKEN_BUCKETS)
        registry.register(series)
        _publish_spec(registry, spec)

    def publish(self, batch: EvaluatedBatch) -> None:
        """Every request of the batch counted and observed, computed per label set rather than per request: the
        series, values, folds and exemplars that publishing the requests one at a time would give (the
        differential tests hold the two to byte-identical exposition, against the reference in
        ``tests/support/reference.py``).

        Caps admit label sets first come first served, so the order in which new label sets arrive matters when a
        budget runs out. A batch therefore first replays, in request order (increments left out), the few requests
        that bring a label set some family does not hold yet; every other request only adds to series that exist
        (or to the fold a refused set goes to, refusals being final). Then each family adds its counts per label
        set in one step.
        """
        if not len(batch):
            return
        labels = batch.labels
        plan = BatchRows(batch, labels.model, labels.pool, labels.slo_class, labels.pod, assumed=self._assumed)
        counters = self._counter_plan(plan)
        histograms = self._histogram_plan(plan)
        with self._series.lock:
            new = {
                int(groups.first[g])
                for family, keys, groups, _ in counters
                for g, key in enumerate(keys)
                if key not in family.values
            }
            new.update(
                int(groups.first[g])
                for family, keys, groups, _, _ in histograms
                for g, key in enumerate(keys)
                if key not in family.series
            )
            for row in sorted(new):
                self._replay(plan, row, histograms)
            for family, keys, groups, weighted in counters:
                count_groups(family, keys, groups, plan.weights if weighted else None)
            for field in c.INVALID_FIELDS:
                count = int(batch.verdicts.invalid[field].sum())
                if count:
                    self._invalid.inc((field,), float(count), events=count)
            for histogram, keys, groups, values, exemplars in histograms:
                observe_groups(
                    histogram, keys, groups, values, plan.trace_ids if exemplars else None, weights=plan.weights
                )

    def _counter_plan(self, plan: BatchRows) -> list[CounterPlan]:
        """Per counter family, the label sets it counts and their rows (a group-by of the rows each family counts, as
        :meth:`publish` selects them), and whether it adds their adjusted counts or counts them (a sampled twin,
        which shares its family's group-by)."""
        base, pod_key = plan.base_columns, (plan.pool, plan.pod)
        planned: list[tuple[CounterFamily, tuple[Column | str, ...], Mask | None]] = [
            (self._requests, base, None),
            (self._failed, (*base, plan.reason), plan.failed),
            (self._pod_requests, pod_key, plan.on_a_pod),
        ]
        for slo in c.SLOS:
            verdict = plan.verdicts.verdict(slo)
            missed = verdict.eligible & ~verdict.met
            planned.append((self._slo_requests, (*base, slo), verdict.eligible))
            planned.append((self._slo_violations, (*base, slo), missed))
            planned.append((self._pod_violations, (*pod_key, slo), missed & plan.on_a_pod))
        out: list[CounterPlan] = []
        for family, columns, selected in planned:
            groups = group(plan.codes(columns), selected)
            keys = plan.keys(columns, groups)
            out.append((family, keys, groups, True))
            if family.twin is not None:
                out.append((family.twin, keys, groups, False))
        return out

    def _histogram_plan(self, plan: BatchRows) -> list[HistogramPlan]:
        """Per histogram, the groups of rows it observes, their values and whether exemplars are kept."""
        records, verdicts = plan.batch.records, plan.verdicts
        keys = plan.codes(plan.histogram_columns)
        out: list[HistogramPlan] = []

        server_ttft, e2e, prompt, completion = (
            records.floats(name)
            for name in ("server_ttft_seconds", "e2e_seconds", "prompt_tokens", "completion_tokens")
        )
        for family, values, selected, exemplars in (
            (self._ttft, verdicts.ttft_seconds, ~np.isnan(verdicts.ttft_seconds), True),
            (self._server_ttft, server_ttft, valid_seconds_of(server_ttft), True),
            (self._tpot, verdicts.tpot_seconds, ~np.isnan(verdicts.tpot_seconds), True),
            (self._e2e, e2e, valid_seconds_of(e2e), True),  # each when the span carried a valid one
            (self._prompt_tokens, prompt, valid_tokens_of(prompt), False),
            (self._completion_tokens, completion, valid_tokens_of(completion), False),
        ):
            groups = group(keys, selected)
            out.append((family, plan.keys(plan.histogram_columns, groups), groups, values, exemplars))
        return out

    def _replay(self, plan: BatchRows, row: int, histograms: list[HistogramPlan]) -> None:
        """What publishing the request of ``row`` alone does to the series set, increments left out: every label set
        it brings started (with its siblings at 0) in the order one request at a time would."""
        base = plan.labels_at(plan.base_columns, row)
        model, pool, slo_class, _ = base
        pod = plan.pod.values[plan.pod.codes[row]]
        if base not in self._requests.values:
            self._start_request(base, slo_class)
        self._requests.start(base)
        if plan.failed[row]:
            self._failed.start((*base, plan.reason.values[plan.reason.codes[row]]))
        on_a_pod = bool(plan.on_a_pod[row])
        if on_a_pod:
            if (pool, pod) not in self._pod_requests.values:
                self._start_pod(pool, pod)
            self._pod_requests.start((pool, pod))
        for slo in c.SLOS:
            verdict = plan.verdicts.verdict(slo)
            if not verdict.eligible[row]:
                continue
            key = (*base, slo)
            if key not in self._slo_requests.values:
                self._slo_violations.start(key)
            self._slo_requests.start(key)
            if not verdict.met[row]:
                self._slo_violations.start(key)
                if on_a_pod:
                    self._pod_violations.start((pool, pod, slo))
        for family, _, groups, _, _ in histograms:
            if groups.ids[row] >= 0:
                family.touch((model, pool, slo_class))

    def _start_request(self, base: tuple[str, ...], slo_class: str) -> None:
        """A new (model, pool, class, routing) with every sibling at 0: failed for every reason and, for a class
        of the spec (each has an objective for every SLO), eligible and violated for every SLO. The first miss or
        failure of the label set is then an increase Prometheus sees, not a new series at 1. The default class has
        no objectives (in the built-in spec its requests carry no SLO): an SLO of it starts with its first
        eligible request. Siblings are made only of label values the caps admitted.
        """
        self._requests.start(base)
        for reason in c.FAILURE_REASONS:
            self._failed.start((*base, reason))
        if slo_class not in self._spec_classes:
            return
        for slo in c.SLOS:
            self._slo_requests.start((*base, slo))
            self._slo_violations.start((*base, slo))

    def _start_pod(self, pool: str, pod: str) -> None:
        """A new pod with its violations of every SLO at 0, for the same reason."""
        self._pod_requests.start((pool, pod))
        for slo in c.SLOS:
            self._pod_violations.start((pool, pod, slo))


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
