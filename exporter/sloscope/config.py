"""Runtime settings of one deployment: listeners, limits, attribute mapping, join behaviour.

Loaded from an optional YAML file and overridden by environment variables with the prefix
``SLOSCOPE_`` and ``__`` between nested keys (``SLOSCOPE_LISTENERS__METRICS_PORT=9000``).
Unknown keys are errors: a typo must not silently fall back to a default. The SLO spec is a
separate, team-owned file (:mod:`sloscope.slo.spec`); ``slo_spec`` only says where it is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

_CAPPED_LABELS = {"model": 50, "pool": 50, "slo_class": 20, "pod": 2000}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Listeners(_Section):
    """Where sloscope listens. Port 0 picks a free port (tests); the bound port is logged."""

    host: str = Field(default="0.0.0.0", description="Address all listeners bind.")
    otlp_grpc_port: int = Field(default=4317, ge=0, le=65535, description="OTLP/gRPC TraceService.")
    otlp_http_port: int = Field(default=4318, ge=0, le=65535, description="OTLP/HTTP POST /v1/traces.")
    metrics_port: int = Field(default=9464, ge=0, le=65535, description="/metrics, /healthz, /readyz.")


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
    max_label_values: dict[str, int] = Field(
        default_factory=lambda: dict(_CAPPED_LABELS),
        description="Distinct values admitted per label, first come first served; later values fold into "
        "__other__. Labels left out keep their default cap.",
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
        default=r"^(?:chatcmpl-|cmpl-|embd-)?(?P<id>.+)$",
        description="Regular expression whose group 'id' extracts the joinable request id from a span's value "
        "(vLLM prefixes the x-request-id it was given).",
    )

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
    requested_model: list[str] = Field(default_factory=lambda: ["gen_ai.request.model", "model"])
    target_model: list[str] = Field(default_factory=lambda: ["target_model", "gen_ai.response.model"])
    pool: list[str] = Field(
        default_factory=lambda: ["inference_pool", "gateway.inference_pool", "resource.k8s.inferencepool.name"]
    )
    pod: list[str] = Field(
        default_factory=lambda: ["resource.k8s.pod.name", "resource.service.instance.id", "resource.host.name"]
    )
    endpoint: list[str] = Field(
        default_factory=lambda: [
            "http.request.header.x-gateway-destination-endpoint",
            "x-gateway-destination-endpoint",
        ]
    )
    slo_ttft_ms: list[str] = Field(
        default_factory=lambda: ["http.request.header.x-slo-ttft-ms", "x-slo-ttft-ms", "x-llm-d-slo-ttft-ms"]
    )
    slo_tpot_ms: list[str] = Field(
        default_factory=lambda: ["http.request.header.x-slo-tpot-ms", "x-slo-tpot-ms", "x-llm-d-slo-tpot-ms"]
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
        default_factory=lambda: ["llm_d.pd_proxy.true_ttft_ms"],
        description="The same in milliseconds (llm-d's P/D sidecar measures the TTFT a client sees, including "
        "the KV-cache hand-over that neither vLLM instance reports).",
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
    default_pool: str = Field(default="unknown", description="Pool label of requests whose spans name none.")


class SelfTracing(_Section):
    """sloscope traces its own HTTP API with opentelemetry-instrumentation-fastapi."""

    enabled: bool = Field(default=True, description="Trace sloscope's own HTTP endpoints.")
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/gRPC endpoint for sloscope's own spans (host:port). None keeps them in-process "
        "only; never point it at sloscope itself.",
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

    @model_validator(mode="after")
    def _check_join(self) -> Settings:
        if self.join.window_seconds > self.join.trace_ttl_seconds:
            raise ValueError("join.window_seconds must not exceed join.trace_ttl_seconds")
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
    return settings
