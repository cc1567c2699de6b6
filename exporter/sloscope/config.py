"""Runtime settings of one deployment: listeners, limits, attribute mapping, join behaviour.

Loaded from an optional YAML file and overridden by environment variables with the prefix
``SLOSCOPE_`` and ``__`` between nested keys (``SLOSCOPE_LISTENERS__METRICS_PORT=9000``).
Unknown keys are errors: a typo must not silently fall back to a default. The SLO spec is a
separate, team-owned file (:mod:`sloscope.slo.spec`); ``slo_spec`` only says where it is.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sloscope.engines import ALIASES, MetricSpec
from sloscope.store.replica import REPLICA_ID_PATTERN

_CAPPED_LABELS = {"model": 50, "pool": 50, "slo_class": 20, "pod": 2000}
GATEWAY_MEMORY_SECONDS = 600.0  # join.wait_for_gateway "auto": a gateway span this recent says the gateway traces


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


ListenerName = Literal["otlp_grpc", "otlp_http", "metrics"]
LISTENER_NAMES: tuple[ListenerName, ...] = ("otlp_grpc", "otlp_http", "metrics")
ClientAuthType = Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]


def _unique_listeners(value: list[ListenerName]) -> list[ListenerName]:
    return list(dict.fromkeys(value))


class GrpcListener(_Section):
    """gRPC transport limits of the OTLP/gRPC listener (gRPC core channel arguments)."""

    server: Literal["grpcio", "native"] | None = Field(
        default=None,
        description="What serves OTLP/gRPC: grpcio's asyncio server, or the native core's HTTP/2 server "
        "(needs join.engine native). Unset: native with the native engine, else grpcio.",
    )
    max_connections: int = Field(
        default=512, ge=1, description="Connections open at once; gRPC refuses more before their handshake."
    )
    max_concurrent_streams: int = Field(default=100, ge=1, description="Calls in flight on one connection.")
    keepalive_time_seconds: float = Field(
        default=60.0, gt=0, description="sloscope pings a connection idle this long, to find dead peers."
    )
    keepalive_timeout_seconds: float = Field(
        default=20.0, gt=0, description="A ping unanswered this long closes the connection."
    )
    min_ping_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Shortest interval between a client's pings sloscope accepts; a client pinging more often is "
        "sent GOAWAY (gRPC's too_many_pings).",
    )
    permit_keepalive_without_calls: bool = Field(
        default=True, description="Accept client pings on a connection with no call in flight (exporters idle)."
    )
    max_connection_idle_seconds: float = Field(
        default=300.0, gt=0, description="A connection with no call for this long is closed with GOAWAY."
    )
    max_connection_age_seconds: float = Field(
        default=1800.0,
        gt=0,
        description="Any connection is closed with GOAWAY after this long, so exporters reconnect and spread "
        "over replicas.",
    )
    max_connection_age_grace_seconds: float = Field(
        default=30.0, ge=0, description="Time calls in flight get to finish after that GOAWAY."
    )


class ListenerTLS(_Section):
    """TLS of sloscope's own listeners, named as in Prometheus's web configuration (``tls_server_config``).

    The files are re-read when they change on disk (by mtime and size): a renewed certificate is
    presented from the next handshake on, without a restart.
    """

    cert_file: str | None = Field(default=None, description="Server certificate chain (PEM); TLS is off if unset.")
    key_file: str | None = Field(default=None, description="Private key (PEM) of cert_file.")
    client_ca_file: str | None = Field(
        default=None, description="CA bundle (PEM) client certificates are verified against."
    )
    client_auth_type: ClientAuthType = Field(
        default="NoClientCert",
        description="NoClientCert; VerifyClientCertIfGiven (HTTP listeners only: gRPC can only require or not ask); "
        "RequireAndVerifyClientCert.",
    )
    listeners: list[ListenerName] = Field(
        default_factory=lambda: list(LISTENER_NAMES), description="The listeners that serve TLS when it is on."
    )

    _listeners = field_validator("listeners")(_unique_listeners)

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None

    @model_validator(mode="after")
    def _consistent(self) -> ListenerTLS:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("set both cert_file and key_file, or neither")
        verifies = self.client_auth_type != "NoClientCert"
        if verifies and self.client_ca_file is None:
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file")
        if self.client_ca_file is not None and not verifies:
            raise ValueError("client_ca_file is set but client_auth_type is NoClientCert")
        if self.client_auth_type == "VerifyClientCertIfGiven" and "otlp_grpc" in self.listeners and self.enabled:
            raise ValueError(
                "gRPC cannot verify an optional client certificate: use RequireAndVerifyClientCert, "
                "or leave otlp_grpc out of listeners.tls.listeners"
            )
        return self


class ListenerAuth(_Section):
    """Credentials a client must present: a bearer token, or basic auth (either is accepted when both are set).

    Secrets come only from files (re-read when they change), never from the settings text, and are
    never logged. /healthz and /readyz stay open for probes.
    """

    token_file: str | None = Field(
        default=None, description="File holding the bearer token (Authorization: Bearer <token>)."
    )
    username: str | None = Field(default=None, description="Basic auth user name; needs password_file.")
    password_file: str | None = Field(default=None, description="File holding the basic auth password.")
    listeners: list[ListenerName] = Field(
        default_factory=lambda: list(LISTENER_NAMES), description="The listeners that require credentials."
    )

    _listeners = field_validator("listeners")(_unique_listeners)

    @property
    def enabled(self) -> bool:
        return self.token_file is not None or self.password_file is not None

    @model_validator(mode="after")
    def _pair(self) -> ListenerAuth:
        if (self.username is None) != (self.password_file is None):
            raise ValueError("set both username and password_file, or neither")
        return self


class Listeners(_Section):
    """Where sloscope listens. Port 0 picks a free port (tests); the bound port is logged."""

    host: str = Field(
        default="0.0.0.0",
        description="Address all listeners bind. 0.0.0.0 is every interface: anyone who can reach the pod can "
        "send spans and read /metrics unless auth or a NetworkPolicy stops them.",
    )
    otlp_grpc_port: int = Field(default=4317, ge=0, le=65535, description="OTLP/gRPC TraceService.")
    otlp_http_port: int = Field(default=4318, ge=0, le=65535, description="OTLP/HTTP POST /v1/traces.")
    metrics_port: int = Field(default=9464, ge=0, le=65535, description="/metrics, /healthz, /readyz.")
    max_connections: int = Field(
        default=512,
        ge=1,
        description="Connections open at once on each HTTP listener. At the cap a new connection closes the "
        "longest-waiting idle or header-less one, else it is refused with 503. Lowered at start-up when the "
        "listeners would not fit under the open-file limit (docs/operations.md, listener limits).",
    )
    backlog: int = Field(
        default=128,
        ge=1,
        le=65535,
        description="Connections the kernel queues per HTTP listener before sloscope accepts them; also how many "
        "it accepts at once, so a listener holds at most about max_connections + 2 x backlog descriptors.",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Time an HTTP client has for its TLS handshake and for a request's line and headers, "
        "counted from the connection or the request's first byte; then 408 and close.",
    )
    idle_timeout_seconds: float = Field(
        default=75.0, gt=0, description="A kept-alive HTTP connection with no request for this long is closed."
    )
    otlp_http_server: Literal["uvicorn", "native"] | None = Field(
        default=None,
        description="What serves OTLP/HTTP: uvicorn on the event loop, or the native core's HTTP/1.1 server (needs "
        "join.engine native; its requests are not self-traced). Unset: native with the native engine, else uvicorn.",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Time an OTLP/HTTP client has to send a request's whole body once its headers are in; then "
        "408 and close. A body trickled byte by byte would hold its declared bytes in flight for ever.",
    )
    grpc: GrpcListener = Field(default_factory=GrpcListener)
    tls: ListenerTLS = Field(default_factory=ListenerTLS)
    auth: ListenerAuth = Field(default_factory=ListenerAuth)


class Limits(_Section):
    """Bounds that keep memory and label cardinality finite whatever clients send."""

    max_request_bytes: int = Field(
        default=8 * 1024 * 1024, gt=0, description="Largest OTLP request body, after gzip decompression."
    )
    queue_spans: int = Field(
        default=200_000, gt=0, description="Spans the receiver-to-assembler queue holds before answering 429."
    )
    retry_after_seconds: int = Field(
        default=2, ge=1, description="Retry-After / RetryInfo delay sent when the queue is full."
    )
    max_bytes_in_flight: int = Field(
        default=64 * 1024 * 1024,
        gt=0,
        description="Bytes of OTLP requests being read or decoded at once across both receivers (a compressed "
        "HTTP body counts its inflated worst case, max_request_bytes, too); beyond it 429 / RESOURCE_EXHAUSTED "
        "with a retry delay. One request is always admitted when nothing else is held.",
    )
    decode_threads: int = Field(
        default=2, ge=1, le=64, description="Threads decoding OTLP bodies off the event loop (both receivers)."
    )
    json_decode_processes: int = Field(
        default=1,
        ge=0,
        le=16,
        description="Worker processes parsing OTLP/JSON bodies (json.loads holds the GIL for ~200 ms per 8 MiB, "
        "which a thread cannot hide from the event loop); 0 parses JSON in the decoding threads.",
    )
    max_label_values: dict[str, int] = Field(
        default_factory=lambda: dict(_CAPPED_LABELS),
        description="Distinct values admitted per label, first come first served; later values fold into "
        "__other__. Labels left out keep their default cap.",
    )
    max_series_per_family: int = Field(
        default=50_000,
        ge=1,
        description="Series one family of sloscope's own may hold (a histogram label set counts its buckets, "
        "_sum and _count), first come first served; later label sets are counted into the family's series "
        "whose capped labels (model, pool, slo_class, pod, target_model) are __other__.",
    )
    max_series_total: int = Field(
        default=400_000,
        ge=1,
        description="Series all capped families may hold together; past it, new label sets of any family fold "
        "as above.",
    )

    @field_validator("max_label_values")
    @classmethod
    def _known_labels(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(_CAPPED_LABELS))
        if unknown:
            raise ValueError(f"unknown label(s) {', '.join(unknown)}; capped labels are {', '.join(_CAPPED_LABELS)}")
        small = sorted(label for label, cap in value.items() if cap < 1)
        if small:
            raise ValueError(f"caps must be at least 1: {', '.join(small)}")
        return {**_CAPPED_LABELS, **value}


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


class SelfTracing(_Section):
    """sloscope traces its own HTTP API with opentelemetry-instrumentation-fastapi."""

    enabled: bool = Field(default=True, description="Trace sloscope's own HTTP endpoints.")
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/gRPC endpoint for sloscope's own spans (host:port). None keeps them in-process "
        "only; never point it at sloscope itself.",
    )


class StaticTarget(_Section):
    """One model-server pod given by hand."""

    address: str = Field(pattern=r"^[^\s/]+:\d+$", description="host:port of the pod's metrics listener.")
    pod: str | None = Field(
        default=None, description="The pod's name, as its spans name it (k8s.pod.name); the address if unset."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="The pod's labels, like llm-d.ai/role and llm-d.ai/engine-type."
    )
    rank_ports: list[int] = Field(
        default_factory=list,
        description="The ports of the pod's data-parallel ranks in rank order, as an InferencePool's targetPorts "
        "(llm-d's multi-port data parallelism: each rank an endpoint with its own metrics page); address names the "
        "host. Empty: the pod is one endpoint at address.",
    )

    @field_validator("rank_ports")
    @classmethod
    def _ports(cls, ports: list[int]) -> list[int]:
        if any(not 0 < port < 65536 for port in ports) or len(set(ports)) != len(ports):
            raise ValueError("rank_ports must be distinct ports from 1 to 65535")
        return ports


class FileSD(_Section):
    """Prometheus ``file_sd_configs`` files: JSON or YAML lists of ``{targets: [...], labels: {...}}``."""

    files: list[str] = Field(description="Paths; the last path component may be a glob, as in Prometheus.")
    refresh_seconds: float = Field(
        default=5.0, gt=0, description="How often the files are re-read when they changed (by mtime and size)."
    )


class KubernetesSD(_Section):
    """Pods found through the Kubernetes API with the official client's list and watch."""

    namespace: str = Field(description="Namespace of the pods (and of the InferencePool).")
    inference_pool: str | None = Field(
        default=None,
        description="Name of an InferencePool; its selector picks the pods and its target port is scraped.",
    )
    label_selector: str | None = Field(
        default=None, description="A label selector (app=vllm,tier in (a,b)) used when no InferencePool is named."
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="Metrics port; the InferencePool's target port if unset."
    )
    kubeconfig: str | None = Field(
        default=None, description="Path of a kubeconfig; the in-cluster service account when unset."
    )

    @model_validator(mode="after")
    def _one_selector(self) -> KubernetesSD:
        if (self.inference_pool is None) == (self.label_selector is None):
            raise ValueError("set exactly one of inference_pool and label_selector")
        if self.inference_pool is None and self.port is None:
            raise ValueError("port is required with label_selector")
        return self


class Targets(_Section):
    """Where a pool's model-server pods are found; sources add up."""

    static: list[StaticTarget] = Field(default_factory=list)
    file_sd: FileSD | None = None
    kubernetes: KubernetesSD | None = None


class MetricOverrides(_Section):
    """Series to read instead of the protocol's, in the EPP's flag syntax ``name{label=value}``."""

    waiting: str | None = Field(default=None, description="Like the EPP's --total-queued-requests-metric.")
    running: str | None = Field(default=None, description="Like the EPP's --total-running-requests-metric.")
    kv_cache: str | None = Field(default=None, description="Like the EPP's --kv-cache-usage-percentage-metric.")
    lora: str | None = Field(default=None, description="Like the EPP's --lora-info-metric.")

    @model_validator(mode="after")
    def _parse(self) -> MetricOverrides:
        for name in ("waiting", "running", "kv_cache", "lora"):
            value = getattr(self, name)
            if value is not None:
                MetricSpec.parse(value)  # raises ValueError with the reason
        return self


class TLSConfig(_Section):
    """TLS of the connections to one kind of target, named as in Prometheus's ``tls_config``.

    The files are loaded when the first request needs them, and again after a failure, so a Secret
    mounted late is picked up; a certificate changed later needs a restart.
    """

    ca_file: str | None = Field(
        default=None, description="PEM bundle the server's certificate is verified against; the system's if unset."
    )
    cert_file: str | None = Field(
        default=None,
        description="Client certificate (PEM) for mutual TLS (an EPP started with --metrics-client-ca-file asks one).",
    )
    key_file: str | None = Field(default=None, description="Private key (PEM) of cert_file.")
    server_name: str | None = Field(
        default=None, description="Name the server's certificate must carry, also sent as SNI; the URL's host if unset."
    )
    insecure_skip_verify: bool = Field(
        default=False, description="Accept any server certificate (a self-signed one); the connection stays encrypted."
    )

    @model_validator(mode="after")
    def _pair(self) -> TLSConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("set both cert_file and key_file, or neither")
        return self


class HTTPClientConfig(_Section):
    """Credentials and TLS for scraping one kind of target, as Prometheus's ``authorization`` and ``tls_config``.

    Credentials come only from files, never from the settings themselves, and are never logged.
    """

    credentials_file: str | None = Field(
        default=None,
        description="File holding a bearer token, sent as Authorization: Bearer. Read at every request: "
        "ServiceAccount tokens rotate.",
    )
    tls_config: TLSConfig = Field(default_factory=TLSConfig)


_LABEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"  # a name shown as a label value: no URL, no userinfo

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""The pod's ServiceAccount token, which the EPP's metrics authentication accepts (docs/discovery.md)."""


class PredictorServers(_Section):
    """The latency predictor of a pool: one training server, one or more prediction servers."""

    name: str | None = Field(
        default=None,
        pattern=_LABEL_NAME,
        description="Names the servers in the server label and the logs instead of their URLs: <name> for the "
        "training server, <name>-<i> for the i-th prediction URL (from 0). Unset: the URLs, userinfo masked.",
    )
    training_url: str | None = Field(default=None, description="Base URL of the training server (port 8000).")
    prediction_urls: list[str] = Field(
        default_factory=list, description="Base URLs of the prediction servers (ports 8001...), used in turn."
    )
    auth: HTTPClientConfig | None = Field(
        default=None, description="Credentials and TLS for the training and prediction servers; none if unset."
    )


class EPPMetrics(_Section):
    """The EPP's own /metrics, re-published as sloscope_epp_* with their label defects put right."""

    metrics_url: str = Field(description="Full URL, like http://epp:9090/metrics.")
    name: str | None = Field(
        default=None,
        pattern=_LABEL_NAME,
        description="Names the EPP in the logs instead of its URL. Unset: the URL, userinfo masked.",
    )
    auth: HTTPClientConfig | None = Field(
        default=None,
        description="Credentials and TLS for the EPP's /metrics. Unset: the pod's ServiceAccount token when sloscope "
        "runs in Kubernetes (the EPP authenticates /metrics by default), else none. {} sends no credentials.",
    )


class Pool(_Section):
    """One InferencePool: its model servers, their protocol, its latency predictor and its EPP."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="The pool label.")
    protocol: Literal["vllm", "sglang", "triton-tensorrt-llm", "triton", "trtllm-serve", "tgi", "triton-trtllm"] = (
        Field(
            default="vllm",
            description="The pods' protocol, by the EPP's engine names (triton-trtllm: the old name of "
            "triton-tensorrt-llm); a pod's engine label naming another one wins.",
        )
    )
    engine_label: str = Field(
        default="llm-d.ai/engine-type",
        min_length=1,
        description="The pod label naming a pod's engine (the EPP's engineLabelKey); the legacy "
        "inference.networking.k8s.io/engine-type is read when a pod lacks it.",
    )
    metrics: MetricOverrides = Field(default_factory=MetricOverrides)
    metrics_path: str | None = Field(
        default=None, description="Path of the pods' metrics page; the protocol's if unset."
    )
    scheme: Literal["http", "https"] = "http"
    auth: HTTPClientConfig | None = Field(
        default=None, description="Credentials and TLS for the model-server pods' metrics pages; none if unset."
    )
    model: str | None = Field(
        default=None,
        description="Count only this model_name's series (pods serving several models); also the model label of "
        "the pool's requests whose spans name no model (vLLM 0.33 sets no gen_ai.response.model).",
    )
    scrape_interval_seconds: float | None = Field(default=None, gt=0, description="Overrides scrape.interval_seconds.")
    scrape_timeout_seconds: float | None = Field(default=None, gt=0, description="Overrides scrape.timeout_seconds.")
    targets: Targets = Field(default_factory=Targets)
    predictor: PredictorServers | None = None
    epp: EPPMetrics | None = None
    gateways: list[str] = Field(
        default_factory=list,
        description="Regular expressions (anchored, as Prometheus' relabelling) of the gateway identities "
        "(attributes.gateway) whose requests belong to this pool: where a request that failed before reaching any "
        "pod is counted. Unset: learned from the pool's answered requests (docs/sending-traces.md).",
    )
    streaming_mode: bool | None = Field(
        default=None,
        description="The streamingMode of the pool's EPP latency plugin (predicted-latency-producer), used until "
        "the EPP's page shows it: off, its predicted TTFT is end-to-end latency and it predicts no TPOT. Unset: "
        "false, the upstream default (docs/predictions.md).",
    )

    @field_validator("protocol")
    @classmethod
    def _canonical_protocol(cls, value: str) -> str:
        return ALIASES.get(value, value)

    @field_validator("gateways")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"gateways: {pattern!r} is not a regular expression: {error}") from None
        return patterns


class Scrape(_Section):
    """How model servers, the EPP and the predictor servers are polled."""

    interval_seconds: float = Field(default=5.0, gt=0, description="Time between two scrapes of a target.")
    timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description="Total deadline of a scrape or health poll, connect to last byte; longer counts as a timeout.",
    )
    max_concurrency: int = Field(default=64, ge=1, description="Scrapes in flight at once.")
    history_samples: int = Field(
        default=256, ge=2, description="Samples kept per pod for as-of lookups (21 minutes at 5 s)."
    )
    stale_after_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A pod sample older than this (at the time it is looked up for) is not used.",
    )
    vanished_grace_seconds: float = Field(
        default=60.0,
        ge=0,
        description="How long the series and history of a pod that left discovery are kept before removal.",
    )


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


class Store(_Section):
    """The record store: one Parquet row per evaluated request, for SLO reviews (docs/record-store.md)."""

    enabled: bool = Field(default=False, description="Write every evaluated request to the store.")
    directory: Path = Field(
        default=Path("/var/lib/sloscope/records"),
        description="Root of the store (relative to the settings file); one directory per partition hour.",
    )
    flush_interval_seconds: float = Field(
        default=60.0, gt=0, description="Longest time a record waits in memory before it is written."
    )
    max_rows_per_file: int = Field(default=100_000, ge=1, description="A file is written once this many wait.")
    max_buffered_records: int = Field(
        default=500_000,
        ge=1,
        description="Records held in memory waiting to be written; beyond it new ones are dropped and counted.",
    )
    retention_hours: float = Field(
        default=28 * 24.0,
        gt=0,
        description="Partitions whose hour ended longer ago than this are deleted.",
    )
    max_bytes: int = Field(
        default=10 * 1024**3, gt=0, description="Total size kept; the oldest files go first beyond it."
    )
    replica_id: str | None = Field(
        default=None,
        pattern=REPLICA_ID_PATTERN,
        description="Names this replica's folder for files being written and appears in its file names, so "
        "replicas sharing the directory never touch each other's files in flight; the pod name (POD_NAME, "
        "else HOSTNAME) when unset.",
    )
    retry_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="After a failed write (disk full, read-only), how soon the held records are written again.",
    )
    failure_grace_seconds: float = Field(
        default=0.0,
        ge=0,
        description="How long writes may keep failing before /readyz reports the store not ready.",
    )


class Export(_Section):
    """OTLP export of one span per evaluated request, carrying its verdict (docs/otlp-export.md)."""

    enabled: bool = Field(default=False, description="Send an evaluation span for evaluated requests.")
    endpoint: str = Field(
        default="http://localhost:4317",
        description="OTLP endpoint: host:port or URL for gRPC; for http/protobuf the traces URL "
        "(/v1/traces is appended when the URL has no path).",
    )
    protocol: Literal["grpc", "http/protobuf"] = Field(default="grpc", description="OTLP transport.")
    insecure: bool = Field(default=True, description="gRPC without TLS (an https:// endpoint always uses TLS).")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra request headers, e.g. tenant ids.")
    compression: Literal["none", "gzip"] = Field(default="gzip", description="Compression of export requests.")
    timeout_seconds: float = Field(
        default=10.0, gt=0, description="Deadline of one export, retries with backoff included."
    )
    only_violations: bool = Field(default=False, description="Export only requests that missed an SLO.")
    relation: Literal["child", "link"] = Field(
        default="child",
        description="child: the span joins the request's trace under the model-server span (and links it); "
        "link: it starts a trace of its own, linked to the request's.",
    )
    max_queue_size: int = Field(
        default=20_000, ge=1, description="Spans waiting for export; beyond it new ones are dropped and counted."
    )
    max_batch_size: int = Field(default=512, ge=1, description="Spans per export request.")
    schedule_delay_seconds: float = Field(default=2.0, gt=0, description="Longest wait before a batch is sent.")
    failure_grace_seconds: float = Field(
        default=60.0,
        ge=0,
        description="How long exports may keep failing (every export since the first failure) before /readyz "
        "reports the export not ready.",
    )


class Settings(BaseSettings):
    """Everything one sloscope deployment needs besides the SLO spec."""

    model_config = SettingsConfigDict(env_prefix="SLOSCOPE_", env_nested_delimiter="__", extra="forbid")

    slo_spec: Path | None = Field(
        default=None, description="Path of the SLO spec file (relative to this file); the built-in spec if unset."
    )
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$")
    shutdown_grace_seconds: float = Field(
        default=10.0, gt=0, description="Time SIGTERM allows for stopping the receivers and draining the pipeline."
    )
    final_scrape_wait_seconds: float = Field(
        default=15.0,
        ge=0,
        description="After draining, how long /metrics stays up waiting for one more scrape, so that what the "
        "drain flushed reaches Prometheus. Keep shutdown_grace_seconds plus this below the pod's "
        "terminationGracePeriodSeconds (30 s by default).",
    )
    listeners: Listeners = Field(default_factory=Listeners)
    limits: Limits = Field(default_factory=Limits)
    join: Join = Field(default_factory=Join)
    attributes: Attributes = Field(default_factory=Attributes)
    self_tracing: SelfTracing = Field(default_factory=SelfTracing)
    pools: list[Pool] = Field(default_factory=list, description="Pools whose pods and predictors are watched.")
    scrape: Scrape = Field(default_factory=Scrape)
    predictions: Predictions = Field(default_factory=Predictions)
    headroom: Headroom = Field(default_factory=Headroom)
    store: Store = Field(default_factory=Store)
    export: Export = Field(default_factory=Export)

    @model_validator(mode="after")
    def _check_join(self) -> Settings:
        if self.join.window_seconds > self.join.trace_ttl_seconds:
            raise ValueError("join.window_seconds must not exceed join.trace_ttl_seconds")
        names = [pool.name for pool in self.pools]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"pool names must be unique; repeated: {', '.join(repeated)}")
        return self

    @model_validator(mode="after")
    def _choose_fronts(self) -> Settings:
        """The native fronts serve by default with the native engine, whose decoder they use."""
        listeners, native = self.listeners, self.join.engine == "native"
        if listeners.grpc.server is None:
            listeners.grpc.server = "native" if native else "grpcio"
        if listeners.otlp_http_server is None:
            listeners.otlp_http_server = "native" if native else "uvicorn"
        chosen = {"grpc.server": listeners.grpc.server, "otlp_http_server": listeners.otlp_http_server}
        for setting, server in chosen.items():
            if server == "native" and self.join.engine != "native":
                raise ValueError(f"listeners.{setting}: native decodes natively: it needs join.engine: native")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file (passed as init values), the way operators expect.
        return (env_settings, init_settings)


def unknown_environment() -> list[str]:
    """SLOSCOPE_* variables that name no setting: pydantic-settings would ignore them silently.

    Matching is case-insensitive, as pydantic-settings reads the environment.
    """
    known = {name.upper() for name in Settings.model_fields}
    out = []
    for name in sorted(os.environ):
        upper = name.upper()
        if upper.startswith("SLOSCOPE_") and upper.removeprefix("SLOSCOPE_").split("__")[0] not in known:
            out.append(name)
    return out


def load_settings(path: Path | None, data: dict[str, Any] | None = None) -> Settings:
    """Settings from a YAML file (or a parsed mapping) plus the environment.

    A relative ``slo_spec`` is resolved against the settings file's folder.
    """
    values = dict(data or {})
    settings = Settings(**values)
    if path is not None and settings.slo_spec is not None and not settings.slo_spec.is_absolute():
        settings = settings.model_copy(update={"slo_spec": (path.parent / settings.slo_spec).resolve()})
    if path is not None and not settings.store.directory.is_absolute():
        store = settings.store.model_copy(update={"directory": (path.parent / settings.store.directory).resolve()})
        settings = settings.model_copy(update={"store": store})
    return settings
