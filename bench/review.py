"""Time and peak memory of ``sloscope review`` over a large record store (100 million rows by default).

Run from the repository root as part of ``make bench`` (``.venv/bin/python bench/review.py``), or alone with
``--rows``. docs/review.md, "At fleet scale", gives the method and the numbers.

1. Writes synthetic requests in the store's real schema (``sloscope.store.schema.SCHEMA``: every column, its
   type, the schema version in the file metadata) and layout (``date=YYYY-MM-DD/hour=HH/*.parquet``, zstd), 10
   million rows at a time, an hour per file, by DuckDB straight from ``range()`` in two processes (not the Python
   record path: that would take days): a 28-day window of a fleet of 20 models in 10 pools on 1,000 pods, three
   SLO classes, TTFT and TPOT misses, quantile and mean predictions, failures, invalid values, skipped predictions.
2. After the first 10 million rows and at the end (``--measure-every`` for more points), runs ``sloscope review``
   over the whole window as a child process and reads its wall time and peak RSS (``ru_maxrss`` of the child,
   from ``os.wait4``): the report is the one a user gets (every table, the charts, the files).
3. Prints a table (rows, wall seconds, seconds per 10 M rows, peak RSS) and writes JSON to bench/results/;
   removes the store (under ``--dir``, a temporary directory by default) afterwards.

It asserts nothing: the acceptance (peak RSS under 4 GiB at 100 M rows) is read from the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from sloscope.review.engine import DEFAULT_MEMORY_LIMIT
from sloscope.store.schema import METADATA_KEY, SCHEMA, SCHEMA_VERSION

CHUNK = 10_000_000
START = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
DAYS = 28
SPEC = """version: sloscope/v1
classes:
  - name: interactive
    objectives: {ttft: 0.95, tpot: 0.9, goodput: 0.9}
  - name: standard
    objectives: {ttft: 0.9, tpot: 0.9, goodput: 0.85}
  - name: batch
    objectives: {ttft: 0.8, tpot: 0.8, goodput: 0.75}
"""

# Columns as the schema types them (the benchmark's store is read exactly as a real one); r1..r4: uniform [0, 1).
_ROWS = """
SELECT
  CAST(1 AS USMALLINT) AS schema_version,
  lpad(printf('%x', i), 32, '0') AS trace_id,
  lpad(printf('%x', i % 1000000007), 16, '0') AS span_id,
  CASE WHEN i % 3 = 0 THEN NULL ELSE 'req-' || i END AS request_id,
  CAST(make_timestamp_ns(end_ns - 2000000000) AS TIMESTAMPTZ_NS) AS arrival_time,
  CAST(make_timestamp_ns(end_ns - 1000000000) AS TIMESTAMPTZ_NS) AS start_time,
  CAST(make_timestamp_ns(end_ns) AS TIMESTAMPTZ_NS) AS end_time,
  model, model AS requested_model, pool, pod, 'http://' || pod || ':8000' AS endpoint, slo_class,
  CASE WHEN r4 < 0.6 THEN 'predicted' WHEN r4 < 0.9 THEN 'default' WHEN r4 < 0.97 THEN 'unknown' ELSE 'none' END
    AS routing,
  CASE WHEN slo_class = 'batch' THEN 'class_default' ELSE 'request' END AS target_source,
  ttft_target AS ttft_target_seconds, tpot_target AS tpot_target_seconds,
  CASE WHEN r1 < 0.002 THEN NULL ELSE ttft END AS ttft_seconds,
  'gateway' AS ttft_source,
  tpot AS tpot_seconds, ttft + tpot * (tokens - 1) AS e2e_seconds,
  ttft * r2 AS queue_seconds, ttft * (1 - r2) AS prefill_seconds, tpot * (tokens - 1) AS decode_seconds,
  CAST(100 + i % 2000 AS BIGINT) AS prompt_tokens, tokens AS completion_tokens,
  ttft <= ttft_target AS ttft_met,
  CASE WHEN tokens > 1 THEN tpot <= tpot_target END AS tpot_met,
  ttft <= ttft_target AND (tokens <= 1 OR tpot <= tpot_target) AS goodput_met,
  CASE WHEN r1 < 0.002 THEN ['ttft'] WHEN r1 < 0.003 THEN ['ttft', 'tpot'] ELSE [] END AS invalid_fields,
  source AS prediction_source,
  CASE WHEN source = 'none' THEN 'no_predictor' END AS prediction_skipped,
  CASE WHEN source != 'none' THEN round(ttft * (0.7 + r3 * 0.6), 4) END AS predicted_ttft_seconds,
  CASE WHEN source != 'none' THEN round(tpot * (0.8 + r3 * 0.4), 5) END AS predicted_tpot_seconds,
  CASE WHEN source != 'none' AND pool != 'pool-9' THEN CAST(0.9 AS DOUBLE) END AS prediction_quantile,
  CASE WHEN source = 'none' THEN NULL WHEN pool = 'pool-9' THEN 'mean' ELSE 'quantile' END AS prediction_objective,
  CASE WHEN source != 'none' THEN ttft_target - round(ttft * (0.7 + r3 * 0.6), 4) END AS ttft_headroom_seconds,
  CASE WHEN source != 'none' THEN tpot_target - round(tpot * (0.8 + r3 * 0.4), 5) END AS tpot_headroom_seconds,
  CAST(i % 64 AS DOUBLE) AS pod_waiting, CAST(i % 16 AS DOUBLE) AS pod_running,
  (i % 100) / 100.0 AS pod_kv_cache_utilization, (i % 5000) / 1000.0 AS pod_state_age_seconds,
  CASE WHEN r4 < 0.97 THEN 'joined' WHEN r4 < 0.99 THEN 'joined_by_request_id' ELSE 'anchor_only' END
    AS join_outcome,
  CASE WHEN r1 > 0.995 THEN 'error' WHEN r1 > 0.993 THEN 'timeout' END AS failure_reason,
  CAST(1 AS BIGINT) AS choices,
  CAST(NULL AS VARCHAR) AS prefill_pod, CAST(NULL AS DOUBLE) AS prefill_queue_seconds,
  CAST(NULL AS DOUBLE) AS prefill_stage_seconds,
  strftime(make_timestamp_ns(end_ns), '%Y-%m-%d') AS date, strftime(make_timestamp_ns(end_ns), '%H') AS hour
FROM (
  SELECT *,
    CAST(CASE slo_class WHEN 'interactive' THEN 0.5 WHEN 'standard' THEN 1.5 ELSE 5.0 END AS DOUBLE) AS ttft_target,
    CAST(CASE slo_class WHEN 'interactive' THEN 0.05 WHEN 'standard' THEN 0.1 ELSE 0.25 END AS DOUBLE) AS tpot_target,
    CASE slo_class WHEN 'interactive' THEN 0.5 WHEN 'standard' THEN 1.5 ELSE 5.0 END * 0.35 * exp(r1 * 2.0 - 1.2)
      AS ttft,
    0.02 + r2 * 0.05 AS tpot,
    CAST(1 + (i * 7919) % 400 AS BIGINT) AS tokens
  FROM (
    SELECT i,
      CAST($start_ns + i * $step_ns AS BIGINT) AS end_ns,
      'model-' || (i % 20) AS model, 'pool-' || (i % 10) AS pool, 'pod-' || (i * 31 % 1000) AS pod,
      CASE i % 10 WHEN 0 THEN 'batch' WHEN 1 THEN 'none' WHEN 2 THEN 'standard' WHEN 3 THEN 'standard'
        ELSE 'interactive' END AS slo_class,
      CASE WHEN i % 4 = 0 THEN 'none' WHEN i % 4 = 1 THEN 'span' ELSE 'shadow' END AS source,
      hash(i) % 1000003 / 1000003.0 AS r1, hash(i + 1) % 999983 / 999983.0 AS r2,
      hash(i + 2) % 999979 / 999979.0 AS r3, hash(i + 3) % 999961 / 999961.0 AS r4
    FROM range($first, $last) AS t(i)
  )
)
"""


def write_rows(root: Path, first: int, last: int, total: int, workers: int = 2) -> None:
    """Rows ``first`` to ``last`` of ``total``, spread evenly over the window, one file per hour as the store's
    layout has it, written by ``workers`` processes (an hour each at a time)."""
    step_ns = DAYS * 86400 * 10**9 // total
    per_hour = 3600 * 10**9 // step_ns + 1
    hours = [(max(first, h), min(last, h + per_hour)) for h in range(first - first % per_hour, last, per_hour)]
    jobs = [(str(root), a, b, step_ns) for a, b in hours if a < b]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.starmap(_write_hour, jobs)


def _write_hour(root: str, first: int, last: int, step_ns: int) -> None:
    start_ns = int(START.timestamp()) * 10**9
    sql = _ROWS.replace("$start_ns", str(start_ns)).replace("$step_ns", str(step_ns))
    sql = sql.replace("$first", str(first)).replace("$last", str(last))
    hour = START + dt.timedelta(microseconds=first * step_ns // 1000)
    target = Path(root) / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
    target.mkdir(parents=True, exist_ok=True)
    metadata = f"{{'{METADATA_KEY.decode()}': '{SCHEMA_VERSION}'}}"
    with duckdb.connect() as connection:
        connection.execute("SET TimeZone = 'UTC'")
        connection.execute("SET threads = 1")
        connection.execute("SET enable_progress_bar = false")
        connection.execute(
            f"COPY (SELECT * EXCLUDE (date, hour) FROM ({sql})) TO '{target}/part-bench-{first}.parquet' "
            f"(FORMAT parquet, COMPRESSION zstd, KV_METADATA {metadata})"
        )


def _check_schema(root: Path) -> None:
    """The files have the store's columns and types, in its order (else the benchmark is moot); nullability and
    the name of a list's item field (DuckDB's ``element``, Arrow's ``item``) aside, as no reader tells them apart."""
    written = pq.read_schema(next(root.rglob("*.parquet")))

    def plain(field: pa.Field) -> tuple[str, str]:
        kind = field.type
        return field.name, str(pa.list_(kind.value_type) if pa.types.is_list(kind) else kind)

    differ = [f"{a} (the store: {b})" for a, b in zip(written, SCHEMA, strict=False) if plain(a) != plain(b)]
    if differ or len(written) != len(SCHEMA):
        raise SystemExit("the generated files' schema differs from the store's: " + "; ".join(differ or ["columns"]))
    if (written.metadata or {}).get(METADATA_KEY) != str(SCHEMA_VERSION).encode():
        raise SystemExit("the generated files lack the schema version in their metadata")


def review(root: Path, work: Path, memory_limit: str, threads: int | None) -> dict[str, float]:
    """One ``sloscope review`` of the whole window as a child; its wall seconds and peak RSS (bytes)."""
    (work / "slo.yaml").write_text(SPEC)
    end = START + dt.timedelta(days=DAYS)
    command = [sys.executable, "-m", "sloscope", "review", "--store", str(root), "--slo-spec", str(work / "slo.yaml")]
    command += ["--from", START.isoformat(), "--to", end.isoformat(), "--out", str(work / "out" / "report.html")]
    command += ["--memory-limit", memory_limit] + (["--threads", str(threads)] if threads else [])
    began = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - began
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"sloscope review failed (exit {os.waitstatus_to_exitcode(status)})")
    return {
        "wall_seconds": wall,
        "peak_rss_bytes": usage.ru_maxrss * 1024.0,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000_000, help="rows in the store (default 100 million)")
    parser.add_argument("--measure-every", type=int, default=0, help="also review after every N rows (0: no)")
    parser.add_argument("--dir", type=Path, help="where the store goes (default: a temporary directory)")
    parser.add_argument("--memory-limit", default=DEFAULT_MEMORY_LIMIT, help="the review's --memory-limit")
    parser.add_argument("--threads", type=int, help="the review's --threads (default: every core)")
    parser.add_argument(
        "--measure-first",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also review after the first 10 million rows (default: yes)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its files
    work = Path(tempfile.mkdtemp(prefix="sloscope-review-bench-", dir=args.dir))
    root = work / "store"
    root.mkdir()
    results = []
    try:
        written = 0
        measure_at = {min(CHUNK, args.rows), args.rows} if args.measure_first else {args.rows}
        if args.measure_every:
            measure_at |= set(range(args.measure_every, args.rows, args.measure_every))
        while written < args.rows:
            began = time.monotonic()
            last = min(written + CHUNK, args.rows)
            write_rows(root, written, last, args.rows)
            if written == 0:
                _check_schema(root)
            written = last
            print(f"wrote {written:,} rows in {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
            if written in measure_at:
                size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
                measured = {"rows": written, "store_bytes": size, **review(root, work, args.memory_limit, args.threads)}
                results.append(measured)
                print(_line(measured), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'rows':>12} {'store GiB':>9} {'wall s':>8} {'s / 10M rows':>12} {'CPU s':>8} {'peak RSS MiB':>12}")
    for measured in results:
        print(_line(measured))
    out = Path(__file__).with_name("results")
    out.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {"machine": platform.platform(), "cpus": os.cpu_count(), "memory_limit": args.memory_limit,
              "threads": args.threads, "results": results}  # fmt: skip
    (out / f"review-{stamp}.json").write_text(json.dumps(report, indent=2))


def _line(measured: dict[str, float]) -> str:
    per = measured["wall_seconds"] / (measured["rows"] / 10_000_000)
    return (
        f"{int(measured['rows']):>12,} {measured['store_bytes'] / 2**30:>9.2f} {measured['wall_seconds']:>8.1f} "
        f"{per:>12.1f} {measured['cpu_seconds']:>8.1f} {measured['peak_rss_bytes'] / 2**20:>12.0f}"
    )


if __name__ == "__main__":
    main()
