"""The review's numbers: pure functions from the requests DataFrame (see ``load``) to tables.

Definitions (docs/review.md explains how to read them):

- attainment = 1 - violations / eligible; error budget = 1 - objective;
- mean burn rate over the window = (violations / eligible) / (1 - objective) (1 = spending at exactly the pace
  that lasts the compliance period);
- budget consumed = the share of the compliance period's error budget the window spent: violations /
  ((1 - objective) x the period's expected eligible requests), the period's requests estimated as the window's
  scaled to the period's length (eligible x period / window); so budget consumed = mean burn rate x window /
  period, the Google SRE workbook's "budget consumed = burn rate x window / period" (see :mod:`budget`);
- burn rate over a bin = the bin's error ratio / (1 - objective);
- coverage = share of compared requests (actual and predicted both known) with actual <= predicted,
  read against the predictor's quantile, for quantile predictions only;
- for mean predictions (``prediction_objective`` mean) instead: bias (mean of actual - predicted), relative
  bias (over the mean prediction), MAE and RMSE;
- headroom at routing = target - predicted (the store's ``*_headroom_seconds``);
- routing: attainment per routing profile (``predicted``, ``default``, ``unknown``) side by side, the difference
  predicted - default, and a two-sided two-proportion z-test of that difference (pooled proportion; see
  :func:`two_proportion_z`), with Wilson score intervals for the chart (:func:`wilson_interval`).

Objectives come from the SLO spec: :func:`objectives` turns it into a table, one row per class and SLO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from sloscope.conventions import (
    ROUTING_DEFAULT,
    ROUTING_PREDICTED,
    ROUTING_UNKNOWN,
    SIGNALS,
    SLOS,
    UNKNOWN,
)
from sloscope.review import budget, queries
from sloscope.review.engine import Requests, Rows, rows
from sloscope.slo.spec import SLOSpec

__all__ = [
    "BIN_LADDER_SECONDS",
    "CAUSES",
    "HEADROOM_PERCENTILES",
    "MIN_EXPECTED",
    "ROUTINGS",
    "SIGNIFICANCE_LEVEL",
    "attainment",
    "attainment_from_counts",
    "breakdown",
    "burn",
    "burn_from_counts",
    "causes",
    "choose_bin",
    "coverage",
    "eligible",
    "headroom",
    "mean_error",
    "objectives",
    "policy",
    "policy_from_counts",
    "reliability",
    "routing",
    "routing_from_counts",
    "trend",
    "two_proportion_z",
    "violation_cause",
    "wilson_interval",
    "worst_periods",
    "worst_pods",
    "worst_pods_from_counts",
]

BIN_LADDER_SECONDS = (3600, 1800, 900, 300, 60, 30, 10, 5)
"""Bins the burn-over-time table may use: the longest that still gives ``MIN_BINS`` bins over the data."""
MIN_BINS = 12
CAUSES = ("failed", "queueing", "prefill", "decode", "unknown")
HEADROOM_PERCENTILES = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95)
ROUTINGS = (ROUTING_PREDICTED, ROUTING_DEFAULT, ROUTING_UNKNOWN)
"""The routing profiles, in the order of the routing table's columns; any other value counts as unknown."""
SIGNIFICANCE_LEVEL = 0.05
"""Two-sided: a difference with p below it is called significant."""
MIN_EXPECTED = 5.0
"""The z-test's normal approximation is trusted when each group expects at least this many violations and passes."""
_GROUP = ["slo", "slo_class", "model"]


def objectives(spec: SLOSpec) -> pd.DataFrame:
    """One row per (slo_class, slo) with its objective and compliance period (seconds); the default class has none
    (its requests carry no SLO)."""
    rows = [(cls.name, slo, cls.objectives.of(slo), float(spec.period_of(cls))) for cls in spec.classes for slo in SLOS]
    return pd.DataFrame(rows, columns=["slo_class", "slo", "objective", "period_seconds"])


def eligible(requests: Requests) -> Rows:
    """Long form: one row per (request, SLO it was eligible for), with ``violated`` (the ``eligible`` view,
    :data:`~sloscope.review.queries.ELIGIBLE`). The tables counting eligible requests (attainment, burn, routing,
    worst pods) take it."""
    return rows(requests)


def _counts(long: Requests, keys: Sequence[str], bin_seconds: int | None = None) -> pd.DataFrame:
    """Eligible requests and violations per ``keys`` of the long form (``bin_start``: bins of ``bin_seconds``).

    The report's keys (:data:`~sloscope.review.queries.COUNT_KEYS`) come from one query that counts them all in
    one scan (:data:`~sloscope.review.queries.COUNTS`), run once per bin width; other keys from their own query.
    """
    found = rows(long)
    bin_ns = (bin_seconds or BIN_LADDER_SECONDS[0]) * 1_000_000_000
    if tuple(keys) not in queries.COUNT_KEYS and "bin_start" in keys:
        return found.table(queries.counts(*keys), times=["bin_start"], bin_ns=bin_ns)
    if tuple(keys) not in queries.COUNT_KEYS:
        return found.table(queries.counts(*keys))
    every = found.table(queries.COUNTS, bin_ns=bin_ns)
    columns = queries.COUNT_COLUMNS
    summed = sum(1 << (len(columns) - 1 - i) for i, column in enumerate(columns) if column not in keys)
    table = every[every["grouping_set"] == summed][[*keys, "eligible", "violations"]]
    if "bin_start" in keys:
        table["bin_start"] = pd.to_datetime(table["bin_start"].astype("int64"), unit="ns", utc=True)
    table = table.astype({"eligible": "int64", "violations": "int64"})
    return table.sort_values(list(keys)).reset_index(drop=True)


def _with_objectives(table: pd.DataFrame, targets: pd.DataFrame, window_seconds: float) -> pd.DataFrame:
    """Attainment, error budget, mean burn rate and the share of the period's budget consumed in the window."""
    table = table.merge(targets, on=["slo_class", "slo"], how="left")
    ratio = table["violations"] / table["eligible"]
    table["attainment"] = 1.0 - ratio
    table["error_budget"] = 1.0 - table["objective"]
    table["mean_burn_rate"] = ratio / table["error_budget"]
    table["budget_consumed"] = budget.consumed(table["mean_burn_rate"], window_seconds, table["period_seconds"])
    return table


_SLO_ORDER = {slo: i for i, slo in enumerate(SLOS)}


def _slo_first(column: pd.Series) -> pd.Series:
    """Sort key: SLOs in the order ttft, tpot, goodput; other columns as they are."""
    return column.map(_SLO_ORDER) if column.name == "slo" else column


def _slo_order(table: pd.DataFrame) -> pd.Series:
    return table["slo"].map(_SLO_ORDER)


def attainment(
    long: Requests, targets: pd.DataFrame, window_seconds: float, projected_seconds: float | None = None
) -> pd.DataFrame:
    """Per SLO, class and model over the window (``long`` from :func:`eligible`): eligible, violations,
    attainment, objective, mean burn rate, the period's budget consumed and remaining, and the policy status.

    ``window_seconds`` is the time the counts speak for (the store's: the part of the window it has requests in);
    ``budget_consumed_projected`` is the budget the same pace would spend over ``projected_seconds`` (the whole
    window asked for; ``window_seconds`` when not given). ``within_budget`` is False when more than the period's
    whole budget is spent; null when the class has no objective.
    """
    return attainment_from_counts(_counts(long, _GROUP), targets, window_seconds, projected_seconds)


def attainment_from_counts(
    counts: pd.DataFrame, targets: pd.DataFrame, window_seconds: float, projected_seconds: float | None = None
) -> pd.DataFrame:
    """The attainment table from counts per ``keys`` (slo, slo_class, model by default; the store's, or
    Prometheus's increases) over a window of ``window_seconds``."""
    return _budget_table(counts, targets, window_seconds, ["slo", "slo_class", "model"], projected_seconds)


def _budget_table(
    counts: pd.DataFrame,
    targets: pd.DataFrame,
    window_seconds: float,
    keys: list[str],
    projected_seconds: float | None = None,
) -> pd.DataFrame:
    table = _with_objectives(counts[counts["eligible"] > 0], targets, window_seconds)
    table["budget_consumed_projected"] = budget.consumed(
        table["mean_burn_rate"], projected_seconds or window_seconds, table["period_seconds"]
    )
    table["budget_remaining"] = 1.0 - table["budget_consumed"]
    table["within_budget"] = (table["budget_consumed"] <= 1.0).astype("boolean")
    table.loc[table["objective"].isna(), "within_budget"] = pd.NA
    table["status"] = budget.status(table["budget_remaining"], table["mean_burn_rate"])
    table = table.sort_values(keys, key=_slo_first)
    columns = [*keys, "eligible", "violations", "attainment", "objective", "error_budget", "period_seconds"]
    columns += ["mean_burn_rate", "budget_consumed", "budget_consumed_projected", "budget_remaining", "within_budget"]
    columns += ["status"]
    return table[columns].reset_index(drop=True)


def policy(
    long: Requests, targets: pd.DataFrame, window_seconds: float, projected_seconds: float | None = None
) -> pd.DataFrame:
    """Per SLO and class (models summed): the attainment table's columns, with the error-budget policy status."""
    return policy_from_counts(_counts(long, ["slo", "slo_class"]), targets, window_seconds, projected_seconds)


def policy_from_counts(
    counts: pd.DataFrame, targets: pd.DataFrame, window_seconds: float, projected_seconds: float | None = None
) -> pd.DataFrame:
    """The policy table from counts per (slo, slo_class) or finer (summed over the rest)."""
    keys = ["slo", "slo_class"]
    summed = counts.groupby(keys, as_index=False)[["eligible", "violations"]].sum()
    return _budget_table(summed, targets, window_seconds, keys, projected_seconds)


def breakdown(
    long: Requests, targets: pd.DataFrame, window_seconds: float, projected_seconds: float | None = None
) -> pd.DataFrame:
    """Per SLO, class, pool and model: the attainment table's columns, one row per pool and model."""
    keys = ["slo", "slo_class", "pool", "model"]
    return _budget_table(_counts(long, keys), targets, window_seconds, keys, projected_seconds)


def choose_bin(span_seconds: float) -> int:
    """The longest bin of ``BIN_LADDER_SECONDS`` that cuts ``span_seconds`` into at least 12 bins.

    A week is reviewed hour by hour; a two-minute demo in 10-second bins.
    """
    for seconds in BIN_LADDER_SECONDS:
        if span_seconds / seconds >= MIN_BINS:
            return seconds
    return BIN_LADDER_SECONDS[-1]


def burn(long: Requests, targets: pd.DataFrame, bin_seconds: int, window_seconds: float) -> pd.DataFrame:
    """Per bin (``bin_start``, aligned to multiples of the bin since the epoch), SLO and class, the models summed.

    ``burn_rate`` is the bin's error ratio over the error budget (1 = spending exactly the budget's pace);
    ``budget_consumed_cumulative`` is the share of the period's budget spent up to the bin's end, as
    ``budget_consumed`` counts it: violations so far / (all eligible in the window x period / window) /
    (1 - objective); its last value is the class's budget consumed over the window. Bins without eligible
    requests are left out.
    """
    return burn_from_counts(_counts(long, ["slo", "slo_class", "bin_start"], bin_seconds), targets, window_seconds)


def burn_from_counts(counts: pd.DataFrame, targets: pd.DataFrame, window_seconds: float) -> pd.DataFrame:
    """The burn table from counts per (slo, slo_class, bin_start): the store's, or Prometheus's increases."""
    table = _with_objectives(counts[counts["eligible"] > 0], targets, window_seconds)
    table["error_ratio"] = table["violations"] / table["eligible"]
    table["burn_rate"] = table["error_ratio"] / table["error_budget"]
    table = table.sort_values(["slo", "slo_class", "bin_start"], key=_slo_first).reset_index(drop=True)
    keys = ["slo", "slo_class"]
    total = table.groupby(keys)["eligible"].transform("sum")
    so_far = table.groupby(keys)["violations"].cumsum()
    table["budget_consumed_cumulative"] = budget.consumed(
        so_far / total / table["error_budget"], window_seconds, table["period_seconds"]
    )
    columns = ["bin_start", "slo", "slo_class", "eligible", "violations", "error_ratio", "objective", "burn_rate"]
    return table[[*columns, "budget_consumed_cumulative"]].reset_index(drop=True)


def worst_periods(burn_table: pd.DataFrame, limit: int = 10) -> pd.DataFrame:
    """The bins that spent most of the period's budget: ``budget_share`` = the bin's part of the window's budget
    consumed (its violations over the window's, times the class's ``budget_consumed``), so the shares of a class
    add up to its budget consumed. Bins of a class without objective are left out; ties go to the earlier bin."""
    table = burn_table.dropna(subset=["objective"]).copy()
    keys = ["slo", "slo_class"]
    last = table.groupby(keys)["budget_consumed_cumulative"].transform("last")
    missed = table.groupby(keys)["violations"].transform("sum")
    table["budget_share"] = table["violations"] / missed.where(missed > 0) * last
    table = table[table["violations"] > 0]
    table = table.sort_values(["budget_share", "bin_start", "slo", "slo_class"], ascending=[False, True, True, True])
    columns = ["bin_start", "slo", "slo_class", "eligible", "violations", "error_ratio", "burn_rate", "budget_share"]
    return table[columns].head(limit).reset_index(drop=True)


def worst_pods(long: Requests, limit: int = 10) -> pd.DataFrame:
    """Per pool, pod and SLO (``long`` from :func:`eligible`): eligible, violations, error ratio and the pod's
    share of that SLO's violations.

    Sorted by violations, then error ratio (both descending), then pod; the first ``limit`` rows of each SLO. A
    request that failed before reaching any pod (no pod: ``unknown``) is no pod's, as in the pod series.
    """
    table = _counts(long, ["slo", "pool", "pod"])
    table = table[table["pod"] != UNKNOWN].copy()
    table["error_ratio"] = table["violations"] / table["eligible"]
    return _rank_pods(table, "eligible", "error_ratio", limit)


def worst_pods_from_counts(requests: pd.DataFrame, violations: pd.DataFrame, limit: int = 10) -> pd.DataFrame:
    """Worst pods from per-pod counters (Prometheus): ``requests`` per (pool, pod), ``violations`` per (slo, pool,
    pod). Eligible requests per pod are not published, so the ratio is ``violations_per_request`` = violations /
    every evaluated request on the pod, not an error ratio over the eligible ones.

    Every pod with requests gets a row for each SLO some pod missed (0 violations where it has no series); an
    SLO no pod missed has no rows. Ranked as :func:`worst_pods`.
    """
    slos = [slo for slo in SLOS if slo in set(violations["slo"])]
    grid = requests.merge(pd.DataFrame({"slo": pd.Series(slos, dtype=object)}), how="cross")
    table = grid.merge(violations, on=["slo", "pool", "pod"], how="outer").fillna({"requests": 0.0, "violations": 0.0})
    table["violations_per_request"] = table["violations"] / table["requests"].where(table["requests"] > 0)
    return _rank_pods(table, "requests", "violations_per_request", limit)


def _rank_pods(table: pd.DataFrame, count: str, ratio: str, limit: int) -> pd.DataFrame:
    all_violations = table.groupby("slo")["violations"].transform("sum")
    table["share_of_violations"] = (table["violations"] / all_violations.where(all_violations > 0)).fillna(0.0)
    table["order"] = _slo_order(table)
    table = table.sort_values(["order", "violations", ratio, "pod"], ascending=[True, False, False, True])
    table = table.groupby("slo", sort=False).head(limit)
    columns = ["slo", "pool", "pod", count, "violations", ratio, "share_of_violations"]
    return table[columns].reset_index(drop=True)


def wilson_interval(violations: float, eligible: float, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of the attainment 1 - violations / eligible: (low, high).

    Unlike attainment +- z x standard error it stays within [0, 1] and is not empty at 0 or all violations.
    """
    if eligible <= 0:
        return (math.nan, math.nan)
    p = 1.0 - violations / eligible
    centre = (p + z * z / (2 * eligible)) / (1 + z * z / eligible)
    half = z / (1 + z * z / eligible) * math.sqrt(p * (1 - p) / eligible + z * z / (4 * eligible * eligible))
    return (centre - half, centre + half)


def two_proportion_z(
    violations_a: float, eligible_a: float, violations_b: float, eligible_b: float
) -> tuple[float, float]:
    """(z, two-sided p) of the difference in attainment a - b under the null hypothesis of equal attainment.

    z = (attainment_a - attainment_b) / sqrt(p (1 - p) (1 / n_a + 1 / n_b)), p = the pooled attainment
    (all passes / all eligible); p-value = erfc(|z| / sqrt 2). NaN when a group is empty or the pooled
    attainment is 0 or 1 (no violation, or nothing but violations, in both: nothing to test).
    """
    if eligible_a <= 0 or eligible_b <= 0:
        return (math.nan, math.nan)
    pooled = 1.0 - (violations_a + violations_b) / (eligible_a + eligible_b)
    variance = pooled * (1.0 - pooled) * (1.0 / eligible_a + 1.0 / eligible_b)
    if variance <= 0:
        return (math.nan, math.nan)
    z = ((1.0 - violations_a / eligible_a) - (1.0 - violations_b / eligible_b)) / math.sqrt(variance)
    return (z, math.erfc(abs(z) / math.sqrt(2.0)))


def routing(long: Requests, targets: pd.DataFrame) -> pd.DataFrame:
    """Per SLO and class (models summed; ``long`` from :func:`eligible`): eligible, violations and attainment under
    each routing profile side by side, the difference predicted - default and its z-test; see
    :func:`routing_from_counts`."""
    return routing_from_counts(_counts(long, ["slo", "slo_class", "routing"]), targets)


def _routing_note(row: pd.Series) -> str:
    n_p, n_d = row[f"{ROUTING_PREDICTED}_eligible"], row[f"{ROUTING_DEFAULT}_eligible"]
    if n_p <= 0 or n_d <= 0:
        return f"no {ROUTING_PREDICTED if n_p <= 0 else ROUTING_DEFAULT} requests to compare"
    violated = (row[f"{ROUTING_PREDICTED}_violations"] + row[f"{ROUTING_DEFAULT}_violations"]) / (n_p + n_d)
    if violated <= 0:
        return "no violations under either"
    if violated >= 1:
        return "every request violated under both"
    if min(n_p, n_d) * min(violated, 1.0 - violated) < MIN_EXPECTED:
        return f"too few to tell (under {MIN_EXPECTED:g} expected violations or passes in a group)"
    if row["p_value"] >= SIGNIFICANCE_LEVEL:
        return f"no significant difference (p >= {SIGNIFICANCE_LEVEL:g})"
    better = ROUTING_PREDICTED if row["difference"] > 0 else ROUTING_DEFAULT
    return f"{better} better (p < {SIGNIFICANCE_LEVEL:g})"


def routing_from_counts(counts: pd.DataFrame, targets: pd.DataFrame) -> pd.DataFrame:
    """The routing table from counts per (slo, slo_class, routing): the store's, or Prometheus's increases.

    Routing values other than ``predicted`` and ``default`` count as ``unknown``. Per routing value:
    ``<routing>_eligible``, ``<routing>_violations``, ``<routing>_attainment`` (null without eligible requests);
    then ``difference`` = predicted attainment - default attainment, ``z`` and ``p_value`` of
    :func:`two_proportion_z` and a ``note`` reading them: a group empty, nothing to test, too few to tell (a
    group expects fewer than ``MIN_EXPECTED`` violations or passes at the pooled rate, where the normal
    approximation is poor), no significant difference, or which profile is better at ``SIGNIFICANCE_LEVEL``.
    """
    counts = counts.copy()
    counts["routing"] = counts["routing"].where(counts["routing"].isin(ROUTINGS), ROUTING_UNKNOWN)
    summed = counts.groupby(["slo", "slo_class", "routing"])[["eligible", "violations"]].sum()
    wide = pd.DataFrame(summed.unstack("routing", fill_value=0))
    wide = wide.reindex(columns=pd.MultiIndex.from_product([["eligible", "violations"], ROUTINGS]), fill_value=0)
    if all(pd.api.types.is_integer_dtype(counts[column]) for column in ("eligible", "violations")):
        wide = wide.astype("int64")  # the store's counts stay whole numbers in the CSV
    table = pd.DataFrame(index=wide.index)
    for profile in ROUTINGS:
        n, v = pd.Series(wide[("eligible", profile)]), pd.Series(wide[("violations", profile)])
        table[f"{profile}_eligible"] = n
        table[f"{profile}_violations"] = v
        table[f"{profile}_attainment"] = 1.0 - v / n.where(n > 0)
    table = table[table[[f"{profile}_eligible" for profile in ROUTINGS]].sum(axis=1) > 0].reset_index()
    columns = ["slo", "slo_class", "objective", *table.columns[2:], "difference", "z", "p_value", "note"]
    if table.empty:
        return pd.DataFrame(columns=columns)
    table = table.merge(targets, on=["slo_class", "slo"], how="left")
    table["difference"] = table[f"{ROUTING_PREDICTED}_attainment"] - table[f"{ROUTING_DEFAULT}_attainment"]
    tests = [
        two_proportion_z(
            row[f"{ROUTING_PREDICTED}_violations"],
            row[f"{ROUTING_PREDICTED}_eligible"],
            row[f"{ROUTING_DEFAULT}_violations"],
            row[f"{ROUTING_DEFAULT}_eligible"],
        )
        for _, row in table.iterrows()
    ]
    table["z"] = [z for z, _ in tests]
    table["p_value"] = [p for _, p in tests]
    table["note"] = table.apply(_routing_note, axis=1)
    table = table.sort_values(["slo", "slo_class"], key=_slo_first)
    return table[columns].reset_index(drop=True)


def violation_cause(requests: Requests) -> pd.Series:
    """The cause of each request's violation (null where it met every SLO it was eligible for), in the requests'
    order; :data:`~sloscope.review.queries.CAUSE_ROWS`:

    - missed TTFT only: ``queueing`` when ``queue_seconds >= prefill_seconds``, else ``prefill``;
    - missed TPOT only: ``decode``;
    - missed both: the phase that used the largest share of its own budget: queue / TTFT target,
      prefill / TTFT target, decode / (TPOT target x (completion_tokens - 1)); ties in the order
      queueing, prefill, decode;
    - ``unknown`` when a value the rule needs is missing;
    - ``failed`` for a failed, shed, timed-out or aborted request, whatever it missed: no phase was slow.
    """
    cause = rows(requests).table(queries.CAUSE_ROWS)["cause"].astype("string")
    return cause.set_axis(requests.index) if isinstance(requests, pd.DataFrame) else cause


def causes(requests: Requests) -> pd.DataFrame:
    """Violating requests per class, which SLOs they missed (ttft, tpot, both) and cause, with the cause's share
    of the class's violating requests."""
    columns = ["slo_class", "missed", "cause", "requests", "share"]
    table = rows(requests).table(queries.CAUSES)
    if table.empty:
        return pd.DataFrame(columns=columns)
    table["share"] = table["requests"] / table.groupby("slo_class")["requests"].transform("sum")
    order = {cause: i for i, cause in enumerate(CAUSES)}
    table["order"] = table["cause"].map(order)
    table = table.sort_values(["slo_class", "missed", "order"])
    return table[columns].reset_index(drop=True)


def coverage(requests: Requests) -> pd.DataFrame:
    """Per signal, source, pool and the predictor's quantile: compared, covered, coverage and coverage - quantile.

    A well-calibrated quantile-q predictor covers a share q of the requests; below q it predicts too low. Mean
    predictions are left out (see :func:`mean_error`): half of them are exceeded by design. Rows written before
    the store had ``prediction_objective`` are quantile predictions (the only kind then judged).
    """
    columns = ["signal", "source", "pool", "quantile", "compared", "covered", "coverage", "gap"]
    table = rows(requests).table(queries.COVERAGE)
    if table.empty:
        return pd.DataFrame(columns=columns)
    table["coverage"] = table["covered"] / table["compared"]
    table["gap"] = table["coverage"] - table["quantile"]
    return table[columns]


def mean_error(requests: Requests) -> pd.DataFrame:
    """Per signal, source and pool, the mean predictions: compared, bias (mean of actual - predicted, s),
    relative bias (over the mean prediction; positive: predicts too low), MAE and RMSE (s)."""
    columns = ["signal", "source", "pool", "compared", "bias", "relative_bias", "mae", "rmse"]
    table = rows(requests).table(queries.MEAN_ERROR, serial=True)
    if table.empty:
        return pd.DataFrame(columns=columns)
    table["relative_bias"] = table["bias"] / table["predicted"]
    table["rmse"] = table["mse"] ** 0.5
    return table[columns]


def qcut_probabilities(bins: int) -> list[float]:
    """The probabilities of ``pd.qcut(x, bins)``'s edges: np.linspace(0, 1, bins + 1), each nudged up to the next
    float where bins x it is not the whole number it should be (pandas/core/reshape/tile.py, ``qcut``)."""
    quantiles = np.linspace(0, 1, bins + 1)
    np.putmask(quantiles, bins * quantiles != np.arange(bins + 1), np.nextafter(quantiles, 1))
    return [float(q) for q in quantiles]


def reliability(requests: Requests, bins: int = 10) -> pd.DataFrame:
    """Per signal and source: the compared requests cut into ``bins`` equal-count bins of the predicted value
    (as ``pd.qcut``, deciles by default; fewer when predictions repeat), and in each bin the predicted median, the
    q-quantile of the actual values (q = the predictor's quantile, linear interpolation) and the coverage.

    On a reliability plot (actual quantile against predicted median) a calibrated predictor lies on the diagonal.
    """
    columns = ["signal", "source", "bin", "requests", "predicted_low", "predicted_high", "predicted_median"]
    columns += ["quantile", "actual_quantile", "coverage"]
    table = rows(requests).table(queries.RELIABILITY, edges=qcut_probabilities(bins))
    return table[columns] if not table.empty else pd.DataFrame(columns=columns)


def _percentile_name(p: float) -> str:
    return f"p{round(p * 100):02d}"


def headroom(requests: Requests, percentiles: Sequence[float] = HEADROOM_PERCENTILES) -> pd.DataFrame:
    """Per signal and class: requests with a headroom at routing (target - predicted), the share below zero
    (routed although predicted to miss), and percentiles (linear interpolation), in seconds."""
    names = [_percentile_name(p) for p in percentiles]
    columns = ["signal", "slo_class", "requests", "negative_share", *names]
    long = rows(requests).table(queries.HEADROOM_TABLE, names=names, percentiles=[float(p) for p in percentiles])
    if long.empty:
        return pd.DataFrame(columns=columns)
    table = long.pivot(index=["signal", "slo_class", "requests", "negative_share"], columns="name", values="value")
    table = table.reset_index()
    table["order"] = table["signal"].map({signal: i for i, signal in enumerate(SIGNALS)})
    table = table.sort_values(["order", "slo_class"])
    return pd.DataFrame(table[columns].to_numpy(), columns=columns).astype(
        {"requests": "int64", "negative_share": float, **dict.fromkeys(names, float)}
    )


def trend(long: Requests, previous: Requests | None, targets: pd.DataFrame, window_seconds: float) -> pd.DataFrame:
    """Per SLO and class (models summed): the window's eligible, attainment and mean burn rate beside those of the
    period of the same length just before it (``previous``, in :func:`eligible`'s long form; None or empty when
    the store does not reach back that far: the previous columns are then null), and ``change`` = attainment -
    previous attainment (positive: better than before)."""
    keys = ["slo", "slo_class"]
    now = _budget_table(_counts(long, keys), targets, window_seconds, keys)
    columns = [*keys, "eligible", "attainment", "mean_burn_rate"]
    table = now[columns]
    earlier = _counts(previous, keys) if previous is not None else None
    if earlier is not None and not earlier.empty:
        before = _budget_table(earlier, targets, window_seconds, keys)[columns]
    else:
        before = pd.DataFrame({c: pd.Series(dtype=object if c in keys else float) for c in columns})
    table = table.merge(before, on=keys, how="outer", suffixes=("", "_previous"))
    table = table.rename(
        columns={f"{c}_previous": f"previous_{c}" for c in ("eligible", "attainment", "mean_burn_rate")}
    )
    table["change"] = table["attainment"] - table["previous_attainment"]
    table = table.sort_values(keys, key=_slo_first)
    order = [*keys, "eligible", "previous_eligible", "attainment", "previous_attainment", "change"]
    return table[[*order, "mean_burn_rate", "previous_mean_burn_rate"]].reset_index(drop=True)
