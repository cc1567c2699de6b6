"""The request and answer shapes of the prediction servers' ``/predict`` API.

The fields and their ranges are the prediction server's (``PredictionRequest`` of the latency
predictor's ``prediction_server.py``; see ``fixtures/predictor/predict-bulk-request.json``):
``kv_cache_percentage`` and ``prefix_cache_score`` in 0..1, the counts non-negative integers. They are
not checked here: the server validates them and answers 422 for a value out of range, which the
client counts as ``rejected``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, TypeGuard

from sloscope import conventions as c

__all__ = ["Features", "Prediction", "is_json_number", "out_of_range", "parse_objective"]


@dataclass(frozen=True)
class Features:
    """One request's features, as the EPP sends them to a prediction server.

    The first six are every generation's. ``prefill_tokens_in_flight`` is None for the late-2025 GIE
    EPP, which sent only those six; GIE v1.5.0's request object adds ``pod_type`` (omitted when empty) and the
    two in-flight token counts (``sidecars/latencypredictorasync/types.go:183-193`` at df9f8909fe06); the llm-d
    EPP's also carries the multimodal encoder sizes (0 for text) (``latencypredictorclient/types.go:188-203`` at
    llm-d-router ebab6879): ``encoder``.
    """

    kv_cache_percentage: float  # KV-cache utilization of the pod, 0..1
    input_token_length: int  # whitespace words (late-2025 GIE EPP) or prompt tokens (llm-d EPP)
    num_request_waiting: int
    num_request_running: int
    num_tokens_generated: int
    prefix_cache_score: float  # prefix-cache hit ratio, 0..1
    pod_type: str = ""  # the pod's role label value ("prefill", "decode", ...), "" for monolithic
    prefill_tokens_in_flight: int | None = None  # the EPP's in-flight uncached prompt tokens on the endpoint
    decode_tokens_in_flight: int = 0  # the llm-d EPP's routing-time call leaves it 0
    encoder: bool = True  # with the in-flight counts, the encoder sizes too (llm-d; GIE v1.5.0 has none)

    def to_json(self) -> dict[str, float | int | str]:
        """The request object of ``POST /predict`` (one item of ``/predict/bulk/strict``'s ``requests``)."""
        body: dict[str, float | int | str] = {
            "kv_cache_percentage": self.kv_cache_percentage,
            "input_token_length": self.input_token_length,
            "num_request_waiting": self.num_request_waiting,
            "num_request_running": self.num_request_running,
            "num_tokens_generated": self.num_tokens_generated,
            "prefix_cache_score": self.prefix_cache_score,
        }
        if self.prefill_tokens_in_flight is None:
            return body
        # Go's encoding/json order of the llm-d (and GIE v1.5.0) PredictionRequest; pod_type is `omitempty`.
        if self.encoder:
            body["encoder_input_size"] = 0
            body["encoder_matched_size"] = 0
        if self.pod_type:
            body["pod_type"] = self.pod_type
        body["prefill_tokens_in_flight"] = self.prefill_tokens_in_flight
        body["decode_tokens_in_flight"] = self.decode_tokens_in_flight
        return body


@dataclass(frozen=True)
class Prediction:
    """A prediction server's answer for one request: TTFT and TPOT at its ``objective``.

    ``objective`` is ``quantile`` (the ``quantile`` of the latency, 0.9: p90) or ``mean`` (the mean latency;
    the server still reports a ``quantile``, which then means nothing).
    """

    ttft_ms: float
    tpot_ms: float
    quantile: float
    model_type: str
    objective: str = c.OBJECTIVE_QUANTILE


def parse_objective(value: Any) -> str:
    """The objective an answer states in ``objective_type``; absent (None) is ``quantile``.

    The llm-d latency predictor writes ``objective_type`` ("quantile" or "mean", its ``ObjectiveType``) into
    every answer, ``/status`` and ``/metrics`` (prediction/prediction_server.py:917,925 and
    training/training_server.py:1523 at b5d19f1); the late-2025 predictor has no such field and predicts a
    quantile. Raises ``ValueError`` for any other value.
    """
    if value is None:
        return c.OBJECTIVE_QUANTILE
    if value not in c.OBJECTIVES:
        raise ValueError(f"unknown objective_type {value!r}")
    return str(value)


def out_of_range(ttft_ms: float, tpot_ms: float, quantile: float | None) -> str | None:
    """Why these answer values cannot be a prediction, or None when they can.

    The prediction server clips its predictions at 0 (``np.maximum(..., 0.0)`` in
    ``predict_bulk_strict_endpoint``, ``max(0, ...)`` in ``/predict``: prediction/prediction_server.py:1028-1029
    and 1002-1003 at llm-d-latency-predictor b5d19f1) and reports the quantile it was started with,
    ``LATENCY_QUANTILE_ALPHA`` (default 0.9, :78 and :312), a probability in both objectives (0.9 in mean
    mode too: fixtures ``predictor/llm-d/mean/``). A negative, NaN or infinite latency, or a quantile outside
    (0, 1) (90 for 0.9, a percent written by mistake) is a broken server or proxy, not a prediction.
    """
    for name, value in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        if not math.isfinite(value) or value < 0:
            return f"{name} {value!r} is not a latency"
    if quantile is not None and not (math.isfinite(quantile) and 0.0 < quantile < 1.0):
        return f"quantile {quantile!r} is not in (0, 1)"
    return None


def is_json_number(value: Any) -> TypeGuard[int | float]:
    """Whether a parsed JSON value is a number a float can hold: not a bool, and no integer beyond the
    largest float (``float(10**400)`` and ``math.isfinite(10**400)`` raise ``OverflowError``, which no
    reader of an answer expects)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= sys.float_info.max
    return isinstance(value, float)
