"""The review's SQL over the store's Parquet files: exact values on generated stores with known answers, the files
it reads and skips, DuckDB's limits, and quantiles and histograms equal to numpy's and pandas' (the report's
numbers were pandas' before they were SQL: numpy/lib/_function_base_impl.py ``_quantile``/``_lerp``,
numpy/lib/_histograms_impl.py ``histogram``, pandas/core/reshape/tile.py ``qcut``, numpy 2.4.6, pandas 3.1.1)."""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sloscope.cli import main
from sloscope.review import ReviewError, analysis, charts, quality, queries
from sloscope.review.engine import COLUMNS, Engine, Rows
from sloscope.review.load import store_rows
from sloscope.review.window import Window
from sloscope.store.files import INCOMING, write_atomic
from sloscope.store.schema import METADATA_KEY, SCHEMA

HOUR = datetime(2026, 11, 30, 10, tzinfo=UTC)
WINDOW = Window(HOUR, HOUR + timedelta(hours=3))


def row(i: int, **more: Any) -> dict[str, Any]:
    """Request i ends i seconds after 10:00 (interactive, model m, pool p, pod a)."""
    return {
        "schema_version": 1, "trace_id": f"{i:032x}", "span_id": f"{i:016x}",
        "end_time": HOUR + timedelta(seconds=i), "model": "m", "pool": "p", "pod": "a", "slo_class": "interactive",
        **more,
    }  # fmt: skip


def write(root: Path, rows: list[dict[str, Any]], replica: str = "r0") -> None:
    """Rows into their hourly partitions, one file per hour."""
    for hour in sorted({r["end_time"].replace(minute=0, second=0, microsecond=0) for r in rows}):
        part = [r for r in rows if hour <= r["end_time"] < hour + timedelta(hours=1)]
        write_atomic(root, hour, pa.Table.from_pylist(part, schema=SCHEMA), hour, replica)


def of_store(root: Path, window: Window = WINDOW) -> Rows:
    found = Rows.of_store(root, window)
    assert found is not None
    return found


def test_counts_over_several_files_and_hours(tmp_path: Path) -> None:
    """1,000 requests over two hours in two replicas' files: every 10th misses TTFT (100), every 4th is not
    eligible for TPOT; goodput misses where TTFT does."""
    rows = [
        row(i * 7, ttft_met=i % 10 != 0, tpot_met=None if i % 4 == 0 else True, goodput_met=i % 10 != 0)
        for i in range(1000)
    ]
    write(tmp_path, rows[::2], "r0")
    write(tmp_path, rows[1::2], "r1")
    counts = analysis._counts(of_store(tmp_path), ["slo", "slo_class"])
    assert counts.to_dict("records") == [
        {"slo": "goodput", "slo_class": "interactive", "eligible": 1000, "violations": 100},
        {"slo": "tpot", "slo_class": "interactive", "eligible": 750, "violations": 0},
        {"slo": "ttft", "slo_class": "interactive", "eligible": 1000, "violations": 100},
    ]
    assert str(counts["eligible"].dtype) == "int64" and str(counts["violations"].dtype) == "int64"
    span = quality.span(of_store(tmp_path))
    assert (span.requests, span.first, span.last) == (
        1000,
        pd.Timestamp(HOUR),
        pd.Timestamp(HOUR) + pd.Timedelta(6993, "s"),
    )


def test_the_window_is_end_time_in_start_to_end(tmp_path: Path) -> None:
    """Nanosecond end times: the one at the window's end is out, the one at its start in."""
    ends = [HOUR - timedelta(microseconds=1), HOUR, HOUR + timedelta(hours=1), HOUR + timedelta(hours=2)]
    write(tmp_path, [dict(row(i), end_time=end, ttft_met=True) for i, end in enumerate(ends)])
    found = of_store(tmp_path, Window(HOUR, HOUR + timedelta(hours=2)))
    assert quality.span(found).requests == 2
    frame = found.table("SELECT epoch_ns(end_time) AS end_time FROM requests ORDER BY end_time", times=["end_time"])
    assert list(frame["end_time"]) == [pd.Timestamp(HOUR), pd.Timestamp(HOUR + timedelta(hours=1))]


def test_files_being_written_are_not_read(tmp_path: Path) -> None:
    """A complete Parquet file under .incoming/<replica>/ (a replica mid-write, as named before its rename) and one
    with the temporary name: neither is read, as pyarrow's reader skipped them."""
    write(tmp_path, [row(0, ttft_met=True)])
    incoming = tmp_path / INCOMING / "r1"
    incoming.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row(1, ttft_met=False)], schema=SCHEMA), incoming / "a.parquet")
    pq.write_table(pa.Table.from_pylist([row(2, ttft_met=False)], schema=SCHEMA), incoming / "b.parquet.tmp")
    counts = analysis._counts(of_store(tmp_path), ["slo"])
    assert counts.to_dict("records") == [{"slo": "ttft", "eligible": 1, "violations": 0}]


def test_a_file_of_an_older_schema_reads_its_missing_columns_as_null(tmp_path: Path) -> None:
    """A file written before failure_reason and prediction_objective existed: its failed requests unknown, its
    predictions quantile ones (coverage, not mean error)."""
    old = SCHEMA.remove(SCHEMA.get_field_index("failure_reason"))
    old = old.remove(old.get_field_index("prediction_objective"))
    rows = [row(i, ttft_seconds=0.2, predicted_ttft_seconds=0.3, prediction_source="span") for i in range(3)]
    table = pa.Table.from_pylist(rows, schema=old)
    write_atomic(tmp_path, HOUR, table, HOUR, "r0")
    found = of_store(tmp_path)
    assert analysis.coverage(found)[["signal", "compared", "covered"]].to_dict("records") == [
        {"signal": "ttft", "compared": 3, "covered": 3}
    ]
    assert analysis.mean_error(found).empty
    assert found.scalars("SELECT COUNT(failure_reason) FROM requests") == (0,)


def test_a_file_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    newer = SCHEMA.with_metadata({METADATA_KEY: b"99"})
    write_atomic(tmp_path, HOUR, pa.Table.from_pylist([row(0)], schema=newer), HOUR, "r0")
    with pytest.raises(ReviewError, match="record schema version 99"):
        Rows.of_store(tmp_path, WINDOW)


def test_an_empty_window_and_a_missing_previous_period(tmp_path: Path) -> None:
    write(tmp_path, [row(0, ttft_met=True), row(3700, ttft_met=True)])
    with pytest.raises(ReviewError, match="has no requests that ended between"):
        store_rows(tmp_path, Window(HOUR + timedelta(hours=5), HOUR + timedelta(hours=6)))
    _, previous = store_rows(tmp_path, WINDOW)
    assert previous is None
    _, previous = store_rows(tmp_path, Window(HOUR + timedelta(hours=1), HOUR + timedelta(hours=2)))
    assert previous is not None and quality.span(previous).requests == 1


def test_duckdb_limits_come_from_the_options(tmp_path: Path) -> None:
    write(tmp_path, [row(0)])
    found = Rows.of_store(tmp_path, WINDOW, Engine(memory_limit="300MB", threads=1, temp_directory=tmp_path / "t"))
    assert found is not None
    limit, threads, spill = found.scalars(
        "SELECT current_setting('memory_limit'), current_setting('threads'), current_setting('temp_directory')"
    )
    assert (limit, int(threads), spill) == ("286.1 MiB", 1, str(tmp_path / "t"))


def test_the_review_takes_duckdbs_limits_as_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "store", [row(i, ttft_met=i % 2 == 0) for i in range(20)])
    window = ["--from", "2026-11-30T10:00:00Z", "--to", "2026-11-30T11:00:00Z"]
    args = ["review", "--store", str(tmp_path / "store"), *window, "--out", str(tmp_path / "r.html")]
    assert main([*args, "--memory-limit", "100MB", "--threads", "1"]) == 0
    assert (tmp_path / "r-tables" / "attainment.csv").exists()
    capsys.readouterr()
    assert main([*args, "--threads", "0"]) == 2
    assert capsys.readouterr().err == "review: --threads: must be at least 1, not 0\n"
    assert main([*args, "--memory-limit", "lots"]) == 2
    assert capsys.readouterr().err == "review: --memory-limit: not a size: 'lots' (like 2GB or 512MB)\n"


def test_headroom_percentiles_equal_numpys_quantile(tmp_path: Path) -> None:
    """Random headroom with ties, and groups of 1 and 2 values: every percentile == np.quantile's, bit for bit."""
    rnd = random.Random(3)
    rows = [row(i, ttft_headroom_seconds=round(rnd.gauss(0.1, 0.2), 2)) for i in range(997)]
    rows += [row(1000, slo_class="one", ttft_headroom_seconds=0.25)]
    rows += [row(1001 + i, slo_class="two", ttft_headroom_seconds=v) for i, v in enumerate((0.1, 0.7))]
    write(tmp_path, rows)
    table = analysis.headroom(of_store(tmp_path))
    for got in table.to_dict("records"):
        values = np.array([r["ttft_headroom_seconds"] for r in rows if r["slo_class"] == got["slo_class"]])
        assert got["requests"] == len(values)
        assert got["negative_share"] == float((values < 0).mean())
        for p in analysis.HEADROOM_PERCENTILES:
            assert got[f"p{round(p * 100):02d}"] == float(np.quantile(values, p)), (got["slo_class"], p)


def test_reliability_bins_equal_pandas_qcut(tmp_path: Path) -> None:
    """Predictions with many repeats (so qcut drops duplicate edges): the bins' sizes, ranges, medians, actual
    quantiles and coverage equal those of pd.qcut over the same values."""
    rnd = random.Random(5)
    rows = []
    for i in range(2000):
        predicted = rnd.choice([0.1, 0.1, 0.1, 0.2, 0.3]) if i % 2 else round(rnd.uniform(0.1, 0.9), 3)
        actual = round(predicted * rnd.uniform(0.5, 1.5), 4)
        rows.append(row(i, prediction_source="shadow", ttft_seconds=actual, predicted_ttft_seconds=predicted))
    write(tmp_path, rows)
    table = analysis.reliability(of_store(tmp_path))
    frame = pd.DataFrame({"predicted": [r["predicted_ttft_seconds"] for r in rows]})
    frame["actual"] = [r["ttft_seconds"] for r in rows]
    codes = pd.qcut(frame["predicted"], q=10, labels=False, duplicates="drop")
    expected = []
    for code, members in frame.groupby(codes, sort=True):
        expected.append(
            {
                "bin": int(code) + 1, "requests": len(members), "predicted_low": members["predicted"].min(),
                "predicted_high": members["predicted"].max(), "predicted_median": members["predicted"].median(),
                "actual_quantile": members["actual"].quantile(0.9),
                "coverage": float((members["actual"] <= members["predicted"]).mean()),
            }
        )  # fmt: skip
    assert len(expected) < 10  # duplicate edges were dropped
    assert table.drop(columns=["signal", "source", "quantile"]).to_dict("records") == expected


def test_the_headroom_histogram_counts_as_numpy(tmp_path: Path) -> None:
    """Values on the bin edges themselves (numpy's index is corrected against its edges)."""
    values = [i / 40 for i in range(41)] + [0.5] * 3 + [0.3333, 0.1 + 0.2]
    write(tmp_path, [row(i, ttft_headroom_seconds=v) for i, v in enumerate(values)])
    edges, counts = charts.headroom_histogram(of_store(tmp_path), "ttft")
    expected, expected_edges = np.histogram(np.array(values), bins=40)
    assert list(edges) == list(expected_edges)
    assert list(counts) == list(expected)


def test_violation_causes_over_the_store(tmp_path: Path) -> None:
    """One request per rule of docs/review.md, "Violations by cause"."""
    ttft = {"ttft_target_seconds": 1.0, "tpot_target_seconds": 0.1, "completion_tokens": 11}
    rows = [
        row(0, ttft_met=False, tpot_met=True, queue_seconds=0.6, prefill_seconds=0.5, **ttft),
        row(1, ttft_met=False, tpot_met=True, queue_seconds=0.4, prefill_seconds=0.5, **ttft),
        row(2, ttft_met=True, tpot_met=False, **ttft),
        row(3, ttft_met=False, tpot_met=False, queue_seconds=0.2, prefill_seconds=0.3, decode_seconds=2.0, **ttft),
        row(4, ttft_met=False, tpot_met=None, **ttft),
        row(5, ttft_met=False, tpot_met=True, failure_reason="timeout", **ttft),
        row(6, ttft_met=True, tpot_met=True, **ttft),
    ]
    write(tmp_path, rows)
    table = analysis.causes(of_store(tmp_path))
    assert table[["missed", "cause", "requests"]].to_dict("records") == [
        {"missed": "both", "cause": "decode", "requests": 1},
        {"missed": "tpot", "cause": "decode", "requests": 1},
        {"missed": "ttft", "cause": "failed", "requests": 1},
        {"missed": "ttft", "cause": "queueing", "requests": 1},
        {"missed": "ttft", "cause": "prefill", "requests": 1},
        {"missed": "ttft", "cause": "unknown", "requests": 1},
    ]


def test_the_queries_run_on_a_plain_duckdb_over_the_files(tmp_path: Path) -> None:
    """What docs/review.md shows: the printed queries, the views made by hand over the store's files (no sloscope
    code), the same counts."""
    write(tmp_path, [row(i, ttft_met=i % 3 != 0) for i in range(30)])
    printed = subprocess.run(
        [sys.executable, "-m", "sloscope.review.queries"], capture_output=True, text=True, check=True
    ).stdout
    assert all(f"-- {name}\n" in printed for name in queries.ALL)
    connection = duckdb.connect()
    connection.execute(
        f"CREATE VIEW requests AS SELECT * FROM read_parquet('{tmp_path}/date=*/hour=*/*.parquet', "
        "hive_partitioning = false, union_by_name = true)"
    )
    connection.execute(f"CREATE VIEW eligible AS {queries.ELIGIBLE}")
    got = connection.execute(queries.ALL["policy and trend counts"]).fetchall()
    assert got == [("ttft", "interactive", 30, 10)]


def _ddl_columns(text: str, opening: str) -> list[tuple[str, str]]:
    """(column, type) of the CREATE TABLE after ``opening`` in docs/review.md, up to its partition columns."""
    lines = text[text.index(opening) :].splitlines()[1:]
    columns = []
    for line in lines:
        name, kind = line.strip().rstrip(",").split(" ", 1)
        if name == "date":
            return columns
        columns.append((name, kind))
    raise AssertionError(f"no partition columns after {opening}")


def test_the_docs_tables_for_trino_and_spark_declare_the_reviews_columns() -> None:
    """docs/review.md, "Running the queries elsewhere": each engine's table has the columns the review reads, in
    the store's types (Spark's times as nanosecond BIGINT, its Parquet reader's only way to nanoseconds)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "review.md").read_text(encoding="utf-8")
    trino = {"string": "varchar", "double": "double", "int64": "bigint", "bool": "boolean"}
    spark = {"string": "STRING", "double": "DOUBLE", "int64": "BIGINT", "bool": "BOOLEAN"}

    def typed(names: dict[str, str], time: str, strings: str, column: str) -> str:
        kind = SCHEMA.field(column).type
        return time if pa.types.is_timestamp(kind) else strings if pa.types.is_list(kind) else names[str(kind)]

    assert _ddl_columns(text, "CREATE TABLE hive.sloscope.records (") == [
        (c, typed(trino, "timestamp(9)", "array(varchar)", c)) for c in COLUMNS
    ]
    assert _ddl_columns(text, "CREATE TABLE records (") == [
        (c, typed(spark, "BIGINT", "ARRAY<STRING>", c)) for c in COLUMNS
    ]
