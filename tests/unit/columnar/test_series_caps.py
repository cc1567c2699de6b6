"""The series caps: a family holds at most its cap of series, later label sets fold into __other__ and are
counted, and the sum over the family is unchanged."""

from __future__ import annotations

import itertools

import pytest
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.columnar.buckets import HEADROOM_BUCKETS, RATIO_BUCKETS, TOKEN_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS
from sloscope.columnar.cardinality import SeriesBudget
from sloscope.columnar.series import SeriesCollector
from sloscope.config import Limits
from sloscope.loading import default_spec
from sloscope.records import JoinedRequest
from tests.support.stage import Stage, stage

REQ = c.MetricDef("demo_requests", "counter", (c.MODEL, c.POOL, c.SLO), "Demo.")
BAD = c.MetricDef("demo_violations", "counter", (c.MODEL, c.POOL, c.SLO), "Demo.")
HIST = c.MetricDef("demo_seconds", "histogram", (c.MODEL, c.POOL), "Demo.")
FIELDS = c.MetricDef("demo_fields", "counter", (c.FIELD,), "Demo.")


def folded(registry: CollectorRegistry, family: str) -> float | None:
    return registry.get_sample_value("sloscope_series_folded_total", {"family": family})


def test_label_sets_past_the_family_cap_fold_into_other_and_are_counted() -> None:
    registry = CollectorRegistry()
    budget = SeriesBudget(per_family=3, total=100)
    registry.register(budget)
    series = SeriesCollector(budget)
    requests = series.counter(REQ)
    registry.register(series)
    assert folded(registry, "demo_requests_total") == 0  # at 0 from the family's creation
    for model in ("a", "b", "c", "d", "e"):
        requests.inc((model, "p", "ttft"))
        requests.inc((model, "p", "ttft"), 2)
    assert set(requests.values) == {
        ("a", "p", "ttft"),
        ("b", "p", "ttft"),
        ("c", "p", "ttft"),
        (c.OTHER, c.OTHER, "ttft"),
    }
    assert requests.values[(c.OTHER, c.OTHER, "ttft")] == 6  # d and e, three each: the sum is unchanged
    assert sum(requests.values.values()) == 15
    assert folded(registry, "demo_requests_total") == 4  # every folded observation


def test_a_refused_label_set_stays_refused_and_the_fold_keeps_uncapped_labels() -> None:
    budget = SeriesBudget(per_family=1, total=100)
    requests = SeriesCollector(budget).counter(REQ)
    requests.inc(("a", "p", "ttft"))
    requests.inc(("b", "p", "tpot"))
    requests.inc(("b", "p", "ttft"))
    requests.inc(("a", "p", "ttft"))
    assert requests.values == {("a", "p", "ttft"): 2, (c.OTHER, c.OTHER, "tpot"): 1, (c.OTHER, c.OTHER, "ttft"): 1}
    assert requests.cap is not None and requests.cap.folded == 2


def test_start_past_the_cap_starts_the_fold_at_zero_and_counts_nothing() -> None:
    budget = SeriesBudget(per_family=1, total=100)
    requests = SeriesCollector(budget).counter(REQ)
    requests.start(("a", "p", "ttft"))
    requests.start(("b", "p", "ttft"))
    assert requests.values == {("a", "p", "ttft"): 0, (c.OTHER, c.OTHER, "ttft"): 0}
    assert requests.cap is not None and requests.cap.folded == 0  # nothing was observed


def test_a_fixed_vocabulary_is_never_capped() -> None:
    budget = SeriesBudget(per_family=1, total=1)
    fields = SeriesCollector(budget).counter(FIELDS)
    for field in c.INVALID_FIELDS:
        fields.inc((field,))
    assert set(fields.values) == {(field,) for field in c.INVALID_FIELDS}
    assert budget.used == 0


def test_families_read_as_a_ratio_hold_or_fold_a_label_set_together() -> None:
    """The total runs out between the two families' admissions of ("b", ...): both fold it, so the error ratio of
    every real series is its own and the __other__ one has both its requests and its violations."""
    budget = SeriesBudget(per_family=10, total=5)
    series = SeriesCollector(budget)
    requests = series.counter(REQ)
    violations = series.counter(BAD, ratio_of=requests)
    for model in ("a", "b", "c"):
        violations.start((model, "p", "ttft"))
        requests.inc((model, "p", "ttft"))
        violations.inc((model, "p", "ttft"))
    assert (
        set(requests.values)
        == set(violations.values)
        == {("a", "p", "ttft"), ("b", "p", "ttft"), (c.OTHER, c.OTHER, "ttft")}
    )
    assert budget.used == 4  # two label sets, in two families each


def test_histogram_label_sets_weigh_their_buckets_sum_and_count() -> None:
    budget = SeriesBudget(per_family=2 * 5, total=100)  # two label sets of 2 bounds + +Inf, _sum, _count
    histogram = SeriesCollector(budget).histogram(HIST, (0.1, 1.0))
    for model in ("a", "b", "c"):
        histogram.observe((model, "p"), 0.5)
    assert set(histogram.series) == {("a", "p"), ("b", "p"), (c.OTHER, c.OTHER)}
    assert budget.used == 10
    assert sum(h.counts[1] for h in histogram.series.values()) == 3


def test_the_total_cap_is_shared_by_every_family() -> None:
    budget = SeriesBudget(per_family=100, total=3)
    first, second = SeriesCollector(budget), SeriesCollector(budget)
    a, b = first.counter(REQ), second.counter(BAD)
    for model in ("a", "b"):
        a.inc((model, "p", "ttft"))
        b.inc((model, "p", "ttft"))
    assert set(a.values) == {("a", "p", "ttft"), ("b", "p", "ttft")}
    assert set(b.values) == {("a", "p", "ttft"), (c.OTHER, c.OTHER, "ttft")}


# A large deployment, the sizing the defaults are for (docs/operations.md "Cardinality caps"): every model at the
# model cap, each served by two pools, eight SLO classes each adding two targets to the latency histograms,
# every routing, the pod cap of pods.
LARGE = {"model_pools": 50 * 2, "classes": 8, "targets_per_class": 2, "pods": 2000, "engine_bounds": 23}


def large_deployment() -> dict[str, int]:
    """Series per capped family of the large deployment, by the families' labels and buckets."""
    pairs, classes, pods = LARGE["model_pools"], LARGE["classes"], LARGE["pods"]
    routings, reasons, slos, signals, sources = (
        len(x) for x in (c.ROUTINGS, c.FAILURE_REASONS, c.SLOS, c.SIGNALS, c.SOURCES)
    )
    targets = classes * LARGE["targets_per_class"]

    def histogram(bounds: int, label_sets: int) -> int:
        return label_sets * (bounds + 3)

    out = {
        c.REQUESTS.name: pairs * classes * routings,
        c.REQUESTS_FAILED.name: pairs * classes * routings * reasons,
        c.SLO_REQUESTS.name: pairs * classes * routings * slos,
        c.SLO_VIOLATIONS.name: pairs * classes * routings * slos,
        c.TTFT_SECONDS.name: histogram(len(TTFT_BUCKETS) + targets, pairs * classes),
        c.TPOT_SECONDS.name: histogram(len(TPOT_BUCKETS) + targets, pairs * classes),
        c.E2E_SECONDS.name: histogram(len(TTFT_BUCKETS), pairs * classes),
        c.PROMPT_TOKENS.name: histogram(len(TOKEN_BUCKETS), pairs * classes),
        c.COMPLETION_TOKENS.name: histogram(len(TOKEN_BUCKETS), pairs * classes),
        c.POD_REQUESTS.name: pods,
        c.POD_SLO_VIOLATIONS.name: pods * slos,
        c.PREDICTION_RATIO.name: histogram(len(RATIO_BUCKETS), pairs * signals * sources),
        c.HEADROOM_SECONDS.name: histogram(len(HEADROOM_BUCKETS), pairs * signals),
        c.ENGINE_LATENCY_SECONDS.name: (LARGE["engine_bounds"] + 2) * pairs * 5,
    }
    for counter in (c.PREDICTIONS, c.PREDICTION_COVERED, c.PREDICTION_PINBALL_LOSS, c.MEAN_PREDICTIONS):
        out[counter.name] = pairs * signals * sources
    return out


def test_the_default_caps_hold_a_large_deployment_and_stop_a_combination_flood() -> None:
    limits, sizes = Limits(), large_deployment()
    assert max(sizes.values()) <= limits.max_series_per_family
    assert sum(sizes.values()) <= limits.max_series_total
    assert max(sizes.values()) * 1.5 <= limits.max_series_per_family  # a margin for a larger one
    # every admitted value combined: one family alone would be over a million series
    caps = limits.max_label_values
    flood = caps[c.MODEL] * caps[c.POOL] * caps[c.SLO_CLASS] * len(c.ROUTINGS) * len(c.FAILURE_REASONS)
    assert flood >= 20 * limits.max_series_per_family


def flood(stage: Stage, models: int, pools: int, pods: int) -> int:
    """Every combination once, in batches of 500 through the evaluator stage."""
    batch: list[JoinedRequest] = []
    sent = 0
    for model, pool, pod in itertools.product(range(models), range(pools), range(pods)):
        request = JoinedRequest(
            trace_id=f"{sent:032x}",
            span_id=f"{sent:016x}",
            outcome="joined",
            ttft_seconds=0.3,
            e2e_seconds=0.8,
            completion_tokens=6,
            slo_ttft_ms=250,
            target_model=f"model-{model}",
            pool=f"pool-{pool}",
            pod=f"pod-{pool}-{pod}",
        )
        batch.append(request)
        sent += 1
        if len(batch) == 500:
            stage.publish(*batch)
            batch.clear()
    stage.publish(*batch)
    return sent


def series_of(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


@pytest.mark.parametrize("per_family", [50, 150])
def test_a_label_combination_flood_is_capped_per_family_and_sums_stay_right(per_family: int) -> None:
    """50 models x 50 pools x 4 pods, every value admitted by the label caps: 10,000 requests over 2,500 (model,
    pool) pairs and 10,000 (pool, pod) pairs."""
    limits = Limits(max_series_per_family=per_family, max_series_total=100_000)
    s = stage(default_spec(), limits)
    registry = s.registry
    sent = flood(s, models=50, pools=50, pods=4)
    counters = (c.REQUESTS, c.SLO_REQUESTS, c.SLO_VIOLATIONS, c.REQUESTS_FAILED, c.POD_REQUESTS, c.POD_SLO_VIOLATIONS)
    for definition in counters:
        values = series_of(registry, definition.exposed_name)
        real = [
            labels for labels in values if (c.POD if c.POD in definition.labels else c.MODEL, c.OTHER) not in labels
        ]
        assert len(real) <= per_family, definition.name
    requests = series_of(registry, c.REQUESTS.exposed_name)
    assert sum(requests.values()) == sent
    assert sum(series_of(registry, c.POD_REQUESTS.exposed_name).values()) == sent
    ttft = series_of(registry, c.TTFT_SECONDS.name + "_count")
    assert sum(ttft.values()) == sent
    assert len(requests) == per_family + 1  # the admitted label sets and one fold (one class, one routing)
    for definition, fold in ((c.REQUESTS, (c.MODEL, c.POOL)), (c.POD_REQUESTS, (c.POOL, c.POD))):
        values = series_of(registry, definition.exposed_name)
        other = sum(v for labels, v in values.items() if all((label, c.OTHER) in labels for label in fold))
        assert other > 0
        assert registry.get_sample_value("sloscope_series_folded_total", {"family": definition.exposed_name}) == other
    violations = series_of(registry, c.SLO_VIOLATIONS.exposed_name)
    assert set(violations) == set(series_of(registry, c.SLO_REQUESTS.exposed_name))
