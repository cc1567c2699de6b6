"""Settings of what sloscope writes besides its series: the record store, the OTLP export, its own spans."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from sloscope.config._section import _Section
from sloscope.store.replica import REPLICA_ID_PATTERN


class SelfTracing(_Section):
    """sloscope traces its own HTTP API with opentelemetry-instrumentation-fastapi."""

    enabled: bool = Field(default=True, description="Trace sloscope's own HTTP endpoints.")
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/gRPC endpoint for sloscope's own spans (host:port). None keeps them in-process "
        "only; never point it at sloscope itself.",
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
