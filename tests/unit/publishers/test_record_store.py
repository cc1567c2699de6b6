"""The record store: row format, atomic partitioned files, retention, reading back, the publisher."""

from __future__ import annotations

import math
import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

from sloscope.config import Store
from sloscope.publishers.record_store import RecordStore
from sloscope.publishers.sinks import FailureWindow, SinkMetrics
from sloscope.store.files import (
    ABANDONED_SECONDS,
    INCOMING,
    clean_incoming,
    enforce_retention,
    list_files,
    write_atomic,
)
from sloscope.store.read import StoreError, read_records
from sloscope.store.replica import replica_id
from sloscope.store.schema import COLUMNS, METADATA_KEY, SCHEMA
from tests.support.records import BASE_NS, HOUR_NS, record
from tests.support.reference import PodStateAtArrival, record_rows

HOUR = datetime(2026, 11, 30, 10, tzinfo=UTC)
REPLICA = "sloscope-0"


def _store(tmp_path: Path, **overrides: object) -> tuple[RecordStore, CollectorRegistry]:
    registry = CollectorRegistry()
    overrides.setdefault("replica_id", REPLICA)
    settings = Store(enabled=True, directory=tmp_path / "records", **overrides)  # type: ignore[arg-type]
    return RecordStore(settings, SinkMetrics(registry), registry, clock=lambda: BASE_NS / 1e9 + 7200), registry


def to_table(records: list[pa.RecordBatch]) -> pa.Table:
    """Record tables of one row each as one table, for files written by hand."""
    return pa.Table.from_batches(records)


def _records_total(registry: CollectorRegistry, result: str) -> float | None:
    return registry.get_sample_value("sloscope_records_total", {"sink": "store", "result": result})


# ---- row format ---------------------------------------------------------------------------------


def test_a_row_carries_the_request_its_verdicts_prediction_and_pod_state() -> None:
    rec = record(
        3,
        slo_ttft_ms=150.0,  # TTFT 0.2 s misses 150 ms
        pod_state=PodStateAtArrival(waiting=4.0, running=12.0, kv_cache_utilization=0.5, age_seconds=0.25),
        prediction={"source": "shadow", "ttft": 0.18, "quantile": 0.9, "ttft_headroom": 0.15 - 0.18},
    )
    row = to_table([rec]).to_pylist()[0]

    assert row["schema_version"] == 1
    assert row["trace_id"] == f"{3:032x}" and row["request_id"] == "req-3"
    assert row["end_time"] == datetime.fromtimestamp((BASE_NS + 4_000_000_000) / 1e9, UTC)
    assert row["arrival_time"] == datetime.fromtimestamp((BASE_NS + 4_000_000_000 - 510_000_000) / 1e9, UTC)
    assert (row["model"], row["pool"], row["pod"], row["slo_class"]) == ("llama", "pool-a", "vllm-0", "interactive")
    assert (row["ttft_target_seconds"], row["tpot_target_seconds"]) == (0.15, 0.05)
    assert (row["ttft_met"], row["tpot_met"], row["goodput_met"]) == (False, True, False)
    assert math.isclose(row["tpot_seconds"], 0.03)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (100, 11)
    assert (row["prediction_source"], row["predicted_ttft_seconds"], row["predicted_tpot_seconds"]) == (
        "shadow",
        0.18,
        None,
    )
    assert math.isclose(row["ttft_headroom_seconds"], -0.03)
    assert (row["pod_waiting"], row["pod_running"], row["pod_kv_cache_utilization"]) == (4.0, 12.0, 0.5)
    assert row["pod_state_age_seconds"] == 0.25
    assert row["join_outcome"] == "joined"
    assert row["invalid_fields"] == []


def test_unknown_values_are_null_never_zero() -> None:
    rec = record(1, slo_tpot_ms=None, completion_tokens=1.0, pod=None, request_id=None)
    row = to_table([rec]).to_pylist()[0]
    assert row["tpot_met"] is None  # not eligible: no TPOT SLO and a one-token answer
    assert row["tpot_seconds"] is None and row["tpot_target_seconds"] is None
    assert row["pod"] is None and row["request_id"] is None
    assert row["pod_waiting"] is None and row["predicted_ttft_seconds"] is None


def test_a_failed_pd_request_of_several_choices_keeps_its_reason_and_stages() -> None:
    failed = to_table([record(1, failure_reason="shed", ttft_seconds=None, pod=None)]).to_pylist()[0]
    assert (failed["failure_reason"], failed["ttft_met"], failed["goodput_met"], failed["ttft_seconds"]) == (
        "shed",
        False,
        False,
        None,
    )
    staged = record(
        2,
        choices=3,
        prefill_pod="prefill-0",
        prefill_queue_seconds=0.004,
        prefill_seconds_on_prefill_pod=0.12,
        ttft_source="pd_sidecar",
    )
    row = to_table([staged]).to_pylist()[0]
    assert (row["choices"], row["prefill_pod"], row["prefill_queue_seconds"], row["prefill_stage_seconds"]) == (
        3,
        "prefill-0",
        0.004,
        0.12,
    )
    assert (row["failure_reason"], row["ttft_source"]) == (None, "pd_sidecar")


def test_a_target_that_could_not_be_judged_stays_on_record() -> None:
    row = to_table([record(1, ttft_seconds=None, server_ttft_seconds=None)]).to_pylist()[0]
    assert row["ttft_met"] is None and row["ttft_target_seconds"] == 0.5
    assert "ttft_seconds" in row["invalid_fields"]


def test_the_schema_is_the_column_list_and_carries_its_version() -> None:
    assert SCHEMA.names == [column.name for column in COLUMNS]
    assert SCHEMA.metadata == {METADATA_KEY: b"1"}
    assert len(set(SCHEMA.names)) == len(SCHEMA.names)


# ---- files ------------------------------------------------------------------------------------


def test_files_are_written_into_hourly_partitions_and_read_back_by_range(tmp_path: Path) -> None:
    first = [record(n) for n in range(3)]  # end 10:00:01 .. 10:00:03
    second = [record(n, end_ns=BASE_NS + HOUR_NS + n * 1_000_000_000) for n in range(10, 12)]  # 11:00:00, 11:00:01
    write_atomic(tmp_path, HOUR, to_table(first), HOUR, REPLICA)
    stored = write_atomic(tmp_path, HOUR + timedelta(hours=1), to_table(second), HOUR, REPLICA)

    assert stored.path.parent == tmp_path / "date=2026-11-30" / "hour=11"
    assert [f.hour.hour for f in list_files(tmp_path)] == [10, 11]
    everything = read_records(tmp_path, HOUR, HOUR + timedelta(hours=2))
    assert sorted(everything.column("request_id").to_pylist()) == ["req-0", "req-1", "req-10", "req-11", "req-2"]
    # [start, end): 10:00:02 is in, 11:00:00 is not
    window = read_records(tmp_path, HOUR + timedelta(seconds=2), HOUR + timedelta(hours=1))
    assert sorted(window.column("request_id").to_pylist()) == ["req-1", "req-2"]
    assert read_records(tmp_path, HOUR + timedelta(hours=5), HOUR + timedelta(hours=6)).num_rows == 0
    some = read_records(tmp_path, HOUR, HOUR + timedelta(hours=2), columns=("request_id", "ttft_met"))
    assert some.column_names == ["request_id", "ttft_met"] and some.num_rows == 5
    none = read_records(tmp_path, HOUR + timedelta(hours=5), HOUR + timedelta(hours=6), columns=("request_id",))
    assert none.column_names == ["request_id"] and none.num_rows == 0


def test_pandas_and_duckdb_read_the_store_as_one_table(tmp_path: Path) -> None:
    write_atomic(tmp_path, HOUR, to_table([record(n) for n in range(4)]), HOUR, REPLICA)
    write_atomic(tmp_path, HOUR, to_table([record(n, slo_ttft_ms=100.0) for n in range(4, 6)]), HOUR, REPLICA)
    (tmp_path / INCOMING / REPLICA / "half-written.parquet.tmp").write_bytes(b"PAR1 not a whole file")

    frame = pd.read_parquet(tmp_path)
    assert len(frame) == 6 and int((frame["ttft_met"] == False).sum()) == 2  # noqa: E712
    assert set(frame["hour"]) == {10}  # the partition columns come along
    sql = f"SELECT count(*), sum(CASE WHEN ttft_met THEN 0 ELSE 1 END) FROM read_parquet('{tmp_path}/**/*.parquet', hive_partitioning = true)"  # noqa: E501
    assert duckdb.sql(sql).fetchall() == [(6, 2)]


def test_a_crash_leftover_is_deleted_and_never_read(tmp_path: Path) -> None:
    write_atomic(tmp_path, HOUR, to_table([record(1)]), HOUR, REPLICA)
    (tmp_path / INCOMING / REPLICA / "abc.parquet.tmp").write_bytes(b"partial")
    assert read_records(tmp_path, HOUR, HOUR + timedelta(hours=1)).num_rows == 1
    assert clean_incoming(tmp_path, REPLICA) == 1
    assert list((tmp_path / INCOMING / REPLICA).iterdir()) == []


def test_files_of_a_newer_schema_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    table = to_table([record(1)])
    newer = table.replace_schema_metadata({METADATA_KEY: b"2"})
    target = tmp_path / "date=2026-11-30" / "hour=10"
    target.mkdir(parents=True)
    pq.write_table(newer, target / "part-x.parquet")
    with pytest.raises(StoreError, match=r"schema version 2.*upgrade sloscope"):
        read_records(tmp_path, HOUR, HOUR + timedelta(hours=1))


def test_a_missing_store_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        read_records(tmp_path / "nowhere", HOUR, HOUR + timedelta(hours=1))


def test_retention_deletes_whole_old_hours_then_the_oldest_files_beyond_the_size(tmp_path: Path) -> None:
    table = to_table([record(1)])
    sizes = []
    for hours_back in (50, 30, 3, 2, 1):
        sizes.append(write_atomic(tmp_path, HOUR - timedelta(hours=hours_back), table, HOUR, REPLICA).size)
    # 24 h limit: the hours starting 50 h and 30 h back are gone; 3 h, 2 h, 1 h back stay.
    result = enforce_retention(tmp_path, 24 * 3600, max_bytes=10**9, now=HOUR)
    assert (result.by_age, result.by_size, result.files) == (2, 0, 3)
    assert [f.hour for f in list_files(tmp_path)] == [HOUR - timedelta(hours=h) for h in (3, 2, 1)]
    # Room for two files: the oldest remaining one goes.
    result = enforce_retention(tmp_path, 24 * 3600, max_bytes=sizes[3] + sizes[4], now=HOUR)
    assert (result.by_age, result.by_size, result.files, result.bytes) == (0, 1, 2, sizes[3] + sizes[4])
    assert not (tmp_path / f"date={HOUR - timedelta(hours=50):%Y-%m-%d}" / "hour=08").exists()


def test_an_hour_is_kept_until_all_of_it_is_past_the_limit(tmp_path: Path) -> None:
    write_atomic(tmp_path, HOUR, to_table([record(1)]), HOUR, REPLICA)
    just_inside = HOUR + timedelta(hours=2)  # the hour ended 1 h ago: kept with a 1 h limit
    assert enforce_retention(tmp_path, 3600, 10**9, just_inside).by_age == 0
    assert enforce_retention(tmp_path, 3600, 10**9, just_inside + timedelta(seconds=1)).by_age == 1


# ---- the publisher ---------------------------------------------------------------------------------


def test_flush_writes_one_file_per_hour_and_counts_the_rows(tmp_path: Path) -> None:
    store, registry = _store(tmp_path)
    store.start()
    try:
        for n in range(5):
            store.emit(record(n))
        for n in range(3):
            store.emit(record(100 + n, end_ns=BASE_NS + HOUR_NS + n))
        assert store.flush() == 8
    finally:
        assert store.shutdown(5.0)
    files = list_files(tmp_path / "records")
    assert [(f.hour.hour, pq.read_metadata(f.path).num_rows) for f in files] == [(10, 5), (11, 3)]
    assert _records_total(registry, "written") == 8
    assert registry.get_sample_value("sloscope_store_files") == 2
    assert registry.get_sample_value("sloscope_store_bytes") == sum(f.size for f in files)


def test_the_rows_of_tables_are_put_together_by_the_hour_they_ended_in(tmp_path: Path) -> None:
    """Two tables, each with rows of two hours and one row without an end (the hour of now): one file per hour,
    each with its rows in the order they came."""
    store, registry = _store(tmp_path)
    first = to_table([record(1), record(101, end_ns=BASE_NS + HOUR_NS + 1), record(2)])
    second = to_table([record(102, end_ns=BASE_NS + HOUR_NS + 2), record(3), record(4, end_ns=0, start_ns=0)])
    store.emit(first)
    store.emit(second)
    assert store.queued() == 6
    assert store.flush() == 6
    files = list_files(tmp_path / "records")
    assert [f.hour.hour for f in files] == [10, 11, 12]  # the clock is 12:00
    assert [pq.read_table(f.path).column("request_id").to_pylist() for f in files] == [
        ["req-1", "req-2", "req-3"],
        ["req-101", "req-102"],
        ["req-4"],
    ]
    assert _records_total(registry, "written") == 6


def test_a_refused_write_puts_the_rows_of_every_hour_back_in_their_order(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    blocker = _block_writes(tmp_path)
    store.emit(to_table([record(1), record(101, end_ns=BASE_NS + HOUR_NS + 1), record(2)]))
    assert store.flush() == 0 and store.queued() == 3
    store.emit(record(3))
    assert [row["request_id"] for row in record_rows(store._buffer)] == ["req-1", "req-2", "req-101", "req-3"]
    blocker.unlink()
    assert store.flush() == 4
    assert store.shutdown(1.0)


def test_a_full_buffer_drops_new_records_and_counts_them(tmp_path: Path) -> None:
    store, registry = _store(tmp_path, max_buffered_records=3)  # not started: nothing drains the buffer
    for n in range(5):
        store.emit(record(n))
    assert store.queued() == 3
    assert _records_total(registry, "dropped") == 2
    assert registry.get_sample_value("sloscope_records_queued", {"sink": "store"}) == 3
    assert store.shutdown(1.0)  # never started: writes what it holds
    assert _records_total(registry, "written") == 3


def test_a_batch_of_records_is_held_and_dropped_as_one_at_a_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table of records (a batch's at once, from the prediction tracker) is held and dropped as its rows one at
    a time would be, and the run of drops is logged once."""
    one, one_registry = _store(tmp_path / "one", max_buffered_records=3)
    many, many_registry = _store(tmp_path / "many", max_buffered_records=3)
    records = [record(n) for n in range(5)]
    for r in records:
        one.emit(r)
    many.emit(to_table(records[:2]))
    many.emit(to_table(records[2:]))
    many.emit(records[0])
    one.emit(records[0])
    assert record_rows(many._buffer) == record_rows(one._buffer) == record_rows(records[:3])
    assert _records_total(many_registry, "dropped") == _records_total(one_registry, "dropped") == 3
    drops = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 2 and all("3 record(s) held" in message for message in drops)  # once per store


def test_a_large_backlog_is_split_into_files_of_max_rows(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, max_rows_per_file=4)
    for n in range(10):
        store.emit(record(n))
    assert store.shutdown(1.0)
    assert sorted(pq.read_metadata(f.path).num_rows for f in list_files(tmp_path / "records")) == [2, 4, 4]


def test_shutdown_writes_everything_accepted_even_before_the_flush_interval(tmp_path: Path) -> None:
    store, registry = _store(tmp_path, flush_interval_seconds=3600)
    store.start()
    for n in range(7):
        store.emit(record(n))
    assert store.shutdown(5.0)
    assert _records_total(registry, "written") == 7
    table = read_records(tmp_path / "records", HOUR, HOUR + timedelta(hours=1))
    assert sorted(table.column("request_id").to_pylist()) == sorted(f"req-{n}" for n in range(7))


def test_a_token_count_beyond_int64_is_stored_as_unknown() -> None:
    row = to_table([record(1, prompt_tokens=float(2**70))]).to_pylist()[0]
    assert row["prompt_tokens"] is None and row["completion_tokens"] == 11


def test_records_in_another_schema_lose_only_themselves(tmp_path: Path) -> None:
    store, registry = _store(tmp_path)
    store.start()
    try:
        bad = record(1).drop_columns(["gateway"])  # not the store's schema: refused as it is emitted
        for n in (2, 3):
            store.emit(record(n))
        store.emit(bad)
        store.emit(record(4))
        assert store.flush() == 3
    finally:
        store.shutdown(5.0)
    assert (_records_total(registry, "failed"), _records_total(registry, "written")) == (1, 3)
    table = read_records(tmp_path / "records", HOUR, HOUR + timedelta(hours=1))
    assert sorted(table.column("request_id").to_pylist()) == ["req-2", "req-3", "req-4"]
    assert list((tmp_path / "records" / INCOMING / REPLICA).iterdir()) == []


def _block_writes(tmp_path: Path) -> Path:
    """A file where this replica's folder for files being written should be: every write fails (ENOTDIR)."""
    blocker = tmp_path / "records" / INCOMING / REPLICA
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the folder should be")
    return blocker


def test_a_refused_write_keeps_its_records_until_the_store_can_write_again(tmp_path: Path) -> None:
    store, registry = _store(tmp_path)
    blocker = _block_writes(tmp_path)
    for n in range(3):
        store.emit(record(n))
    assert store.flush() == 0
    assert store.queued() == 3 and _records_total(registry, "failed") == 0
    assert re.fullmatch(rf"cannot write {blocker}/[0-9a-f]{{8}}\.parquet\.tmp: Not a directory", store.problem() or "")
    store.emit(record(3))  # the newer record waits behind the held ones
    blocker.unlink()
    assert store.flush() == 4 and store.problem() is None
    assert store.shutdown(1.0) and store.unwritten == 0
    assert (_records_total(registry, "written"), _records_total(registry, "failed")) == (4, 0)


def test_the_store_is_reported_only_after_failing_for_its_grace(tmp_path: Path) -> None:
    now = [100.0]
    store, _ = _store(tmp_path, failure_grace_seconds=30.0)
    store._fault = FailureWindow("store", 30.0, clock=lambda: now[0])
    _block_writes(tmp_path)
    store.emit(record(1))
    store.flush()
    now[0] += 29.0
    assert store.problem() is None
    store.flush()  # failing again does not restart the window
    now[0] += 1.0
    assert (store.problem() or "").endswith(": Not a directory")


def test_while_writes_fail_the_bound_holds_and_drops_are_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, registry = _store(tmp_path, max_buffered_records=3)
    _block_writes(tmp_path)
    for n in range(2):
        store.emit(record(n))
    store.flush()
    for n in range(2, 6):
        store.emit(record(n))
    assert store.queued() == 3
    assert _records_total(registry, "dropped") == 3
    drops = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 1 and "3 record(s) held" in drops[0] and "Not a directory" in drops[0]


def test_records_still_unwritable_at_shutdown_are_counted_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, registry = _store(tmp_path)
    store.start()
    _block_writes(tmp_path)
    for n in range(5):
        store.emit(record(n))
    assert not store.shutdown(5.0)
    assert store.unwritten == 5
    assert (_records_total(registry, "failed"), _records_total(registry, "written")) == (5, 0)
    assert "5 accepted record(s) not written at shutdown: cannot write" in caplog.text


def test_a_store_that_cannot_be_created_starts_not_ready_and_a_probe_finds_it_writable(tmp_path: Path) -> None:
    """Not ready, a replica receives no records: with nothing to write, the store probes with a file of its own."""
    blocker = tmp_path / "records"
    blocker.write_text("a file where the store should be")
    store, _ = _store(tmp_path, flush_interval_seconds=3600)
    store.start()
    try:
        assert store.problem() == f"cannot write {blocker}: File exists"
        assert store.flush() == 0 and store.problem() is not None  # the probe fails too
        blocker.unlink()
        assert store.flush() == 0 and store.problem() is None
        assert list((blocker / INCOMING / REPLICA).iterdir()) == []  # the probe's file is gone
    finally:
        assert store.shutdown(5.0)


def test_start_deletes_what_a_crash_left_half_written(tmp_path: Path) -> None:
    incoming = tmp_path / "records" / INCOMING / REPLICA
    incoming.mkdir(parents=True)
    (incoming / "dead.parquet.tmp").write_bytes(b"PAR1")
    store, _ = _store(tmp_path)
    store.start()
    store.shutdown(1.0)
    assert list(incoming.iterdir()) == []


def test_a_start_leaves_the_files_other_replicas_are_writing(tmp_path: Path) -> None:
    incoming = tmp_path / INCOMING
    now = time.time()
    (incoming / REPLICA).mkdir(parents=True)
    (incoming / REPLICA / "mine.parquet.tmp").write_bytes(b"PAR1")
    (incoming / "sloscope-1").mkdir()
    (incoming / "sloscope-1" / "theirs.parquet.tmp").write_bytes(b"PAR1")  # being written right now
    (incoming / "gone-pod").mkdir()
    (incoming / "gone-pod" / "dead.parquet.tmp").write_bytes(b"PAR1")
    (incoming / "old-layout.parquet.tmp").write_bytes(b"PAR1")  # a version without replica folders
    for stale in (incoming / "gone-pod" / "dead.parquet.tmp", incoming / "old-layout.parquet.tmp"):
        os.utime(stale, (now - ABANDONED_SECONDS - 1, now - ABANDONED_SECONDS - 1))
    assert clean_incoming(tmp_path, REPLICA, now) == 3
    assert sorted(p.relative_to(incoming).as_posix() for p in incoming.rglob("*")) == [
        REPLICA,
        "sloscope-1",
        "sloscope-1/theirs.parquet.tmp",
    ]


def test_replicas_name_their_files_and_never_share_a_name(tmp_path: Path) -> None:
    table = to_table([record(1)])
    mine = write_atomic(tmp_path, HOUR, table, HOUR, "sloscope-0")
    theirs = write_atomic(tmp_path, HOUR, table, HOUR, "sloscope-1")
    assert mine.path.name.startswith("part-20261130T100000Z-sloscope-0-")
    assert theirs.path.name.startswith("part-20261130T100000Z-sloscope-1-")
    assert read_records(tmp_path, HOUR, HOUR + timedelta(hours=1)).num_rows == 2


@pytest.mark.parametrize(
    ("configured", "environ", "expected"),
    [
        pytest.param("r-7", {"POD_NAME": "sloscope-0"}, "r-7", id="the setting wins"),
        pytest.param(None, {"POD_NAME": "sloscope-6d9f-abcde", "HOSTNAME": "h"}, "sloscope-6d9f-abcde", id="pod name"),
        pytest.param(None, {"HOSTNAME": "sloscope-1"}, "sloscope-1", id="Kubernetes sets HOSTNAME to the pod name"),
        pytest.param(None, {"HOSTNAME": "box one/two"}, "box-one-two", id="unsafe characters become dashes"),
    ],
)
def test_the_replica_id_comes_from_the_setting_then_the_pod_name(
    configured: str | None, environ: dict[str, str], expected: str
) -> None:
    assert replica_id(configured, environ) == expected


def test_every_column_has_an_arrow_type_pandas_understands() -> None:
    frame = record(1).to_pandas()
    assert list(frame.columns) == SCHEMA.names
    assert isinstance(SCHEMA.field("end_time").type, pa.TimestampType)
    assert str(frame["end_time"].dtype) == "datetime64[ns, UTC]"


def _docs_blocks(language: str) -> list[str]:
    text = (Path(__file__).parents[3] / "docs" / "record-store.md").read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


def _predicted(n: int, pool: str, objective: str | None, predicted: float | None, end_ns: int, **fields: Any) -> Any:
    if objective is None:
        return record(n, end_ns=end_ns, pool=pool, **fields)
    prediction = {"source": "shadow", "objective": objective, "ttft": predicted}
    prediction["quantile"] = 0.9 if objective == "quantile" else None
    return record(n, end_ns=end_ns, pool=pool, prediction=prediction, **fields)


def test_the_documented_queries_run_as_written_on_a_store_of_known_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/record-store.md's pandas snippet and DuckDB queries, their path pointed at a store written here.

    Actual TTFT 0.2 s everywhere (one row against a 100 ms SLO: the one violation). pool-a: quantile predictions
    0.25, 0.15, 0.3 s (two cover), one mean prediction of 0.1 s that coverage must leave out, one request without
    a prediction; pool-b: mean predictions 0.1 and 0.25 s (errors +0.1 and -0.05 s).
    """
    end_ns = (time.time_ns() // HOUR_NS) * HOUR_NS - HOUR_NS // 2  # half an hour before this hour began
    rows = [
        _predicted(0, "pool-a", "quantile", 0.25, end_ns),
        _predicted(1, "pool-a", "quantile", 0.15, end_ns),
        _predicted(2, "pool-a", "quantile", 0.3, end_ns, slo_ttft_ms=100.0),
        _predicted(3, "pool-a", "mean", 0.1, end_ns),
        _predicted(4, "pool-a", None, None, end_ns),
        _predicted(5, "pool-b", "mean", 0.1, end_ns),
        _predicted(6, "pool-b", "mean", 0.25, end_ns),
    ]
    hour = datetime.fromtimestamp(end_ns // HOUR_NS * HOUR_NS / 1e9, UTC)
    write_atomic(tmp_path, hour, to_table(rows), hour, REPLICA)
    here = lambda block: block.replace("/var/lib/sloscope/records", str(tmp_path))  # noqa: E731

    (snippet,) = _docs_blocks("python")
    exec(here(snippet).replace("2026-11-23", f"{hour:%Y-%m-%d}"), {})
    assert float(capsys.readouterr().out) == pytest.approx(1 - 1 / 7)  # TTFT attainment

    coverage, mean = _docs_blocks("sql")
    assert duckdb.sql(here(coverage)).fetchall() == [("interactive", 7, 1, pytest.approx(2 / 3), 0.9)]
    assert duckdb.sql(here(mean)).fetchall() == [
        ("pool-a", 1, pytest.approx(0.1), pytest.approx(1.0), pytest.approx(0.1), pytest.approx(0.1)),
        (
            "pool-b",
            2,
            pytest.approx(0.025),  # (0.1 - 0.05) / 2
            pytest.approx(0.05 / 0.35),
            pytest.approx(0.075),
            pytest.approx(math.sqrt((0.1**2 + 0.05**2) / 2)),
        ),
    ]
