"""The "SLO overview" dashboard: are the SLOs met, how fast is the budget going, does prediction-based routing help.

Attainment and burn rates read the recording rules the generated Prometheus rules write (one error ratio per
model, pool, class and SLO and window), re-weighted by traffic when summed over models. Objectives and
compliance periods come from the SLO spec: each class gets its own row, whose thresholds are the class's
objectives, so the dashboard changes when the spec does. Comparisons by ``routing`` read the raw counters,
since the recording rules do not keep that label.
"""

from __future__ import annotations

from typing import Any

from sloscope import conventions as c
from sloscope.generators.dashboards import common as d
from sloscope.generators.dashboards import variables as v
from sloscope.generators.dashboards.promql import (
    budget,
    duration,
    eq,
    min_by,
    rate,
    regex,
    rule_error_ratio,
    sel,
    series,
    slo_missed_share,
    sum_by,
    var,
)
from sloscope.slo.spec import SLOClass, SLOSpec

FILE_NAME = "slo-overview.json"
ATTAINMENT_WINDOW = "1h"
BURN_WINDOWS = ("5m", "1h", "6h")
SLO_TITLES = {c.SLO_TTFT: "TTFT", c.SLO_TPOT: "TPOT", c.SLO_GOODPUT: "Goodput"}
_COMPARED = regex(c.ROUTING, f"{c.ROUTING_PREDICTED}|{c.ROUTING_DEFAULT}")
_FILTERS = (var(c.MODEL), var(c.POOL), var(c.SLO_CLASS))
_SLO_MEANING = (
    "TTFT: actual time to first token at most the request's target. TPOT: time per output token after the first at "
    "most the target. Goodput: every SLO the request carries met."
)

for _window in (ATTAINMENT_WINDOW, *BURN_WINDOWS):
    if _window not in c.RULE_WINDOWS:
        raise ValueError(f"window {_window} has no recording rule (rules exist for {', '.join(c.RULE_WINDOWS)})")


def dashboard(spec: SLOSpec) -> Any:
    """The SLO overview of ``spec``: traffic, routing comparison, latency, then one row per SLO class."""
    panels = [*_traffic(), *_routing(), *_latency(), *_engine_crosscheck()]
    for cls in spec.classes:
        panels += _class_row(spec, cls)
    return d.build(
        title="SLO overview",
        service=spec.service,
        file_name=FILE_NAME,
        description=(
            f"SLO attainment, error budgets and burn rates of {spec.service} per SLO class, from sloscope's joined "
            "gateway and model-server traces; prediction-based routing against the default profile."
        ),
        tags=["slo"],
        variables=[*v.slo_variables(), v.traces_variable()],
        panels=panels,
        time_from="now-24h",
    )


def _traffic() -> list[Any]:
    goodput = (*_FILTERS, eq(c.SLO, c.SLO_GOODPUT))
    eligible = rate(series(c.SLO_REQUESTS), goodput)
    missed = rate(series(c.SLO_VIOLATIONS), goodput)
    return [
        d.row("Traffic and goodput"),
        d.timeseries(
            "Request rate by class and routing",
            "Evaluated (joined) requests per second, by SLO class and routing profile (routing: predicted, default, "
            "or unknown when no routing header was captured). Counts are of sampled requests when the gateway samples "
            "traces.",
            [
                d.Query(
                    sum_by((c.SLO_CLASS, c.ROUTING), rate(series(c.REQUESTS), _FILTERS)), "{{slo_class}} {{routing}}"
                )
            ],
            unit=d.REQUESTS_PER_SECOND,
            width=8,
            stacked=True,
        ),
        d.timeseries(
            "Goodput rate by model",
            "Requests per second that met every SLO they carried (eligible for goodput minus goodput violations). "
            "Requests without any SLO are not counted.",
            [
                d.Query(
                    f"{sum_by((c.MODEL,), eligible)} - ({sum_by((c.MODEL,), missed)} or "
                    f"{sum_by((c.MODEL,), eligible)} * 0)",
                    "{{model}}",
                )
            ],
            unit=d.REQUESTS_PER_SECOND,
            width=8,
        ),
        d.timeseries(
            f"Goodput share by class ({ATTAINMENT_WINDOW})",
            f"Share of requests carrying an SLO that met all of them, over the last {ATTAINMENT_WINDOW}, from the "
            "recording rules weighted by traffic. Each class's goodput objective is in its own row below.",
            [
                d.Query(
                    f"1 - ({rule_error_ratio(ATTAINMENT_WINDOW, (c.SLO_CLASS,), goodput)})",
                    "{{slo_class}}",
                )
            ],
            unit=d.PERCENT,
            width=8,
            maximum=1,
        ),
    ]


def _routing() -> list[Any]:
    panels: list[Any] = [d.row("Prediction-based routing against the default profile")]
    for slo, name in SLO_TITLES.items():
        matchers = (*_FILTERS, eq(c.SLO, slo), _COMPARED)
        panels.append(
            d.timeseries(
                f"{name} attainment by routing ({ATTAINMENT_WINDOW})",
                f"1 - violations / eligible requests for the {name} SLO over the last {ATTAINMENT_WINDOW}, per class, "
                "for requests routed by the prediction-based profile (x-prediction-based-scheduling) and by the "
                "default profile, side by side. From the raw counters, which keep the routing label. " + _SLO_MEANING,
                [
                    d.Query(
                        f"1 - ({slo_missed_share(ATTAINMENT_WINDOW, (c.SLO_CLASS, c.ROUTING), matchers)})",
                        "{{slo_class}} {{routing}}",
                    )
                ],
                unit=d.PERCENT,
                width=8,
                maximum=1,
            )
        )
    by = (c.SLO_CLASS, c.SLO, c.ROUTING)
    compared = (*_FILTERS, _COMPARED)
    panels += [
        d.table(
            "Attainment by routing over the time range",
            "Attainment per class and SLO over the whole dashboard time range, one column per routing profile: "
            "predicted (prediction-based) and default. A class missing a column had no request of that profile.",
            [
                d.Query(
                    f"1 - ({slo_missed_share('$__range', by, compared)})",
                    "{{routing}}",
                    instant=True,
                )
            ],
            unit=d.PERCENT,
            decimals=3,
            transformations=[
                {"id": "joinByLabels", "options": {"value": c.ROUTING, "join": [c.SLO_CLASS, c.SLO]}},
            ],
            width=16,
        ),
        d.timeseries(
            "Request share by routing",
            "Share of evaluated requests per routing profile. unknown: neither routing header was captured, so the "
            "request counts in neither side of the comparison.",
            [
                d.Query(
                    f"{sum_by((c.ROUTING,), rate(series(c.REQUESTS), _FILTERS))} / ignoring ({c.ROUTING}) group_left "
                    f"{sum_by((), rate(series(c.REQUESTS), _FILTERS))}",
                    "{{routing}}",
                )
            ],
            unit=d.PERCENT,
            width=8,
            stacked=True,
            maximum=1,
        ),
    ]
    return panels


def _latency() -> list[Any]:
    panels: list[Any] = [d.row("Latency")]
    for metric, name in ((c.TTFT_SECONDS, "TTFT"), (c.TPOT_SECONDS, "TPOT")):
        buckets = rate(series(metric, "_bucket"), _FILTERS)
        panels.append(
            d.timeseries(
                f"{name} percentiles by class",
                f"p50, p90 and p99 of the actual {name} per SLO class, from the histogram buckets (the spec's targets "
                "are bucket boundaries, so the share under a target is exact; a percentile in between is "
                "interpolated). Exemplar dots link to the request's trace in the traces data source.",
                [
                    d.Query(
                        f"histogram_quantile({q}, {sum_by((c.SLO_CLASS, 'le'), buckets)})",
                        f"p{round(q * 100)} {{{{slo_class}}}}",
                        exemplar=q == 0.99,
                    )
                    for q in (0.5, 0.9, 0.99)
                ],
                unit=d.SECONDS,
                trace_links=True,
            )
        )
    return panels


_ENGINE_FILTERS = (var(c.MODEL), var(c.POOL))
_ENGINE_SIGNALS = ((c.TTFT_SECONDS, c.SIGNAL_TTFT, "TTFT"), (c.TPOT_SECONDS, c.SIGNAL_TPOT, "TPOT"))


def _engine_crosscheck() -> list[Any]:
    """Span-based latency against the model servers' own unsampled histograms, and the share the spans cover."""
    panels: list[Any] = [d.row("Span-based against engine-based latency")]
    for metric, signal, name in _ENGINE_SIGNALS:
        spans = rate(series(metric, "_bucket"), _ENGINE_FILTERS)
        engine = rate(series(c.ENGINE_LATENCY_SECONDS, "_bucket"), (*_ENGINE_FILTERS, eq(c.SIGNAL, signal)))
        panels.append(
            d.timeseries(
                f"{name}: spans against the engines' own histograms",
                f"p50 and p90 of the {name} sloscope measures from spans (the sampled requests the EPP traces) and of "
                f"the {name} the model servers observe for every request they serve (vLLM, SGLang, trtllm-serve "
                "histograms, signal "
                f"{signal}). Close lines say the sampled spans describe the traffic; the engine's TTFT starts at its "
                "own arrival, so it leaves out the gateway and EPP time the span-based TTFT includes.",
                [
                    d.Query(f"histogram_quantile({q}, {sum_by(('le',), spans)})", f"p{round(q * 100)} spans")
                    for q in (0.5, 0.9)
                ]
                + [
                    d.Query(f"histogram_quantile({q}, {sum_by(('le',), engine)})", f"p{round(q * 100)} engines")
                    for q in (0.5, 0.9)
                ],
                unit=d.SECONDS,
            )
        )
    sampled = rate(series(c.TTFT_SECONDS, "_count"), _ENGINE_FILTERS)
    served = rate(series(c.ENGINE_LATENCY_SECONDS, "_count"), (*_ENGINE_FILTERS, eq(c.SIGNAL, c.SIGNAL_TTFT)))
    panels.append(
        d.timeseries(
            "Sampled share of requests",
            "Requests sloscope judged from spans over the requests the model servers served (their TTFT histogram's "
            "count), per pool and model. The EPP traces 10 % of requests by default: the SLO series describe this "
            "share of the traffic.",
            [
                d.Query(
                    f"{sum_by((c.POOL, c.MODEL), sampled)} / {sum_by((c.POOL, c.MODEL), served)}",
                    "{{pool}} {{model}}",
                )
            ],
            unit=d.PERCENT,
        )
    )
    return panels


def _class_row(spec: SLOSpec, cls: SLOClass) -> list[Any]:
    """Attainment, budget and burn rates of one class, its objectives as thresholds and in the queries."""
    objectives = cls.objectives
    period = duration(spec.period_of(cls))
    summary = ", ".join(f"{SLO_TITLES[slo]} {objectives.of(slo):.2%}" for slo in c.SLOS)
    # The fixed class matcher selects the row's class; the variable matcher on the same label empties the row
    # when the viewer deselects the class, instead of showing it regardless.
    base = (eq(c.SLO_CLASS, cls.name), var(c.SLO_CLASS), var(c.MODEL), var(c.POOL))
    panels: list[Any] = [d.row(f"Class {cls.name}: objectives {summary} over {period}")]
    for slo, name in SLO_TITLES.items():
        matchers = (*base, eq(c.SLO, slo))
        panels.append(
            d.stat(
                f"{cls.name}: {name} attainment ({ATTAINMENT_WINDOW})",
                f"Share of the class's eligible requests that met the {name} SLO over the last {ATTAINMENT_WINDOW} "
                f"(recording rules, weighted by traffic). Red below the objective {objectives.of(slo):.2%}. "
                + _SLO_MEANING,
                [d.Query(f"1 - ({rule_error_ratio(ATTAINMENT_WINDOW, (), matchers)})")],
                unit=d.PERCENT,
                thresholds=d.at_least(objectives.of(slo)),
                decimals=2,
                width=4,
            )
        )
    panels.append(_budget(cls, base, period))
    for slo, name in SLO_TITLES.items():
        panels.append(_attainment_by_model(cls, (*base, eq(c.SLO, slo)), slo, name))
    for slo, name in SLO_TITLES.items():
        panels.append(_burn_rate(cls, (*base, eq(c.SLO, slo)), slo, name))
    return panels


def _budget(cls: SLOClass, base: tuple[str, ...], period: str) -> Any:
    queries = [
        d.Query(
            min_by((c.SLO,), sel(c.SLO_PERIOD_ERROR_BUDGET_REMAINING_RULE, (*base, eq(c.SLO, slo)))),
            "{{slo}}",
            instant=True,
        )
        for slo in c.SLOS
    ]
    return d.stat(
        f"{cls.name}: error budget remaining ({period})",
        f"1 - error ratio / (1 - objective) over the class's compliance period ({period}), per SLO: 100% = nothing "
        "spent, 0 = the budget is gone, below 0 = the objective is missed for the period. The lowest of the selected "
        "models and pools, each counted on its own as its alerts are, evaluated once at the end of the time range. "
        f"From the recorded {c.SLO_PERIOD_ERROR_BUDGET_REMAINING_RULE}, whose error ratio weighs the period by "
        f"traffic; Prometheus must keep {period} of the recorded series (docs/dashboards-and-alerts.md).",
        queries,
        unit=d.PERCENT,
        thresholds=d.steps(d.RED, (0, d.ORANGE), (0.25, d.GREEN)),
        decimals=1,
        width=12,
        sparkline=False,
    )


def _attainment_by_model(cls: SLOClass, matchers: tuple[str, ...], slo: str, name: str) -> Any:
    objective = cls.objectives.of(slo)
    return d.timeseries(
        f"{cls.name}: {name} attainment by model ({ATTAINMENT_WINDOW})",
        f"{name} attainment of the class per model over a sliding {ATTAINMENT_WINDOW} (recording rules). The red "
        f"area is below the objective {objective:.2%}.",
        [d.Query(f"1 - ({rule_error_ratio(ATTAINMENT_WINDOW, (c.MODEL,), matchers)})", "{{model}}")],
        unit=d.PERCENT,
        width=8,
        thresholds=d.steps(d.RED, (objective, d.TRANSPARENT)),
        threshold_style="line+area",
        maximum=1,
    )


def _burn_rate(cls: SLOClass, matchers: tuple[str, ...], slo: str, name: str) -> Any:
    objective = cls.objectives.of(slo)
    return d.timeseries(
        f"{cls.name}: {name} burn rate",
        f"Error ratio / (1 - objective {objective:.2%}) over {', '.join(BURN_WINDOWS)}: 1 spends the error budget "
        "exactly over the compliance period, above 1 faster. A short window that burns while the long one does not "
        "is a spike; both burning is an incident.",
        [
            d.Query(f"({rule_error_ratio(window, (), matchers)}) / {budget(objective)}", window)
            for window in BURN_WINDOWS
        ],
        unit=d.SHORT,
        width=8,
        thresholds=d.steps(d.GREEN, (1, d.RED)),
        threshold_style="dashed",
    )
