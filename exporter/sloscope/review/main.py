"""``sloscope review``: read the window's requests (or ask Prometheus), analyse, render, write the files.

Files written for ``--out report.html``::

    report.html            self-contained: tables and the charts embedded as PNG data URIs
    report.md              the same report in Markdown; its charts are the PNGs in report-charts/
    report-charts/*.png
    report-tables/*.csv    every table at full precision
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sloscope import __version__
from sloscope.conventions import POD_REQUESTS, POD_SLO_VIOLATIONS, SLOS
from sloscope.review import analysis, charts
from sloscope.review.load import load_frame
from sloscope.review.render import Chart, Report, Section, cell, render_html, render_markdown
from sloscope.review.window import Window
from sloscope.slo.spec import SLOSpec

__all__ = ["Options", "build_report", "run", "summary", "write_report"]


@dataclass(frozen=True)
class Options:
    window: Window
    spec: SLOSpec
    out: Path
    title: str | None = None
    store: Path | None = None
    prometheus: str | None = None
    spec_source: str = "built-in spec"


def _percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def summary(attainment: pd.DataFrame) -> list[str]:
    """One verdict per SLO: within budget when no class and model spent more than its whole error budget."""
    lines = []
    for slo in SLOS:
        rows = attainment[(attainment["slo"] == slo) & attainment["objective"].notna()]
        if rows.empty:
            continue
        worst = rows.sort_values(["budget_consumed", "slo_class", "model"], ascending=[False, True, True]).iloc[0]
        over = rows[rows["budget_consumed"] > 1.0]
        verdict = "within budget" if over.empty else f"OVER BUDGET in {len(over)} of {len(rows)} class/model rows"
        lines.append(
            f"{slo}: {verdict}; most consumed: {worst['slo_class']} / {worst['model']}, attainment "
            f"{_percent(float(worst['attainment']))} against an objective of {_percent(float(worst['objective']))}, "
            f"{_percent(float(worst['budget_consumed']))} of the error budget consumed"
        )
    return lines


def _chart(name: str, title: str, png: bytes | None) -> list[Chart]:
    return [] if png is None else [Chart(name, title, png)]


def _bin_text(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


_ATTAINMENT = (
    "Per SLO, class and model over the window: attainment = 1 - violations / eligible, against the class's "
    "objective from the SLO spec. Budget consumed = (violations / eligible) / (1 - objective): 1.0 means the "
    "whole error budget of the window is spent."
)


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


def _burn_text(bin_seconds: int) -> str:
    return (
        f"In {_bin_text(bin_seconds)} bins per SLO and class: the error budget consumed so far (the chart; it ends at "
        "the class's budget consumed over the window) and each bin's burn rate = the bin's error ratio / "
        "(1 - objective), where 1 spends the budget exactly at the pace that lasts the window. Every bin is in "
        "the table burn.csv."
    )


def store_sections(requests: pd.DataFrame, spec: SLOSpec) -> tuple[pd.DataFrame, list[Section]]:
    targets = analysis.objectives(spec)
    long = analysis.eligible(requests)  # once: the tables that count eligible requests share it
    attainment = analysis.attainment(long, targets)
    span = (requests["end_time"].max() - requests["end_time"].min()).total_seconds()
    bin_seconds = analysis.choose_bin(span)
    burn = analysis.burn(long, targets, bin_seconds)
    routing = analysis.routing(long, targets)
    periods = analysis.worst_periods(burn)
    pods = analysis.worst_pods(long)
    causes = analysis.causes(requests)
    coverage = analysis.coverage(requests)
    reliability = analysis.reliability(requests)
    mean_error = analysis.mean_error(requests)
    headroom = analysis.headroom(requests)
    sections = [
        Section("Attainment and error budget", _ATTAINMENT, tables=[("attainment", attainment)]),
        _routing_section(routing),
        Section(
            "Error budget burn over time",
            _burn_text(bin_seconds),
            charts=_chart("burn", "Error budget consumed over time", charts.burn_chart(burn)),
            csv_only=[("burn", burn)],
        ),
        Section(
            "Worst periods",
            f"The {_bin_text(bin_seconds)} bins that spent the largest share of the window's error budget of an SLO "
            "and class (budget_share = the bin's violations / the window's eligible requests / (1 - objective)).",
            tables=[("worst_periods", periods)],
        ),
        Section(
            "Worst pods",
            "Per pod and SLO: eligible requests, violations, error ratio and the pod's share of the SLO's violations; "
            "a pod far above its peers points at the pod, similar ratios everywhere at load or the predictor.",
            charts=_chart("pods", "Error ratio per pod", charts.pods_chart(pods)),
            tables=[("worst_pods", pods)],
        ),
        Section(
            "Violations by cause",
            "Each request that missed TTFT or TPOT, by the phase that caused it (from the model server's latency "
            "breakdown). Missed TTFT only: queueing if time in queue >= time in prefill, else prefill. Missed TPOT "
            "only: decode. Missed both: the phase with the largest share of its budget (queue / TTFT target, "
            "prefill / TTFT target, decode / (TPOT target x (completion tokens - 1))). Unknown: no breakdown.",
            charts=_chart("causes", "Violations by cause", charts.causes_chart(causes)),
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
            charts=_chart("reliability", "Reliability plot", charts.reliability_chart(reliability)),
            tables=[("coverage", coverage), ("reliability", reliability), ("mean_error", mean_error)],
        ),
        Section(
            "Headroom at routing",
            "Target - predicted when the request was routed, per signal and class, in seconds. negative_share is the "
            "share routed although predicted to miss (no pod had headroom); a thin positive margin means little room "
            "for prediction error.",
            charts=_chart("headroom", "Headroom at routing", charts.headroom_chart(requests)),
            tables=[("headroom", headroom)],
        ),
    ]
    return attainment, sections


def prometheus_sections(url: str, window: Window, spec: SLOSpec) -> tuple[pd.DataFrame, list[Section]]:
    from sloscope.review.prometheus import query_tables

    targets = analysis.objectives(spec)
    bin_seconds = analysis.choose_bin(window.seconds)
    tables = query_tables(url, window, targets, bin_seconds)
    text = (
        " From Prometheus: increase() over the window, which extrapolates to the window's edges, so the counts "
        "are estimates (their ratios are exact when both counters have the same samples)."
    )
    sections = [
        Section("Attainment and error budget", _ATTAINMENT + text, tables=[("attainment", tables.attainment)]),
        _routing_section(
            tables.routing,
            " From Prometheus: the counts are increase() estimates, so the test is approximate (it treats them as "
            "counts of requests).",
        ),
        Section(
            "Error budget burn over time",
            _burn_text(bin_seconds),
            charts=_chart("burn", "Error budget consumed over time", charts.burn_chart(tables.burn)),
            csv_only=[("burn", tables.burn)],
        ),
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
            "Violations by cause, prediction calibration and headroom need the per-request rows of the record "
            "store: run the review with --store.",
        ),
    ]
    return tables.attainment, sections


def build_report(options: Options) -> Report:
    if options.store is not None:
        requests = load_frame(options.store, options.window)
        attainment, sections = store_sections(requests, options.spec)
        first, last = (cell(requests["end_time"].min()), cell(requests["end_time"].max()))
        source = f"record store {options.store}: {len(requests)} requests, ended {first} to {last}"
    else:
        assert options.prometheus is not None
        attainment, sections = prometheus_sections(options.prometheus, options.window, options.spec)
        source = f"Prometheus at {options.prometheus}"
    facts = [
        ("Window", str(options.window)),
        ("Source", source),
        ("SLO spec", f"{options.spec_source} (service {options.spec.service})"),
        ("Made by", f"sloscope {__version__}"),
    ]
    title = options.title or f"SLO review: {options.spec.service}"
    return Report(title, facts, summary(attainment), sections)


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
            table.to_csv(path, index=False)
            written.append(path)
    return written


def run(options: Options) -> list[Path]:
    return write_report(build_report(options), options.out)
