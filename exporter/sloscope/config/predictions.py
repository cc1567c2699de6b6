"""Settings of the shadow predictions and of the live headroom."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sloscope.config._section import _Section


class Predictions(_Section):
    """Predicted versus actual: spans' predictions when present, else shadow predictions."""

    shadow: bool = Field(default=True, description="Ask the prediction server when a request carries none.")
    share: float = Field(default=1.0, ge=0, le=1, description="Share of completed requests to shadow-predict.")
    max_per_second: float = Field(default=200.0, gt=0, description="Shadow predictions asked per second at most.")
    batch_size: int = Field(default=100, ge=1, le=100, description="Requests per /predict/bulk/strict call (EPP: 100).")
    batch_wait_seconds: float = Field(default=1.0, gt=0, description="Longest wait to fill a batch.")
    timeout_seconds: float = Field(
        default=2.0, gt=0, description="Total deadline of one prediction call, connect to the answer's last byte."
    )
    max_pending: int = Field(
        default=10_000, ge=1, description="Requests waiting for a shadow prediction, per pool (one queue each)."
    )
    breaker_failures: int = Field(
        default=5, ge=1, description="Consecutive failed calls that open a server's circuit breaker."
    )
    breaker_open_seconds: float = Field(
        default=30.0, gt=0, description="How long an open breaker refuses calls before one trial call."
    )
    words_per_token: float = Field(
        default=0.75,
        gt=0,
        description="Whitespace words per prompt token: the EPP sends a word count as input_token_length, "
        "spans carry tokens.",
    )
    prefix_cache_score: float = Field(
        default=0.0, ge=0, le=1, description="prefix_cache_score sent when the request's is unknown."
    )
    tokens_generated: int = Field(
        default=1, ge=0, description="num_tokens_generated sent (the EPP's routing-time bulk call sends 1)."
    )
    health_interval_seconds: float = Field(
        default=15.0, gt=0, description="How often predictor servers' health endpoints are polled."
    )
    reset_probe: bool = Field(
        default=True,
        description="At each health poll, ask every ready prediction server two POST /predict of very different "
        "requests: the same answer for both marks a model reset to its default (docs/predictions.md).",
    )
    streaming_mode: bool | None = Field(
        default=None,
        description="The streamingMode of the EPPs' latency plugin for pools without their own streaming_mode, and "
        "for requests of pools no setting names (predictions carried on spans), until an EPP's page shows it. "
        "Unset: false, the upstream default (docs/predictions.md).",
    )
    epp_generation: Literal["auto", "gie-2025", "gie-v1.5", "llm-d"] = Field(
        default="auto",
        description="Which EPP's prediction call shadow predictions reproduce (docs/predictions.md): gie-2025 "
        "(whitespace words, the pod's running count), gie-v1.5 (the same, plus pod_type and in-flight tokens), "
        "llm-d (prompt tokens, the EPP's in-flight counts, pod_type); auto tells them apart by the pool's EPP page, "
        "else by the prediction servers' answers.",
    )
    endpoint_role_label: str = Field(
        default="",
        description="The llm-d EPP's endpointRoleLabel (e.g. llm-d.ai/role): pod_type is the pod's value of this "
        "label; empty, as the EPP's default, sends no pod_type.",
    )
    inflight_producer: str = Field(
        default="inflight-load-producer",
        min_length=1,
        description="The llm-d EPP's in-flight load producer the latency plugin reads (its inFlightLoadProducerName).",
    )


class Headroom(_Section):
    """Live per-pod headroom for each SLO class's reference request."""

    interval_seconds: float = Field(default=10.0, gt=0, description="How often headroom is predicted.")
    slo_buffer_factor: float = Field(default=1.0, gt=0, description="The EPP's sloBufferFactor for TPOT headroom.")
    running_slo_window_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Requests that ended this recently count as running on their pod when finding the "
        "tightest TPOT SLO there (spans arrive only when a request ends).",
    )
