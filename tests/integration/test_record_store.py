"""The record store with a real ``sloscope serve`` process, real signals and real filesystem faults.

SIGKILL while files are being written must leave only complete, readable files (plus temporary
ones a restart deletes); SIGTERM must write every request sloscope accepted. A full or read-only
store directory makes ``/readyz`` answer 503 with the reason, holds the records until the fault is
gone, and makes a SIGTERM meanwhile exit 3. Two replicas sharing one directory never delete each
other's files in flight, and a review reads both.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from sloscope.store.files import ABANDONED_SECONDS, INCOMING, list_files, write_atomic
from sloscope.store.schema import SCHEMA
from sloscope.testing import export_request, gateway_attributes, span, vllm_attributes
from tests.support.store_faults import Fault, FaultyStore, require_mount_namespaces

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

_KILL_ATTEMPTS = 10


def _requests(first: int, count: int, prefix: str) -> bytes:
    """``count`` joined requests (an EPP span and its vLLM child per trace), ending now."""
    now = time.time_ns()
    spans = []
    for n in range(first, first + count):
        request_id = f"{prefix}-{n}"
        trace = n + 1  # an all-zero trace id is invalid
        gateway = gateway_attributes(slo_ttft_ms="500", request_id=request_id)
        spans.append(span(trace, 1, "gateway.request", gateway, resource={"service.name": "epp"}, start_ns=now - 10**9))
        spans.append(
            span(trace, 2, "llm_request", vllm_attributes(request_id=request_id), parent=1, start_ns=now - 10**9)
        )
    return export_request(spans).SerializeToString()


def _post(server: Server, body: bytes) -> None:
    request = urllib.request.Request(
        server.otlp_http, data=body, headers={"Content-Type": "application/x-protobuf"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def _store_settings(directory: Path, **store: Any) -> dict[str, Any]:
    return {
        "store": {"enabled": True, "directory": str(directory), **store},
        "join": {"window_seconds": 0.2, "trace_ttl_seconds": 5.0},
    }


def _feed(server: Server, stop: threading.Event) -> None:
    """Keeps sending batches until told to stop or the process dies."""
    first = 0
    while not stop.is_set():
        try:
            _post(server, _requests(first, 20, "kill"))
        except OSError:
            return
        first += 20


def test_sigkill_while_writing_leaves_only_complete_files(serve: Callable[..., Server], tmp_path: Path) -> None:
    store = tmp_path / "records"
    # One row per file, written as fast as they come: the writer thread is nearly always writing.
    settings = _store_settings(store, flush_interval_seconds=0.01, max_rows_per_file=1)
    killed_mid_write = 0
    for _ in range(_KILL_ATTEMPTS):
        server = serve(**settings)
        stop = threading.Event()
        feeder = threading.Thread(target=_feed, args=(server, stop), daemon=True)
        feeder.start()
        before = len(list_files(store))
        wait_until(lambda: len(list_files(store)) >= before + 20, what="files being written")  # noqa: B023
        server.process.kill()
        server.process.wait(10)
        stop.set()
        feeder.join(10)
        if any((store / INCOMING).rglob("*.parquet.tmp")):
            killed_mid_write += 1
            break
    assert killed_mid_write, f"no SIGKILL landed during a write in {_KILL_ATTEMPTS} attempts"

    complete = list_files(store)
    assert complete
    for stored in complete:  # every file in a partition reads whole, with the current schema
        table = pq.ParquetFile(stored.path).read()  # the file alone, without partition columns
        assert table.schema.names == SCHEMA.names and table.schema.metadata == SCHEMA.metadata
        assert table.num_rows == 1

    # A restart deletes the leftover and keeps every complete file.
    server = serve(**_store_settings(store, flush_interval_seconds=3600))
    assert list((store / INCOMING).rglob("*.tmp")) == []
    assert {f.path for f in list_files(store)} == {f.path for f in complete}
    assert server.stop() == 0


def test_sigterm_writes_every_accepted_request(serve: Callable[..., Server], tmp_path: Path) -> None:
    store = tmp_path / "records"
    # An hour between flushes: only the shutdown can write these.
    server = serve(**_store_settings(store, flush_interval_seconds=3600))
    _post(server, _requests(0, 40, "term"))
    _post(server, _requests(40, 25, "term"))
    wait_until(lambda: server.total("sloscope_requests_total") == 65, what="65 evaluated requests")
    assert list_files(store) == []
    assert server.stop() == 0

    ids = [value for f in list_files(store) for value in pq.read_table(f.path).column("request_id").to_pylist()]
    assert sorted(ids) == sorted(f"term-{n}" for n in range(65))


# ---- a full or read-only store directory --------------------------------------------------------------


def _readyz(server: Server) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(server.url("/readyz"), timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


_REASON = {"full": "No space left on device", "read-only": "Read-only file system"}


def _serve_on_faulty_store(serve: Callable[..., Server], tmp_path: Path, fault: Fault) -> tuple[Server, FaultyStore]:
    require_mount_namespaces(tmp_path)
    faulty = FaultyStore(tmp_path / "records", fault)
    settings = _store_settings(faulty.directory, flush_interval_seconds=0.1, retry_interval_seconds=0.1)
    server = serve(prefix=faulty.prefix(), env={"POD_NAME": "sloscope-0"}, **settings)
    faulty.pid = server.process.pid
    return server, faulty


def _not_ready_for(server: Server, fault: Fault) -> dict[str, Any]:
    wait_until(lambda: _readyz(server)[0] == 503, what="/readyz to answer 503")
    status, body = _readyz(server)
    assert status == 503
    return body


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_readiness_says_why_the_store_cannot_write_and_returns_once_it_can(
    serve: Callable[..., Server], tmp_path: Path, fault: Fault
) -> None:
    server, faulty = _serve_on_faulty_store(serve, tmp_path, fault)
    assert _readyz(server) == (200, {"ready": True, "checks": _checks(store=True), "reasons": {}})
    _post(server, _requests(0, 30, "held"))
    wait_until(lambda: server.total("sloscope_requests_total") == 30, what="30 evaluated requests")

    body = _not_ready_for(server, fault)
    assert body["ready"] is False and body["checks"] == _checks(store=False)
    # The folder of files being written (a read-only volume refuses to create it) or the file in it.
    incoming = re.escape(str(faulty.directory / INCOMING))
    expected = rf"cannot write {incoming}(/sloscope-0/[0-9a-f]{{8}}\.parquet\.tmp)?: {_REASON[fault]}"
    assert re.fullmatch(expected, body["reasons"]["store"]), body
    # Held, not lost: every record waits in the store's buffer, none is counted failed or dropped.
    assert server.value("sloscope_records_queued", sink="store") == 30
    assert server.value("sloscope_records_total", sink="store", result="failed") == 0
    assert server.value("sloscope_records_total", sink="store", result="dropped") == 0

    faulty.remove()
    wait_until(lambda: _readyz(server)[0] == 200, what="/readyz to answer 200 again")
    assert _readyz(server) == (200, {"ready": True, "checks": _checks(store=True), "reasons": {}})
    assert server.value("sloscope_records_total", sink="store", result="written") == 30
    files = list_files(faulty.seen_by_process())
    ids = [value for f in files for value in pq.read_table(f.path).column("request_id").to_pylist()]
    assert sorted(ids) == sorted(f"held-{n}" for n in range(30))
    assert server.stop() == 0


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_sigterm_while_records_are_unwritten_exits_3_and_says_how_many(
    serve: Callable[..., Server], tmp_path: Path, fault: Fault
) -> None:
    server, _ = _serve_on_faulty_store(serve, tmp_path, fault)
    _post(server, _requests(0, 12, "lost"))
    wait_until(lambda: server.total("sloscope_requests_total") == 12, what="12 evaluated requests")
    _not_ready_for(server, fault)
    assert server.stop() == 3
    assert any(
        "record store: 12 accepted record(s) not written at shutdown: cannot write" in line and _REASON[fault] in line
        for line in server.log
    ), server.log
    assert any("shutdown: 12 acknowledged record(s) were not written (store: 12)" in line for line in server.log)


def _checks(store: bool) -> dict[str, bool]:
    return {"listeners": True, "pipeline": True, "accepting": True, "store": store}


# ---- two replicas on one store directory ---------------------------------------------------------------


def _ids_by_replica(store: Path) -> dict[str, list[str]]:
    """Request ids of every complete file, by the replica id in the file's name."""
    found: dict[str, list[str]] = {}
    for stored in list_files(store):
        replica = re.fullmatch(r"part-\d{8}T\d{6}Z-(.+)-[0-9a-f]{8}\.parquet", stored.path.name)
        assert replica, stored.path.name
        found.setdefault(replica.group(1), []).extend(pq.read_table(stored.path).column("request_id").to_pylist())
    return {replica: sorted(ids) for replica, ids in found.items()}


def test_two_replicas_share_a_store_directory_and_a_review_reads_both(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    store = tmp_path / "records"
    now = datetime.now(UTC)
    # What a pod that is gone left: a complete file long past retention, and a file it died writing.
    old_hour = (now - timedelta(days=40)).replace(minute=0, second=0, microsecond=0)
    write_atomic(store, old_hour, SCHEMA.empty_table(), old_hour, "gone-pod")
    abandoned = store / INCOMING / "gone-pod" / "dead.parquet.tmp"
    abandoned.write_bytes(b"PAR1")
    stale = time.time() - ABANDONED_SECONDS - 60
    os.utime(abandoned, (stale, stale))

    settings = _store_settings(store, flush_interval_seconds=0.05, max_rows_per_file=5)
    first = serve(env={"POD_NAME": "sloscope-0"}, **settings)
    second = serve(env={"POD_NAME": "sloscope-1"}, **settings)
    for batch in range(6):  # several files each, written while the other replica writes and applies retention
        _post(first, _requests(batch * 5, 5, "a"))
        _post(second, _requests(batch * 5, 5, "b"))
    for server in (first, second):
        wait_until(lambda: server.value("sloscope_records_total", sink="store", result="written") == 30, what="30")  # noqa: B023
    deleted_by_age = sum(s.value("sloscope_store_files_deleted_total", reason="age") for s in (first, second))
    assert deleted_by_age == 1  # retention is store-wide: the gone pod's old file went, once
    assert not abandoned.exists()

    # The first replica restarts while the second one has a file in flight: a restart cleans only its own folder.
    in_flight = store / INCOMING / "sloscope-1" / "being-written.parquet.tmp"
    in_flight.write_bytes(b"PAR1")
    assert first.stop() == 0
    first = serve(env={"POD_NAME": "sloscope-0"}, **settings)
    _post(first, _requests(30, 5, "a"))
    wait_until(lambda: first.value("sloscope_records_total", sink="store", result="written") == 5, what="5 more")
    assert in_flight.exists()
    in_flight.unlink()  # the stand-in for the second replica's write goes, as its rename would take it
    assert first.stop() == 0 and second.stop() == 0

    assert _ids_by_replica(store) == {
        "sloscope-0": sorted(f"a-{n}" for n in range(35)),
        "sloscope-1": sorted(f"b-{n}" for n in range(30)),
    }
    out = tmp_path / "report" / "review.html"
    ran = subprocess.run(
        [sys.executable, "-m", "sloscope", "review", "--store", str(store), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    quality = pd.read_csv(out.with_name(f"{out.stem}-tables") / "data_quality.csv")
    joined = {r.key: r.count for r in quality.itertuples() if r.measure == "join outcome"}
    assert joined == {"joined": 65}
