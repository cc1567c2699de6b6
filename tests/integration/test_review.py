"""``sloscope review`` end to end: on a seeded demo's record store, and against a real Prometheus.

1. A short seeded ``sloscope demo --store`` writes a real record store (a real ``sloscope serve`` fed by the
   simulated fleet over OTLP). ``sloscope review`` runs on it as a subprocess, and its CSV tables are checked
   against an independent computation written here with pandas over the store's Parquet files (and numpy,
   and plain Python for the cause rule), with the objectives read from the demo's spec file by plain YAML.
   DuckDB reads the same files, to show the format is readable by it. The HTML must embed the charts.
2. Counter samples at known timestamps are backfilled into a real Prometheus TSDB (promtool
   ``create-blocks-from openmetrics``); ``sloscope review --prometheus`` over a known window must give
   attainment, burn, routing and worst-pod figures worked out from those samples and Prometheus's documented
   ``increase()``.
"""

from __future__ import annotations

import base64
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import NormalDist
from typing import Any

import duckdb
import httpx
import numpy as np
import pandas as pd
import pytest
import yaml

from sloscope.conventions import (
    INVALID_VALUES,
    POD,
    POD_REQUESTS,
    POD_SLO_VIOLATIONS,
    POOL,
    RECORDS,
    REQUESTS,
    REQUESTS_FAILED,
    SLO,
    SLO_REQUESTS,
    SLO_VIOLATIONS,
    SPANS_DROPPED,
    SPANS_RECEIVED,
    TRACES_JOINED,
)
from sloscope.demo.ports import free_port
from tests.support.page_server import PageServer

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n"
SLOS = ("ttft", "tpot", "goodput")
DEMO_SECONDS = 40  # about a minute with start and drain (measured: 56 s)


def sloscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sloscope", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def csv(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out.with_name(f"{out.stem}-tables") / f"{name}.csv")


# ---- 1. a seeded demo ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoReview:
    store: Path
    spec: dict[str, Any]
    out: Path
    review: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoReview:
    root = tmp_path_factory.mktemp("demo")
    store, work, out = root / "store", root / "work", root / "report" / "review.html"
    # the late-2025 upstream: its records have no failed requests (routing none), which this test does not expect.
    # Bursts of three times the base rate: at the default two a 40 s run misses only 4 to 8 TTFT targets, and
    # now and then none (the CI run of 2026-12-03), which these tests need; at three it misses about 30.
    ran = sloscope("demo", "--store", str(store), "--workdir", str(work), "--duration", str(DEMO_SECONDS),
                   "--seed", "7", "--no-view", "--upstream", "gie-2025", "--burst-factor", "3")  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    # The week up to a minute after the run: its last bin lies inside the window, so that no clipping at the window's
    # end (the review's "now", unknown to these tests) enters the covered time the budgets are judged over.
    to = (pd.read_parquet(store)["end_time"].max() + pd.Timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    review = sloscope(
        "review", "--store", str(store), "--slo-spec", str(work / "slo.yaml"), "--to", to, "--out", str(out)
    )
    assert review.returncode == 0, review.stderr
    spec = yaml.safe_load((work / "slo.yaml").read_text())
    assert "compliance_period" not in spec and all("compliance_period" not in c for c in spec["classes"])
    return DemoReview(store, yaml.safe_load((work / "slo.yaml").read_text()), out, review)


def requests_of(store: Path) -> pd.DataFrame:
    """Every row of the store, read with pandas alone (the hive partitions become columns date and hour)."""
    return pd.read_parquet(store)


def test_attainment_matches_an_independent_computation(demo: DemoReview) -> None:
    rows = requests_of(demo.store)
    objective = {(c["name"], slo): c["objectives"][slo] for c in demo.spec["classes"] for slo in SLOS}
    expected = []
    for slo in SLOS:
        judged = rows[rows[f"{slo}_met"].notna()]
        for (slo_class, model), group in judged.groupby(["slo_class", "model"]):
            missed = int((group[f"{slo}_met"] == False).sum())  # noqa: E712 (a column of booleans)
            target = objective[(slo_class, slo)]
            burn = missed / len(group) / (1 - target)
            seen = observed(rows)
            expected.append((slo, slo_class, model, len(group), missed, 1 - missed / len(group), burn,
                             burn * seen / PERIOD, 1 - burn * seen / PERIOD))  # fmt: skip
    table = csv(demo.out, "attainment")
    columns = ["slo", "slo_class", "model", "eligible", "violations", "attainment", "mean_burn_rate", "budget_consumed"]
    got = list(table[[*columns, "budget_remaining"]].itertuples(index=False, name=None))
    assert sorted(g[:5] for g in got) == sorted(e[:5] for e in expected)
    for g, e in zip(sorted(got), sorted(expected), strict=True):
        assert g[5:] == pytest.approx(e[5:], rel=1e-12, abs=1e-15)
    assert sum(e[4] for e in expected) > 0, "the demo should miss some SLOs"
    print("\n" + table.to_string(index=False))
    assert table["status"].tolist() == [status(r, b) for r, b in zip(table["budget_remaining"], table["mean_burn_rate"],
                                                                   strict=True)]  # fmt: skip
    # the summary line of each SLO is in the HTML, with the worst status of its rows
    html = demo.out.read_text()
    for slo in SLOS:
        worst = min(table.loc[table["slo"] == slo, "status"], key=["exhausted", "at risk", "healthy"].index)
        assert re.search(rf"<li>{slo}: {worst.upper()}[ ;]", html)


WEEK, PERIOD = 7 * 86400, 28 * 86400  # the review's default window; the demo spec's compliance period (the default)


def observed(rows: pd.DataFrame) -> float:
    """The seconds of the window the store has requests in, written again: the bins (of the documented rule) that
    hold a request's end. The demo's run lies well inside the review's week, so no bin is clipped."""
    step = pd.Timedelta(seconds=bin_of((rows["end_time"].max() - rows["end_time"].min()).total_seconds()))
    return len(set(rows["end_time"].dt.floor(step))) * step.total_seconds()


def status(remaining: float, burn: float) -> str:
    """The documented error-budget policy, written again."""
    if remaining <= 0:
        return "exhausted"
    return "at risk" if remaining < 0.25 or burn > 1 else "healthy"


def z_test(violations_a: float, eligible_a: float, violations_b: float, eligible_b: float) -> tuple[float, float]:
    """The two-proportion z-test with a pooled proportion, written again: z of attainment a - b, two-sided p."""
    attained_a, attained_b = 1 - violations_a / eligible_a, 1 - violations_b / eligible_b
    pooled = (eligible_a - violations_a + eligible_b - violations_b) / (eligible_a + eligible_b)
    z = (attained_a - attained_b) / math.sqrt(pooled * (1 - pooled) * (1 / eligible_a + 1 / eligible_b))
    return z, 2 * (1 - NormalDist().cdf(abs(z)))


def test_routing_matches_an_independent_computation(demo: DemoReview) -> None:
    rows = requests_of(demo.store)
    assert set(rows["routing"]) <= {"predicted", "default", "unknown"}
    table = csv(demo.out, "routing").set_index(["slo", "slo_class"])
    expected_keys = set()
    for slo in SLOS:
        judged = rows[rows[f"{slo}_met"].notna()]
        for slo_class, group in judged.groupby("slo_class"):
            expected_keys.add((slo, slo_class))
            got = table.loc[(slo, slo_class)]
            counted = {}
            for routing in ("predicted", "default", "unknown"):
                mine = group[group["routing"] == routing]
                missed = int((mine[f"{slo}_met"] == False).sum())  # noqa: E712
                counted[routing] = (len(mine), missed)
                assert (got[f"{routing}_eligible"], got[f"{routing}_violations"]) == (len(mine), missed)
                if len(mine):
                    assert got[f"{routing}_attainment"] == pytest.approx(1 - missed / len(mine), rel=1e-12)
            (n_p, v_p), (n_d, v_d) = counted["predicted"], counted["default"]
            if n_p and n_d and 0 < v_p + v_d < n_p + n_d:
                z, p = z_test(v_p, n_p, v_d, n_d)
                assert got["difference"] == pytest.approx((1 - v_p / n_p) - (1 - v_d / n_d), rel=1e-12, abs=1e-15)
                assert got["z"] == pytest.approx(z, rel=1e-9, abs=1e-12)
                assert got["p_value"] == pytest.approx(p, rel=1e-6, abs=1e-12)
    assert set(table.index) == expected_keys
    # the demo sends about a fifth of its requests through the default profile
    ttft = table.loc[("ttft", "interactive")]
    share = ttft["default_eligible"] / (ttft["predicted_eligible"] + ttft["default_eligible"])
    assert 0.1 < share < 0.3
    print("\n" + table.reset_index().drop(columns=["note"]).to_string(index=False))


def test_burn_adds_up_to_the_window(demo: DemoReview) -> None:
    burn, attainment = csv(demo.out, "burn"), csv(demo.out, "attainment")
    totals = attainment.groupby(["slo", "slo_class"])[["eligible", "violations"]].sum()
    binned = burn.groupby(["slo", "slo_class"])[["eligible", "violations"]].sum()
    assert binned.sort_index().equals(totals.sort_index())
    last = burn.groupby(["slo", "slo_class"])["budget_consumed_cumulative"].last()
    objective = burn.groupby(["slo", "slo_class"])["objective"].first()
    seen = observed(requests_of(demo.store))
    for key, value in last.items():
        assert value == pytest.approx(
            totals.loc[key, "violations"] / totals.loc[key, "eligible"] / (1 - objective[key]) * seen / PERIOD
        )
    assert burn["bin_start"].nunique() >= 5  # a 40 s run in 5 s bins


def test_policy_and_breakdown_match_an_independent_computation(demo: DemoReview) -> None:
    rows = requests_of(demo.store)
    objective = {(c["name"], slo): c["objectives"][slo] for c in demo.spec["classes"] for slo in SLOS}
    for name, keys in (("policy", ["slo_class"]), ("breakdown", ["slo_class", "pool", "model"])):
        table = csv(demo.out, name).set_index(["slo", *keys])
        expected = set()
        for slo in SLOS:
            judged = rows[rows[f"{slo}_met"].notna()]
            for grouped, group in judged.groupby(keys):
                key = grouped if isinstance(grouped, tuple) else (grouped,)
                expected.add((slo, *key))
                got = table.loc[(slo, *key)]
                missed = int((group[f"{slo}_met"] == False).sum())  # noqa: E712
                assert (got["eligible"], got["violations"]) == (len(group), missed)
                target = objective.get((key[0], slo))
                if target is None:
                    assert pd.isna(got["status"])
                    continue
                burn = missed / len(group) / (1 - target)
                assert got["mean_burn_rate"] == pytest.approx(burn, rel=1e-12, abs=1e-15)
                seen = observed(rows)
                assert got["budget_consumed"] == pytest.approx(burn * seen / PERIOD, rel=1e-12, abs=1e-15)
                assert got["budget_consumed_projected"] == pytest.approx(burn * WEEK / PERIOD, rel=1e-12, abs=1e-15)
                assert got["status"] == status(1 - burn * seen / PERIOD, burn)
        assert set(table.index) == expected, name


def test_offenders_are_the_worst_misses_with_their_trace_ids(demo: DemoReview) -> None:
    rows = requests_of(demo.store)
    table = csv(demo.out, "offenders")
    for signal in ("ttft", "tpot"):
        missed = rows[(rows[f"{signal}_met"] == False) & rows[f"{signal}_seconds"].notna()].copy()  # noqa: E712
        missed["over"] = missed[f"{signal}_seconds"] / missed[f"{signal}_target_seconds"]
        worst = missed.sort_values(["over", "end_time"], ascending=[False, True]).head(10)
        got = table[table["signal"] == signal]
        assert got["trace_id"].tolist() == worst["trace_id"].tolist()
        assert got["over_target"].tolist() == pytest.approx(worst["over"].tolist(), rel=1e-12)
        assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in got["trace_id"])
    assert (table["signal"] == "ttft").sum() > 0, "the demo should miss some TTFT targets"


def bin_of(span_seconds: float) -> int:
    """The documented bin rule, written again: the longest of the ladder giving 12 bins, else 5 s."""
    return next((s for s in (3600, 1800, 900, 300, 60, 30, 10, 5) if span_seconds / s >= 12), 5)


def test_the_header_and_data_quality_match_the_store(demo: DemoReview) -> None:
    rows = requests_of(demo.store)
    first, last = rows["end_time"].min(), rows["end_time"].max()
    markdown = demo.out.with_suffix(".md").read_text()
    assert f"requests ended {first:%Y-%m-%d %H:%M:%S}Z to {last:%Y-%m-%d %H:%M:%S}Z" in markdown
    assert "counts are of sampled requests" in markdown

    step = pd.Timedelta(seconds=bin_of((last - first).total_seconds()))
    seen = set(rows["end_time"].dt.floor(step))
    every = pd.date_range(first.floor(step), last.floor(step), freq=step)
    empty = [b for b in every if b not in seen]
    gaps = csv(demo.out, "gaps")
    starts, ends = pd.to_datetime(gaps["gap_start"]), pd.to_datetime(gaps["gap_end"])
    inside = (starts >= first.floor(step)) & (ends <= last.floor(step) + step)
    assert int(gaps.loc[inside, "seconds"].sum()) == len(empty) * step.total_seconds()
    # the week before the run and the time after it: the window's gaps at both ends
    assert (ends.iloc[0], starts.iloc[-1]) == (first.floor(step), last.floor(step) + step)
    assert gaps.loc[~inside, "seconds"].sum() > WEEK - 3600

    quality = csv(demo.out, "data_quality")
    assert set(quality["source"]) == {"store"}
    got = {(r.measure, r.key): r.count for r in quality.itertuples()}
    expected = {("join outcome", k): v for k, v in rows["join_outcome"].value_counts().items()}
    expected |= {("failed request", k): v for k, v in rows["failure_reason"].value_counts().items()}
    expected |= {("prediction skipped", k): v for k, v in rows["prediction_skipped"].value_counts().items()}
    fields = rows["invalid_fields"].dropna().map(lambda listed: sorted(set(listed))).explode().dropna()
    expected |= {("invalid value", k): v for k, v in fields.value_counts().items()}
    assert got == expected
    assert quality["share"].tolist() == pytest.approx((quality["count"] / len(rows)).tolist(), rel=1e-12)
    joined = rows["join_outcome"].isin(["joined", "joined_by_request_id"]).mean()
    assert f"Join ratio {joined * 100:.1f}%" in markdown


def test_trend_against_the_previous_period(demo: DemoReview, tmp_path: Path) -> None:
    rows = requests_of(demo.store)
    first, last = rows["end_time"].min(), rows["end_time"].max()
    # Whole seconds, so that no rounding of --from/--to can move a request across a boundary: the previous
    # period, as long as this one, starts a second or two before the first request.
    start = first.floor("s") - pd.Timedelta(seconds=1)
    end = last.ceil("s") + pd.Timedelta(seconds=1)
    end += pd.Timedelta(seconds=(end - start).total_seconds() % 2)
    middle = start + (end - start) / 2
    out = tmp_path / "trend.html"
    ran = sloscope("review", "--store", str(demo.store), "--slo-spec", str(demo.out.parents[1] / "work" / "slo.yaml"),
                   "--from", middle.isoformat(), "--to", end.isoformat(), "--out", str(out))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    trend = csv(out, "trend").set_index(["slo", "slo_class"])
    now, before = rows[rows["end_time"] >= middle], rows[rows["end_time"] < middle]
    for slo in SLOS:
        for slo_class, group in now[now[f"{slo}_met"].notna()].groupby("slo_class"):
            earlier = before[(before["slo_class"] == slo_class) & before[f"{slo}_met"].notna()]
            got = trend.loc[(slo, slo_class)]
            attained = group[f"{slo}_met"].astype(bool).mean()
            assert (got["eligible"], got["previous_eligible"]) == (len(group), len(earlier))
            assert got["attainment"] == pytest.approx(attained, rel=1e-12)
            previous = earlier[f"{slo}_met"].astype(bool).mean()
            assert got["previous_attainment"] == pytest.approx(previous, rel=1e-12)
            assert got["change"] == pytest.approx(attained - previous, rel=1e-9, abs=1e-12)


def cause(row: Any) -> str | None:
    """The documented rule, written again row by row."""
    ttft, tpot = row.ttft_met is False, row.tpot_met is False
    present = lambda v: v is not None and not (isinstance(v, float) and math.isnan(v))  # noqa: E731
    if ttft and not tpot:
        if not (present(row.queue_seconds) and present(row.prefill_seconds)):
            return "unknown"
        return "queueing" if row.queue_seconds >= row.prefill_seconds else "prefill"
    if tpot and not ttft:
        return "decode"
    if ttft and tpot:
        values = (row.queue_seconds, row.prefill_seconds, row.decode_seconds, row.completion_tokens)
        if not all(present(v) for v in values):
            return "unknown"
        shares = {
            "queueing": row.queue_seconds / row.ttft_target_seconds,
            "prefill": row.prefill_seconds / row.ttft_target_seconds,
            "decode": row.decode_seconds / (row.tpot_target_seconds * (row.completion_tokens - 1)),
        }
        return max(shares, key=lambda k: shares[k])
    return None


def test_causes_match_the_rule_applied_row_by_row(demo: DemoReview) -> None:
    rows = requests_of(demo.store).astype(object).where(lambda f: f.notna(), None)
    counted: dict[tuple[str, str], int] = {}
    for row in rows.itertuples(index=False):
        found = cause(row)
        if found is not None:
            counted[(row.slo_class, found)] = counted.get((row.slo_class, found), 0) + 1
    table = csv(demo.out, "causes").groupby(["slo_class", "cause"])["requests"].sum()
    assert {k: int(v) for k, v in table.items()} == counted
    print(counted)


def test_coverage_and_reliability_match(demo: DemoReview) -> None:
    rows = requests_of(demo.store)
    expected = {}
    for signal in ("ttft", "tpot"):
        actual, predicted = rows[f"{signal}_seconds"], rows[f"predicted_{signal}_seconds"]
        compared = rows[rows["prediction_source"].isin(["span", "shadow"]) & actual.notna() & predicted.notna()]
        for (source, pool), group in compared.groupby(["prediction_source", "pool"]):
            covered = int((group[f"{signal}_seconds"] <= group[f"predicted_{signal}_seconds"]).sum())
            expected[(signal, source, pool)] = (len(group), covered)
    table = csv(demo.out, "coverage")
    got = {(r.signal, r.source, r.pool): (r.compared, r.covered) for r in table.itertuples()}
    assert got == expected
    assert table["coverage"].tolist() == pytest.approx((table["covered"] / table["compared"]).tolist())
    reliability = csv(demo.out, "reliability")
    per_signal = reliability.groupby(["signal", "source"])["requests"].sum()
    assert {k: int(v) for k, v in per_signal.items()} == {(s, src): n for (s, src, _), (n, _) in expected.items()}


def test_headroom_and_worst_pods_match(demo: DemoReview) -> None:
    rows = requests_of(demo.store)
    headroom = csv(demo.out, "headroom")
    for r in headroom.itertuples():
        values = rows.loc[rows["slo_class"] == r.slo_class, f"{r.signal}_headroom_seconds"].dropna().to_numpy()
        assert r.requests == len(values)
        assert r.p50 == pytest.approx(float(np.percentile(values, 50)), rel=1e-12)
        assert r.p05 == pytest.approx(float(np.percentile(values, 5)), rel=1e-12)
        assert r.negative_share == pytest.approx(float((values < 0).mean()))
    pods = csv(demo.out, "worst_pods")
    judged = rows[rows["goodput_met"].notna()]
    expected = judged.groupby("pod")["goodput_met"].agg(lambda met: int((met == False).sum()))  # noqa: E712
    got = pods[pods["slo"] == "goodput"].set_index("pod")["violations"]
    assert got.sort_index().to_dict() == expected.sort_index().to_dict()
    assert set(got.index) == {"vllm-0", "vllm-1", "vllm-2", "vllm-3"}


def test_duckdb_reads_the_store(demo: DemoReview) -> None:
    pattern = str(demo.store / "**" / "*.parquet")
    [(missed,)] = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{pattern}', hive_partitioning=true) WHERE ttft_met = false"
    ).fetchall()
    attainment = csv(demo.out, "attainment")
    assert missed == attainment.loc[attainment["slo"] == "ttft", "violations"].sum()
    hours = duckdb.sql(f"SELECT DISTINCT hour FROM read_parquet('{pattern}', hive_partitioning=true)").fetchall()
    assert hours  # the partition columns are there


def test_the_report_embeds_its_charts(demo: DemoReview) -> None:
    html = demo.out.read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 6  # routing, burn, pods, causes, reliability, headroom
    for data in images:
        assert base64.b64decode(data, validate=True).startswith(PNG)
    markdown = demo.out.with_suffix(".md")
    assert markdown.is_file()
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", markdown.read_text()):
        assert (markdown.parent / link).read_bytes().startswith(PNG)
    assert str(demo.out) in demo.review.stdout.splitlines()


# ---- 2. a real Prometheus with backfilled counters -----------------------------------------------------------

ALERT = "ReviewTestSpansDropped"
T0 = datetime(2026, 1, 5, tzinfo=UTC)  # samples every minute from T0 to T0 + 180 min
MINUTES = 181


def interactive_ttft_violations(minute: int, per_minute_before: int, per_minute_after: int) -> int:
    """A counter growing by ``per_minute_before`` each minute up to minute 120, then by ``per_minute_after``."""
    return per_minute_before * min(minute, 120) + per_minute_after * max(minute - 120, 0)


def series() -> dict[tuple[str, tuple[tuple[str, str], ...]], list[int]]:
    def labels(pool: str, routing: str, slo_class: str, slo: str) -> tuple[tuple[str, str], ...]:
        return (("model", "m"), ("pool", pool), ("routing", routing), ("slo", slo), ("slo_class", slo_class))

    minutes = range(MINUTES)
    requests, violations = SLO_REQUESTS.exposed_name, SLO_VIOLATIONS.exposed_name
    return {
        # interactive TTFT from two pools: 100 eligible a minute in all; 2 misses a minute, 5 after minute 120
        (requests, labels("p1", "predicted", "interactive", "ttft")): [60 * m for m in minutes],
        (violations, labels("p1", "predicted", "interactive", "ttft")): [
            interactive_ttft_violations(m, 1, 3) for m in minutes
        ],
        (requests, labels("p2", "default", "interactive", "ttft")): [40 * m for m in minutes],
        (violations, labels("p2", "default", "interactive", "ttft")): [
            interactive_ttft_violations(m, 1, 2) for m in minutes
        ],
        # interactive goodput: 100 a minute, 3 misses a minute
        (requests, labels("p1", "predicted", "interactive", "goodput")): [100 * m for m in minutes],
        (violations, labels("p1", "predicted", "interactive", "goodput")): [3 * m for m in minutes],
        # standard TTFT: 50 a minute, never missed
        (requests, labels("p1", "predicted", "standard", "ttft")): [50 * m for m in minutes],
        (violations, labels("p1", "predicted", "standard", "ttft")): [0 for _ in minutes],
        # per pod: vllm-0 100 requests a minute, 2 TTFT misses; vllm-1 50, 1 TTFT miss and 3 goodput misses;
        # vllm-2 (another pool) 40 a minute and never a miss, so no violation series at all
        (POD_REQUESTS.exposed_name, ((POD, "vllm-0"), (POOL, "p1"))): [100 * m for m in minutes],
        (POD_REQUESTS.exposed_name, ((POD, "vllm-1"), (POOL, "p1"))): [50 * m for m in minutes],
        (POD_REQUESTS.exposed_name, ((POD, "vllm-2"), (POOL, "p2"))): [40 * m for m in minutes],
        (POD_SLO_VIOLATIONS.exposed_name, ((POD, "vllm-0"), (POOL, "p1"), (SLO, "ttft"))): [2 * m for m in minutes],
        (POD_SLO_VIOLATIONS.exposed_name, ((POD, "vllm-1"), (POOL, "p1"), (SLO, "ttft"))): list(minutes),
        (POD_SLO_VIOLATIONS.exposed_name, ((POD, "vllm-1"), (POOL, "p1"), (SLO, "goodput"))): [3 * m for m in minutes],
        # self-monitoring, per minute: 1000 spans received, 10 dropped; 100 records written to the store, 2 dropped;
        # 95 requests joined, 5 anchor only; 100 evaluated requests, 1 invalid TTFT value, 3 shed
        (SPANS_RECEIVED.exposed_name, (("transport", "grpc"),)): [1000 * m for m in minutes],
        (SPANS_DROPPED.exposed_name, (("reason", "queue_full"),)): [10 * m for m in minutes],
        (RECORDS.exposed_name, (("result", "written"), ("sink", "store"))): [100 * m for m in minutes],
        (RECORDS.exposed_name, (("result", "dropped"), ("sink", "store"))): [2 * m for m in minutes],
        (TRACES_JOINED.exposed_name, (("outcome", "joined"),)): [95 * m for m in minutes],
        (TRACES_JOINED.exposed_name, (("outcome", "anchor_only"),)): [5 * m for m in minutes],
        (
            REQUESTS.exposed_name,
            (("model", "m"), ("pool", "p1"), ("routing", "predicted"), ("slo_class", "interactive")),
        ): [100 * m for m in minutes],
        (INVALID_VALUES.exposed_name, (("field", "ttft"),)): list(minutes),
        (REQUESTS_FAILED.exposed_name, (("model", "m"), ("reason", "shed"))): [3 * m for m in minutes],
    }


def openmetrics() -> str:
    lines = []
    families = (SLO_REQUESTS, SLO_VIOLATIONS, POD_REQUESTS, POD_SLO_VIOLATIONS, SPANS_RECEIVED, SPANS_DROPPED, RECORDS,
                TRACES_JOINED, REQUESTS, INVALID_VALUES, REQUESTS_FAILED)  # fmt: skip
    for family in families:
        lines.append(f"# TYPE {family.name} counter")
        for (name, labels), values in series().items():
            if name != family.exposed_name:
                continue
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            for minute, value in enumerate(values):
                lines.append(f"{name}{{{text}}} {value} {int(T0.timestamp()) + 60 * minute}")
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, prometheus_binary: Path, promtool: Path) -> Iterator[str]:
    root = tmp_path_factory.mktemp("prometheus")
    data = root / "data"
    (root / "samples.om").write_text(openmetrics())
    subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(root / "samples.om"), str(data)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    # live too: a page with a dropped-spans counter, scraped every second, and a rule whose alert fires on it
    page = PageServer(f'{SPANS_DROPPED.exposed_name}{{reason="queue_full"}} 3\n').__enter__()
    (root / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "review-test", "rules": [{
        "alert": ALERT, "expr": f'{SPANS_DROPPED.exposed_name}{{job="page"}} > 0', "labels": {"severity": "ticket"},
    }]}]}))  # fmt: skip
    (root / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(root / "rules.yml")],
        "scrape_configs": [{"job_name": "page", "static_configs": [{"targets": [page.address]}]}],
    }))  # fmt: skip
    port = free_port()
    with (root / "prometheus.log").open("w") as log:
        process = subprocess.Popen(
            [str(prometheus_binary), f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
             "--storage.tsdb.retention.time=36500d", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=log,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # a bound on start-up, not a measurement
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, (root / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Prometheus did not become ready"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        page.__exit__()


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_review_from_prometheus(prometheus: str, tmp_path: Path) -> None:
    out = tmp_path / "review.html"
    ran = sloscope("review", "--prometheus", prometheus, "--from", at(60), "--to", at(180), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    table = csv(out, "attainment").set_index(["slo", "slo_class"])
    # increase(x[7200s]) at minute 180 sees the samples of minutes 61..180 (the range is open on the left): their
    # difference spans 119 minutes, and Prometheus extrapolates it by the 60 s gap to the range's start (less
    # than 1.1 sampling intervals): x 120/119. Counts are estimates; ratios of series with the same samples exact.
    scale = 120 / 119
    ttft = table.loc[("ttft", "interactive")]
    # eligible: 100 a minute over 119 minutes; misses: 2 a minute over minutes 62..120, 5 over 121..180
    assert ttft["eligible"] == pytest.approx(100 * 119 * scale, rel=1e-12)
    assert ttft["violations"] == pytest.approx((2 * 59 + 5 * 60) * scale, rel=1e-12)
    assert ttft["attainment"] == pytest.approx(1 - 418 / 11900, rel=1e-12)
    assert ttft["mean_burn_rate"] == pytest.approx(418 / 11900 / 0.01, rel=1e-9)  # the built-in spec: 0.99
    assert ttft["budget_consumed"] == pytest.approx(418 / 11900 / 0.01 * 2 / (28 * 24), rel=1e-9)
    assert (ttft["within_budget"], ttft["status"]) == (True, "at risk")
    goodput = table.loc[("goodput", "interactive")]
    assert goodput["attainment"] == pytest.approx(0.97, rel=1e-12)
    assert goodput["mean_burn_rate"] == pytest.approx(0.03 / 0.05, rel=1e-9)
    assert goodput["status"] == "healthy"
    standard = table.loc[("ttft", "standard")]
    assert (standard["attainment"], standard["violations"]) == (1.0, 0.0)
    assert standard["eligible"] == pytest.approx(50 * 119 * scale, rel=1e-12)

    # burn in 5-minute bins (a 2-hour window): each bin's increase(x[300s]) sees 5 samples, 4 minutes of
    # increase, extrapolated by 5/4: 500 eligible; 10 misses in bins up to minute 120, 25 after
    burn = csv(out, "burn")
    ttft_burn = burn[(burn["slo"] == "ttft") & (burn["slo_class"] == "interactive")]
    starts = pd.to_datetime(ttft_burn["bin_start"], utc=True)
    assert list(starts) == [pd.Timestamp(T0 + timedelta(minutes=m)) for m in range(60, 180, 5)]
    assert ttft_burn["eligible"].tolist() == pytest.approx([500.0] * 24, rel=1e-12)
    assert ttft_burn["violations"].tolist() == pytest.approx([10.0] * 12 + [25.0] * 12, rel=1e-12)
    assert ttft_burn["burn_rate"].tolist() == pytest.approx([2.0] * 12 + [5.0] * 12, rel=1e-9)

    # routing, from the same increases by routing: interactive TTFT predicted (pool p1) 60 a minute, 1 miss a
    # minute up to minute 120 then 3; default (pool p2) 40 a minute, 1 miss then 2
    routing = csv(out, "routing").set_index(["slo", "slo_class"])
    row = routing.loc[("ttft", "interactive")]
    n_p, v_p = 60 * 119 * scale, (1 * 59 + 3 * 60) * scale
    n_d, v_d = 40 * 119 * scale, (1 * 59 + 2 * 60) * scale
    assert (row["predicted_eligible"], row["predicted_violations"]) == pytest.approx((n_p, v_p), rel=1e-12)
    assert (row["default_eligible"], row["default_violations"]) == pytest.approx((n_d, v_d), rel=1e-12)
    assert (row["unknown_eligible"], row["unknown_violations"]) == (0.0, 0.0)
    assert row["predicted_attainment"] == pytest.approx(1 - 239 / 7140, rel=1e-12)
    assert row["default_attainment"] == pytest.approx(1 - 179 / 4760, rel=1e-12)
    assert row["difference"] == pytest.approx(179 / 4760 - 239 / 7140, rel=1e-9)
    z, p = z_test(v_p, n_p, v_d, n_d)  # z = 1.2044, p = 0.228: 0.4 points of attainment is within the noise
    assert (row["z"], row["p_value"]) == pytest.approx((z, p), rel=1e-9)
    assert (round(z, 4), round(p, 3)) == (1.2044, 0.228)
    assert row["note"] == "no significant difference (p >= 0.05)"
    assert routing.loc[("goodput", "interactive"), "note"] == "no default requests to compare"
    assert routing.loc[("goodput", "interactive"), "predicted_attainment"] == pytest.approx(0.97, rel=1e-12)
    assert sorted(routing.index) == [("goodput", "interactive"), ("ttft", "interactive"), ("ttft", "standard")]

    # worst pods from the per-pod counters: the same 120/119 extrapolation of each counter
    pods = csv(out, "worst_pods")
    assert list(pods.columns) == ["slo", "pool", "pod", "requests", "violations", "violations_per_request",
                                  "share_of_violations"]  # fmt: skip
    got = [(r.slo, r.pool, r.pod) for r in pods.itertuples()]
    assert got == [
        ("ttft", "p1", "vllm-0"), ("ttft", "p1", "vllm-1"), ("ttft", "p2", "vllm-2"),
        ("goodput", "p1", "vllm-1"), ("goodput", "p1", "vllm-0"), ("goodput", "p2", "vllm-2"),
    ]  # fmt: skip
    assert pods["requests"].tolist() == pytest.approx([12000, 6000, 4800, 6000, 12000, 4800], rel=1e-12)
    assert pods["violations"].tolist() == pytest.approx([240, 120, 0, 360, 0, 0], rel=1e-12)
    assert pods["violations_per_request"].tolist() == pytest.approx([0.02, 0.02, 0, 0.06, 0, 0], rel=1e-12)
    assert pods["share_of_violations"].tolist() == pytest.approx([2 / 3, 1 / 3, 0, 1, 0, 0], rel=1e-12)

    # data quality from the exporter's own counters: every increase is 120 minutes' worth (the same 120/119)
    quality = csv(out, "data_quality")
    assert set(quality["source"]) == {"prometheus"}
    got = {(r.measure, r.key): (r.count, r.share) for r in quality.itertuples()}
    assert got == {
        ("failed request", "shed"): pytest.approx((360, 0.03), rel=1e-9),
        ("invalid value", "ttft"): pytest.approx((120, 0.01), rel=1e-9),
        ("join outcome", "anchor_only"): pytest.approx((600, 0.05), rel=1e-9),
        ("join outcome", "joined"): pytest.approx((11400, 0.95), rel=1e-9),
        ("records not written", "store/dropped"): pytest.approx((240, 2 / 102), rel=1e-9),
        ("spans dropped", "queue_full"): pytest.approx((1200, 0.01), rel=1e-9),
    }
    assert csv(out, "alerts").empty  # nothing fired in January: the alert rule runs now

    html = out.read_text()
    assert "<li>Alerts: none fired in the window.</li>" in html
    # 418 of 11900 over a 1% budget is a mean burn rate of 3.51: 2 hours of it spend 1% of a 28-day budget
    assert "<li>ttft: AT RISK (1 at risk of 2 class/model rows); most spent: interactive / m, 1.0% of its " in html
    assert "Not available from Prometheus" in html
    assert html.count("data:image/png;base64,") == 3  # routing, burn, pods


def test_an_empty_prometheus_window_exits_1(prometheus: str, tmp_path: Path) -> None:
    ran = sloscope("review", "--prometheus", prometheus, "--from", "2025-01-01", "--to", "2025-01-02",
                   "--out", str(tmp_path / "r.html"))  # fmt: skip
    assert ran.returncode == 1
    assert ran.stderr.strip().startswith(f"review: Prometheus at {prometheus} has no {SLO_REQUESTS.exposed_name}")
    assert ran.stderr.count("\n") == 1


def test_alerts_that_fired_come_from_prometheus(demo: DemoReview, prometheus: str, tmp_path: Path) -> None:
    """The live rule fires on the scraped page (evaluated every second): the review of the demo's store with
    --prometheus lists it, from Prometheus's ALERTS series, and adds the exporter's counters to data quality.
    The alert fires on the page's first sample, but increase() needs two: the review waits for both (with one,
    the data quality table has no Prometheus rows)."""
    deadline = time.monotonic() + 60  # a bound on the rule's first evaluations, not a measurement
    firing = f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}'
    two_samples = f'count_over_time({SPANS_DROPPED.exposed_name}{{job="page"}}[10m]) >= 2'

    def holds(query: str) -> bool:
        answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}, timeout=5).json()
        return bool(answer["data"]["result"])

    while not (holds(firing) and holds(two_samples)):
        assert time.monotonic() < deadline, "the test rule never fired, or the page was scraped fewer than twice"
        time.sleep(0.5)
    out = tmp_path / "review.html"
    ran = sloscope("review", "--store", str(demo.store), "--slo-spec", str(demo.out.parents[1] / "work" / "slo.yaml"),
                   "--prometheus", prometheus, "--out", str(out))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    alerts = csv(out, "alerts")
    assert alerts[["alertname", "severity"]].values.tolist() == [[ALERT, "ticket"]]
    [labels] = alerts["labels"]
    assert "reason=queue_full" in labels and "job=page" in labels
    first = pd.Timestamp(alerts["first_firing"].iloc[0])
    assert first <= pd.Timestamp(alerts["last_firing"].iloc[0]) <= pd.Timestamp.now(tz="UTC") + pd.Timedelta(minutes=1)
    assert alerts["firing_seconds"].iloc[0] >= 15
    html = out.read_text()
    assert f"<li>Alerts: 1 fired in the window ({ALERT}).</li>" in html
    quality = csv(out, "data_quality")
    assert set(quality["source"]) == {"store", "prometheus"}
