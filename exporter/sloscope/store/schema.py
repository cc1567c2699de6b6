"""The record store's row format: one row per evaluated request, defined once.

Each column is named, typed and described here, and says how it is computed from the parts a record is built
of (:class:`RecordParts`): the joined request's columns, the evaluator's, the prediction tracker's and the
state of the request's pod at arrival. :func:`build_records` makes the rows of many requests at once, column
by column; ``docs/record-store.md`` documents the list (a test keeps the two in step) and the review reads it.
Times are UTC timestamps with nanosecond precision, durations seconds (float64), SLO targets
seconds. A missing value is null, never 0: "no prediction" must not read as "predicted 0 s".

``SCHEMA_VERSION`` changes when a column changes meaning or type; adding a column keeps the
version (readers select the columns they know). Every file carries the version in its
key-value metadata and in the ``schema_version`` column, so a reader can tell files apart after
an upgrade without opening the docs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sloscope.columnar import arrow_arrays

__all__ = [
    "COLUMNS",
    "POD",
    "PREDICTION",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Column",
    "RecordParts",
    "Records",
    "as_batch",
    "build_records",
    "check",
]

SCHEMA_VERSION = 1
METADATA_KEY = b"sloscope.schema_version"

Records: TypeAlias = pa.Table | pa.RecordBatch
"""Rows of the record store, in :data:`SCHEMA`: what the record sinks take."""


class RecordParts(NamedTuple):
    """What the records of some requests are built from, a row per request in the same order in every part."""

    joined: pa.RecordBatch  # the join's columns (processors/joined_batch.py to_arrow)
    evaluation: pa.RecordBatch  # the evaluator's (slo/evaluate_batch.py Verdicts.to_record_batch)
    prediction: pa.RecordBatch  # the prediction tracker's, in PREDICTION
    pod: pa.RecordBatch  # the pod's scraped state as of arrival, in POD (null: no sample was found)


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    description: str
    value: Callable[[RecordParts], pa.Array]  # the column of a batch of records, from their parts


@dataclass(frozen=True)
class Taken:
    """A column one of the parts holds as is (the part's ``source`` column)."""

    part: str  # a field of RecordParts
    source: str

    def __call__(self, parts: RecordParts) -> pa.Array:
        array: pa.Array = getattr(parts, self.part).column(self.source)
        return array


def _joined(source: str) -> Taken:
    return Taken("joined", source)


def _evaluated(source: str) -> Taken:
    return Taken("evaluation", source)


def _predicted(source: str) -> Taken:
    return Taken("prediction", source)


def _pod(source: str) -> Taken:
    return Taken("pod", source)


def _time(source: str) -> Callable[[RecordParts], pa.Array]:
    """A joined request's time (int64 ns) as a timestamp, null where it is 0 ("no span said")."""

    def value(parts: RecordParts) -> pa.Array:
        ns = arrow_arrays.ints(parts.joined.column(source))
        return arrow_arrays.int_array(ns, null=ns == 0).view(_TIME)

    return value


_TOKENS_BEYOND = float(2**63)  # the first float an int64 cannot hold


def _tokens(source: str) -> Callable[[RecordParts], pa.Array]:
    """A token count as an int64 (truncated); null when missing or not a count an int64 can hold."""

    def value(parts: RecordParts) -> pa.Array:
        counts = arrow_arrays.floats(parts.joined.column(source))
        with np.errstate(invalid="ignore"):
            held = np.isfinite(counts) & (counts >= 0) & (counts < _TOKENS_BEYOND)
        return arrow_arrays.int_array(np.where(held, counts, 0.0).astype(np.int64), null=~held)

    return value


def _met(slo: str) -> Callable[[RecordParts], pa.Array]:
    """Whether the SLO was met; null where the request was not eligible for it."""

    def value(parts: RecordParts) -> pa.Array:
        evaluation = parts.evaluation
        eligible = arrow_arrays.bools(evaluation.column(f"{slo}_eligible"))
        return arrow_arrays.bool_array(arrow_arrays.bools(evaluation.column(f"{slo}_met")), null=~eligible)

    return value


def _decoded(source: str) -> Callable[[RecordParts], pa.Array]:
    """An evaluator's column of a few distinct strings (a dictionary array) as plain strings."""

    def value(parts: RecordParts) -> pa.Array:
        array: pa.Array = parts.evaluation.column(source).dictionary_decode()
        return array

    return value


def _model(parts: RecordParts) -> pa.Array:
    """The model that served the request, the requested one when the server did not say (``target or requested``)."""
    target, requested = parts.joined.column("target_model"), parts.joined.column("requested_model")
    said = arrow_arrays.nonempty(target)
    if said.all():
        return target
    chosen: pa.Array = pc.if_else(arrow_arrays.bool_array(said), target, requested)
    return chosen


def _version(parts: RecordParts) -> pa.Array:
    return arrow_arrays.int_array(np.full(parts.joined.num_rows, SCHEMA_VERSION)).cast(pa.uint16())


_TIME = pa.timestamp("ns", tz="UTC")


COLUMNS: tuple[Column, ...] = (
    Column("schema_version", pa.uint16(), "Version of this schema the row was written with.", _version),
    Column(
        "trace_id",
        pa.string(),
        "Trace id of the model-server span (32 lowercase hex digits).",
        _joined("trace_id"),
    ),
    Column("span_id", pa.string(), "Span id of the model-server span (the anchor).", _joined("span_id")),
    Column("request_id", pa.string(), "The request's x-request-id, when a span carried it.", _joined("request_id")),
    Column(
        "arrival_time",
        _TIME,
        "When the request reached the gateway (the earliest span's start).",
        _time("arrival_ns"),
    ),
    Column("start_time", _TIME, "Start of the model-server span.", _time("start_ns")),
    Column(
        "end_time",
        _TIME,
        "End of the model-server span; files are partitioned by its hour.",
        _time("end_ns"),
    ),
    Column(
        "model",
        pa.string(),
        "The model that served the request (the requested one when the server did not say).",
        _model,
    ),
    Column("requested_model", pa.string(), "The model the client asked for.", _joined("requested_model")),
    Column(
        "pool",
        pa.string(),
        "The pool the request is counted in (span, discovery, its gateway's pool for a failure before any pod, or "
        "the default pool).",
        _predicted("pool"),
    ),
    Column("pod", pa.string(), "The model-server pod, when a span or discovery named it.", _joined("pod")),
    Column("endpoint", pa.string(), "host:port the gateway sent the request to.", _joined("endpoint")),
    Column("slo_class", pa.string(), "SLO class from the spec.", _decoded("slo_class")),
    Column(
        "routing",
        pa.string(),
        "predicted (the latency scorer ran), default, unknown, or none (refused before scheduling).",
        _joined("routing"),
    ),
    Column(
        "target_source",
        pa.string(),
        "Where the targets came from: request, class_default or none.",
        _decoded("target_source"),
    ),
    Column(
        "ttft_target_seconds",
        pa.float64(),
        "TTFT target the request was judged against.",
        _evaluated("ttft_target_seconds"),
    ),
    Column(
        "tpot_target_seconds",
        pa.float64(),
        "TPOT target the request was judged against.",
        _evaluated("tpot_target_seconds"),
    ),
    Column("ttft_seconds", pa.float64(), "Actual TTFT.", _evaluated("ttft_seconds")),
    Column(
        "model_server_ttft_seconds",
        pa.float64(),
        "The model server's own TTFT, from the request's arrival at the model server (ttft_seconds counts from "
        "the gateway's).",
        _joined("server_ttft_seconds"),
    ),
    Column(
        "ttft_source",
        pa.string(),
        "Which span measured TTFT: gateway_arrival (from the gateway span's start), gateway (a gateway's TTFT "
        "attribute), pd_gateway or pd_sidecar (P/D: from the gateway span, else the sidecar's routing span, to the "
        "decode pod's first token), coordinator (llm-d's coordinator: from the first leg's gateway span to the "
        "decode leg's first token) or model_server.",
        _joined("ttft_source"),
    ),
    Column(
        "tpot_seconds",
        pa.float64(),
        "Actual TPOT, (e2e - ttft) / (completion_tokens - 1) on the model server's clock.",
        _evaluated("tpot_seconds"),
    ),
    Column("e2e_seconds", pa.float64(), "End-to-end latency reported by the model server.", _joined("e2e_seconds")),
    Column(
        "queue_seconds",
        pa.float64(),
        "Time in the model server's queue; null when the engine reports none (SGLang counts it in prefill).",
        _joined("queue_seconds"),
    ),
    Column("prefill_seconds", pa.float64(), "Time in prefill.", _joined("prefill_seconds")),
    Column("decode_seconds", pa.float64(), "Time in decode.", _joined("decode_seconds")),
    Column("prompt_tokens", pa.int64(), "Prompt tokens.", _tokens("prompt_tokens")),
    Column("completion_tokens", pa.int64(), "Completion tokens.", _tokens("completion_tokens")),
    Column(
        "ttft_met",
        pa.bool_(),
        "TTFT SLO met; null when the request was not eligible for it.",
        _met("ttft"),
    ),
    Column("tpot_met", pa.bool_(), "TPOT SLO met; null when not eligible.", _met("tpot")),
    Column(
        "goodput_met",
        pa.bool_(),
        "Every SLO the request carries met; null when not eligible.",
        _met("goodput"),
    ),
    Column(
        "invalid_fields",
        pa.list_(pa.string()),
        "Values that were missing, negative or not finite.",
        _evaluated("invalid_fields"),
    ),
    Column(
        "prediction_source",
        pa.string(),
        "span (the EPP's, on a span), shadow (asked by sloscope) or none.",
        _predicted("prediction_source"),
    ),
    Column(
        "prediction_skipped",
        pa.string(),
        "Why there is no shadow prediction (the reasons of sloscope_shadow_skipped_total).",
        _predicted("prediction_skipped"),
    ),
    Column(
        "predicted_ttft_seconds",
        pa.float64(),
        "Predicted TTFT (the predictor's quantile, or its mean: see prediction_objective).",
        _predicted("predicted_ttft_seconds"),
    ),
    Column("predicted_tpot_seconds", pa.float64(), "Predicted TPOT.", _predicted("predicted_tpot_seconds")),
    Column(
        "prediction_quantile",
        pa.float64(),
        "The quantile the predictor predicts (0.9 by default); null for a mean prediction.",
        _predicted("prediction_quantile"),
    ),
    Column(
        "prediction_objective",
        pa.string(),
        "What the prediction is: quantile (judge by coverage) or mean (judge by bias, MAE, RMSE); null without one.",
        _predicted("prediction_objective"),
    ),
    Column(
        "ttft_headroom_seconds",
        pa.float64(),
        "TTFT headroom at routing: target - predicted.",
        _predicted("ttft_headroom_seconds"),
    ),
    Column(
        "tpot_headroom_seconds",
        pa.float64(),
        "TPOT headroom at routing, the EPP's formula.",
        _predicted("tpot_headroom_seconds"),
    ),
    Column(
        "predicted_e2e_seconds",
        pa.float64(),
        "Predicted end-to-end latency, where the pool's EPP runs with streamingMode off and its predicted TTFT is "
        "one (then predicted_ttft_seconds and predicted_tpot_seconds are null); compare with end minus arrival.",
        _predicted("predicted_e2e_seconds"),
    ),
    Column(
        "e2e_headroom_seconds",
        pa.float64(),
        "With streaming off: TTFT target - predicted end-to-end latency, what the EPP routes on.",
        _predicted("e2e_headroom_seconds"),
    ),
    Column(
        "pod_waiting",
        pa.float64(),
        "Requests waiting on the pod as of arrival (as-of join on the scrapes).",
        _pod("pod_waiting"),
    ),
    Column("pod_running", pa.float64(), "Requests running on the pod as of arrival.", _pod("pod_running")),
    Column(
        "pod_kv_cache_utilization",
        pa.float64(),
        "KV-cache utilization of the pod as of arrival, 0..1.",
        _pod("pod_kv_cache_utilization"),
    ),
    Column(
        "pod_state_age_seconds",
        pa.float64(),
        "Arrival minus the time of the scrape used for the pod columns.",
        _pod("pod_state_age_seconds"),
    ),
    Column(
        "join_outcome",
        pa.string(),
        "How the trace assembler joined the spans (the outcomes of sloscope_traces_joined_total).",
        _joined("outcome"),
    ),
    Column(
        "failure_reason",
        pa.string(),
        "Why the request failed (error, shed, timeout, aborted, invalid: the reasons of "
        "sloscope_requests_failed_total); null when it did not.",
        _joined("failure_reason"),
    ),
    Column(
        "choices",
        pa.int64(),
        "Model-server spans counted as this one request's choices (n > 1); 1 for an ordinary request.",
        _joined("choices"),
    ),
    Column(
        "prefill_pod",
        pa.string(),
        "P/D: the pod that ran the prefill stage (the request counts on the decode pod, the pod column).",
        _joined("prefill_pod"),
    ),
    Column(
        "prefill_queue_seconds",
        pa.float64(),
        "P/D: time in the prefill pod's queue.",
        _joined("prefill_queue_seconds"),
    ),
    Column(
        "prefill_stage_seconds",
        pa.float64(),
        "P/D: time in prefill on the prefill pod.",
        _joined("prefill_seconds_on_prefill_pod"),
    ),
    Column(
        "call_arrival_time",
        _TIME,
        "A call made of several EPP calls (llm-d's coordinator): when its first leg reached the gateway, what its "
        "TTFT counts from (arrival_time is its final leg's); null for a call of one EPP call.",
        _time("call_arrival_ns"),
    ),
    Column(
        "gateway",
        pa.string(),
        "The gateway (EPP) that handled the request, as its spans name it (attributes.gateway): where a failure "
        "before any pod is counted.",
        _joined("gateway"),
    ),
    Column(
        "ttft_judged_seconds",
        pa.float64(),
        "The TTFT the TTFT verdict judged, null when the request was not eligible: ttft_seconds, or for a failed "
        "request that missed its TTFT SLO the TTFT it measured (ttft_seconds is null for a failed request).",
        _evaluated("ttft_actual_seconds"),
    ),
    Column(
        "sampling_probability",
        pa.float64(),
        "The probability the request's trace was kept with, as the th threshold in its tracestate's ot entry "
        "records it (OpenTelemetry's consistent probability sampling): the model-server span's, else its gateway "
        "spans'. Null when no span recorded one (a ratio sampler that records nothing), never 1 by default.",
        _joined("sampling_probability"),
    ),
)

SCHEMA = pa.schema(
    [pa.field(column.name, column.type) for column in COLUMNS],
    metadata={METADATA_KEY: str(SCHEMA_VERSION).encode()},
)


def _part_schema(part: str) -> pa.Schema:
    """The columns a part holds as the records do, in their order: what its producer writes."""
    return pa.schema(
        [
            pa.field(column.value.source, column.type)
            for column in COLUMNS
            if isinstance(column.value, Taken) and column.value.part == part
        ]
    )


PREDICTION = _part_schema("prediction")
POD = _part_schema("pod")


def build_records(parts: RecordParts) -> pa.RecordBatch:
    """The records of the parts' rows, column by column."""
    return pa.RecordBatch.from_arrays([column.value(parts) for column in COLUMNS], schema=SCHEMA)


def check(records: Records) -> None:
    """Raises ValueError when ``records`` are not in :data:`SCHEMA` (its columns, in order, with their types)."""
    if not records.schema.equals(SCHEMA, check_metadata=False):
        raise ValueError(f"records in another schema than the record store's: {records.schema.names}")


def as_batch(records: Records) -> pa.RecordBatch:
    """The records as one record batch (a table's chunks put together)."""
    if isinstance(records, pa.RecordBatch):
        return records
    return pa.RecordBatch.from_arrays([column.combine_chunks() for column in records.columns], schema=records.schema)
