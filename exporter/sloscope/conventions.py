"""Every series name and label name sloscope publishes, defined once.

The exporter, the docs test and (later) the dashboard and rule generators import these
definitions, so a renamed series cannot silently break a panel or an alert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NAMESPACE = "sloscope"

# Label names.
MODEL = "model"
POOL = "pool"
POD = "pod"
SLO_CLASS = "slo_class"
ROUTING = "routing"
SLO = "slo"
SIGNAL = "signal"
SOURCE = "source"
REASON = "reason"
OUTCOME = "outcome"
TRANSPORT = "transport"
FIELD = "field"
LABEL = "label"
RESULT = "result"

# Label values with a fixed meaning.
OTHER = "__other__"  # label values beyond the per-label cap fold into this one
UNKNOWN = "unknown"  # a label whose value no span carried
SLO_TTFT = "ttft"
SLO_TPOT = "tpot"
SLO_GOODPUT = "goodput"
SLOS = (SLO_TTFT, SLO_TPOT, SLO_GOODPUT)
ROUTING_PREDICTED = "predicted"
ROUTING_DEFAULT = "default"
ROUTING_UNKNOWN = "unknown"

MetricType = Literal["counter", "gauge", "histogram", "info"]


@dataclass(frozen=True)
class MetricDef:
    """One published family. ``name`` excludes the ``_total`` suffix of counters, as prometheus_client wants."""

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str

    @property
    def exposed_name(self) -> str:
        """The name a scraper sees (counters carry ``_total``, info families ``_info``)."""
        if self.type == "counter":
            return f"{self.name}_total"
        if self.type == "info":
            return f"{self.name}_info"
        return self.name


def _m(name: str, type_: MetricType, labels: tuple[str, ...], help_: str) -> MetricDef:
    return MetricDef(f"{NAMESPACE}_{name}", type_, labels, help_)


_REQ = (MODEL, POOL, SLO_CLASS, ROUTING)

# Request series: one increment per evaluated (joined) request.
REQUESTS = _m("requests", "counter", _REQ, "Evaluated (joined) requests.")
SLO_REQUESTS = _m("slo_requests", "counter", (*_REQ, SLO), "Requests eligible for an SLO (ttft, tpot or goodput).")
SLO_VIOLATIONS = _m("slo_violations", "counter", (*_REQ, SLO), "Eligible requests that missed the SLO.")
TTFT_SECONDS = _m("ttft_seconds", "histogram", (MODEL, POOL, SLO_CLASS), "Actual time to first token.")
TPOT_SECONDS = _m(
    "tpot_seconds",
    "histogram",
    (MODEL, POOL, SLO_CLASS),
    "Actual time per output token after the first, (e2e - ttft) / (completion_tokens - 1).",
)
POD_REQUESTS = _m("pod_requests", "counter", (POOL, POD), "Evaluated requests per pod.")
POD_SLO_VIOLATIONS = _m("pod_slo_violations", "counter", (POOL, POD, SLO), "SLO violations per pod.")
INVALID_VALUES = _m(
    "invalid_values",
    "counter",
    (FIELD,),
    "Request values that were missing, negative or not finite; the request is ineligible for the SLOs needing them.",
)

# The SLO spec, as series.
SLO_OBJECTIVE_RATIO = _m(
    "slo_objective_ratio", "gauge", (MODEL, SLO_CLASS, SLO), "Objective of an SLO class (share of requests to meet it)."
)
SLO_TARGET_SECONDS = _m(
    "slo_target_seconds",
    "gauge",
    (MODEL, SLO_CLASS, SLO),
    "Default target of an SLO class, used for requests that carry none (present only when the class sets one).",
)
SLO_COMPLIANCE_PERIOD_SECONDS = _m(
    "slo_compliance_period_seconds",
    "gauge",
    (SLO_CLASS,),
    "Compliance period over which an SLO class's budget is counted.",
)

# Self-monitoring.
SPANS_RECEIVED = _m("spans_received", "counter", (TRANSPORT,), "Spans accepted by a receiver.")
SPANS_DROPPED = _m("spans_dropped", "counter", (REASON,), "Spans refused or discarded, by reason.")
OTLP_REQUESTS = _m("otlp_requests", "counter", (TRANSPORT, RESULT), "OTLP export requests received, by outcome.")
QUEUE_SPANS = _m("queue_spans", "gauge", (), "Spans waiting in the receiver-to-assembler queue.")
QUEUE_CAPACITY_SPANS = _m("queue_capacity_spans", "gauge", (), "Capacity of the receiver-to-assembler queue.")
TRACES_PENDING = _m("traces_pending", "gauge", (), "Traces held by the assembler waiting for their spans.")
TRACES_JOINED = _m(
    "traces_joined", "counter", (OUTCOME,), "Requests emitted or traces expired by the assembler, by outcome."
)
LABEL_VALUES_FOLDED = _m(
    "label_values_folded", "counter", (LABEL,), "Observations whose label value was folded into __other__ by the cap."
)
BUILD_INFO = _m("build", "info", ("version", "python"), "sloscope build information.")

# Join outcomes (values of the ``outcome`` label).
OUTCOME_JOINED = "joined"  # anchor and gateway span in one trace
OUTCOME_JOINED_BY_REQUEST_ID = "joined_by_request_id"  # gateway span found in another trace by request id
OUTCOME_ANCHOR_ONLY = "anchor_only"  # the join window passed with no gateway span
OUTCOME_NO_ANCHOR = "no_anchor"  # a trace expired without a model-server span
OUTCOME_EVICTED = "evicted"  # emitted early because the pending-trace cap was reached
OUTCOMES = (OUTCOME_JOINED, OUTCOME_JOINED_BY_REQUEST_ID, OUTCOME_ANCHOR_ONLY, OUTCOME_NO_ANCHOR, OUTCOME_EVICTED)

# Drop reasons (values of the ``reason`` label of SPANS_DROPPED).
DROP_QUEUE_FULL = "queue_full"  # refused with 429 / RESOURCE_EXHAUSTED; the client may retry
DROP_INVALID = "invalid"  # rejected in an OTLP partial success
DROP_DUPLICATE = "duplicate"  # the same span id seen twice in a trace (exporter retries)
DROP_LATE = "late"  # arrived after its trace was emitted
DROP_PENDING_CAP = "pending_cap"  # a trace without an anchor evicted by the pending-trace cap
DROP_TRACE_TOO_LARGE = "trace_too_large"  # beyond the per-trace span cap
DROP_SHUTDOWN = "shutdown"  # arrived while shutting down
DROP_REASONS = (
    DROP_QUEUE_FULL,
    DROP_INVALID,
    DROP_DUPLICATE,
    DROP_LATE,
    DROP_PENDING_CAP,
    DROP_TRACE_TOO_LARGE,
    DROP_SHUTDOWN,
)

# sloscope's own HTTP server metrics: the family vLLM exposes through prometheus-fastapi-instrumentator.
HTTP_REQUESTS = MetricDef(
    "http_requests", "counter", ("handler", "method", "status"), "HTTP requests served by sloscope, by handler."
)
HTTP_REQUEST_DURATION = MetricDef(
    "http_request_duration_seconds", "histogram", ("handler", "method"), "Latency of sloscope's HTTP handlers."
)

ALL_METRICS: tuple[MetricDef, ...] = (
    REQUESTS,
    SLO_REQUESTS,
    SLO_VIOLATIONS,
    TTFT_SECONDS,
    TPOT_SECONDS,
    POD_REQUESTS,
    POD_SLO_VIOLATIONS,
    INVALID_VALUES,
    SLO_OBJECTIVE_RATIO,
    SLO_TARGET_SECONDS,
    SLO_COMPLIANCE_PERIOD_SECONDS,
    SPANS_RECEIVED,
    SPANS_DROPPED,
    OTLP_REQUESTS,
    QUEUE_SPANS,
    QUEUE_CAPACITY_SPANS,
    TRACES_PENDING,
    TRACES_JOINED,
    LABEL_VALUES_FOLDED,
    BUILD_INFO,
    HTTP_REQUESTS,
    HTTP_REQUEST_DURATION,
)
