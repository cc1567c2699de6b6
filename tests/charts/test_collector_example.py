"""docs/examples/otel-collector-loadbalancing.yaml: a Collector config that routes each trace to one replica of
the chart's sloscope, resolving the headless Service the chart renders for a scale-out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.charts.conftest import NAMESPACE, ROOT, Rendered

EXAMPLE = ROOT / "docs" / "examples" / "otel-collector-loadbalancing.yaml"


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return config


def test_traces_go_through_the_loadbalancing_exporter_by_trace_id(collector: dict[str, Any]) -> None:
    (pipeline,) = collector["service"]["pipelines"].values()
    assert list(collector["service"]["pipelines"]) == ["traces"]
    assert pipeline["exporters"] == ["loadbalancing"]
    loadbalancing = collector["exporters"]["loadbalancing"]
    assert loadbalancing["routing_key"] == "traceID"
    assert set(loadbalancing["protocol"]) == {"otlp"}, "sloscope takes OTLP/gRPC from the exporter template"
    assert "endpoint" not in loadbalancing["protocol"]["otlp"], "the resolver fills in each replica's endpoint"
    assert loadbalancing["protocol"]["otlp"]["tls"] == {"insecure": True}


def test_every_component_a_pipeline_names_is_configured(collector: dict[str, Any]) -> None:
    for pipeline in collector["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for name in pipeline.get(kind, []):
                assert name in collector[kind], f"{kind} {name} is used but not configured"
    for name in collector["service"].get("extensions", []):
        assert name in collector["extensions"]
    assert set(collector["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}


def test_the_resolver_finds_the_replicas_of_the_chart(
    collector: dict[str, Any], render: Callable[..., Rendered]
) -> None:
    """The documented release (sloscope in monitoring) with the scale-out values has exactly that Service."""
    rendered = render("scale-out-values.yaml")
    headless = rendered.one("Service", "sloscope-headless")
    assert headless["spec"]["clusterIP"] == "None"
    grpc = next(p["port"] for p in headless["spec"]["ports"] if p["name"] == "otlp-grpc")
    dns = collector["exporters"]["loadbalancing"]["resolver"]["dns"]
    assert dns["hostname"] == f"sloscope-headless.{NAMESPACE}.svc.cluster.local"
    assert dns["port"] == grpc


def test_batches_stay_small_against_the_join_window(collector: dict[str, Any]) -> None:
    """The join window counts from a span's arrival: a batch held for seconds would split requests."""
    batch = collector["processors"]["batch"]
    assert batch["timeout"].endswith("ms")
    assert batch["send_batch_max_size"] >= batch["send_batch_size"]
