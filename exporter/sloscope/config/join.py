"""Settings of the trace join and of the span-attribute mapping it reads requests with."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator

from sloscope.config._section import _Section

GATEWAY_MEMORY_SECONDS = 600.0  # join.wait_for_gateway "auto": a gateway span this recent says the gateway traces


class Join(_Section):
    """How the trace assembler turns spans into one record per request."""

    engine: Literal["native", "python"] = Field(
        default="native",
        description="Which implementation decodes OTLP and joins spans: the native core (sloscope._native, "
        "compiled) or the Python reference it is tested against. Both follow the same rules.",
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Join worker threads: with more than one, the join is sharded by trace id, each worker with "
        "its own assembler and queue (the native join releases the GIL, so they run on separate cores); the "
        "queue and pending caps are totals, divided among them. Joining by request id across traces then only "
        "joins traces that fall on the same worker (docs/scale-out.md).",
    )
    batch_requests: int = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description="Joined requests gathered before they are evaluated and published together (or fewer after "
        "batch_timeout_seconds): the vectorized evaluation costs about ten times more per request in batches of "
        "256 than of 4,096.",
    )
    batch_timeout_seconds: float = Field(
        default=0.5,
        ge=0,
        le=10,
        description="The longest a joined request waits for its batch to fill before it is evaluated and "
        "published anyway; the series lag the join by at most this (0: every assembler call is published at once).",
    )
    window_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How long after the model-server span *arrives* to wait for its ancestors (the gateway "
        "spans) before emitting the request with what it has. Counted in arrival time: exporters batch and "
        "clocks differ.",
    )
    trace_ttl_seconds: float = Field(
        default=30.0, gt=0, description="How long a trace without a model-server span is kept before it expires."
    )
    by_request_id: bool = Field(
        default=True,
        description="Also join a model-server span with a gateway span of another trace carrying the same "
        "request id (EPPs before mid-2026 did not continue the caller's trace).",
    )
    request_id_pattern: str = Field(
        default=r"^(?P<cmpl>cmpl-)?(?:chatcmpl-|embd-)?(?P<id>.+?)(?(cmpl)-\d+)$",
        description="Regular expression whose group 'id' extracts the joinable request id from a span's value "
        "(vLLM prefixes the x-request-id it was given: chatcmpl-<id>, and cmpl-<id>-<prompt index> for completions).",
    )

    @property
    def gateway_memory_seconds(self) -> float:
        """How recently a gateway span must have arrived for a model-server span to wait for its own: what
        ``wait_for_gateway`` means to both joins (infinite: always; negative: never)."""
        return {"auto": GATEWAY_MEMORY_SECONDS, "always": math.inf, "never": -1.0}[self.wait_for_gateway]

    @property
    def legs_memory_seconds(self) -> float:
        """How recently a coordinator leg must have come for a decode-phase request to wait for its own: what
        ``wait_for_legs`` means to the call joiner (infinite: always; negative: never)."""
        return {"auto": GATEWAY_MEMORY_SECONDS, "always": math.inf, "never": -1.0}[self.wait_for_legs]

    @field_validator("request_id_pattern")
    @classmethod
    def _has_id_group(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        if "id" not in compiled.groupindex:
            raise ValueError("must have a named group 'id', like ^(?:chatcmpl-)?(?P<id>.+)$")
        return value

    max_pending_traces: int = Field(default=100_000, gt=0, description="Traces held at once; the oldest is evicted.")
    max_spans_per_trace: int = Field(default=64, gt=1, description="Spans kept per trace; the rest are dropped.")
    max_pending_bytes: int = Field(
        default=512 * 1024 * 1024,
        gt=0,
        description="Estimated bytes of the spans held in pending traces (with the native engine, the bytes it "
        "holds); beyond it the oldest trace is evicted, as with max_pending_traces.",
    )
    max_done_traces: int = Field(
        default=200_000, gt=0, description="Emitted traces remembered to drop their duplicate and late spans."
    )
    anchor_span_names: list[str] = Field(
        default_factory=lambda: ["llm_request"],
        description="Names of model-server spans; one of these anchors a request.",
    )
    anchor_attribute: str = Field(
        default="gen_ai.latency.e2e",
        description="A span carrying this attribute is also an anchor, whatever its name (SGLang, TensorRT-LLM).",
    )
    gateway_span_names: list[str] = Field(
        default_factory=lambda: ["gateway.request"],
        description="Names of the gateway's per-request spans (the EPP's gateway.request). Each is one LLM call: "
        "its model-server spans are one request, and one that reaches none is a failed request.",
    )
    failure_window_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How long after a gateway span arrives to wait for its model-server span before the request "
        "counts as failed (exporters batch for up to 5 s each, so keep this well above the join window).",
    )
    wait_for_gateway: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="Whether a model-server span with no gateway span above it waits, up to window_seconds, for a "
        "gateway span that may still come: when the caller's traceparent wins, the EPP's gateway.request is a "
        "sibling of the model-server span, and the EPP's batch exporter sends it after the model server's. 'auto' "
        "waits while a gateway span (a late one too) has arrived in the last ten minutes: the traffic says the "
        "gateway traces, so only the requests before sloscope's first gateway span can miss theirs; 'always' and "
        "'never' decide without the traffic.",
    )
    wait_for_legs: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="Whether a request of llm-d's coordinator's decode phase with no earlier leg held waits, up to "
        "window_seconds, for its encode and prefill legs (each pod exports its own spans, so they may be joined "
        "after it). 'auto' waits while coordinator legs have come in the last ten minutes; 'always' and 'never' "
        "decide without the traffic.",
    )
    max_request_seconds: float = Field(
        default=600.0,
        gt=0,
        description="The longest an LLM call may take: a P/D prefill stage waits this long for its decode stage "
        "when no gateway span says the request is over.",
    )
    unanswered_are_aborted: bool = Field(
        default=True,
        description="A gateway request with no error and no model-server span counts as aborted (vLLM emits no "
        "span for an aborted request). Turn off only when the model servers export no spans at all.",
    )
    latency_scorer_types: list[str] = Field(
        default_factory=lambda: ["latency-scorer"],
        description="Scorer plugin types of prediction-based routing: a request they scored has routing=predicted.",
    )


class Attributes(_Section):
    """Which span attributes give each field, tried in order; ``resource.`` looks at resource attributes.

    Header attributes are accepted under the OpenTelemetry convention ``http.request.header.<name>``
    (a string or an array of strings) and under the plain header name.
    """

    request_id: list[str] = Field(
        default_factory=lambda: [
            "http.request.header.x-request-id",
            "x-request-id",
            "gen_ai.request.id",
        ]
    )
    requested_model: list[str] = Field(
        default_factory=lambda: ["http.request.header.x-gateway-model-name", "model"],
        description="Not gen_ai.request.model: the EPPs that set it (llm-d-router's scheduling spans, "
        "scheduler_profile.go) write the target model there, after any rewrite. The body-based router writes "
        "the client's model to the x-gateway-model-name header (GIE bodyfieldtoheader), which a gateway can "
        "capture on its span.",
    )
    target_model: list[str] = Field(
        default_factory=lambda: ["target_model", "gen_ai.request.model", "gen_ai.response.model"]
    )
    pool: list[str] = Field(
        default_factory=lambda: ["inference_pool", "gateway.inference_pool", "resource.k8s.inferencepool.name"]
    )
    pod: list[str] = Field(
        default_factory=lambda: ["resource.k8s.pod.name", "resource.host.name"],
        description="Not resource.service.instance.id: the OpenTelemetry SDK fills it with a random uuid per "
        "process (vLLM 0.33 sets no pod name), a new label value at every restart; the endpoint is the fallback.",
    )
    endpoint: list[str] = Field(
        default_factory=lambda: [
            "http.request.header.x-gateway-destination-endpoint",
            "x-gateway-destination-endpoint",
        ]
    )
    slo_ttft_ms: list[str] = Field(
        default_factory=lambda: [
            "http.request.header.x-llm-d-slo-ttft-ms",
            "x-llm-d-slo-ttft-ms",
            "http.request.header.x-slo-ttft-ms",
            "x-slo-ttft-ms",
        ],
        description="The TTFT SLO header; llm-d-router's name first, as the EPP reads it (the old one is an alias).",
    )
    slo_tpot_ms: list[str] = Field(
        default_factory=lambda: [
            "http.request.header.x-llm-d-slo-tpot-ms",
            "x-llm-d-slo-tpot-ms",
            "http.request.header.x-slo-tpot-ms",
            "x-slo-tpot-ms",
        ],
        description="The TPOT SLO header, in the same order.",
    )
    prediction_based_scheduling: list[str] = Field(
        default_factory=lambda: [
            "http.request.header.x-prediction-based-scheduling",
            "x-prediction-based-scheduling",
        ],
        description="true selects the prediction-based profile (routing=predicted), false the default one.",
    )
    prediction_based_scheduling_off: list[str] = Field(
        default_factory=lambda: [
            "http.request.header.x-prediction-based-scheduling-off",
            "x-prediction-based-scheduling-off",
        ],
        description="Presence disables the prediction-based profile (routing=default).",
    )
    predicted_ttft_ms: list[str] = Field(default_factory=lambda: ["predicted_ttft_ms", "llm_d.predicted_ttft_ms"])
    predicted_tpot_ms: list[str] = Field(default_factory=lambda: ["predicted_tpot_ms", "llm_d.predicted_tpot_ms"])
    gateway_ttft_seconds: list[str] = Field(
        default_factory=list,
        description="Client-side TTFT in seconds measured in front of the model server; preferred over the "
        "model server's own when present.",
    )
    gateway_ttft_ms: list[str] = Field(
        default_factory=list,
        description="The same in milliseconds. Not llm_d.pd_proxy.true_ttft_ms: the P/D sidecar stops that clock "
        "when it sends the decode request, before any token (about 0 ms for the concurrent connectors).",
    )
    prefix_cache_score: list[str] = Field(
        default_factory=lambda: ["prefix_cache_score", "llm_d.prefix_cache_score"],
        description="The routing-time prefix-cache score (0..1) of the chosen pod, used by shadow predictions; "
        "predictions.prefix_cache_score when absent.",
    )
    ttft_seconds: list[str] = Field(default_factory=lambda: ["gen_ai.latency.time_to_first_token"])
    e2e_seconds: list[str] = Field(default_factory=lambda: ["gen_ai.latency.e2e"])
    queue_seconds: list[str] = Field(default_factory=lambda: ["gen_ai.latency.time_in_queue"])
    prefill_seconds: list[str] = Field(default_factory=lambda: ["gen_ai.latency.time_in_model_prefill"])
    decode_seconds: list[str] = Field(default_factory=lambda: ["gen_ai.latency.time_in_model_decode"])
    prompt_tokens: list[str] = Field(
        default_factory=lambda: ["gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens"]
    )
    completion_tokens: list[str] = Field(
        default_factory=lambda: ["gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens"]
    )
    gateway: list[str] = Field(
        default_factory=lambda: ["resource.k8s.deployment.name", "resource.k8s.pod.name", "resource.service.name"],
        description="Who handled the request at the gateway, read from the gateway's (EPP's) spans alone: where a "
        "request that failed before any pod is counted (pools[].gateways, else the pool this gateway's answered "
        "requests went to; docs/sending-traces.md, where a failure is counted). The EPP charts set k8s.pod.name "
        "in OTEL_RESOURCE_ATTRIBUTES.",
    )
    default_pool: str = Field(
        default="unknown",
        description="Pool label of answered requests whose spans name none and whose pod discovery does not know.",
    )
