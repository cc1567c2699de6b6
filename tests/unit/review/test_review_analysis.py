"""The review's numbers on small hand-made sets of requests, each value worked out by hand.

Requests are built as record-store rows (``sloscope.store.schema.SCHEMA``) and read the way the review reads
the store (``load.to_frame``), so the analysis sees exactly the dtypes it sees in production.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from sloscope.review import analysis
from sloscope.review.load import COLUMNS, to_frame
from sloscope.slo.spec import SLOSpec
from sloscope.store.schema import SCHEMA

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SPEC = SLOSpec.model_validate(
    {
        "version": "sloscope/v1",
        "classes": [
            {"name": "interactive", "objectives": {"ttft": 0.9, "tpot": 0.8, "goodput": 0.75}},
            {"name": "standard", "objectives": {"ttft": 0.5, "tpot": 0.5, "goodput": 0.5}},
        ],
    }
)  # fmt: skip


def frame(*rows: dict[str, Any]) -> pd.DataFrame:
    """Store rows (defaults: model a, pool p, the other columns null) as the review's DataFrame."""
    full = [
        {"schema_version": 1, "trace_id": "0" * 32, "span_id": "0" * 16, "model": "a", "pool": "p", **r} for r in rows
    ]
    table = pa.Table.from_pylist(full, schema=SCHEMA)
    return to_frame(table.select(list(COLUMNS)).to_pandas())


def req(
    seconds: float, slo_class: str, met: tuple[bool | None, bool | None, bool | None], **more: Any
) -> dict[str, Any]:
    ttft, tpot, goodput = met
    end = T0 + timedelta(seconds=seconds)
    return {"end_time": end, "slo_class": slo_class, "ttft_met": ttft, "tpot_met": tpot, "goodput_met": goodput, **more}


# R1..R7 of the attainment, burn and worst-pod tests.
REQUESTS = (
    req(0, "interactive", (True, True, True), pod="p0"),
    req(5, "interactive", (False, True, False), pod="p0"),
    req(12, "interactive", (True, False, False), pod="p1"),
    req(15, "interactive", (True, None, True), pod="p1"),
    req(25, "interactive", (False, False, False), pod="p1", model="b"),
    req(31, "standard", (True, None, True), pod="p0"),
    req(33, "none", (None, None, None), pod="p0"),
)


PERIOD = 28 * 86400.0  # the spec's compliance period: a window as long gives budget consumed = mean burn rate


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if v is pd.NA else v) for k, v in row.items()} for row in table.to_dict("records")]


def test_objectives_come_from_the_spec() -> None:
    table = analysis.objectives(SPEC)
    assert records(table) == [
        {"slo_class": "interactive", "slo": "ttft", "objective": 0.9, "period_seconds": PERIOD},
        {"slo_class": "interactive", "slo": "tpot", "objective": 0.8, "period_seconds": PERIOD},
        {"slo_class": "interactive", "slo": "goodput", "objective": 0.75, "period_seconds": PERIOD},
        {"slo_class": "standard", "slo": "ttft", "objective": 0.5, "period_seconds": PERIOD},
        {"slo_class": "standard", "slo": "tpot", "objective": 0.5, "period_seconds": PERIOD},
        {"slo_class": "standard", "slo": "goodput", "objective": 0.5, "period_seconds": PERIOD},
    ]


def test_attainment_and_budget_consumed_per_slo_class_and_model() -> None:
    table = analysis.attainment(analysis.eligible(frame(*REQUESTS)), analysis.objectives(SPEC), PERIOD)
    keys = ("slo", "slo_class", "model", "eligible", "violations", "attainment", "budget_consumed", "within_budget")
    got = [tuple(r[k] for k in keys) for r in records(table)]
    expected = [
        ("ttft", "interactive", "a", 4, 1, 0.75, 0.25 / 0.1, False),
        ("ttft", "interactive", "b", 1, 1, 0.0, 1.0 / 0.1, False),
        ("ttft", "standard", "a", 1, 0, 1.0, 0.0, True),
        ("tpot", "interactive", "a", 3, 1, 2 / 3, (1 / 3) / 0.2, False),
        ("tpot", "interactive", "b", 1, 1, 0.0, 1.0 / 0.2, False),
        ("goodput", "interactive", "a", 4, 2, 0.5, 0.5 / 0.25, False),
        ("goodput", "interactive", "b", 1, 1, 0.0, 1.0 / 0.25, False),
        ("goodput", "standard", "a", 1, 0, 1.0, 0.0, True),
    ]
    assert [g[:5] for g in got] == [e[:5] for e in expected]
    assert [g[5:7] for g in got] == [pytest.approx(e[5:7], rel=1e-12) for e in expected]
    assert [g[7] for g in got] == [e[7] for e in expected]
    assert table["error_budget"].tolist() == pytest.approx([0.1, 0.1, 0.5, 0.2, 0.2, 0.25, 0.25, 0.5])


def test_a_class_without_objective_has_no_verdict() -> None:
    requests = frame(req(0, "unlisted", (True, None, True)))
    [row] = records(
        analysis.attainment(analysis.eligible(requests), analysis.objectives(SPEC), PERIOD).query("slo == 'ttft'")
    )
    assert row["eligible"] == 1 and row["attainment"] == 1.0
    assert row["objective"] != row["objective"]  # NaN
    assert row["within_budget"] is None


@pytest.mark.parametrize(
    ("span", "expected"),
    [(7 * 86400, 3600), (86400, 3600), (12 * 3600, 3600), (3 * 3600, 900), (3600, 300), (120, 10), (40, 5), (1, 5)],
)
def test_bins_follow_the_span(span: float, expected: int) -> None:
    assert analysis.choose_bin(span) == expected


def test_burn_per_bin_with_budget_consumed_so_far() -> None:
    burn = analysis.burn(analysis.eligible(frame(*REQUESTS)), analysis.objectives(SPEC), 10, PERIOD)
    ttft = records(burn[(burn["slo"] == "ttft") & (burn["slo_class"] == "interactive")])
    assert [r["bin_start"] for r in ttft] == [pd.Timestamp(T0 + timedelta(seconds=s)) for s in (0, 10, 20)]
    assert [(r["eligible"], r["violations"]) for r in ttft] == [(2, 1), (2, 0), (1, 1)]
    assert [r["error_ratio"] for r in ttft] == [0.5, 0.0, 1.0]
    assert [r["burn_rate"] for r in ttft] == pytest.approx([5.0, 0.0, 10.0])
    # 5 eligible in the window: 1, 1, 2 violations so far over 5 x 0.1
    assert [r["budget_consumed_cumulative"] for r in ttft] == pytest.approx([2.0, 2.0, 4.0])
    goodput_standard = records(burn[(burn["slo"] == "goodput") & (burn["slo_class"] == "standard")])
    assert [(r["bin_start"], r["eligible"], r["violations"]) for r in goodput_standard] == [
        (pd.Timestamp(T0 + timedelta(seconds=30)), 1, 0)
    ]
    assert list(dict.fromkeys(burn["slo"])) == ["ttft", "tpot", "goodput"]
    assert "none" not in set(burn["slo_class"])  # eligible for nothing


def test_the_last_cumulative_value_is_the_class_budget_consumed() -> None:
    requests = frame(*REQUESTS)
    targets = analysis.objectives(SPEC)
    burn = analysis.burn(analysis.eligible(requests), targets, 10, PERIOD)
    last = burn.groupby(["slo", "slo_class"])["budget_consumed_cumulative"].last()
    att = (
        analysis.attainment(analysis.eligible(requests), targets, PERIOD)
        .groupby(["slo", "slo_class"])[["eligible", "violations"]]
        .sum()
    )
    objective = targets.set_index(["slo", "slo_class"])["objective"]
    for key, value in last.items():
        eligible, violations = att.loc[key]
        assert value == pytest.approx(violations / eligible / (1 - objective[key]))


def test_worst_periods_rank_bins_by_the_share_of_the_window_budget_they_spent() -> None:
    burn = analysis.burn(analysis.eligible(frame(*REQUESTS)), analysis.objectives(SPEC), 10, PERIOD)
    table = records(analysis.worst_periods(burn, limit=5))
    got = [(r["bin_start"] - pd.Timestamp(T0), r["slo"], r["slo_class"], r["violations"]) for r in table]
    s = pd.Timedelta
    assert got == [
        (s(seconds=0), "ttft", "interactive", 1),  # 1 of 5 eligible over 0.1: 2.0, the earlier of a tie first
        (s(seconds=20), "ttft", "interactive", 1),
        (s(seconds=10), "tpot", "interactive", 1),  # 1 of 4 over 0.2: 1.25
        (s(seconds=20), "tpot", "interactive", 1),
        (s(seconds=0), "goodput", "interactive", 1),  # 1 of 5 over 0.25: 0.8
    ]
    assert [r["budget_share"] for r in table] == pytest.approx([2.0, 2.0, 1.25, 1.25, 0.8])


def test_worst_pods() -> None:
    table = records(analysis.worst_pods(analysis.eligible(frame(*REQUESTS))))
    got = [(r["slo"], r["pod"], r["eligible"], r["violations"]) for r in table]
    assert got == [
        ("ttft", "p0", 3, 1),  # equal counts and ratios: by pod name
        ("ttft", "p1", 3, 1),
        ("tpot", "p1", 2, 2),
        ("tpot", "p0", 2, 0),
        ("goodput", "p1", 3, 2),
        ("goodput", "p0", 3, 1),
    ]
    assert [r["error_ratio"] for r in table] == pytest.approx([1 / 3, 1 / 3, 1.0, 0.0, 2 / 3, 1 / 3])
    assert [r["share_of_violations"] for r in table] == pytest.approx([0.5, 0.5, 1.0, 0.0, 2 / 3, 1 / 3])
    assert len(analysis.worst_pods(analysis.eligible(frame(*REQUESTS)), limit=1)) == 3


def test_a_request_that_failed_before_any_pod_is_no_pods() -> None:
    shed = req(40, "interactive", (False, False, False), failure_reason="shed")  # no pod: counted in its pool only
    table = records(analysis.worst_pods(analysis.eligible(frame(*REQUESTS, shed))))
    got = [(r["slo"], r["pod"], r["eligible"], r["violations"]) for r in table]
    assert got[:2] == [("ttft", "p0", 3, 1), ("ttft", "p1", 3, 1)]
    assert {r["pod"] for r in table} == {"p0", "p1"}
    assert [r["share_of_violations"] for r in table][:2] == pytest.approx([0.5, 0.5])  # of the pods' violations


TARGETS = {"ttft_target_seconds": 0.5, "tpot_target_seconds": 0.05, "completion_tokens": 11}
Q, P, D = "queue_seconds", "prefill_seconds", "decode_seconds"
CAUSE_CASES = [
    ("ttft only, queue longer", (False, True, False), {Q: 0.3, P: 0.1}, "queueing"),
    ("ttft only, prefill longer", (False, True, False), {Q: 0.1, P: 0.3}, "prefill"),
    ("ttft only, a tie", (False, True, False), {Q: 0.2, P: 0.2}, "queueing"),
    ("ttft only, no queue time", (False, None, False), {P: 0.3}, "unknown"),
    ("tpot only", (True, False, False), {D: 0.9}, "decode"),
    ("tpot only, no breakdown", (True, False, False), {}, "decode"),
    # prefill 0.6 / 0.5 = 1.2 against decode 0.55 / (0.05 x 10) = 1.1
    ("both, prefill over most", (False, False, False), {Q: 0.1, P: 0.6, D: 0.55}, "prefill"),
    # decode 0.6 / 0.5 = 1.2 against prefill 0.4 / 0.5 = 0.8
    ("both, decode over most", (False, False, False), {Q: 0.2, P: 0.4, D: 0.6}, "decode"),
    # queue 0.7 / 0.5 = 1.4 against decode 0.6 / 0.5 = 1.2
    ("both, queue over most", (False, False, False), {Q: 0.7, P: 0.1, D: 0.6}, "queueing"),
    ("both, no decode time", (False, False, False), {Q: 0.7, P: 0.1}, "unknown"),
    ("failed: shed with a TTFT target", (True, False, False), {"failure_reason": "shed"}, "failed"),  # type: ignore[dict-item]
    ("failed, missed both", (False, False, False), {Q: 0.7, "failure_reason": "error"}, "failed"),  # type: ignore[dict-item]
    ("met everything", (True, True, True), {Q: 0.7}, None),
    ("eligible for nothing", (None, None, None), {Q: 0.7}, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "met", "breakdown", "expected"), CAUSE_CASES, ids=[c[0] for c in CAUSE_CASES])
def test_violation_cause(
    case: str, met: tuple[bool | None, ...], breakdown: dict[str, float], expected: str | None
) -> None:
    cause = analysis.violation_cause(frame(req(0, "interactive", met, **TARGETS, **breakdown)))  # type: ignore[arg-type]
    assert (None if cause.iloc[0] is pd.NA else cause.iloc[0]) == expected


def test_causes_table_per_class() -> None:
    rows = [req(i, "interactive", met, **TARGETS, **breakdown) for i, (_, met, breakdown, _) in enumerate(CAUSE_CASES)]
    rows.append(req(20, "standard", (True, False, False), **TARGETS))
    table = records(analysis.causes(frame(*rows)))  # type: ignore[arg-type]
    got = [(r["slo_class"], r["missed"], r["cause"], r["requests"]) for r in table]
    assert got == [
        ("interactive", "both", "failed", 1),
        ("interactive", "both", "queueing", 1),
        ("interactive", "both", "prefill", 1),
        ("interactive", "both", "decode", 1),
        ("interactive", "both", "unknown", 1),
        ("interactive", "tpot", "failed", 1),
        ("interactive", "tpot", "decode", 2),
        ("interactive", "ttft", "queueing", 2),
        ("interactive", "ttft", "prefill", 1),
        ("interactive", "ttft", "unknown", 1),
        ("standard", "tpot", "decode", 1),
    ]
    twelfth = 1 / 12
    assert [r["share"] for r in table] == pytest.approx(
        [twelfth] * 5 + [twelfth, 2 * twelfth, 2 * twelfth] + [twelfth] * 2 + [1.0]
    )


def test_causes_of_a_window_without_violations_is_an_empty_table() -> None:
    table = analysis.causes(frame(req(0, "interactive", (True, True, True))))
    assert table.empty and list(table.columns) == ["slo_class", "missed", "cause", "requests", "share"]


def prediction(
    seconds: float, source: str, actual: float | None, predicted: float | None, **more: Any
) -> dict[str, Any]:
    return req(seconds, "interactive", (True, None, True), prediction_source=source, ttft_seconds=actual,
               predicted_ttft_seconds=predicted, prediction_quantile=0.9, **more)  # fmt: skip


def test_coverage_per_signal_source_and_pool() -> None:
    requests = frame(
        prediction(0, "span", 0.2, 0.3),
        prediction(1, "span", 0.4, 0.3),
        prediction(2, "span", 0.3, 0.3),  # equal counts as covered: actual <= predicted
        prediction(3, "shadow", 0.1, 0.2),
        prediction(4, "shadow", 0.5, None),  # no prediction: not compared
        prediction(5, "none", 0.2, 0.1),  # no source: not compared
        prediction(6, "shadow", 0.9, 0.2, pool="q", tpot_seconds=0.04, predicted_tpot_seconds=0.05),
    )
    table = records(analysis.coverage(requests))
    got = [(r["signal"], r["source"], r["pool"], r["quantile"], r["compared"], r["covered"]) for r in table]
    assert got == [
        ("tpot", "shadow", "q", 0.9, 1, 1),
        ("ttft", "shadow", "p", 0.9, 1, 1),
        ("ttft", "shadow", "q", 0.9, 1, 0),
        ("ttft", "span", "p", 0.9, 3, 2),
    ]
    assert [r["coverage"] for r in table] == pytest.approx([1.0, 1.0, 0.0, 2 / 3])
    assert [r["gap"] for r in table] == pytest.approx([0.1, 0.1, -0.9, 2 / 3 - 0.9])


def test_mean_predictions_are_judged_by_bias_mae_and_rmse_not_coverage() -> None:
    def mean(seconds: float, actual: float, predicted: float, **more: Any) -> dict[str, Any]:
        return prediction(seconds, "shadow", actual, predicted, prediction_objective="mean", **more)

    requests = frame(
        mean(0, 0.75, 0.5),  # error +0.25
        mean(1, 0.25, 0.5),  # error -0.25
        mean(2, 1.5, 1.0),  # error +0.5
        prediction(3, "shadow", 0.1, 0.2, pool="q"),  # a quantile prediction of another pool
    )
    assert [(r["pool"], r["compared"]) for r in records(analysis.coverage(requests))] == [("q", 1)]
    (row,) = records(analysis.mean_error(requests))
    assert (row["signal"], row["source"], row["pool"], row["compared"]) == ("ttft", "shadow", "p", 3)
    # By hand: errors 0.25, -0.25, 0.5 over predictions 0.5, 0.5, 1.0.
    assert row["bias"] == pytest.approx(0.5 / 3)
    assert row["relative_bias"] == pytest.approx((0.5 / 3) / (2.0 / 3))  # 0.25: actual 25% above
    assert row["mae"] == pytest.approx(1.0 / 3)
    assert row["rmse"] == pytest.approx((0.375 / 3) ** 0.5)
    assert analysis.mean_error(frame(prediction(0, "span", 0.2, 0.3))).empty  # quantile rows only


def test_reliability_bins_predictions_into_equal_count_bins() -> None:
    # predictions 0.1 .. 2.0; in the first quarter actual = predicted, then twice, half and equal again
    rows = []
    for i in range(1, 21):
        predicted = i / 10
        factor = {0: 1.0, 1: 2.0, 2: 0.5, 3: 1.0}[(i - 1) // 5]
        rows.append(prediction(i, "shadow", predicted * factor, predicted))
    table = records(analysis.reliability(frame(*rows), bins=4))
    assert [(r["signal"], r["source"], r["bin"], r["requests"]) for r in table] == [
        ("ttft", "shadow", b, 5) for b in (1, 2, 3, 4)
    ]
    assert [r["predicted_low"] for r in table] == pytest.approx([0.1, 0.6, 1.1, 1.6])
    assert [r["predicted_high"] for r in table] == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert [r["predicted_median"] for r in table] == pytest.approx([0.3, 0.8, 1.3, 1.8])
    # the 0.9 quantile of five sorted values x0..x4 with linear interpolation: x3 + 0.6 (x4 - x3)
    assert [r["actual_quantile"] for r in table] == pytest.approx([0.46, 1.92, 0.73, 1.96])
    assert [r["coverage"] for r in table] == [1.0, 0.0, 1.0, 1.0]
    assert {r["quantile"] for r in table} == {0.9}


def test_headroom_percentiles_per_signal_and_class() -> None:
    values = [-0.1, 0.0, 0.1, 0.2, 0.3]
    rows = [req(i, "interactive", (True, None, True), ttft_headroom_seconds=v) for i, v in enumerate(values)]
    rows.append(req(9, "standard", (True, True, True), ttft_headroom_seconds=1.0, tpot_headroom_seconds=-0.01))
    table = records(analysis.headroom(frame(*rows)))
    assert [(r["signal"], r["slo_class"], r["requests"]) for r in table] == [
        ("ttft", "interactive", 5),
        ("ttft", "standard", 1),
        ("tpot", "standard", 1),
    ]
    first = table[0]
    assert first["negative_share"] == 0.2
    percentiles = [first[k] for k in ("p05", "p10", "p25", "p50", "p75", "p90", "p95")]
    assert percentiles == pytest.approx([-0.08, -0.06, 0.0, 0.1, 0.2, 0.26, 0.28])
    assert table[2]["negative_share"] == 1.0 and table[2]["p50"] == -0.01


# ---- routing: prediction-based against default ----------------------------------------------------------------


def test_two_proportion_z_test() -> None:
    # attainment 0.9 (10 of 100 missed) against 0.8 (20 of 100): pooled attainment 0.85,
    # variance 0.85 x 0.15 x (1/100 + 1/100) = 0.00255, z = 0.1 / sqrt(0.00255) = 1.98030, two-sided p = 0.04767
    z, p = analysis.two_proportion_z(10, 100, 20, 100)
    assert z == pytest.approx(0.1 / 0.00255**0.5, rel=1e-12)
    assert z == pytest.approx(1.980295, abs=1e-6)
    assert p == pytest.approx(0.047670, abs=1e-6)
    assert analysis.two_proportion_z(20, 100, 10, 100)[0] == pytest.approx(-z, rel=1e-12)  # the sign says which
    assert analysis.two_proportion_z(10, 100, 10, 100) == (0.0, 1.0)
    for nothing_to_test in [(0, 100, 0, 50), (100, 100, 50, 50), (0, 0, 1, 10), (1, 10, 0, 0)]:
        assert all(math.isnan(v) for v in analysis.two_proportion_z(*nothing_to_test))


def test_wilson_interval() -> None:
    # 90 of 100 attained: the textbook 95% Wilson interval (0.8256, 0.9448)
    low, high = analysis.wilson_interval(10, 100)
    assert (low, high) == pytest.approx((0.825634, 0.944771), abs=1e-6)
    assert analysis.wilson_interval(0, 20)[1] == pytest.approx(1.0)  # not empty at 100% attainment
    assert analysis.wilson_interval(0, 20)[0] == pytest.approx(20 / (20 + 1.959963984540054**2))


ROUTED = (
    req(0, "interactive", (True, True, True), routing="predicted"),
    req(1, "interactive", (False, True, False), routing="predicted"),
    req(2, "interactive", (True, None, True), routing="predicted"),
    req(3, "interactive", (True, False, False), routing="predicted"),
    req(4, "interactive", (False, False, False), routing="default"),
    req(5, "interactive", (True, True, True), routing="default"),
    req(6, "interactive", (True, None, True)),  # no routing recorded: unknown
    req(7, "interactive", (False, None, False), routing="something-else"),  # counted as unknown
    req(8, "standard", (True, None, True), routing="predicted"),
)


def test_routing_table_side_by_side_with_the_z_test() -> None:
    table = records(analysis.routing(analysis.eligible(frame(*ROUTED)), analysis.objectives(SPEC)))
    counts = [
        (r["slo"], r["slo_class"], r["predicted_eligible"], r["predicted_violations"], r["default_eligible"],
         r["default_violations"], r["unknown_eligible"], r["unknown_violations"])
        for r in table
    ]  # fmt: skip
    assert counts == [
        ("ttft", "interactive", 4, 1, 2, 1, 2, 1),
        ("ttft", "standard", 1, 0, 0, 0, 0, 0),
        ("tpot", "interactive", 3, 1, 2, 1, 0, 0),
        ("goodput", "interactive", 4, 2, 2, 1, 2, 1),
        ("goodput", "standard", 1, 0, 0, 0, 0, 0),
    ]
    assert [r["objective"] for r in table] == [0.9, 0.5, 0.8, 0.75, 0.5]
    assert [r["predicted_attainment"] for r in table] == pytest.approx([0.75, 1.0, 2 / 3, 0.5, 1.0])
    compared, standard = [table[0], table[2], table[3]], [table[1], table[4]]
    assert [r["default_attainment"] for r in compared] == pytest.approx([0.5, 0.5, 0.5])
    assert [r["unknown_attainment"] for r in compared] == pytest.approx([0.5, float("nan"), 0.5], nan_ok=True)
    for r in standard:  # no default request: no attainment, no difference, no test
        assert all(math.isnan(r[k]) for k in ("default_attainment", "difference", "z", "p_value"))
    assert [r["difference"] for r in compared] == pytest.approx([0.25, 1 / 6, 0.0])
    # ttft: pooled attainment 4/6, variance (2/3)(1/3)(1/4 + 1/2) = 1/6, z = 0.25 x sqrt 6 = 0.61237, p = 0.54029;
    # tpot: pooled 3/5, variance 0.24 x (1/3 + 1/2) = 0.2, z = (1/6) / sqrt 0.2 = 0.37268, p = 0.70939
    assert [r["z"] for r in compared] == pytest.approx([0.25 * 6**0.5, (1 / 6) / 0.2**0.5, 0.0], rel=1e-12)
    assert [r["p_value"] for r in compared] == pytest.approx([0.540291, 0.709388, 1.0], abs=1e-6)
    assert [r["note"] for r in table] == [
        "too few to tell (under 5 expected violations or passes in a group)",
        "no default requests to compare",
        "too few to tell (under 5 expected violations or passes in a group)",
        "too few to tell (under 5 expected violations or passes in a group)",
        "no default requests to compare",
    ]


def counts(*rows: tuple[str, float, float]) -> pd.DataFrame:
    return pd.DataFrame(
        [("ttft", "interactive", routing, n, v) for routing, n, v in rows],
        columns=["slo", "slo_class", "routing", "eligible", "violations"],
    )


NOTES = [
    # 2% against 5% missed: pooled 3.5% missed, z = 0.03 / sqrt(0.965 x 0.035 x 0.002) = 3.650, p = 0.00026
    ((("predicted", 1000, 20), ("default", 1000, 50)), 3.650132, "predicted better (p < 0.05)"),
    ((("predicted", 1000, 50), ("default", 1000, 20)), -3.650132, "default better (p < 0.05)"),
    # 2% against 2.5%: z = 0.005 / sqrt(0.9775 x 0.0225 x 0.002) = 0.75389, p = 0.45092
    ((("predicted", 1000, 20), ("default", 1000, 25)), 0.753885, "no significant difference (p >= 0.05)"),
    ((("predicted", 1000, 0), ("default", 200, 0)), None, "no violations under either"),
    ((("predicted", 3, 3), ("default", 2, 2)), None, "every request violated under both"),
    ((("default", 10, 1),), None, "no predicted requests to compare"),
    # Prometheus's increases are not whole numbers: the same test on them
    ((("predicted", 999.5, 19.5), ("default", 1000.25, 50.25), ("unknown", 0.5, 0.0)), 3.744662,
     "predicted better (p < 0.05)"),
]  # fmt: skip


@pytest.mark.parametrize(("rows", "z", "note"), NOTES)
def test_routing_notes(rows: tuple[tuple[str, float, float], ...], z: float | None, note: str) -> None:
    [row] = records(analysis.routing_from_counts(counts(*rows), analysis.objectives(SPEC)))
    assert row["note"] == note
    if z is None:
        assert math.isnan(row["z"])
    else:
        assert row["z"] == pytest.approx(z, abs=1e-6)


def test_routing_of_nothing_eligible_is_an_empty_table() -> None:
    table = analysis.routing(analysis.eligible(frame(req(0, "none", (None, None, None)))), analysis.objectives(SPEC))
    assert table.empty
    assert list(table.columns)[:5] == ["slo", "slo_class", "objective", "predicted_eligible", "predicted_violations"]
    assert list(table.columns)[-4:] == ["difference", "z", "p_value", "note"]


# ---- worst pods from per-pod counters (Prometheus) ------------------------------------------------------------


def test_worst_pods_from_counts() -> None:
    requests = pd.DataFrame(
        [("p", "a", 100.0), ("p", "b", 50.0), ("q", "c", 10.0)], columns=["pool", "pod", "requests"]
    )
    violations = pd.DataFrame(
        [("ttft", "p", "a", 5.0), ("ttft", "p", "b", 10.0), ("goodput", "p", "b", 12.0)],
        columns=["slo", "pool", "pod", "violations"],
    )
    table = records(analysis.worst_pods_from_counts(requests, violations))
    assert list(table[0]) == ["slo", "pool", "pod", "requests", "violations", "violations_per_request",
                              "share_of_violations"]  # fmt: skip
    got = [(r["slo"], r["pool"], r["pod"], r["requests"], r["violations"]) for r in table]
    assert got == [
        ("ttft", "p", "b", 50.0, 10.0),
        ("ttft", "p", "a", 100.0, 5.0),
        ("ttft", "q", "c", 10.0, 0.0),  # no violation series: 0
        ("goodput", "p", "b", 50.0, 12.0),
        ("goodput", "p", "a", 100.0, 0.0),  # equal: by pod name
        ("goodput", "q", "c", 10.0, 0.0),
    ]  # no tpot rows: no pod missed it
    assert [r["violations_per_request"] for r in table] == pytest.approx([0.2, 0.05, 0.0, 0.24, 0.0, 0.0])
    assert [r["share_of_violations"] for r in table] == pytest.approx([2 / 3, 1 / 3, 0.0, 1.0, 0.0, 0.0])
    assert len(analysis.worst_pods_from_counts(requests, violations, limit=1)) == 2
    empty = analysis.worst_pods_from_counts(requests.iloc[:0], violations.iloc[:0])
    assert empty.empty
