"""The evaluation span's content: its name and attributes, defined once, built from a request record.

One span per evaluated request carries what sloscope concluded about it (targets, actuals, predictions,
headroom, which SLOs were missed). docs/otlp-export.md lists :data:`ATTRIBUTES`, and a test keeps the two
in step. Sending the span is :mod:`sloscope.publishers.otlp_export`'s job.
"""

from __future__ import annotations

import math
from typing import Any

from sloscope import conventions as c
from sloscope.records import RequestRecord, Verdict

__all__ = ["ATTRIBUTES", "SCOPE_NAME", "SPAN_NAME", "evaluation_attributes", "status_description", "violated_slos"]

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


def _ms(seconds: float | None) -> float | None:
    """Seconds to milliseconds rounded to the nanosecond; None (unknown) for None, NaN or infinity."""
    if seconds is None or not math.isfinite(seconds):
        return None
    return round(seconds * 1000.0, 6)


def _known(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def violated_slos(record: RequestRecord) -> list[str]:
    """The SLOs the request was eligible for and missed, in the order of the ``slo`` label values."""
    evaluation = record.evaluation
    return [slo for slo in c.SLOS if (v := evaluation.verdict(slo)).eligible and not v.met]


def evaluation_attributes(record: RequestRecord) -> dict[str, Any]:
    """The span's attributes: only values that are known, so an absent attribute never reads as 0 or false."""
    request, evaluation = record.request, record.evaluation
    attributes: dict[str, Any] = {
        SLO_CLASS: evaluation.slo_class,
        POOL: record.pool,
        ROUTING: request.routing,
        TARGET_SOURCE: evaluation.target_source,
        PREDICTION_SOURCE: record.prediction_source,
    }
    optional: tuple[tuple[str, Any], ...] = (
        (MODEL, request.model),
        (POD, request.pod),
        (REQUEST_ID, request.request_id),
        (JOIN_OUTCOME, request.outcome or None),
        (TTFT_TARGET, _ms(evaluation.ttft.target)),
        (TTFT_ACTUAL, _ms(evaluation.ttft_seconds)),
        (TTFT_SOURCE, request.ttft_source if evaluation.ttft_seconds is not None else None),
        (TTFT_PREDICTED, _ms(record.predicted_ttft_seconds)),
        (TTFT_HEADROOM, _ms(record.ttft_headroom_seconds)),
        (TTFT_MET, _met(evaluation.ttft)),
        (TPOT_TARGET, _ms(evaluation.tpot.target)),
        (TPOT_ACTUAL, _ms(evaluation.tpot_seconds)),
        (TPOT_PREDICTED, _ms(record.predicted_tpot_seconds)),
        (TPOT_HEADROOM, _ms(record.tpot_headroom_seconds)),
        (TPOT_MET, _met(evaluation.tpot)),
        (E2E_PREDICTED, _ms(record.predicted_e2e_seconds)),
        (E2E_HEADROOM, _ms(record.e2e_headroom_seconds)),
        (GOODPUT_MET, _met(evaluation.goodput)),
        (VIOLATED, violated_slos(record) or None),
        (INVALID_FIELDS, list(evaluation.invalid_fields) or None),
        (PREDICTION_QUANTILE, _known(record.prediction_quantile)),
        (PREDICTION_OBJECTIVE, record.prediction_objective),
        (PREDICTION_SKIPPED, record.prediction_skipped),
        (FAILURE_REASON, request.failure_reason),
        (PREFILL_POD, request.prefill_pod),
    )
    attributes.update((name, value) for name, value in optional if value is not None)
    state = record.pod_state
    if state is not None:
        pod: tuple[tuple[str, Any], ...] = (
            (POD_WAITING, _known(state.waiting)),
            (POD_RUNNING, _known(state.running)),
            (POD_KV_CACHE, _known(state.kv_cache_utilization)),
            (POD_STATE_AGE, _ms(state.age_seconds)),
        )
        attributes.update((name, value) for name, value in pod if value is not None)
    return attributes


def _met(verdict: Verdict) -> bool | None:
    return verdict.met if verdict.eligible else None


def status_description(record: RequestRecord) -> str | None:
    """``SLO violated: ttft 250 ms > 200 ms, ...`` for a request that missed an SLO, else None."""
    parts = []
    for slo in violated_slos(record):
        verdict = record.evaluation.verdict(slo)
        actual, target = _ms(verdict.actual), _ms(verdict.target)
        if slo == c.SLO_GOODPUT or actual is None or target is None:
            parts.append(slo)
        else:
            parts.append(f"{slo} {actual:g} ms > {target:g} ms")
    failed = f"request failed ({record.request.failure_reason})" if record.request.failure_reason else None
    violated = "SLO violated: " + ", ".join(parts) if parts else None
    return "; ".join(part for part in (failed, violated) if part) or None
