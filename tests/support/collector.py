"""A real OpenTelemetry Collector process: the ``otelcol-sloscope`` build of ``make tools`` (the Collector builder's
distribution of tools/collector/builder-config.yaml), started with a config written here.

:func:`loadbalancing_config` is the scale-out tier in front of several ``sloscope serve`` replicas: the ``otlp``
receiver, a short ``batch`` and the ``loadbalancing`` exporter with ``routing_key: traceID`` and a ``static``
resolver naming each replica's OTLP/gRPC port (the chart's ConfigMap and docs/examples use the ``dns`` resolver on
the headless Service instead; the exporter is the same).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sloscope.demo.ports import free_ports
from tests.support import otelcol


def loadbalancing_config(otlp_grpc: int, otlp_http: int, replicas: list[str]) -> dict[str, Any]:
    """otlp -> batch -> loadbalancing (traceID) to ``replicas`` (host:port of each sloscope's OTLP/gRPC)."""
    return {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"127.0.0.1:{otlp_grpc}"},
                    "http": {"endpoint": f"127.0.0.1:{otlp_http}"},
                }
            }
        },
        "processors": {"batch": {"send_batch_size": 1024, "send_batch_max_size": 2048, "timeout": "200ms"}},
        "exporters": {
            "loadbalancing": {
                "routing_key": "traceID",
                "protocol": {
                    "otlp": {
                        "tls": {"insecure": True},
                        "timeout": "5s",
                        "retry_on_failure": {"enabled": True, "initial_interval": "1s", "max_elapsed_time": "60s"},
                    }
                },
                "resolver": {"static": {"hostnames": replicas}},
            }
        },
        "service": {
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["loadbalancing"]}},
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
        },
    }


class Collector(otelcol.Otelcol):
    """The loadbalancing Collector of :func:`start_collector`."""


def start_collector(binary: Path, workdir: Path, replicas: list[str]) -> Collector:
    """The loadbalancing Collector on free loopback ports, once its pipelines are up."""
    otlp_grpc, otlp_http = free_ports(2)
    config = workdir / "collector.yaml"
    config.write_text(yaml.safe_dump(loadbalancing_config(otlp_grpc, otlp_http, replicas), sort_keys=False))
    process, log = otelcol.start(binary, config, "the Collector")
    return Collector(process, otlp_grpc, otlp_http, config, log)
