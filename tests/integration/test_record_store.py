"""Crash safety of the record store, with a real ``sloscope serve`` process and real signals.

SIGKILL while files are being written must leave only complete, readable files (plus temporary
ones a restart deletes); SIGTERM must write every request sloscope accepted.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sloscope.store.files import INCOMING, list_files
from sloscope.store.schema import SCHEMA
from sloscope.testing import export_request, gateway_attributes, span, vllm_attributes

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
        if any((store / INCOMING).glob("*.parquet.tmp")):
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
    assert list((store / INCOMING).glob("*")) == []
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
