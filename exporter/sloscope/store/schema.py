"""The record store's row format: one row per evaluated request, defined once.

Each column is named, typed and described here; the writer builds Arrow tables from this list,
``docs/record-store.md`` documents it (a test keeps the two in step) and the review reads it.
Times are UTC timestamps with nanosecond precision, durations seconds (float64), SLO targets
seconds. A missing value is null, never 0: "no prediction" must not read as "predicted 0 s".

``SCHEMA_VERSION`` changes when a column changes meaning or type; adding a column keeps the
version (readers select the columns they know). Every file carries the version in its
key-value metadata and in the ``schema_version`` column, so a reader can tell files apart after
an upgrade without opening the docs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sloscope.records import RequestRecord

__all__ = ["COLUMNS", "SCHEMA", "SCHEMA_VERSION", "Column", "to_table"]

SCHEMA_VERSION = 1
METADATA_KEY = b"sloscope.schema_version"


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    description: str
    value: Callable[[RequestRecord], Any]


_TIME = pa.timestamp("ns", tz="UTC")


def _ns(value: int) -> int | None:
    return value or None  # 0 means "no span said"


def _met(record: RequestRecord, slo: str) -> bool | None:
    verdict = record.evaluation.verdict(slo)
    return verdict.met if verdict.eligible else None


def _pod(record: RequestRecord, field: str) -> float | None:
    state = record.pod_state
    return getattr(state, field) if state is not None else None


_INT64_MAX = 2**63 - 1


def _tokens(value: float | None) -> int | None:
    """A token count as an int64; None when missing or not a count an int64 can hold."""
    if value is None or not math.isfinite(value) or not 0 <= value <= _INT64_MAX:
        return None
    return int(value)


COLUMNS: tuple[Column, ...] = (
    Column("schema_version", pa.uint16(), "Version of this schema the row was written with.", lambda r: SCHEMA_VERSION),
    Column(
        "trace_id",
        pa.string(),
        "Trace id of the model-server span (32 lowercase hex digits).",
        lambda r: r.request.trace_id,
    ),
    Column("span_id", pa.string(), "Span id of the model-server span (the anchor).", lambda r: r.request.span_id),
    Column(
        "request_id", pa.string(), "The request's x-request-id, when a span carried it.", lambda r: r.request.request_id
    ),
    Column(
        "arrival_time",
        _TIME,
        "When the request reached the gateway (the earliest span's start).",
        lambda r: _ns(r.request.arrival_ns),
    ),
    Column("start_time", _TIME, "Start of the model-server span.", lambda r: _ns(r.request.start_ns)),
    Column(
        "end_time",
        _TIME,
        "End of the model-server span; files are partitioned by its hour.",
        lambda r: _ns(r.request.end_ns),
    ),
    Column(
        "model",
        pa.string(),
        "The model that served the request (the requested one when the server did not say).",
        lambda r: r.request.model,
    ),
    Column("requested_model", pa.string(), "The model the client asked for.", lambda r: r.request.requested_model),
    Column(
        "pool",
        pa.string(),
        "The pool the request is counted in (span, discovery, its gateway's pool for a failure before any pod, or "
        "the default pool).",
        lambda r: r.pool,
    ),
    Column("pod", pa.string(), "The model-server pod, when a span or discovery named it.", lambda r: r.request.pod),
    Column("endpoint", pa.string(), "host:port the gateway sent the request to.", lambda r: r.request.endpoint),
    Column("slo_class", pa.string(), "SLO class from the spec.", lambda r: r.evaluation.slo_class),
    Column(
        "routing",
        pa.string(),
        "predicted (the latency scorer ran), default, unknown, or none (refused before scheduling).",
        lambda r: r.request.routing,
    ),
    Column(
        "target_source",
        pa.string(),
        "Where the targets came from: request, class_default or none.",
        lambda r: r.evaluation.target_source,
    ),
    Column(
        "ttft_target_seconds",
        pa.float64(),
        "TTFT target the request was judged against.",
        lambda r: r.evaluation.ttft.target,
    ),
    Column(
        "tpot_target_seconds",
        pa.float64(),
        "TPOT target the request was judged against.",
        lambda r: r.evaluation.tpot.target,
    ),
    Column("ttft_seconds", pa.float64(), "Actual TTFT.", lambda r: r.evaluation.ttft_seconds),
    Column(
        "model_server_ttft_seconds",
        pa.float64(),
        "The model server's own TTFT, from the request's arrival at the model server (ttft_seconds counts from "
        "the gateway's).",
        lambda r: r.request.server_ttft_seconds,
    ),
    Column(
        "ttft_source",
        pa.string(),
        "Which span measured TTFT: gateway_arrival (from the gateway span's start), gateway (a gateway's TTFT "
        "attribute), pd_gateway or pd_sidecar (P/D: from the gateway span, else the sidecar's routing span, to the "
        "decode pod's first token), coordinator (llm-d's coordinator: from the first leg's gateway span to the "
        "decode leg's first token) or model_server.",
        lambda r: r.request.ttft_source,
    ),
    Column(
        "tpot_seconds",
        pa.float64(),
        "Actual TPOT, (e2e - ttft) / (completion_tokens - 1) on the model server's clock.",
        lambda r: r.evaluation.tpot_seconds,
    ),
    Column(
        "e2e_seconds", pa.float64(), "End-to-end latency reported by the model server.", lambda r: r.request.e2e_seconds
    ),
    Column(
        "queue_seconds",
        pa.float64(),
        "Time in the model server's queue; null when the engine reports none (SGLang counts it in prefill).",
        lambda r: r.request.queue_seconds,
    ),
    Column("prefill_seconds", pa.float64(), "Time in prefill.", lambda r: r.request.prefill_seconds),
    Column("decode_seconds", pa.float64(), "Time in decode.", lambda r: r.request.decode_seconds),
    Column("prompt_tokens", pa.int64(), "Prompt tokens.", lambda r: _tokens(r.request.prompt_tokens)),
    Column("completion_tokens", pa.int64(), "Completion tokens.", lambda r: _tokens(r.request.completion_tokens)),
    Column(
        "ttft_met",
        pa.bool_(),
        "TTFT SLO met; null when the request was not eligible for it.",
        lambda r: _met(r, "ttft"),
    ),
    Column("tpot_met", pa.bool_(), "TPOT SLO met; null when not eligible.", lambda r: _met(r, "tpot")),
    Column(
        "goodput_met",
        pa.bool_(),
        "Every SLO the request carries met; null when not eligible.",
        lambda r: _met(r, "goodput"),
    ),
    Column(
        "invalid_fields",
        pa.list_(pa.string()),
        "Values that were missing, negative or not finite.",
        lambda r: list(r.evaluation.invalid_fields),
    ),
    Column(
        "prediction_source",
        pa.string(),
        "span (the EPP's, on a span), shadow (asked by sloscope) or none.",
        lambda r: r.prediction_source,
    ),
    Column(
        "prediction_skipped",
        pa.string(),
        "Why there is no shadow prediction (the reasons of sloscope_shadow_skipped_total).",
        lambda r: r.prediction_skipped,
    ),
    Column(
        "predicted_ttft_seconds",
        pa.float64(),
        "Predicted TTFT (the predictor's quantile, or its mean: see prediction_objective).",
        lambda r: r.predicted_ttft_seconds,
    ),
    Column("predicted_tpot_seconds", pa.float64(), "Predicted TPOT.", lambda r: r.predicted_tpot_seconds),
    Column(
        "prediction_quantile",
        pa.float64(),
        "The quantile the predictor predicts (0.9 by default); null for a mean prediction.",
        lambda r: r.prediction_quantile,
    ),
    Column(
        "prediction_objective",
        pa.string(),
        "What the prediction is: quantile (judge by coverage) or mean (judge by bias, MAE, RMSE); null without one.",
        lambda r: r.prediction_objective,
    ),
    Column(
        "ttft_headroom_seconds",
        pa.float64(),
        "TTFT headroom at routing: target - predicted.",
        lambda r: r.ttft_headroom_seconds,
    ),
    Column(
        "tpot_headroom_seconds",
        pa.float64(),
        "TPOT headroom at routing, the EPP's formula.",
        lambda r: r.tpot_headroom_seconds,
    ),
    Column(
        "predicted_e2e_seconds",
        pa.float64(),
        "Predicted end-to-end latency, where the pool's EPP runs with streamingMode off and its predicted TTFT is "
        "one (then predicted_ttft_seconds and predicted_tpot_seconds are null); compare with end minus arrival.",
        lambda r: r.predicted_e2e_seconds,
    ),
    Column(
        "e2e_headroom_seconds",
        pa.float64(),
        "With streaming off: TTFT target - predicted end-to-end latency, what the EPP routes on.",
        lambda r: r.e2e_headroom_seconds,
    ),
    Column(
        "pod_waiting",
        pa.float64(),
        "Requests waiting on the pod as of arrival (as-of join on the scrapes).",
        lambda r: _pod(r, "waiting"),
    ),
    Column("pod_running", pa.float64(), "Requests running on the pod as of arrival.", lambda r: _pod(r, "running")),
    Column(
        "pod_kv_cache_utilization",
        pa.float64(),
        "KV-cache utilization of the pod as of arrival, 0..1.",
        lambda r: _pod(r, "kv_cache_utilization"),
    ),
    Column(
        "pod_state_age_seconds",
        pa.float64(),
        "Arrival minus the time of the scrape used for the pod columns.",
        lambda r: _pod(r, "age_seconds"),
    ),
    Column(
        "join_outcome",
        pa.string(),
        "How the trace assembler joined the spans (the outcomes of sloscope_traces_joined_total).",
        lambda r: r.request.outcome,
    ),
    Column(
        "failure_reason",
        pa.string(),
        "Why the request failed (error, shed, timeout, aborted, invalid: the reasons of "
        "sloscope_requests_failed_total); null when it did not.",
        lambda r: r.request.failure_reason,
    ),
    Column(
        "choices",
        pa.int64(),
        "Model-server spans counted as this one request's choices (n > 1); 1 for an ordinary request.",
        lambda r: r.request.choices,
    ),
    Column(
        "prefill_pod",
        pa.string(),
        "P/D: the pod that ran the prefill stage (the request counts on the decode pod, the pod column).",
        lambda r: r.request.prefill_pod,
    ),
    Column(
        "prefill_queue_seconds",
        pa.float64(),
        "P/D: time in the prefill pod's queue.",
        lambda r: r.request.prefill_queue_seconds,
    ),
    Column(
        "prefill_stage_seconds",
        pa.float64(),
        "P/D: time in prefill on the prefill pod.",
        lambda r: r.request.prefill_seconds_on_prefill_pod,
    ),
    Column(
        "call_arrival_time",
        _TIME,
        "A call made of several EPP calls (llm-d's coordinator): when its first leg reached the gateway, what its "
        "TTFT counts from (arrival_time is its final leg's); null for a call of one EPP call.",
        lambda r: _ns(r.request.call_arrival_ns),
    ),
    Column(
        "gateway",
        pa.string(),
        "The gateway (EPP) that handled the request, as its spans name it (attributes.gateway): where a failure "
        "before any pod is counted.",
        lambda r: r.request.gateway,
    ),
)

SCHEMA = pa.schema(
    [pa.field(column.name, column.type) for column in COLUMNS],
    metadata={METADATA_KEY: str(SCHEMA_VERSION).encode()},
)


def to_table(records: Sequence[RequestRecord]) -> pa.Table:
    """Rows to an Arrow table, column by column (cheaper than building a dict per row)."""
    arrays = [pa.array([column.value(r) for r in records], type=column.type) for column in COLUMNS]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
