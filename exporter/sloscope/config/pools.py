"""Settings of the pools: their pods (targets and discovery), their EPP, their predictor servers, scraping."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sloscope.config._section import _Section
from sloscope.engines import ALIASES, MetricSpec


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
    trace_sampling_probability: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="The sampler ratio of the pool's EPP, where its traces record no probability: overrides "
        "trace_sampling.assumed_probability for the pool.",
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
