"""Data that crosses a seam between pipeline stages.

Spans come out of the receivers, joined requests out of the trace assembler, evaluations out
of the SLO evaluator. All are plain slotted dataclasses: cheap to build on the hot path and
readable when a test fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

AttributeValue = Any  # str | bool | int | float | bytes | list | dict | None, as OTLP AnyValue allows
STATUS_ERROR = 2  # OTLP Status.code STATUS_CODE_ERROR


@dataclass(slots=True)
class Span:
    """One OTLP span reduced to what sloscope reads. Ids are lowercase hex, as in OTLP/JSON."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    resource: dict[str, AttributeValue]
    tracestate: str = ""
    status_code: int = 0  # OTLP StatusCode: 0 unset, 1 ok, 2 error
    status_message: str = ""

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR


@dataclass(slots=True)
class JoinedRequest:
    """One request: the model-server span (the anchor) joined with its gateway spans.

    Times are seconds, SLO targets milliseconds (as the headers carry them). ``None`` means no
    span said; whether a value is valid is the evaluator's business, not the assembler's.
    """

    trace_id: str
    span_id: str
    outcome: str
    request_id: str | None = None
    requested_model: str | None = None
    target_model: str | None = None
    pool: str | None = None
    pod: str | None = None
    endpoint: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    routing: str = "unknown"
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    ttft_seconds: float | None = None
    ttft_source: str | None = None
    server_ttft_seconds: float | None = None  # the model server's own TTFT, on the same clock as its e2e
    e2e_seconds: float | None = None
    queue_seconds: float | None = None
    prefill_seconds: float | None = None
    decode_seconds: float | None = None
    prompt_tokens: float | None = None
    completion_tokens: float | None = None
    prefix_cache_score: float | None = None  # 0..1, when the gateway put the routing-time score on a span
    start_ns: int = 0  # the model-server span's start and end (the gateway span's for a request that never reached one)
    end_ns: int = 0
    arrival_ns: int = 0  # when the request reached its gateway span, else its outermost ancestor, else the model server
    failure_reason: str | None = None  # error, shed, aborted or timeout: the request failed (a bad event for every SLO)
    tpot_seconds: float | None = None  # set when several model-server spans make one request (n > 1: the slowest)
    choices: int = 1  # model-server spans of one request that were choices (n > 1)
    prefill_pod: str | None = None  # P/D: the prefill stage's pod and times (the request counts on the decode pod)
    prefill_queue_seconds: float | None = None
    prefill_seconds_on_prefill_pod: float | None = None
    phase: str | None = None  # the coordinator phase its EPP call was scheduled for (encode, prefill, decode), if one
    call_arrival_ns: int = 0  # a coordinator call: its first leg's arrival (0: the call is this one EPP request)
    gateway: str | None = None  # the identity of the gateway (EPP) whose spans it came through: where a failure belongs
    sampling_probability: float | None = None  # its trace was kept with it, as its tracestate's th says (None: unsaid)

    @property
    def model(self) -> str | None:
        """The model that served the request; the requested one when the server did not say."""
        return self.target_model or self.requested_model


class Verdict(NamedTuple):
    """Whether a request counts for one SLO, and if it does, whether it met it.

    NamedTuples rather than frozen dataclasses: equally immutable, several times cheaper to build,
    and two of these are built per request.
    """

    eligible: bool
    met: bool = False
    actual: float | None = None  # seconds
    target: float | None = None  # seconds


class Evaluation(NamedTuple):
    """What the SLO evaluator concluded about one request."""

    slo_class: str
    ttft: Verdict
    tpot: Verdict
    goodput: Verdict
    ttft_seconds: float | None
    tpot_seconds: float | None
    target_source: str  # "request", "class_default" or "none"
    invalid_fields: tuple[str, ...] = ()

    def verdict(self, slo: str) -> Verdict:
        result: Verdict = getattr(self, slo)
        return result
