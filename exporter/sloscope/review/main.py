"""``sloscope review``: read the window's requests (or ask Prometheus), analyse, render, write the files.

Files written for ``--out report.html``::

    report.html            self-contained: tables and the charts embedded as PNG data URIs (text escaped)
    report.md              the same report in Markdown; its charts are the PNGs in report-charts/
    report-charts/*.png
    report-tables/*.csv    every table at full precision
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sloscope import __version__
from sloscope.conventions import POD_REQUESTS, POD_SLO_VIOLATIONS
from sloscope.review import analysis, budget, charts, findings, quality
from sloscope.review.engine import Engine, Requests
from sloscope.review.escape import csv_safe
from sloscope.review.load import store_rows
from sloscope.review.prometheus import alert_step
from sloscope.review.render import Chart, Report, Section, cell, render_html, render_markdown
from sloscope.review.window import Window
from sloscope.slo.spec import SLOSpec

__all__ = ["Options", "build_report", "run", "write_report"]


@dataclass(frozen=True)
class Options:
    window: Window
    spec: SLOSpec
    out: Path
    title: str | None = None
    store: Path | None = None
    prometheus: str | None = None
    spec_source: str = "built-in spec"
    engine: Engine = field(default_factory=Engine)


def _chart(name: str, title: str, png: bytes | None) -> list[Chart]:
    return [] if png is None else [Chart(name, title, png)]


def _bin_text(seconds: float) -> str:
    seconds = round(seconds)
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


_BUDGET = (
    "error_budget = 1 - objective, the share of the compliance period's eligible requests allowed to miss. "
    "mean_burn_rate = (violations / eligible) / error_budget over the window: 1 spends the budget at exactly the "
    "pace that lasts the period. budget_consumed = the share of the period's error budget the window spent = "
    "violations / (error_budget x the period's expected eligible requests), the period's requests estimated as "
    "the window's scaled to the period (eligible x period / window): so mean_burn_rate x window / period "
    "(period_seconds, from the spec). budget_remaining = 1 - budget_consumed; status (the error-budget policy): "
    f"{budget.EXHAUSTED} when nothing remains, {budget.AT_RISK} when under {budget.AT_RISK_REMAINING:g} remains or "
    f"the mean burn rate is above {budget.AT_RISK_BURN_RATE:g}, else {budget.HEALTHY}. The window counts only its "
    "own spend: review the whole period for the period's remaining budget."
)
_ATTAINMENT = "Per SLO, class and model over the window: attainment = 1 - violations / eligible. " + _BUDGET


_ROUTING = (
    "Per SLO and class: eligible requests, violations and attainment under the prediction-based profile "
    "(predicted), the default profile (default) and where the EPP's choice is not known (unknown), side by side; "
    "difference = predicted attainment - default attainment. z and p_value are a two-sided two-proportion z-test "
    "of that difference (pooled proportion): p < 0.05 says the difference is unlikely to be noise at these counts, "
    "if requests are independent and the profile was not chosen by the kind of request. 'too few to tell' when a "
    "profile expects fewer than 5 violations or passes. The chart shows each attainment with its 95% Wilson "
    "interval."
)


def _routing_section(routing: pd.DataFrame, extra: str = "") -> Section:
    return Section(
        "Routing: prediction-based against default",
        _ROUTING + extra,
        charts=_chart("routing", "Attainment by routing profile", charts.routing_chart(routing)),
        tables=[("routing", routing)],
    )


def _burn_section(burn: pd.DataFrame, bin_seconds: int) -> Section:
    return Section(
        "Error budget burn over time",
        f"In {_bin_text(bin_seconds)} bins per SLO and class: the share of the compliance period's error budget "
        "consumed so far (the chart; it ends at the class's budget_consumed over the window) and each bin's burn "
        "rate = the bin's error ratio / (1 - objective), where 1 spends the budget exactly at the pace that lasts "
        "the period. Every bin is in the table burn.csv.",
        charts=_chart("burn", "Error budget consumed over time", charts.burn_chart(burn)),
        csv_only=[("burn", burn)],
    )


def _policy_section(policy: pd.DataFrame) -> Section:
    return Section(
        "Error-budget policy",
        "Per SLO and class (models summed): the status of the error-budget policy, from the budget the window "
        f"left and the pace it burned at. {budget.EXHAUSTED}: the budget is spent, the policy's freeze applies "
        f"(reliability work before features); {budget.AT_RISK}: under {budget.AT_RISK_REMAINING:g} of it left, or "
        f"burning faster than {budget.AT_RISK_BURN_RATE:g} (it runs out before the period ends at this pace); "
        f"{budget.HEALTHY}: neither.",
        tables=[("policy", policy)],
    )


def _breakdown_section(table: pd.DataFrame) -> Section:
    return Section(
        "Breakdown per pool and model",
        "The attainment and budget columns per SLO, class, pool and model: a class within budget overall can hide "
        "a pool or model that is not.",
        tables=[("breakdown", table)],
    )


def _alerts_section(alerts: pd.DataFrame, url: str, window: Window) -> Section:
    return Section(
        "Alerts that fired",
        f"From Prometheus at {url}: every alert firing at some time in the window, from its ALERTS series "
        f'(max_over_time(ALERTS{{alertstate="firing"}}[{_bin_text(alert_step(window))}]) as a range query of that '
        "step). first_firing and last_firing are at the step's resolution; firing_seconds counts the steps it "
        "fired in. Read them beside the burn chart: a page without a burn is noise, a burn without a page a gap.",
        tables=[("alerts", alerts)],
    )


def _quality_section(quality: pd.DataFrame, gaps: pd.DataFrame, join: float) -> Section:
    return Section(
        "Data quality",
        f"How far the numbers can be trusted. Join ratio {_percent_or_dash(join)}: the share of the store's "
        "requests whose model-server span was joined with its gateway span (join outcome joined or "
        "joined_by_request_id); the others lack the EPP's routing or targets. Store rows: requests per join "
        "outcome, invalid value (a field missing, negative or not finite), failed request (by reason) and "
        "prediction skipped (by reason), share = of the window's requests. Prometheus rows (with --prometheus): "
        "the exporter's own increase() over the window: spans dropped (share of spans received), records not "
        "written (share of the sink's records: lost to the store or the export), join outcomes, invalid values and "
        "failed requests (share of evaluated requests). gaps: stretches of whole bins between the first and last "
        "request without any request.",
        tables=[("data_quality", quality), ("gaps", gaps)],
    )


def _percent_or_dash(value: float) -> str:
    return "—" if math.isnan(value) else f"{value * 100:.1f}%"


_OFFENDERS = (
    "Per signal, the requests that missed their target by the largest factor (over_target = actual / target), "
    f"at most {quality.OFFENDER_LIMIT}: open their trace_id in the tracing UI first. Failed requests without "
    "an actual value are counted in the data quality section instead."
)


def store_sections(
    requests: Requests, spec: SLOSpec, window: Window, previous: Requests | None = None
) -> tuple[list[str], list[Section]]:
    """The summary's sentences and the sections, from the window's requests (and the previous period's)."""
    targets = analysis.objectives(spec)
    long = analysis.eligible(requests)
    bin_seconds = analysis.choose_bin(quality.span(long).seconds)
    # The budget is judged over the part of the window the store has requests in, not over the window asked for:
    # a short run in a long window says nothing of the rest of it (the whole window's, at the same pace, is the
    # "projected" column).
    observed = quality.observed_seconds(requests, bin_seconds, window.bounds)
    attainment = analysis.attainment(long, targets, observed, window.seconds)
    policy = analysis.policy(long, targets, observed, window.seconds)
    burn = analysis.burn(long, targets, bin_seconds, observed)
    routing = analysis.routing(long, targets)
    coverage = analysis.coverage(requests)
    mean_error = analysis.mean_error(requests)
    reliability = analysis.reliability(requests)
    before = analysis.eligible(previous) if previous is not None else None
    trend = analysis.trend(long, before, targets, window.seconds)
    summary = [
        *findings.budget_lines(attainment, window.seconds, observed),
        *filter(None, [findings.routing_line(routing)]),
        *findings.calibration_lines(coverage, mean_error),
        *findings.headroom_lines(requests),
    ]
    if previous is None:
        summary.append(f"Trend: the store has no requests in the {_bin_text(window.seconds)} before the window.")
    sections = [
        Section("Attainment and error budget", _ATTAINMENT, tables=[("attainment", attainment)]),
        _policy_section(policy),
        Section(
            "Trend against the previous period",
            f"Per SLO and class: the window beside the {_bin_text(window.seconds)} just before it (previous_*; "
            "empty when the store does not reach back that far), change = attainment - previous attainment "
            "(positive: better).",
            tables=[("trend", trend)],
        ),
        _breakdown_section(analysis.breakdown(long, targets, observed, window.seconds)),
        _routing_section(routing),
        _burn_section(burn, bin_seconds),
        Section(
            "Worst periods",
            f"The {_bin_text(bin_seconds)} bins that spent the largest share of the period's error budget of an SLO "
            "and class (budget_share = the bin's violations / the window's violations x the class's "
            "budget_consumed: a class's shares add up to its budget_consumed).",
            tables=[("worst_periods", analysis.worst_periods(burn))],
        ),
        _pods_section(analysis.worst_pods(long)),
        Section("Top offending requests", _OFFENDERS, tables=[("offenders", quality.offenders(requests))]),
        Section(
            "Violations by cause",
            "Each request that missed TTFT or TPOT, by the phase that caused it (from the model server's latency "
            "breakdown). Missed TTFT only: queueing if time in queue >= time in prefill, else prefill. Missed TPOT "
            "only: decode. Missed both: the phase with the largest share of its budget (queue / TTFT target, "
            "prefill / TTFT target, decode / (TPOT target x (completion tokens - 1))). Failed: the request failed. "
            "Unknown: no breakdown.",
            charts=_chart("causes", "Violations by cause", charts.causes_chart(causes := analysis.causes(requests))),
            tables=[("causes", causes)],
        ),
        Section(
            "Prediction calibration",
            "Coverage = share of requests with actual <= predicted; a quantile-q predictor should cover q of them "
            "(gap = coverage - q; negative: it predicts too low, and routing trusts too-optimistic numbers). The "
            "reliability plot cuts the predictions into deciles and plots the q-quantile of the actual values "
            "against the median prediction of each: calibrated bins lie on the diagonal. Both for quantile "
            "predictions only; a pool whose predictor predicts the mean is judged in mean_error instead: bias = mean "
            "of actual - predicted (relative_bias over the mean prediction; positive: it predicts too low), MAE and "
            "RMSE, in seconds.",
            charts=_chart(
                "reliability",
                "Reliability plot",
                charts.reliability_chart(reliability),
            ),
            tables=[("coverage", coverage), ("reliability", reliability), ("mean_error", mean_error)],
        ),
        Section(
            "Headroom at routing",
            "Target - predicted when the request was routed, per signal and class, in seconds. negative_share is the "
            "share routed although predicted to miss (no pod had headroom); a thin positive margin means little room "
            "for prediction error.",
            charts=_chart("headroom", "Headroom at routing", charts.headroom_chart(requests)),
            tables=[("headroom", analysis.headroom(requests))],
        ),
    ]
    return summary, sections


def _pods_section(pods: pd.DataFrame) -> Section:
    return Section(
        "Worst pods",
        "Per pod and SLO: eligible requests, violations, error ratio and the pod's share of the SLO's violations; "
        "a pod far above its peers points at the pod, similar ratios everywhere at load or the predictor.",
        charts=_chart("pods", "Error ratio per pod", charts.pods_chart(pods)),
        tables=[("worst_pods", pods)],
    )


def prometheus_sections(url: str, window: Window, spec: SLOSpec) -> tuple[list[str], list[Section]]:
    from sloscope.review.prometheus import query_tables

    targets = analysis.objectives(spec)
    bin_seconds = analysis.choose_bin(window.seconds)
    tables = query_tables(url, window, targets, bin_seconds)
    text = (
        " From Prometheus: increase() over the window, which extrapolates to the window's edges, so the counts "
        "are estimates (their ratios are exact when both counters have the same samples)."
    )
    policy = analysis.policy_from_counts(tables.counts, targets, window.seconds)
    sections = [
        Section("Attainment and error budget", _ATTAINMENT + text, tables=[("attainment", tables.attainment)]),
        _policy_section(policy),
        _routing_section(
            tables.routing,
            " From Prometheus: the counts are increase() estimates, so the test is approximate (it treats them as "
            "counts of requests).",
        ),
        _burn_section(tables.burn, bin_seconds),
        Section(
            "Worst pods",
            "Per pod and SLO: every evaluated request on the pod, its violations, violations_per_request = "
            "violations / all requests on the pod and the pod's share of the SLO's violations. From Prometheus "
            f"({POD_REQUESTS.exposed_name}, {POD_SLO_VIOLATIONS.exposed_name}): eligible requests per pod are not "
            "published, so violations_per_request is below the store's error ratio (violations / eligible) "
            "wherever some requests carry no SLO; compare pods with each other, not with the objective.",
            charts=_chart(
                "pods",
                "Violations per request per pod",
                charts.pods_chart(tables.pods, "violations_per_request", "violations / all requests on the pod"),
            ),
            tables=[("worst_pods", tables.pods)],
        ),
        Section(
            "Not available from Prometheus",
            "Violations by cause, prediction calibration, headroom, top offending requests, the breakdown per pool "
            "and the trend need the per-request rows of the record store: run the review with --store.",
        ),
    ]
    summary = [*findings.budget_lines(tables.attainment, window.seconds)]
    summary += filter(None, [findings.routing_line(tables.routing)])
    return summary, sections


def _span_facts(span: quality.Span, gaps: pd.DataFrame, observed: float, window: Window) -> list[tuple[str, str]]:
    first, last = span.first, span.last
    text = f"requests ended {cell(first)} to {cell(last)} ({_bin_text(span.seconds)})"
    covered = (
        f"{_bin_text(observed)} of the {_bin_text(window.seconds)} window ({observed / window.seconds:.1%}) has "
        "requests: error budgets are judged over that time (budget_consumed), and over the whole window at the "
        "same pace (budget_consumed_projected)"
    )
    if gaps.empty:
        holes = "none: every bin of the window has requests"
    else:
        longest = gaps.iloc[int(gaps["seconds"].to_numpy().argmax())]
        holes = f"{len(gaps)} without requests, {_bin_text(gaps['seconds'].sum())} in all, the longest "
        holes += f"{_bin_text(longest['seconds'])} from {cell(longest['gap_start'])} (gaps.csv)"
    return [("Data", text), ("Coverage", covered), ("Gaps", holes), ("Counts", quality.SAMPLING_NOTE)]


def build_report(options: Options) -> Report:
    window = options.window
    facts = [("Window", f"{window} ({_bin_text(window.seconds)})")]
    if options.store is not None:
        requests, previous = store_rows(options.store, window, options.engine)
        summary, sections = store_sections(requests, options.spec, window, previous)
        span = quality.span(requests)
        bin_seconds = analysis.choose_bin(span.seconds)
        gaps = quality.gaps(requests, bin_seconds, window.bounds)
        facts += _span_facts(span, gaps, quality.observed_seconds(requests, bin_seconds, window.bounds), window)
        source = f"record store {options.store}: {span.requests} requests"
        store_quality = quality.data_quality(requests)
        join = span.join_ratio
    else:
        assert options.prometheus is not None
        summary, sections = prometheus_sections(options.prometheus, window, options.spec)
        source = ""
        store_quality, gaps, join = None, pd.DataFrame(columns=["gap_start", "gap_end", "seconds"]), math.nan
    if options.prometheus is not None:
        from sloscope.review.prometheus import fired_alerts
        from sloscope.review.prometheus import quality as prometheus_quality

        source = "; ".join(filter(None, [source, f"Prometheus at {options.prometheus}"]))
        alerts = fired_alerts(options.prometheus, window)
        summary.append(findings.alerts_line(alerts))
        sections.append(_alerts_section(alerts, options.prometheus, window))
        from_prometheus = prometheus_quality(options.prometheus, window)
        data = from_prometheus if store_quality is None else pd.concat([store_quality, from_prometheus])
    else:
        assert store_quality is not None
        data = store_quality
    sections.append(_quality_section(data.reset_index(drop=True), gaps, join))
    facts += [
        ("Source", source),
        ("SLO spec", f"{options.spec_source} (service {options.spec.service})"),
        ("Made by", f"sloscope {__version__}"),
    ]
    title = options.title or f"SLO review: {options.spec.service}"
    return Report(title, facts, summary, sections)


def write_report(report: Report, out: Path) -> list[Path]:
    """Writes the HTML at ``out``, the Markdown beside it, its charts and the CSV tables; returns the paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    chart_dir = out.with_name(f"{out.stem}-charts")
    table_dir = out.with_name(f"{out.stem}-tables")
    written = [out, out.with_suffix(".md")]
    out.write_text(render_html(report), encoding="utf-8")
    out.with_suffix(".md").write_text(render_markdown(report, chart_dir.name), encoding="utf-8")
    for section in report.sections:
        for chart in section.charts:
            chart_dir.mkdir(exist_ok=True)
            path = chart_dir / f"{chart.name}.png"
            path.write_bytes(chart.png)
            written.append(path)
        for name, table in [*section.tables, *section.csv_only]:
            table_dir.mkdir(exist_ok=True)
            path = table_dir / f"{name}.csv"
            csv_safe(table).to_csv(path, index=False)
            written.append(path)
    return written


def run(options: Options) -> list[Path]:
    return write_report(build_report(options), options.out)
