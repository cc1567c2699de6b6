"""``sloscope review`` on a small hand-made record store: the files it writes, what they hold, and its errors."""

from __future__ import annotations

import base64
import csv
import re
import socket
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from sloscope.cli import main
from sloscope.review import ReviewError
from sloscope.review.load import load_frame
from sloscope.review.render import cell
from sloscope.review.window import Window
from sloscope.store.files import write_atomic
from sloscope.store.schema import SCHEMA

HOUR = datetime(2026, 11, 30, 10, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n"
WINDOW = ["--from", "2026-11-30T09:00:00Z", "--to", "2026-11-30T12:00:00Z"]


def row(minute: int, pod: str, ttft: float, predicted: float, **more: Any) -> dict[str, Any]:
    """An interactive request (built-in spec: TTFT objective 0.99) with a 0.5 s TTFT target."""
    end = HOUR + timedelta(minutes=minute)
    met = ttft <= 0.5
    return {
        "schema_version": 1, "trace_id": f"{minute:032x}", "span_id": f"{minute:016x}", "end_time": end,
        "arrival_time": end - timedelta(seconds=1), "model": "m", "pool": "p", "pod": pod, "slo_class": "interactive",
        "routing": "predicted", "ttft_target_seconds": 0.5, "ttft_seconds": ttft, "queue_seconds": ttft * 0.7,
        "prefill_seconds": ttft * 0.3, "ttft_met": met, "goodput_met": met, "prediction_source": "shadow",
        "predicted_ttft_seconds": predicted, "prediction_quantile": 0.9, "ttft_headroom_seconds": 0.5 - predicted,
        **more,
    }  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """100 requests over 100 minutes in two hourly files; 4 miss TTFT, all on pod b, all by queueing; the odd
    minutes routed by the default profile (2 of the misses, minutes 25 and 75)."""
    root = tmp_path / "store"
    rows = [
        row(m, "b" if m % 5 == 0 else "a", 0.9 if m % 25 == 0 else 0.2, 0.1 + (m % 10) / 20,
            routing="default" if m % 2 else "predicted")
        for m in range(100)
    ]  # fmt: skip
    for hour in (HOUR, HOUR + timedelta(hours=1)):
        part = [r for r in rows if hour <= r["end_time"] < hour + timedelta(hours=1)]
        write_atomic(root, hour, pa.Table.from_pylist(part, schema=SCHEMA), hour, "sloscope-0")
    return root


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def test_review_writes_html_markdown_charts_and_tables(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "weekly.html"
    assert main(["review", "--store", str(store), *WINDOW, "--out", str(out), "--title", "Week 48"]) == 0

    [ttft] = [r for r in read_csv(out.parent / "weekly-tables" / "attainment.csv") if r["slo"] == "ttft"]
    assert (ttft["slo_class"], ttft["eligible"], ttft["violations"]) == ("interactive", "100", "4")
    assert float(ttft["attainment"]) == 0.96
    # 4 of 100 missed against a 1% budget: a mean burn rate of 4; the store has requests in 100 minutes (20 bins
    # of 5 minutes) of the 3-hour window, which spend 4 x (100 / 60) / 672 of a 28-day period's budget, and the
    # whole window would at that pace 4 x 3 / 672; burning faster than 1 is "at risk" though little is spent
    assert float(ttft["mean_burn_rate"]) == pytest.approx(0.04 / 0.01)
    assert float(ttft["budget_consumed"]) == pytest.approx(0.04 / 0.01 * (100 / 60) / (28 * 24))
    assert float(ttft["budget_consumed_projected"]) == pytest.approx(0.04 / 0.01 * 3 / (28 * 24))
    assert float(ttft["budget_remaining"]) == pytest.approx(1 - 0.04 / 0.01 * (100 / 60) / (28 * 24))
    assert (ttft["within_budget"], ttft["status"]) == ("True", "at risk")
    causes = read_csv(out.parent / "weekly-tables" / "causes.csv")
    assert [(r["missed"], r["cause"], r["requests"]) for r in causes] == [("ttft", "queueing", "4")]
    pods = read_csv(out.parent / "weekly-tables" / "worst_pods.csv")
    assert [(r["slo"], r["pod"], r["violations"]) for r in pods if r["slo"] == "ttft"] == [
        ("ttft", "b", "4"),
        ("ttft", "a", "0"),
    ]
    routing = read_csv(out.parent / "weekly-tables" / "routing.csv")
    assert [(r["slo"], r["predicted_eligible"], r["predicted_violations"], r["default_eligible"],
             r["default_violations"], r["unknown_eligible"]) for r in routing] == [
        ("ttft", "50", "2", "50", "2", "0"),
        ("goodput", "50", "2", "50", "2", "0"),
    ]  # fmt: skip
    assert {(r["difference"], r["z"], r["p_value"]) for r in routing} == {("0.0", "0.0", "1.0")}
    # 4 missed of 100: 50 x 0.04 = 2 expected violations per profile, too few for the normal approximation
    assert routing[0]["note"] == "too few to tell (under 5 expected violations or passes in a group)"

    html = out.read_text()
    assert "<h1>Week 48</h1>" in html
    assert (
        "<li>ttft: AT RISK (1 at risk of 1 class/model rows); most spent: interactive / m, 1.0% of its 28-day error "
        "budget in the 1.67 h of this 3-hour window that has requests (projected over the whole window at that pace: "
        "1.8%)" in html
    )
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 6  # routing, burn, pods, causes, reliability, headroom
    assert all(base64.b64decode(data, validate=True).startswith(PNG) for data in images)
    assert 'src="http' not in html  # self-contained: nothing to fetch

    markdown = out.with_suffix(".md").read_text()
    linked = re.findall(r"!\[[^]]*\]\(([^)]+)\)", markdown)
    names = ("routing", "burn", "pods", "causes", "reliability", "headroom")
    assert linked == [f"weekly-charts/{name}.png" for name in names]
    for link in linked:
        assert (out.parent / link).read_bytes().startswith(PNG)
    assert "| ttft | interactive | m | 100 | 4 | 0.9600 | 0.9900 |" in markdown
    assert "| ttft | interactive | 0.9900 | 50 | 2 | 0.9600 | 50 | 2 | 0.9600 | 0 | 0 | — | 0.0000 |" in markdown
    assert sorted(p.name for p in (out.parent / "weekly-tables").iterdir()) == [
        "attainment.csv", "breakdown.csv", "burn.csv", "causes.csv", "coverage.csv", "data_quality.csv", "gaps.csv",
        "headroom.csv", "mean_error.csv", "offenders.csv", "policy.csv", "reliability.csv", "routing.csv", "trend.csv",
        "worst_periods.csv", "worst_pods.csv",
    ]  # fmt: skip


def test_the_budget_coverage_and_gaps_are_of_what_the_store_saw(store: Path, tmp_path: Path) -> None:
    """A store that covers part of the window (100 minutes of 3 hours, a tenth of a longer one): the budget of the
    time it has requests in, the coverage in the header, and the gaps at both ends, against pandas alone."""
    out = tmp_path / "r.html"
    window = ["--from", "2026-11-30T00:00:00Z", "--to", "2026-11-30T16:40:00Z"]  # 1000 minutes: a tenth covered
    assert main(["review", "--store", str(store), *window, "--out", str(out)]) == 0
    frame = load_frame(store, Window(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 11, 30, 16, 40, tzinfo=UTC)))
    step = pd.Timedelta(minutes=5)  # the ladder's bin for a 99-minute span: at least 12 bins
    bins = sorted(set(frame["end_time"].dt.floor(step)))
    observed = len(bins) * step.total_seconds()
    start, end = pd.Timestamp("2026-11-30T00:00:00Z"), pd.Timestamp("2026-11-30T16:40:00Z")
    assert observed == 6000.0 and (end - start).total_seconds() == 60000.0

    [ttft] = [r for r in read_csv(out.parent / "r-tables" / "attainment.csv") if r["slo"] == "ttft"]
    burn = (4 / 100) / 0.01
    assert float(ttft["budget_consumed"]) == pytest.approx(burn * observed / (28 * 86400))
    assert float(ttft["budget_consumed_projected"]) == pytest.approx(burn * 60000 / (28 * 86400))
    gaps = [
        (pd.Timestamp(r["gap_start"]), pd.Timestamp(r["gap_end"]), float(r["seconds"]))
        for r in read_csv(out.parent / "r-tables" / "gaps.csv")
    ]
    expected = [(start, bins[0]), (bins[-1] + step, end)]  # before the first request's bin, after the last's
    assert gaps == [(a, b, (b - a).total_seconds()) for a, b in expected]
    markdown = out.with_suffix(".md").read_text()
    assert "- **Coverage**: 100 min of the 1000 min window (10.0%) has requests" in markdown
    assert "- **Gaps**: 2 without requests, 15 h in all, the longest 10 h from 2026-11-30 00:00:00Z" in markdown


def test_the_same_store_gives_the_same_files(store: Path, tmp_path: Path) -> None:
    outputs = []
    for name in ("one", "two"):
        out = tmp_path / name / "r.html"
        assert main(["review", "--store", str(store), *WINDOW, "--out", str(out)]) == 0
        outputs.append({p.relative_to(out.parent): p.read_bytes() for p in out.parent.rglob("*") if p.is_file()})
    assert outputs[0] == outputs[1]


def test_the_window_selects_requests_by_end_time(store: Path) -> None:
    start = HOUR + timedelta(minutes=30)
    requests = load_frame(store, Window(start, start + timedelta(minutes=40)))
    assert len(requests) == 40
    assert requests["end_time"].min() == pd.Timestamp(start)
    assert str(requests["ttft_met"].dtype) == "boolean"
    assert requests["tpot_met"].isna().all()


def test_errors_of_the_store(tmp_path: Path) -> None:
    window = Window(HOUR, HOUR + timedelta(hours=1))
    with pytest.raises(ReviewError, match="does not exist"):
        load_frame(tmp_path / "nowhere", window)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReviewError, match=r"has no requests that ended between 2026-11-30T10:00:00Z to"):
        load_frame(tmp_path / "empty", window)


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_an_empty_window_exits_1_with_one_line(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "review",
        "--store",
        str(store),
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-02",
        "--out",
        str(tmp_path / "r.html"),
    ]
    assert main(args) == 1
    assert one_line(capsys).startswith("review: record store ")
    assert not (tmp_path / "r.html").exists()


def test_a_missing_store_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review", "--store", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r.html")]) == 1
    assert one_line(capsys) == f"review: record store {tmp_path / 'nowhere'} does not exist"


def test_unreachable_prometheus_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert main(["review", "--prometheus", url, "--since", "1h", "--out", str(tmp_path / "r.html")]) == 1
    assert one_line(capsys).startswith(f"review: cannot reach Prometheus at {url}: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "7x"], "review: --since: not a duration: '7x'"),
        (["--from", "last tuesday"], "review: --from: not an ISO 8601 time: 'last tuesday'"),
        (["--from", "2026-11-02", "--to", "2026-11-01"], "review: the review window is empty"),
    ],
)
def test_bad_options_exit_2(store: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review", "--store", str(store), *args]) == 2
    assert one_line(capsys).startswith(message)


@pytest.mark.parametrize(
    "args",
    [["--store", "s", "--bogus"], ["--since"]],
    ids=["unknown", "no value"],
)
def test_argument_errors_exit_2(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["review", *args])
    assert exited.value.code == 2


def test_neither_store_nor_prometheus_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review"]) == 2
    assert one_line(capsys) == "review: give --store DIR, --prometheus URL or both"


def test_a_bad_spec_exits_2(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text("version: sloscope/v1\nclasses: [{name: Bad}]\n")
    assert main(["review", "--store", str(store), "--slo-spec", str(spec)]) == 2
    assert str(spec) in capsys.readouterr().err


def test_without_the_extra_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in sys.modules if n.startswith("sloscope.review.") and n != "sloscope.review.window"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an environment without pandas looks like to import
    assert main(["review", "--store", "anywhere"]) == 1
    assert one_line(capsys) == (
        "review: sloscope review needs pandas, matplotlib and duckdb: pip install 'sloscope[review]' "
        "(pandas is not installed)"
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.123456, "0.1235"), (12345.6, "12346"), (float("nan"), "—"), (None, "—"), (pd.NA, "—"), (True, "yes"),
        (7, "7"), (pd.Timestamp("2026-11-30T10:00:05Z"), "2026-11-30 10:00:05Z"), ("a|b", "a|b"),
    ],
)  # fmt: skip
def test_cells(value: object, text: str) -> None:
    assert cell(value) == text


def test_the_routing_chart_draws_attainments_of_0_and_1() -> None:
    from sloscope.review import analysis, charts

    table = pd.DataFrame(
        [("ttft", "interactive", "predicted", 7, 0), ("ttft", "interactive", "default", 3, 0),
         ("tpot", "interactive", "predicted", 5, 5), ("tpot", "interactive", "default", 2, 2)],
        columns=["slo", "slo_class", "routing", "eligible", "violations"],
    )  # fmt: skip
    targets = pd.DataFrame([("interactive", "ttft", 0.99), ("interactive", "tpot", 0.99)],
                           columns=["slo_class", "slo", "objective"])  # fmt: skip
    routing = analysis.routing_from_counts(table, targets)
    assert routing["note"].tolist() == ["no violations under either", "every request violated under both"]
    png = charts.routing_chart(routing)
    assert png is not None and png.startswith(PNG)
    assert charts.routing_chart(routing[routing["slo"] == "nothing"]) is None


HOSTILE_MODEL = "=cmd|' /C calc'!A0"  # a spreadsheet formula (the classic CSV injection)
# mathtext raises on the unknown command; then HTML, a link and code
HOSTILE_POD = "| =cmd() $x^2\\undefinedmacro$ <script>alert(1)</script> [x](javascript:alert(1)) `code`"
HOSTILE_POOL = "@SUM(A1) $\\undefinedmacro$"  # mathtext would raise on the unknown command


def test_hostile_names_render_as_text_in_html_markdown_csv_and_charts(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rows = [
        row(m, HOSTILE_POD if m % 5 == 0 else "a", 0.9 if m % 25 == 0 else 0.2, 0.1 + (m % 10) / 20,
            model=HOSTILE_MODEL, pool=HOSTILE_POOL, slo_class="interactive")
        for m in range(60)
    ]  # fmt: skip
    write_atomic(root, HOUR, pa.Table.from_pylist(rows, schema=SCHEMA), HOUR, "sloscope-0")
    out = tmp_path / "out" / "r.html"
    assert main(["review", "--store", str(root), *WINDOW, "--out", str(out)]) == 0  # the charts drew: no mathtext

    html = out.read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="javascript' not in html

    markdown = out.with_suffix(".md").read_text()
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert re.search(r"(?<!\\)\]\(javascript", markdown) is None  # the brackets are escaped: no link
    assert (
        r"\| =cmd() \$x^2\\undefinedmacro\$ &lt;script&gt;alert(1)&lt;/script&gt; \[x\](javascript:alert(1)) \`code\`"
        in markdown
    )
    lines = markdown.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("| slo | pool | pod |")))
    pod_row = next(line for line in lines[header:] if "\\| =cmd" in line)

    def cells(line: str) -> int:
        return len(re.findall(r"(?<!\\)\|", line))  # unescaped pipes

    assert cells(pod_row) == cells(lines[header])  # the pod's pipe does not split its cell

    tables = out.parent / "r-tables"
    offenders = read_csv(tables / "offenders.csv")
    assert {r["model"] for r in offenders} == {"'" + HOSTILE_MODEL}
    assert {r["pool"] for r in offenders} == {"'" + HOSTILE_POOL}
    assert {r["pod"] for r in offenders} == {HOSTILE_POD}  # starts with a pipe: no formula, unchanged
    for path in tables.iterdir():
        for record in read_csv(path):
            for value in record.values():
                assert not value.startswith(("=", "+", "@", "\t", "\r")), (path.name, value)
                assert not (value.startswith("-") and not re.fullmatch(r"-[0-9.e+-]+", value)), (path.name, value)
