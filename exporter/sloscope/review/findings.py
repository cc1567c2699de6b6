"""The summary: the report's own findings as plain sentences, from the tables the analysis made.

One sentence per SLO (its error-budget policy status and the row that spent most), then what the routing
comparison, the calibration and the headroom say. Pure: tables in, sentences out; docs/review.md, "Summary",
lists each sentence and when it is said.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sloscope.conventions import SLOS
from sloscope.review import budget, queries
from sloscope.review.analysis import SIGNIFICANCE_LEVEL
from sloscope.review.engine import Requests, rows

__all__ = ["alerts_line", "budget_lines", "calibration_lines", "headroom_lines", "routing_line"]


def _percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def _days(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g}-day" if days >= 1 else f"{seconds / 3600:g}-hour"


def _length(seconds: float) -> str:
    """A stretch of time in the unit that reads best: 136 s, 12 min, 3.5 h, 2.5 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _largest(rows: pd.DataFrame, column: str) -> pd.Series:
    """The row with the largest absolute ``column`` (the first of equals)."""
    return rows.iloc[int(np.argmax(rows[column].abs().to_numpy()))]


def budget_lines(attainment: pd.DataFrame, window_seconds: float, observed_seconds: float | None = None) -> list[str]:
    """Per SLO: the worst status among its class/model rows and the row that spent most of its period's budget, over
    the ``observed_seconds`` of the window the data covers (the whole window when not given), and projected over
    the whole window at the same pace when the data covers less."""
    observed = window_seconds if observed_seconds is None else observed_seconds
    lines = []
    for slo in SLOS:
        rows = attainment[(attainment["slo"] == slo) & attainment["objective"].notna()]
        if rows.empty:
            continue
        worst = rows.sort_values(["budget_consumed", "slo_class", "model"], ascending=[False, True, True]).iloc[0]
        counted = rows["status"].value_counts()
        status = next(s for s in (budget.EXHAUSTED, budget.AT_RISK, budget.HEALTHY) if counted.get(s, 0))
        tally = ", ".join(f"{counted[s]} {s}" for s in (budget.EXHAUSTED, budget.AT_RISK) if counted.get(s, 0))
        spent = (
            f"{_percent(float(worst['budget_consumed']))} of its {_days(float(worst['period_seconds']))} error budget"
        )
        if observed < window_seconds:
            spent += (
                f" in the {_length(observed)} of this {_days(window_seconds)} window that has requests (projected "
                f"over the whole window at that pace: {_percent(float(worst['budget_consumed_projected']))})"
            )
        else:
            spent += f" in this {_days(window_seconds)} window"
        lines.append(
            f"{slo}: {status.upper()}{f' ({tally} of {len(rows)} class/model rows)' if tally else ''}; "
            f"most spent: {worst['slo_class']} / {worst['model']}, {spent} "
            f"(mean burn rate {float(worst['mean_burn_rate']):.2f}; "
            f"attainment {_percent(float(worst['attainment']))} against an objective of "
            f"{_percent(float(worst['objective']))})"
        )
    return lines


def routing_line(routing: pd.DataFrame) -> str | None:
    """Whether prediction-based routing did better or worse than the default profile, where the counts can say."""
    both = routing[(routing["predicted_eligible"] > 0) & (routing["default_eligible"] > 0)]
    if both.empty:
        return "Routing: no SLO and class had requests under both profiles, so nothing compares them."
    significant = both[both["note"].str.endswith(f"(p < {SIGNIFICANCE_LEVEL:g})")]
    untestable = both["note"].str.startswith("too few") | both["p_value"].isna()
    if significant.empty:
        testable = both[~untestable]
        smallest = f"; smallest p = {testable['p_value'].min():.3f}" if not testable.empty else ""
        few = f", {int(untestable.sum())} with too few requests to tell" if untestable.any() else ""
        return (
            f"Routing: no significant difference between prediction-based and default routing in any of "
            f"{len(both)} SLO/class rows{few}{smallest}."
        )
    said = []
    for _, row in significant.iterrows():
        better = "better" if float(row["difference"]) > 0 else "worse"
        said.append(
            f"{row['slo']}/{row['slo_class']} {better} ({_percent(float(row['predicted_attainment']))} vs "
            f"{_percent(float(row['default_attainment']))}, p = {float(row['p_value']):.3g})"
        )
    return (
        f"Routing: prediction-based routing differed significantly from default in {len(significant)} of "
        f"{len(both)} SLO/class rows: " + "; ".join(said) + "."
    )


def calibration_lines(coverage: pd.DataFrame, mean_error: pd.DataFrame) -> list[str]:
    """Per signal: the quantile predictions' worst coverage gap (coverage - q), and the mean predictions' worst
    relative bias, each with its pool and source."""
    lines = []
    for signal in ("ttft", "tpot"):
        rows = coverage[coverage["signal"] == signal]
        if not rows.empty:
            row = _largest(rows, "gap")
            reading = "predicts too low" if row["gap"] < 0 else "predicts too high" if row["gap"] > 0 else "calibrated"
            lines.append(
                f"Calibration: {signal.upper()} predictions ({row['source']}, pool {row['pool']}) covered "
                f"{_percent(float(row['coverage']))} of {int(row['compared'])} requests against a quantile of "
                f"{float(row['quantile']):g}: gap {float(row['gap']) * 100:+.1f} points ({reading})"
                + (f"; worst of {len(rows)} pool/source rows." if len(rows) > 1 else ".")
            )
        rows = mean_error[mean_error["signal"] == signal].dropna(subset=["relative_bias"])
        if not rows.empty:
            row = _largest(rows, "relative_bias")
            reading = "predicts too low" if row["relative_bias"] > 0 else "predicts too high"
            lines.append(
                f"Calibration: mean {signal.upper()} predictions ({row['source']}, pool {row['pool']}) have a "
                f"relative bias of {float(row['relative_bias']) * 100:+.1f}% over {int(row['compared'])} requests "
                f"({reading}; MAE {float(row['mae']):.4f} s)."
            )
    return lines


def headroom_lines(requests: Requests) -> list[str]:
    """Per signal: the share of requests routed with negative headroom (predicted to miss), over all classes."""
    ranges = rows(requests).table(queries.HEADROOM_RANGE).set_index("signal")
    lines = []
    for signal in ("ttft", "tpot"):
        if signal not in ranges.index:
            continue
        count, negative = int(ranges["requests"][signal]), int(ranges["negative"][signal])
        lines.append(
            f"Headroom: {_percent(negative / count)} of the {count} requests with a {signal.upper()} "
            f"headroom were routed with negative headroom ({negative} predicted to miss their target)."
        )
    return lines


def alerts_line(alerts: pd.DataFrame) -> str:
    if alerts.empty:
        return "Alerts: none fired in the window."
    names = sorted(set(alerts["alertname"]))
    return f"Alerts: {len(alerts)} fired in the window ({', '.join(names)})."
