"""The evaluation span's content: its name and attributes, defined once, built from a request's record.

One span per evaluated request carries what sloscope concluded about it (targets, actuals, predictions,
headroom, which SLOs were missed). docs/otlp-export.md lists :data:`ATTRIBUTES`, and a test keeps the two
in step. The records come as Arrow (:mod:`sloscope.store.schema`); :func:`record_rows` reads the columns a span
needs, each once per table, and the functions below take one row of them. Sending the span is
:mod:`sloscope.publishers.otlp_export`'s job.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from sloscope import conventions as c
from sloscope.store.schema import Records

__all__ = [
    "ATTRIBUTES",
    "SCOPE_NAME",
    "SPAN_NAME",
    "evaluation_attributes",
    "record_rows",
    "status_description",
    "violated_slos",
]

Row = dict[str, Any]
"""One record's values of the columns :data:`READ` names (times as int64 nanoseconds, null as None)."""

# One name for every evaluation span: low cardinality, as OpenTelemetry asks of span names, and it names
# the operation (sloscope evaluating a request against its SLOs) under the same prefix as the attributes,
# so a backend query `name = "sloscope.evaluation"` finds exactly these spans and nothing a model server sent.
SPAN_NAME = "sloscope.evaluation"
SCOPE_NAME = "sloscope"

# Attribute names, defined once. Durations are milliseconds (the unit of the SLO headers), rounded to the
# nanosecond so that 1.1 s reads 1100.0, not 1100.0000000000002.
SLO_CLASS = "sloscope.slo_class"
MODEL = "sloscope.model"
POOL = "sloscope.pool"
POD = "sloscope.pod"
ROUTING = "sloscope.routing"
REQUEST_ID = "sloscope.request.id"
JOIN_OUTCOME = "sloscope.join.outcome"
TARGET_SOURCE = "sloscope.target_source"
TTFT_TARGET = "sloscope.ttft.target_ms"
TTFT_ACTUAL = "sloscope.ttft.actual_ms"
TTFT_SOURCE = "sloscope.ttft.source"
TTFT_PREDICTED = "sloscope.ttft.predicted_ms"
TTFT_HEADROOM = "sloscope.ttft.headroom_ms"
TTFT_MET = "sloscope.ttft.met"
TPOT_TARGET = "sloscope.tpot.target_ms"
TPOT_ACTUAL = "sloscope.tpot.actual_ms"
TPOT_PREDICTED = "sloscope.tpot.predicted_ms"
TPOT_HEADROOM = "sloscope.tpot.headroom_ms"
TPOT_MET = "sloscope.tpot.met"
E2E_PREDICTED = "sloscope.e2e.predicted_ms"
E2E_HEADROOM = "sloscope.e2e.headroom_ms"
GOODPUT_MET = "sloscope.goodput.met"
VIOLATED = "sloscope.violated"
INVALID_FIELDS = "sloscope.invalid_fields"
PREDICTION_SOURCE = "sloscope.prediction.source"
PREDICTION_QUANTILE = "sloscope.prediction.quantile"
PREDICTION_OBJECTIVE = "sloscope.prediction.objective"
PREDICTION_SKIPPED = "sloscope.prediction.skipped"
POD_WAITING = "sloscope.pod.waiting"
POD_RUNNING = "sloscope.pod.running"
POD_KV_CACHE = "sloscope.pod.kv_cache_utilization"
POD_STATE_AGE = "sloscope.pod.state_age_ms"
FAILURE_REASON = "sloscope.failure.reason"
PREFILL_POD = "sloscope.prefill.pod"

ATTRIBUTES: tuple[tuple[str, str], ...] = (
    (SLO_CLASS, "SLO class the request was counted in (always set)."),
    (MODEL, "Model that served the request, else the requested one."),
    (POOL, "Pool the request is counted in (always set)."),
    (POD, "Model-server pod that served the request."),
    (ROUTING, "predicted, default, unknown or none: the routing profile, as the `routing` label (always set)."),
    (REQUEST_ID, "The request's x-request-id / gen_ai.request.id."),
    (JOIN_OUTCOME, "How the request's spans were joined, as the `outcome` label of sloscope_traces_joined_total."),
    (TARGET_SOURCE, "request (SLO headers), class_default or none (always set)."),
    (TTFT_TARGET, "TTFT target, ms."),
    (TTFT_ACTUAL, "Measured TTFT, ms."),
    (
        TTFT_SOURCE,
        "Where the measured TTFT came from: gateway_arrival, gateway, pd_gateway, pd_sidecar or model_server.",
    ),
    (TTFT_PREDICTED, "Predicted TTFT, ms (the predictor's quantile or mean: see sloscope.prediction.objective)."),
    (TTFT_HEADROOM, "TTFT target minus predicted TTFT at routing, ms; negative when the pod was predicted to miss."),
    (TTFT_MET, "Whether TTFT met its target; set only when the request was eligible for the TTFT SLO."),
    (TPOT_TARGET, "TPOT target, ms."),
    (TPOT_ACTUAL, "Measured TPOT, (e2e - TTFT) / (completion tokens - 1), ms."),
    (TPOT_PREDICTED, "Predicted TPOT, ms."),
    (TPOT_HEADROOM, "TPOT target minus predicted TPOT at routing, ms."),
    (TPOT_MET, "Whether TPOT met its target; set only when the request was eligible for the TPOT SLO."),
    (E2E_PREDICTED, "With streaming off in the EPP: its predicted TTFT, an end-to-end latency, ms."),
    (E2E_HEADROOM, "With streaming off: TTFT target minus predicted end-to-end latency at routing, ms."),
    (GOODPUT_MET, "Whether every SLO the request carries was met; set only when eligible for goodput."),
    (VIOLATED, "The SLOs missed (ttft, tpot, goodput), in that order; absent when none was."),
    (INVALID_FIELDS, "Inputs the evaluator found unusable (e.g. ttft_seconds); absent when none."),
    (PREDICTION_SOURCE, "span (the EPP's prediction), shadow (asked by sloscope) or none (always set)."),
    (PREDICTION_QUANTILE, "Quantile the predictor predicts (e.g. 0.9); absent for a mean prediction."),
    (PREDICTION_OBJECTIVE, "quantile or mean: what the prediction is; absent without one."),
    (PREDICTION_SKIPPED, "Why there is no shadow prediction (sampled_out, no_pod_state, failed, ...)."),
    (POD_WAITING, "Requests waiting on the pod at arrival (scraped)."),
    (POD_RUNNING, "Requests running on the pod at arrival (scraped)."),
    (POD_KV_CACHE, "KV-cache utilization of the pod at arrival, 0..1 (scraped)."),
    (POD_STATE_AGE, "Age of that scraped sample at the request's arrival, ms."),
    (FAILURE_REASON, "Why the request failed: error, shed, timeout, aborted or invalid; absent when it did not."),
    (PREFILL_POD, "P/D: the pod that ran the prefill stage (sloscope.pod is the decode pod)."),
)


READ = (
    "trace_id",
    "span_id",
    "request_id",
    "arrival_time",
    "start_time",
    "end_time",
    "model",
    "pool",
    "pod",
    "slo_class",
    "routing",
    "target_source",
    "ttft_target_seconds",
    "tpot_target_seconds",
    "ttft_seconds",
    "ttft_judged_seconds",
    "ttft_source",
    "tpot_seconds",
    "ttft_met",
    "tpot_met",
    "goodput_met",
    "invalid_fields",
    "prediction_source",
    "prediction_skipped",
    "predicted_ttft_seconds",
    "predicted_tpot_seconds",
    "prediction_quantile",
    "prediction_objective",
    "ttft_headroom_seconds",
    "tpot_headroom_seconds",
    "predicted_e2e_seconds",
    "e2e_headroom_seconds",
    "pod_waiting",
    "pod_running",
    "pod_kv_cache_utilization",
    "pod_state_age_seconds",
    "join_outcome",
    "failure_reason",
    "prefill_pod",
)
"""The record columns an evaluation span is made of."""


def record_rows(records: Records) -> list[Row]:
    """The records' rows as :data:`Row`: each column read once, as Python values (times as nanoseconds)."""
    columns = []
    for name in READ:
        column = records.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        columns.append(column.to_pylist())
    return [dict(zip(READ, values, strict=True)) for values in zip(*columns, strict=True)]


def _ms(seconds: float | None) -> float | None:
    """Seconds to milliseconds rounded to the nanosecond; None (unknown) for None, NaN or infinity."""
    if seconds is None or not math.isfinite(seconds):
        return None
    return round(seconds * 1000.0, 6)


def _known(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def violated_slos(row: Row) -> list[str]:
    """The SLOs the request was eligible for and missed, in the order of the ``slo`` label values."""
    return [slo for slo in c.SLOS if row[f"{slo}_met"] is False]


def evaluation_attributes(row: Row) -> dict[str, Any]:
    """The span's attributes: only values that are known, so an absent attribute never reads as 0 or false."""
    attributes: dict[str, Any] = {
        SLO_CLASS: row["slo_class"],
        POOL: row["pool"],
        ROUTING: row["routing"],
        TARGET_SOURCE: row["target_source"],
        PREDICTION_SOURCE: row["prediction_source"],
    }
    ttft = row["ttft_seconds"]
    optional: tuple[tuple[str, Any], ...] = (
        (MODEL, row["model"]),
        (POD, row["pod"]),
        (REQUEST_ID, row["request_id"]),
        (JOIN_OUTCOME, row["join_outcome"] or None),
        (TTFT_TARGET, _ms(row["ttft_target_seconds"])),
        (TTFT_ACTUAL, _ms(ttft)),
        (TTFT_SOURCE, row["ttft_source"] if ttft is not None else None),
        (TTFT_PREDICTED, _ms(row["predicted_ttft_seconds"])),
        (TTFT_HEADROOM, _ms(row["ttft_headroom_seconds"])),
        (TTFT_MET, row["ttft_met"]),
        (TPOT_TARGET, _ms(row["tpot_target_seconds"])),
        (TPOT_ACTUAL, _ms(row["tpot_seconds"])),
        (TPOT_PREDICTED, _ms(row["predicted_tpot_seconds"])),
        (TPOT_HEADROOM, _ms(row["tpot_headroom_seconds"])),
        (TPOT_MET, row["tpot_met"]),
        (E2E_PREDICTED, _ms(row["predicted_e2e_seconds"])),
        (E2E_HEADROOM, _ms(row["e2e_headroom_seconds"])),
        (GOODPUT_MET, row["goodput_met"]),
        (VIOLATED, violated_slos(row) or None),
        (INVALID_FIELDS, row["invalid_fields"] or None),
        (PREDICTION_QUANTILE, _known(row["prediction_quantile"])),
        (PREDICTION_OBJECTIVE, row["prediction_objective"]),
        (PREDICTION_SKIPPED, row["prediction_skipped"]),
        (FAILURE_REASON, row["failure_reason"]),
        (PREFILL_POD, row["prefill_pod"]),
        (POD_WAITING, _known(row["pod_waiting"])),
        (POD_RUNNING, _known(row["pod_running"])),
        (POD_KV_CACHE, _known(row["pod_kv_cache_utilization"])),
        (POD_STATE_AGE, _ms(row["pod_state_age_seconds"])),
    )
    attributes.update((name, value) for name, value in optional if value is not None)
    return attributes


# The actual each SLO's verdict judged: a failed request's TTFT is no sample (ttft_seconds is null), yet what it
# measured is what its missed TTFT SLO is reported with.
_JUDGED = {c.SLO_TTFT: "ttft_judged_seconds", c.SLO_TPOT: "tpot_seconds"}
_TARGET = {c.SLO_TTFT: "ttft_target_seconds", c.SLO_TPOT: "tpot_target_seconds"}


def status_description(row: Row) -> str | None:
    """``SLO violated: ttft 250 ms > 200 ms, ...`` for a request that missed an SLO, else None."""
    parts = []
    for slo in violated_slos(row):
        actual = _ms(row[_JUDGED[slo]]) if slo in _JUDGED else None
        target = _ms(row[_TARGET[slo]]) if slo in _TARGET else None
        if slo == c.SLO_GOODPUT or actual is None or target is None:
            parts.append(slo)
        else:
            parts.append(f"{slo} {actual:g} ms > {target:g} ms")
    reason = row["failure_reason"]
    failed = f"request failed ({reason})" if reason else None
    violated = "SLO violated: " + ", ".join(parts) if parts else None
    return "; ".join(part for part in (failed, violated) if part) or None
