"""Hand-made request records for the OTLP export's tests: every value chosen, nothing computed by sloscope.

Each record is one row of the record store's schema written value by value (times in nanoseconds), as a
one-row record table: what the sinks are handed. Keyword arguments replace values by column name.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sloscope.store.schema import SCHEMA, SCHEMA_VERSION

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SPAN_ID = "b7ad6b7169203331"
ARRIVAL_NS = 1_700_000_000_000_000_000
START_NS = ARRIVAL_NS + 100_000_000  # the model server started 100 ms after the gateway saw the request
END_NS = ARRIVAL_NS + 1_100_000_000


def table(*rows: dict[str, Any]) -> pa.RecordBatch:
    """Rows (values by column name; a column left out is null) as a record table of the store's schema."""
    arrays = [pa.array([row.get(field.name) for row in rows], type=field.type) for field in SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def _row(trace_id: str, span_id: str, values: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    unknown = set(changed) - set(SCHEMA.names)
    assert not unknown, f"not columns of the record store: {unknown}"
    return {"schema_version": SCHEMA_VERSION, "trace_id": trace_id, "span_id": span_id, **values, **changed}


def violating_row(trace_id: str = TRACE_ID, span_id: str = SPAN_ID, **changed: Any) -> dict[str, Any]:
    """Interactive request on vllm-0: TTFT 250 ms against 200 ms (missed), TPOT 50 ms against 50 ms (met).

    Shadow-predicted 180 ms / 40 ms at the p90, so 20 ms / 10 ms of headroom at routing; the pod had
    3 waiting, 5 running and 42 % of its KV cache in use, in a sample 700 ms old.
    """
    values = {
        "request_id": "req-1",
        "arrival_time": ARRIVAL_NS,
        "start_time": START_NS,
        "end_time": END_NS,
        "model": "llama-3-8b",
        "requested_model": "llama",
        "pool": "pool-a",
        "pod": "vllm-0",
        "slo_class": "interactive",
        "routing": "predicted",
        "target_source": "request",
        "ttft_target_seconds": 0.2,
        "tpot_target_seconds": 0.05,
        "ttft_seconds": 0.25,
        "ttft_judged_seconds": 0.25,
        "ttft_source": "gateway",
        "tpot_seconds": 0.05,
        "ttft_met": False,
        "tpot_met": True,
        "goodput_met": False,
        "invalid_fields": [],
        "prediction_source": "shadow",
        "predicted_ttft_seconds": 0.18,
        "predicted_tpot_seconds": 0.04,
        "prediction_quantile": 0.9,
        "ttft_headroom_seconds": 0.02,
        "tpot_headroom_seconds": 0.01,
        "pod_waiting": 3.0,
        "pod_running": 5.0,
        "pod_kv_cache_utilization": 0.42,
        "pod_state_age_seconds": 0.7,
        "join_outcome": "joined",
        "choices": 1,
    }
    return _row(trace_id, span_id, values, changed)


def met_row(trace_id: str = TRACE_ID, span_id: str = SPAN_ID, **changed: Any) -> dict[str, Any]:
    """Standard request with only a TTFT SLO of 2000 ms, met at 1500 ms; no prediction (no pod state)."""
    values = {
        "arrival_time": ARRIVAL_NS,
        "start_time": START_NS,
        "end_time": END_NS,
        "model": "mistral",
        "requested_model": "mistral",
        "pool": "pool-a",
        "pod": "vllm-1",
        "slo_class": "standard",
        "routing": "unknown",
        "target_source": "request",
        "ttft_target_seconds": 2.0,
        "ttft_seconds": 1.5,
        "ttft_judged_seconds": 1.5,
        "ttft_source": "model_server",
        "ttft_met": True,
        "goodput_met": True,
        "invalid_fields": [],
        "prediction_source": "none",
        "prediction_skipped": "no_pod_state",
        "join_outcome": "joined",
        "choices": 1,
    }
    return _row(trace_id, span_id, values, changed)


def bare_row(trace_id: str = TRACE_ID, span_id: str = SPAN_ID, **changed: Any) -> dict[str, Any]:
    """An anchor-only request with no SLO, no model, no pod, no prediction: the least sloscope can know."""
    values = {
        "start_time": START_NS,
        "end_time": END_NS,
        "pool": "default",
        "slo_class": "none",
        "routing": "unknown",
        "target_source": "none",
        "invalid_fields": ["ttft_seconds"],
        "prediction_source": "none",
        "join_outcome": "anchor_only",
        "choices": 1,
    }
    return _row(trace_id, span_id, values, changed)


def violating_record(trace_id: str = TRACE_ID, span_id: str = SPAN_ID, **changed: Any) -> pa.RecordBatch:
    return table(violating_row(trace_id, span_id, **changed))


def met_record(trace_id: str = TRACE_ID, span_id: str = SPAN_ID, **changed: Any) -> pa.RecordBatch:
    return table(met_row(trace_id, span_id, **changed))


def bare_record(trace_id: str = TRACE_ID, span_id: str = SPAN_ID, **changed: Any) -> pa.RecordBatch:
    return table(bare_row(trace_id, span_id, **changed))


# The attributes of violating_record()'s evaluation span, value by value.
VIOLATING_ATTRIBUTES = {
    "sloscope.slo_class": "interactive",
    "sloscope.model": "llama-3-8b",
    "sloscope.pool": "pool-a",
    "sloscope.pod": "vllm-0",
    "sloscope.routing": "predicted",
    "sloscope.request.id": "req-1",
    "sloscope.join.outcome": "joined",
    "sloscope.target_source": "request",
    "sloscope.ttft.target_ms": 200.0,
    "sloscope.ttft.actual_ms": 250.0,
    "sloscope.ttft.source": "gateway",
    "sloscope.ttft.predicted_ms": 180.0,
    "sloscope.ttft.headroom_ms": 20.0,
    "sloscope.ttft.met": False,
    "sloscope.tpot.target_ms": 50.0,
    "sloscope.tpot.actual_ms": 50.0,
    "sloscope.tpot.predicted_ms": 40.0,
    "sloscope.tpot.headroom_ms": 10.0,
    "sloscope.tpot.met": True,
    "sloscope.goodput.met": False,
    "sloscope.violated": ["ttft", "goodput"],
    "sloscope.prediction.source": "shadow",
    "sloscope.prediction.quantile": 0.9,
    "sloscope.pod.waiting": 3.0,
    "sloscope.pod.running": 5.0,
    "sloscope.pod.kv_cache_utilization": 0.42,
    "sloscope.pod.state_age_ms": 700.0,
}


# The attributes of met_record()'s evaluation span: unknown values are left out.
MET_ATTRIBUTES = {
    "sloscope.slo_class": "standard",
    "sloscope.model": "mistral",
    "sloscope.pool": "pool-a",
    "sloscope.pod": "vllm-1",
    "sloscope.routing": "unknown",
    "sloscope.join.outcome": "joined",
    "sloscope.target_source": "request",
    "sloscope.ttft.target_ms": 2000.0,
    "sloscope.ttft.actual_ms": 1500.0,
    "sloscope.ttft.source": "model_server",
    "sloscope.ttft.met": True,
    "sloscope.goodput.met": True,
    "sloscope.prediction.source": "none",
    "sloscope.prediction.skipped": "no_pod_state",
}
