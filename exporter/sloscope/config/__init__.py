"""Runtime settings of one deployment: listeners, limits, attribute mapping, join behaviour.

Loaded from an optional YAML file and overridden by environment variables with the prefix
``SLOSCOPE_`` and ``__`` between nested keys (``SLOSCOPE_LISTENERS__METRICS_PORT=9000``).
Unknown keys are errors: a typo must not silently fall back to a default. The SLO spec is a
separate, team-owned file (:mod:`sloscope.slo.spec`); ``slo_spec`` only says where it is.

Each component's section is a model of its own module (``listeners``, ``limits``, ``join``, ``pools``,
``predictions``, ``outputs``), as the Collector gives each component its config; :class:`Settings` puts them
together and this module re-exports them, so ``from sloscope.config import Pool`` is where callers read them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sloscope.config.join import GATEWAY_MEMORY_SECONDS, Attributes, Join
from sloscope.config.limits import Limits
from sloscope.config.listeners import (
    LISTENER_NAMES,
    ClientAuthType,
    GrpcListener,
    ListenerAuth,
    ListenerName,
    Listeners,
    ListenerTLS,
)
from sloscope.config.outputs import Export, SelfTracing, Store
from sloscope.config.pools import (
    SERVICE_ACCOUNT_TOKEN,
    EPPMetrics,
    FileSD,
    HTTPClientConfig,
    KubernetesSD,
    MetricOverrides,
    Pool,
    PredictorServers,
    Scrape,
    StaticTarget,
    Targets,
    TLSConfig,
)
from sloscope.config.predictions import Headroom, Predictions
from sloscope.config.sampling import TraceSampling

__all__ = [
    "GATEWAY_MEMORY_SECONDS",
    "LISTENER_NAMES",
    "SERVICE_ACCOUNT_TOKEN",
    "Attributes",
    "ClientAuthType",
    "EPPMetrics",
    "Export",
    "FileSD",
    "GrpcListener",
    "HTTPClientConfig",
    "Headroom",
    "Join",
    "KubernetesSD",
    "Limits",
    "ListenerAuth",
    "ListenerName",
    "ListenerTLS",
    "Listeners",
    "MetricOverrides",
    "Pool",
    "Predictions",
    "PredictorServers",
    "Scrape",
    "SelfTracing",
    "Settings",
    "StaticTarget",
    "Store",
    "TLSConfig",
    "Targets",
    "TraceSampling",
    "load_settings",
    "unknown_environment",
]


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
    trace_sampling: TraceSampling = Field(default_factory=TraceSampling)

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

    def assumed_sampling_probability(self, pool: str) -> float:
        """The probability a trace of ``pool`` that records none was kept with: the pool's, else the default."""
        for configured in self.pools:
            if configured.name == pool and configured.trace_sampling_probability is not None:
                return configured.trace_sampling_probability
        return self.trace_sampling.assumed_probability

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
