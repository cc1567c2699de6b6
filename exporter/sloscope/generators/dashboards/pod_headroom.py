"""The "Pod headroom" dashboard: how much room each pod has for one more request of each SLO class.

Live headroom is the SLO of a class's reference request minus its current predicted latency on the pod
(docs/predictions.md); a pool runs out of room when no pod is positive, and then the router places requests
where they are predicted to miss. Headroom at routing shows how often that already happened. The scraped pod
state (KV cache, queue, batch) is what the predictions are made from, so it sits beside them.

Pod gauges are the same on every sloscope replica (each scrapes every pod): they are aggregated with
``max``, never summed. There is no model filter: a pod's state and headroom are the pod's, whatever model
its requests named. Panels that a variable cannot narrow say so (:data:`POOL_LEVEL`, :data:`EVERY_CLASS`).
"""

from __future__ import annotations

from typing import Any

from sloscope import conventions as c
from sloscope.columnar.buckets import HEADROOM_BUCKETS
from sloscope.conventions import MetricDef
from sloscope.generators.dashboards import common as d
from sloscope.generators.dashboards import variables as v
from sloscope.generators.dashboards.promql import LE_INF, le, max_by, min_by, rate, sel, series, sum_by, var
from sloscope.generators.dashboards.signals import SIGNAL_PANELS
from sloscope.slo.spec import SLOSpec

FILE_NAME = "pod-headroom.json"
_POOL = (var(c.POOL),)
_POD = (var(c.POOL), var(c.POD))
_NO_HEADROOM = 0.0
_LE_NO_HEADROOM = le(_NO_HEADROOM, HEADROOM_BUCKETS)
_LE_ALL = LE_INF  # the histogram has negative buckets, hence no _count: +Inf is the count
POOL_LEVEL = " Pool-level: not filtered by pod."
EVERY_CLASS = " Not filtered by SLO class: a pod's state is the same for requests of every class."


def dashboard(spec: SLOSpec) -> Any:
    """Live headroom per pod and class, pods with headroom per pool, headroom at routing, scraped pod state."""
    return d.build(
        title="Pod headroom",
        service=spec.service,
        file_name=FILE_NAME,
        description=(
            "Per-pod live headroom of each SLO class's reference request, the pods of each pool with room left, "
            "headroom of requests at routing time, and the scraped pod state the predictions are made from."
        ),
        tags=["headroom"],
        variables=[
            v.datasource_variable(),
            v.label_variable(c.POOL, c.POD_UP, "Pool"),
            v.label_variable(c.POD, c.POD_UP, "Pod", narrowed_by=(c.POOL,)),
            v.label_variable(c.SLO_CLASS, c.POOL_PODS_WITH_HEADROOM, "SLO class", narrowed_by=(c.POOL,)),
        ],
        panels=[*_live(spec), *_at_routing(), *_state()],
        time_from="now-3h",
    )


def _live(spec: SLOSpec) -> list[Any]:
    classes = ", ".join(cls.name for cls in spec.classes) or "none"
    panels: list[Any] = [d.row("Live headroom")]
    for signal in SIGNAL_PANELS:
        name = signal.name
        matchers = (*_POD, signal.matcher, var(c.SLO_CLASS))
        panels.append(
            d.timeseries(
                f"{name} headroom by pod",
                f"The {name} SLO of each class's reference request minus its {name} predicted now on the pod, in "
                f"seconds (classes of the spec: {classes}; only classes with a {name} target have a series). Below 0 "
                "(red) the pod would be predicted to miss. The series of a pool disappear when its predictor cannot "
                f"answer.{signal.note}",
                [
                    d.Query(
                        max_by((c.POD, c.SLO_CLASS), sel(series(c.POD_HEADROOM_SECONDS), matchers)),
                        "{{pod}} {{slo_class}}",
                    )
                ],
                unit=d.SECONDS,
                thresholds=d.steps(d.RED, (_NO_HEADROOM, d.TRANSPARENT)),
                threshold_style="line+area",
            )
        )
    with_headroom = max_by((c.POOL, c.SLO_CLASS), sel(series(c.POOL_PODS_WITH_HEADROOM), (*_POOL, var(c.SLO_CLASS))))
    pods = max_by((c.POOL,), sel(series(c.POOL_PODS), _POOL))
    panels += [
        d.timeseries(
            "Pods with headroom against pods",
            "Pods whose every headroom for the class is positive (the router's positive pods), against the pods of the "
            "pool that are up and fresh. When pods with headroom reach 0 the router has no positive pod for the "
            "class and routes on the least negative one: scale out before then." + POOL_LEVEL + " The pool's pods "
            "are not filtered by SLO class either: they serve every class.",
            [d.Query(with_headroom, "{{pool}} {{slo_class}} with headroom"), d.Query(pods, "{{pool}} pods")],
            unit=d.SHORT,
            width=16,
        ),
        d.gauge(
            "Share of pods with headroom",
            "Pods with headroom for the class over the pool's pods, now." + POOL_LEVEL,
            [d.Query(f"{with_headroom} / on ({c.POOL}) group_left {pods}", "{{pool}} {{slo_class}}")],
            unit=d.PERCENT,
            thresholds=d.steps(d.RED, (0.25, d.ORANGE), (0.5, d.GREEN)),
            minimum=0,
            maximum=1,
            width=8,
            height=8,
        ),
    ]
    return panels


def _at_routing() -> list[Any]:
    matchers = _POOL
    bucket = series(c.HEADROOM_SECONDS, "_bucket")
    by = (c.POOL, c.SIGNAL)
    panels: list[Any] = [
        d.row("Headroom at routing"),
        d.timeseries(
            "Requests routed with no headroom",
            "Share of requests whose headroom on the pod they were routed to was at most 0 (SLO minus the prediction "
            "used for them; TPOT against the tightest TPOT SLO running there): the router had no positive pod, or "
            "chose a negative one. Only requests carrying the signal's SLO count. Pool-level: not filtered by pod; "
            "not filtered by SLO class: each request's headroom is against its own SLOs, whatever its class.",
            [
                d.Query(
                    f"{sum_by(by, rate(bucket, (*matchers, _LE_NO_HEADROOM)))} / "
                    f"{sum_by(by, rate(bucket, (*matchers, _LE_ALL)))}",
                    "{{pool}} {{signal}}",
                )
            ],
            unit=d.PERCENT,
            width=8,
            maximum=1,
        ),
    ]
    for signal in SIGNAL_PANELS:
        name = signal.name
        panels.append(
            d.heatmap(
                f"{name} headroom at routing",
                f"Distribution of the {name} headroom requests had on the pod they were routed to, in seconds (buckets "
                f"from -10 s to 10 s); the rows at or below 0 are requests routed with none.{signal.note} Pool-level: "
                "not filtered by pod; not filtered by SLO class: each request's headroom is against its own SLOs.",
                d.Query(
                    sum_by(("le",), rate(bucket, (*matchers, signal.matcher))),
                    "{{le}}",
                    format="heatmap",
                ),
                y_unit=d.SECONDS,
                cell_unit=d.REQUESTS_PER_SECOND,
                width=8,
                height=8,
            )
        )
    return panels


def _state() -> list[Any]:
    def gauge_of(metric: MetricDef) -> str:
        return max_by((c.POOL, c.POD), sel(series(metric), _POD))

    violations = sum_by((c.POOL, c.POD, c.SLO), rate(series(c.POD_SLO_VIOLATIONS), _POD))
    requests = sum_by((c.POOL, c.POD), rate(series(c.POD_REQUESTS), _POD))
    return [
        d.row("Pod state"),
        d.timeseries(
            "KV cache utilization",
            "KV-cache utilization of each pod, 0..1, as sloscope last scraped it (mean over data-parallel engines)."
            + EVERY_CLASS,
            [d.Query(gauge_of(c.POD_KV_CACHE_UTILIZATION), "{{pod}}")],
            unit=d.PERCENT,
            width=8,
            maximum=1,
        ),
        d.timeseries(
            "Requests waiting",
            "Requests queued on each pod, as last scraped (summed over engines)." + EVERY_CLASS,
            [d.Query(gauge_of(c.POD_REQUESTS_WAITING), "{{pod}}")],
            unit=d.SHORT,
            width=8,
        ),
        d.timeseries(
            "Requests running",
            "Requests in each pod's running batch, as last scraped (summed over engines)." + EVERY_CLASS,
            [d.Query(gauge_of(c.POD_REQUESTS_RUNNING), "{{pod}}")],
            unit=d.SHORT,
            width=8,
        ),
        d.timeseries(
            "Prefix-cache hit rate",
            "Share of the prompt tokens each pod looked up in its prefix cache that the cache supplied, from the "
            "model server's own counters as sloscope passes them through (vLLM prefix_cache_hits / queries, SGLang "
            "cached_tokens / prompt_tokens). A falling rate means more prefill per request, hence longer TTFT at the "
            "same load; the predictor sees it only through the prefix-cache score the EPP sends." + EVERY_CLASS,
            [
                d.Query(
                    f"{max_by((c.POOL, c.POD), rate(series(c.POD_PREFIX_CACHE_HITS), _POD))} / "
                    f"{max_by((c.POOL, c.POD), rate(series(c.POD_PREFIX_CACHE_QUERIES), _POD))}",
                    "{{pod}}",
                )
            ],
            unit=d.PERCENT,
            width=8,
            maximum=1,
        ),
        d.timeseries(
            "Preemptions",
            "Requests each pod preempted (vLLM) or retracted (SGLang) per second to free KV cache: each one is "
            "recomputed later, so its TTFT or TPOT grows well past what was predicted. Preemptions with KV cache near "
            "1 mean the pod was given more than it can hold." + EVERY_CLASS,
            [d.Query(max_by((c.POOL, c.POD), rate(series(c.POD_PREEMPTIONS), _POD)), "{{pod}}")],
            unit=d.PER_SECOND,
            width=8,
        ),
        d.stat(
            "Pods up",
            "1 (up) when the pod's last metrics scrape succeeded, 0 (down) when it failed." + EVERY_CLASS,
            [d.Query(gauge_of(c.POD_UP), "{{pod}}")],
            unit=d.NONE,
            thresholds=d.steps(d.RED, (1, d.GREEN)),
            mappings=d.up_down(),
            width=8,
            height=8,
            sparkline=False,
        ),
        d.timeseries(
            "Scrape age",
            "Seconds since each pod's newest successful scrape. Samples older than the configured stale limit are not "
            "used for predictions, and the pod leaves the pool's count." + EVERY_CLASS,
            [d.Query(gauge_of(c.POD_SCRAPE_AGE_SECONDS), "{{pod}}")],
            unit=d.SECONDS,
            width=8,
        ),
        d.timeseries(
            "SLO violations per request by pod",
            "SLO violations per evaluated request on each pod, per SLO. Not an attainment: there is no per-pod count "
            "of eligible requests, so requests without that SLO are in the denominator too. A pod without any "
            "violation yet shows 0 for each SLO: its violation series start at 0 with its first request. Not filtered "
            "by SLO class: the per-pod counters carry no class.",
            [d.Query(f"{violations} / on ({c.POOL}, {c.POD}) group_left {requests}", "{{pod}} {{slo}}")],
            unit=d.PERCENT,
            width=8,
        ),
        d.table(
            "Pods now",
            "Each pod's last scraped state and its lowest live TTFT headroom over the classes, at the end of the time "
            "range. up: 1 or 0; kv cache: 0..1; headroom in seconds." + EVERY_CLASS,
            [
                d.Query(gauge_of(metric), instant=True, format="table")
                for metric in (c.POD_UP, c.POD_KV_CACHE_UTILIZATION, c.POD_REQUESTS_WAITING, c.POD_REQUESTS_RUNNING)
            ]
            + [
                d.Query(
                    min_by((c.POOL, c.POD), sel(series(c.POD_HEADROOM_SECONDS), (*_POD, SIGNAL_PANELS[0].matcher))),
                    instant=True,
                    format="table",
                )
            ],
            unit=d.SHORT,
            decimals=2,
            transformations=d.merged_columns("up", "kv cache", "waiting", "running", "ttft headroom (s)"),
            width=24,
        ),
    ]
