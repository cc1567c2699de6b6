"""A real Jaeger v2 process (an OpenTelemetry Collector distribution) as the OTLP receiver of export tests.

It runs the pinned binary of ``make tools`` with a config written here: the ``otlp`` receiver on free
loopback ports (gRPC and HTTP), the in-memory ``jaeger_storage`` backend, and the ``jaeger_query``
extension whose HTTP API (``/api/v3/traces/<id>``) returns stored traces as OTLP/JSON, so a test reads
back exactly the spans, ids, links and attributes that crossed the wire.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sloscope.demo.ports import free_ports
from tests.support import otelcol

CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def _rfc3339(ns: int) -> str:
    """A nanosecond timestamp as RFC 3339 with microseconds (what the query API parses)."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def any_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as a Python value (int64 arrives as a string in OTLP/JSON)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: any_value(kv["value"]) for kv in value["kvlistValue"].get("values", [])}
    return None


def attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    """OTLP/JSON key-values as a dict, without the ``@jaeger@`` annotations the query service adds."""
    return {kv["key"]: any_value(kv["value"]) for kv in items or [] if not kv["key"].startswith("@jaeger@")}


@dataclass
class StoredSpan:
    """One span as Jaeger stored it, with its resource and scope."""

    raw: dict[str, Any]
    resource: dict[str, Any]
    scope: str

    @property
    def name(self) -> str:
        return str(self.raw["name"])

    @property
    def trace_id(self) -> str:
        return str(self.raw["traceId"])

    @property
    def span_id(self) -> str:
        return str(self.raw["spanId"])

    @property
    def parent_span_id(self) -> str:
        return str(self.raw.get("parentSpanId", ""))

    @property
    def kind(self) -> int:
        return int(self.raw.get("kind", 0))

    @property
    def start_ns(self) -> int:
        return int(self.raw["startTimeUnixNano"])

    @property
    def end_ns(self) -> int:
        return int(self.raw["endTimeUnixNano"])

    @property
    def attributes(self) -> dict[str, Any]:
        return attributes(self.raw.get("attributes"))

    @property
    def links(self) -> list[tuple[str, str]]:
        return [(link["traceId"], link["spanId"]) for link in self.raw.get("links", [])]

    @property
    def status(self) -> tuple[int, str]:
        status = self.raw.get("status", {})
        return int(status.get("code", 0)), str(status.get("message", ""))


@dataclass
class Jaeger(otelcol.Otelcol):
    query_port: int

    def trace(self, trace_id: str) -> list[StoredSpan]:
        """Every stored span of the trace as received (``raw_traces``: no clock-skew or other adjustments)."""
        return self._spans(f"/api/v3/traces/{trace_id}?raw_traces=true")

    def find(self, service: str, operation: str, start_min_ns: int, start_max_ns: int) -> list[StoredSpan]:
        """Spans of every trace with a ``service`` span named ``operation`` starting in the window."""
        query = urllib.parse.urlencode(
            {
                "query.service_name": service,
                "query.operation_name": operation,
                "query.start_time_min": _rfc3339(start_min_ns),
                "query.start_time_max": _rfc3339(start_max_ns),
                "query.num_traces": 1000,
                "query.raw_traces": "true",
            }
        )
        return self._spans(f"/api/v3/traces?{query}")

    def _spans(self, path: str) -> list[StoredSpan]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.query_port}{path}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return []
            raise
        spans = []
        for resource_spans in body.get("result", {}).get("resourceSpans", []):
            resource = attributes(resource_spans.get("resource", {}).get("attributes"))
            for scope_spans in resource_spans.get("scopeSpans", []):
                scope = scope_spans.get("scope", {}).get("name", "")
                spans.extend(StoredSpan(span, resource, scope) for span in scope_spans.get("spans", []))
        return spans

    def wait_for_spans(self, trace_id: str, count: int, timeout: float = 30.0) -> list[StoredSpan]:
        """The trace once it holds at least ``count`` spans (Jaeger stores asynchronously)."""
        deadline = time.monotonic() + timeout
        spans: list[StoredSpan] = []
        while time.monotonic() < deadline:
            spans = self.trace(trace_id)
            if len(spans) >= count:
                return spans
            time.sleep(0.1)
        raise AssertionError(f"Jaeger holds {len(spans)} spans of trace {trace_id}, wanted {count}")


def start_jaeger(binary: Path, workdir: Path) -> Jaeger:
    """Starts Jaeger on free loopback ports and waits until its pipeline and query API are up."""
    otlp_grpc, otlp_http, query_http, query_grpc = free_ports(4)
    config = workdir / "jaeger.yaml"
    config.write_text(
        CONFIG.format(otlp_grpc=otlp_grpc, otlp_http=otlp_http, query_http=query_http, query_grpc=query_grpc)
    )
    process, log = otelcol.start(binary, config, "Jaeger")
    return Jaeger(process, otlp_grpc, otlp_http, config, log, query_http)
