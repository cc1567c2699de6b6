"""Record tables built through the real evaluator and record builder, for tests of the record sinks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from sloscope.loading import default_spec
from sloscope.processors import joined_batch
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.record_parts import BatchRows, Settled, settled_records
from sloscope.receivers.discovery import Target
from sloscope.receivers.protocols import PodState
from sloscope.records import JoinedRequest
from sloscope.slo.evaluate_batch import evaluate_batch
from sloscope.store.schema import Records
from tests.support.reference import PodStateAtArrival, record_rows

HOUR_NS = 3_600_000_000_000
BASE_NS = 1_796_032_800 * 1_000_000_000  # 2026-11-30T10:00:00Z, the start of an hour


def joined(n: int = 0, *, end_ns: int | None = None, **fields: Any) -> JoinedRequest:
    """A joined interactive request: TTFT 0.2 s against 500 ms, TPOT 0.03 s against 50 ms, unless overridden."""
    end = end_ns if end_ns is not None else BASE_NS + (n + 1) * 1_000_000_000
    values: dict[str, Any] = {
        "trace_id": f"{n:032x}",
        "span_id": f"{n:016x}",
        "outcome": "joined",
        "request_id": f"req-{n}",
        "requested_model": "llama",
        "target_model": "llama",
        "pool": "pool-a",
        "pod": "vllm-0",
        "endpoint": "10.0.0.1:8000",
        "slo_ttft_ms": 500.0,
        "slo_tpot_ms": 50.0,
        "routing": "predicted",
        "ttft_seconds": 0.2,
        "ttft_source": "gateway",
        "server_ttft_seconds": 0.2,
        "e2e_seconds": 0.5,
        "queue_seconds": 0.05,
        "prefill_seconds": 0.15,
        "decode_seconds": 0.3,
        "prompt_tokens": 100.0,
        "completion_tokens": 11.0,
        "start_ns": end - 500_000_000,
        "end_ns": end,
        "arrival_ns": end - 510_000_000,
    }
    values.update(fields)
    return JoinedRequest(**values)


def record(
    n: int = 0,
    *,
    end_ns: int | None = None,
    pod_state: PodStateAtArrival | None = None,
    prediction: dict[str, Any] | None = None,
    **fields: Any,
) -> pa.RecordBatch:
    """One request's record, as the prediction tracker builds a shadow-settled request's: ``prediction`` holds
    the values of its :class:`~sloscope.processors.record_parts.Settled` (source ``none`` without), ``pod_state``
    the pod's scrape the as-of join finds (age seconds a multiple of 1/64, so that arrival minus scrape time
    gives it back exactly)."""
    request = joined(n, end_ns=end_ns, **fields)
    batch = joined_batch.from_requests([request])
    rows = BatchRows(joined_batch.to_arrow(batch), evaluate_batch(batch, default_spec()).to_record_batch())
    settled = Settled(request.pool or "unknown", **{"source": "none", **(prediction or {})})
    arrival = (request.arrival_ns or request.start_ns) / 1e9
    history = PodHistory(4, stale_after=3600.0, vanished_grace=60.0)
    target = Target(pool=request.pool or "unknown", pod=request.pod or "pod", address="10.9.9.9:8000")
    history.track(target)
    if pod_state is not None:
        state = pod_state
        scraped = PodState(state.waiting, state.running, state.kv_cache_utilization, lora=None, models=frozenset())
        history.record(target.key, arrival - state.age_seconds, scraped)
    return settled_records(history, [rows], [target.key], [arrival], [settled])


def rows_of(tables: list[Records]) -> list[SimpleNamespace]:
    """The rows of record tables, each read as an object (``row.pool``, ``row.pod_waiting``, ...)."""
    return [SimpleNamespace(**row) for row in record_rows(tables)]
