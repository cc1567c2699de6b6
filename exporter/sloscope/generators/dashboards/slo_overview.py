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
from sloscope.generators.dashboards import alerting, pod_headroom
from sloscope.generators.dashboards import common as d
from sloscope.generators.dashboards import variables as v
from sloscope.generators.dashboards.promql import (
    budget,
    duration,
    eq,
    max_by,
    min_by,
    ne,
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
    pods = d.uid(spec.service, pod_headroom.FILE_NAME)
    panels = [*_alerts(), *_traffic(), *_failures(), *_epp(), *_routing(), *_latency(), *_sizes()]
    panels += _engine_crosscheck(pods)
    for cls in spec.classes:
        panels += _class_row(spec, cls, pods)
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


def _alerts() -> list[Any]:
    return [d.row("Alerts"), alerting.firing_alerts()]


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
            no_traffic=True,
        ),
    ]


def _failures() -> list[Any]:
    """Failed requests by reason: how many, and what share of the traffic."""
    failed = rate(series(c.REQUESTS_FAILED), _FILTERS)
    reasons = ", ".join(c.FAILURE_REASONS)
    return [
        d.row("Failures"),
        d.timeseries(
            "Failed requests by reason",
            f"Requests per second that failed, by reason ({reasons}): error is an error status or HTTP >= 500, shed a "
            "refusal for load (HTTP 429, the EPP's admission), timeout the EPP's queue or a deadline, aborted a client "
            "that went away, invalid a client error. error, shed and timeout count as violations of every SLO the "
            "request carried; aborted only of the SLOs whose deadline passed before the client left (its class's "
            "aborts); invalid of none.",
            [d.Query(sum_by((c.REASON,), failed), "{{reason}}")],
            unit=d.REQUESTS_PER_SECOND,
            stacked=True,
        ),
        d.timeseries(
            "Failure share by reason",
            "Failed requests of each reason over all evaluated requests, per class: the failure rate a client sees. "
            "No traffic where no request was evaluated.",
            [
                d.Query(
                    f"{sum_by((c.SLO_CLASS, c.REASON), failed)} / ignoring ({c.REASON}) group_left "
                    f"{sum_by((c.SLO_CLASS,), rate(series(c.REQUESTS), _FILTERS))}",
                    "{{slo_class}} {{reason}}",
                )
            ],
            unit=d.PERCENT,
            no_traffic=True,
        ),
        d.timeseries(
            "Failures without a pool",
            "Requests per second that failed before reaching any pod and that no pool could be told for, by reason: "
            "counted in no pool's series or budget (docs/sending-traces.md, where a failure is counted). Above 0, "
            "name the pools' gateways (pools[].gateways) or give the EPPs' spans an identity; the "
            "SloscopeFailuresWithoutPool ticket watches the share. Not filtered by pool, model or SLO class: they "
            "have none.",
            [d.Query(sum_by((c.REASON,), rate(series(c.REQUESTS_WITHOUT_POOL))), "{{reason}}")],
            unit=d.REQUESTS_PER_SECOND,
            stacked=True,
        ),
    ]


def _epp() -> list[Any]:
    """The EPP's own series, re-published by sloscope: its view of the same traffic beside sloscope's."""
    pools, models = var(c.POOL), var(c.MODEL)
    return [
        d.row("The EPP's own view"),
        d.stat(
            "EPP up",
            "1 (up) when sloscope's last scrape of the pool's EPP /metrics succeeded, 0 (down) when it failed "
            "(sloscope_epp_up): down, the EPP's series below stop after scrape.stale_after_seconds, and a GIE v1.5.0 "
            "pool's routing and every pool's streaming mode are no longer read from its page. Not filtered by model "
            "or SLO class: one EPP serves the pool.",
            [d.Query(max_by((c.POOL,), sel(series(c.EPP_UP), (pools,))), "{{pool}}")],
            unit=d.NONE,
            thresholds=d.steps(d.RED, (1, d.GREEN)),
            mappings=d.up_down(),
            width=24,
            height=4,
            sparkline=False,
        ),
        d.timeseries(
            "SLO violations: the EPP's counter beside sloscope's",
            "Violations per second as the EPP counts them (sloscope_epp_slo_violations_total, by type: ttft, tpot; "
            "e2e where its TTFT is end-to-end latency) and as sloscope judges them (ttft, tpot, any class). The EPP "
            "counts every request it routed and streamed; sloscope the sampled traces (10 % by default) with the "
            "client's TTFT from the gateway span, and failures too: the lines differ by the sampling ratio and by "
            "what each calls TTFT (docs/predictions.md). Not filtered by SLO class: the EPP's counter names none "
            "(sloscope's lines are).",
            [
                d.Query(
                    sum_by((c.POOL, c.TYPE), rate(series(c.EPP_SLO_VIOLATIONS), (pools, models))),
                    "EPP {{pool}} {{type}}",
                ),
                d.Query(
                    sum_by(
                        (c.POOL, c.SLO),
                        rate(series(c.SLO_VIOLATIONS), (*_FILTERS, regex(c.SLO, f"{c.SLO_TTFT}|{c.SLO_TPOT}"))),
                    ),
                    "sloscope {{pool}} {{slo}}",
                ),
            ],
            unit=d.REQUESTS_PER_SECOND,
            width=12,
        ),
        d.timeseries(
            "EPP scheduling attempts by status",
            "Scheduling attempts per second of each pool's EPP, successful or failed (no endpoint could be picked: "
            "the requests it sheds or fails), from sloscope_epp_scheduler_attempts_total. Not filtered by model or "
            "SLO class: the EPP's attempts name its target model at most (the late-2025 EPP's none).",
            [
                d.Query(
                    sum_by((c.POOL, c.STATUS), rate(series(c.EPP_SCHEDULER_ATTEMPTS), (pools,))),
                    "{{pool}} {{status}}",
                )
            ],
            unit=d.REQUESTS_PER_SECOND,
            width=12,
        ),
        *(
            d.timeseries(
                f"EPP in-flight {what} by pod",
                f"{meaning}, as the llm-d EPP's in-flight load producer counts them: the load it predicts with. Not "
                "filtered by model or SLO class: the producer counts per pod.",
                [d.Query(max_by((c.POOL, c.POD), sel(series(metric), (pools,))), "{{pool}} {{pod}}")],
                unit=d.SHORT,
                width=12,
            )
            for what, metric, meaning in (
                ("requests", c.EPP_INFLIGHT_REQUESTS, "Requests routed to each pod and not yet seen end"),
                (
                    "prompt tokens",
                    c.EPP_INFLIGHT_TOKENS,
                    "Uncached prompt tokens of the requests in flight to each pod",
                ),
            )
        ),
        *_flow_control(),
    ]


_DISPATCHED = "Dispatched"  # the EPP's QueueOutcome of a request sent on to a pod (flowcontrol/types/outcomes.go)
_PER_POOL = " Not filtered by model or SLO class: the EPP's flow control is per pool."


def _flow_control() -> list[Any]:
    """The EPP's flow control (opt-in upstream): how saturated it judges the pool, what it holds back, and what became
    of the requests it held. Every sloscope replica republishes the same EPP page: ``max``, never ``sum``."""
    pools = (var(c.POOL),)
    dispatched = rate(
        series(c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS, "_bucket"), (*pools, eq(c.OUTCOME, _DISPATCHED))
    )
    left = rate(series(c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS, "_count"), pools)
    return [
        d.timeseries(
            "EPP flow-control saturation",
            "The saturation the pool's EPP computes to gate dispatch from its flow-control queues, by stage "
            "(llm-d-router: prefill, decode and effective, their max; GIE v1.5.0: the one gating value, as effective). "
            "At 1 and above the EPP holds requests back; pods with stale metrics count as saturated. Empty unless "
            "the EPP runs flow control." + _PER_POOL,
            [
                d.Query(
                    max_by((c.POOL, c.STAGE), sel(series(c.EPP_FLOW_CONTROL_SATURATION), pools)), "{{pool}} {{stage}}"
                )
            ],
            unit=d.PERCENT,
            thresholds=d.steps(d.TRANSPARENT, (1, d.RED)),
            threshold_style="dashed",
            width=12,
        ),
        d.timeseries(
            "EPP flow-control queue",
            "Requests the EPP holds in its flow-control queues now, by priority band: queued there, a request's TTFT "
            "grows by its wait before any pod sees it." + _PER_POOL,
            [
                d.Query(
                    max_by((c.POOL, c.PRIORITY), sel(series(c.EPP_FLOW_CONTROL_QUEUED_REQUESTS), pools)),
                    "{{pool}} priority {{priority}}",
                )
            ],
            unit=d.SHORT,
            width=12,
        ),
        d.timeseries(
            "Requests leaving EPP flow control by outcome",
            "Requests per second leaving the EPP's flow control, by outcome as the EPP names it: Dispatched to a "
            "pod, Rejected (capacity, other) or Evicted (TTL, the client's context cancelled, other). Rejected and "
            "evicted requests are the shed and timed-out failures sloscope counts against their SLOs." + _PER_POOL,
            [d.Query(max_by((c.POOL, c.OUTCOME), left), "{{pool}} {{outcome}}")],
            unit=d.REQUESTS_PER_SECOND,
            width=12,
        ),
        d.timeseries(
            "Wait in EPP flow control",
            "p50 and p99 of the time requests spent in the EPP's flow control before being dispatched: part of "
            "the TTFT the SLOs judge, spent before any pod and any prediction." + _PER_POOL,
            [
                d.Query(
                    f"histogram_quantile({q}, {max_by((c.POOL, 'le'), dispatched)})",
                    f"p{round(q * 100)} {{{{pool}}}}",
                )
                for q in (0.5, 0.99)
            ],
            unit=d.SECONDS,
            width=12,
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
                no_traffic=True,
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
            no_traffic=True,
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
            no_traffic=True,
        ),
    ]
    return panels


def _latency() -> list[Any]:
    panels: list[Any] = [d.row("Latency")]
    targets = "the spec's targets are bucket boundaries, so the share under a target is exact; "
    for metric, name, meaning in (
        (c.TTFT_SECONDS, "TTFT", targets),
        (c.TPOT_SECONDS, "TPOT", targets),
        (
            c.E2E_SECONDS,
            "E2E",
            "end-to-end latency at the model server, from the request's arrival to its last token; ",
        ),
    ):
        buckets = rate(series(metric, "_bucket"), _FILTERS)
        panels.append(
            d.timeseries(
                f"{name} percentiles by class",
                f"p50, p90 and p99 of the actual {name} per SLO class, from the histogram buckets ({meaning}a "
                "percentile between boundaries is interpolated). Exemplar dots link to the request's trace in the "
                "traces data source.",
                [
                    d.Query(
                        f"histogram_quantile({q}, {sum_by((c.SLO_CLASS, 'le'), buckets)})",
                        f"p{round(q * 100)} {{{{slo_class}}}}",
                        exemplar=q == 0.99,
                    )
                    for q in (0.5, 0.9, 0.99)
                ],
                unit=d.SECONDS,
                width=8,
                trace_links=True,
            )
        )
    panels.append(_ttft_in_front())
    return panels


def _ttft_in_front() -> Any:
    """The SLO's TTFT counts from the gateway's arrival, the model server's own from its arrival: the gap between
    the two is the time in front of the model server (the EPP's scheduling, a P/D prefill and KV transfer)."""
    where = (
        (c.TTFT_SECONDS, "from the gateway"),
        (c.MODEL_SERVER_TTFT_SECONDS, "model server's own"),
    )
    return d.timeseries(
        "TTFT from the gateway and at the model server",
        "p50 and p99 of the TTFT the SLOs judge (from the request's arrival at its gateway) beside the model "
        "server's own TTFT (from its arrival at the model server), every class together: the gap is the time a "
        "request spent in front of the model server (docs/sending-traces.md, which TTFT).",
        [
            d.Query(
                f"histogram_quantile({q}, {sum_by(('le',), rate(series(metric, '_bucket'), _FILTERS))})",
                f"p{round(q * 100)} {label}",
            )
            for q in (0.5, 0.99)
            for metric, label in where
        ],
        unit=d.SECONDS,
        width=24,
    )


_TOKENS = "suffix: tokens"
_TOKEN_RATE = "suffix: tokens/s"


def _sizes() -> list[Any]:
    """Token throughput and the prompt and output lengths of the requests, from the span's token counts."""
    prompt, completion = (
        rate(series(c.PROMPT_TOKENS, "_sum"), _FILTERS),
        rate(series(c.COMPLETION_TOKENS, "_sum"), _FILTERS),
    )
    panels: list[Any] = [
        d.row("Tokens"),
        d.timeseries(
            "Token throughput by model",
            "Prompt (input) and completion (output) tokens per second of the evaluated requests, by model, from the "
            "token counts on the model-server spans. Counts are of sampled requests when the gateway samples traces: "
            "divide by the sampled share (below) for the whole traffic.",
            [
                d.Query(sum_by((c.MODEL,), prompt), "prompt {{model}}"),
                d.Query(sum_by((c.MODEL,), completion), "completion {{model}}"),
            ],
            unit=_TOKEN_RATE,
            width=8,
        ),
    ]
    for metric, name in ((c.PROMPT_TOKENS, "Prompt"), (c.COMPLETION_TOKENS, "Output")):
        buckets = rate(series(metric, "_bucket"), _FILTERS)
        panels.append(
            d.timeseries(
                f"{name} length percentiles by class",
                f"p50, p90 and p99 of the {name.lower()} tokens per request per SLO class, from the histogram buckets "
                "(1, 2, 5, 10, ... tokens: a percentile between boundaries is interpolated). Long prompts lengthen "
                "TTFT, long outputs the end-to-end latency.",
                [
                    d.Query(
                        f"histogram_quantile({q}, {sum_by((c.SLO_CLASS, 'le'), buckets)})",
                        f"p{round(q * 100)} {{{{slo_class}}}}",
                    )
                    for q in (0.5, 0.9, 0.99)
                ],
                unit=_TOKENS,
                width=8,
            )
        )
    return panels


_ENGINE_FILTERS = (var(c.MODEL), var(c.POOL))
_ENGINE_SIGNALS = ((c.TTFT_SECONDS, c.SIGNAL_TTFT, "TTFT"), (c.TPOT_SECONDS, c.SIGNAL_TPOT, "TPOT"))


def _engine_crosscheck(pods_dashboard_uid: str) -> list[Any]:
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
                "own arrival, so it leaves out the gateway and EPP time the span-based TTFT includes. Not "
                "filtered by SLO class: the engines' histograms name none.",
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
    estimated = rate(series(c.E2E_SECONDS, "_count"), _ENGINE_FILTERS)
    sampled = rate(series(c.SAMPLED_REQUESTS), _ENGINE_FILTERS)
    served = rate(series(c.ENGINE_LATENCY_SECONDS, "_count"), (*_ENGINE_FILTERS, eq(c.SIGNAL, c.SIGNAL_E2E)))
    scheduled = rate(series(c.REQUESTS), (var(c.MODEL), var(c.POOL), ne(c.ROUTING, c.ROUTING_NONE)))
    epp = rate(series(c.EPP_REQUESTS), (var(c.POOL),))
    by = (c.POOL, c.MODEL)
    panels.append(
        d.timeseries(
            "Requests counted from spans against those the engines finished",
            "Over the requests the model servers finished (their end-to-end histogram's count: a P/D request ends "
            "once, on its decode pod), per pool and model: estimated, the requests sloscope measured from spans, each "
            "with its adjusted count (1 / its trace's sampling probability): near 100 % when the weights are right; "
            "sampled, the requests whose spans reached sloscope, each once (the EPP traces 10 % by default; failed "
            "requests included). An estimate far from 100 % while the sampled share is near the EPP's ratio says the "
            "assumed sampling probability is wrong (docs/sending-traces.md). Per pool, the estimated requests the EPP "
            "scheduled over its own unsampled count of them (where sloscope reads the EPP's page; a call of several "
            "EPP calls, llm-d's coordinator, is one request to sloscope and several to the EPP). Not filtered by SLO "
            "class: the engines' histograms name none.",
            [
                d.Query(f"{sum_by(by, estimated)} / {sum_by(by, served)}", "{{pool}} {{model}} estimated"),
                d.Query(f"{sum_by(by, sampled)} / {sum_by(by, served)}", "{{pool}} {{model}} sampled"),
                d.Query(f"{sum_by((c.POOL,), scheduled)} / {sum_by((c.POOL,), epp)}", "{{pool}} estimated / EPP"),
            ],
            unit=d.PERCENT,
            no_traffic=True,
            links=[_pool_link(pods_dashboard_uid, "${__field.labels.pool}", "")],
        )
    )
    return panels


def _pool_link(pods_dashboard_uid: str, pool: str, slo_class: str) -> dict[str, Any]:
    """A data link to the pod headroom dashboard with the clicked series' pool (and class) selected."""
    variables = {c.POOL: pool, **({c.SLO_CLASS: slo_class} if slo_class else {})}
    return d.dashboard_link(f"Pods of pool {pool}", pods_dashboard_uid, variables, "The pods of this pool")


def _class_row(spec: SLOSpec, cls: SLOClass, pods_dashboard_uid: str) -> list[Any]:
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
                no_traffic=True,
            )
        )
    panels.append(_budget(cls, base, period))
    for slo, name in SLO_TITLES.items():
        panels.append(_attainment_by_model(cls, (*base, eq(c.SLO, slo)), slo, name))
    for slo, name in SLO_TITLES.items():
        panels.append(_burn_rate(spec, cls, (*base, eq(c.SLO, slo)), slo, name))
    panels += alerting.burn_by_model_and_pool(spec, cls, base, pods_dashboard_uid)
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
        no_traffic=True,
    )


def _burn_rate(spec: SLOSpec, cls: SLOClass, matchers: tuple[str, ...], slo: str, name: str) -> Any:
    objective = cls.objectives.of(slo)
    return d.timeseries(
        f"{cls.name}: {name} burn rate",
        f"Error ratio / (1 - objective {objective:.2%}) over {', '.join(BURN_WINDOWS)}, summed over the selected "
        "models and pools weighted by traffic: 1 spends the error budget exactly over the compliance period, above 1 "
        "faster. A short window that burns while the long one does not is a spike; both burning is an incident. "
        f"Dashed lines: the alerts' thresholds ({alerting.burn_prose(spec, cls, objective)}); the alerts judge "
        "each model and pool alone (the table below).",
        [
            d.Query(f"({rule_error_ratio(window, (), matchers)}) / {budget(objective)}", window)
            for window in BURN_WINDOWS
        ],
        unit=d.SHORT,
        width=8,
        thresholds=alerting.burn_steps(spec, cls, objective),
        threshold_style="dashed",
        no_traffic=True,
    )
