"""docs/examples/otel-collector-loadbalancing.yaml: a Collector config that routes each trace to one replica of
the chart's sloscope, resolving the headless Service the chart renders for a scale-out."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts.conftest import NAMESPACE, ROOT, Rendered, template

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
    assert dns["port"] == str(grpc)  # loadbalancingexporter@v0.140.1 config.go:82: Port string


def test_batches_stay_small_against_the_join_window(collector: dict[str, Any]) -> None:
    """The join window counts from a span's arrival: a batch held for seconds would split requests."""
    batch = collector["processors"]["batch"]
    assert batch["timeout"].endswith("ms")
    assert batch["send_batch_max_size"] >= batch["send_batch_size"]


def _chart_collector(rendered: Rendered) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(rendered.one("ConfigMap", "sloscope-collector")["data"]["relay"])
    return config


def test_the_chart_renders_the_documented_collector_configuration(
    collector: dict[str, Any], render: Callable[..., Rendered]
) -> None:
    """collector.enabled: the example, for the release's own headless Service, in a ConfigMap under ``relay``."""
    assert _chart_collector(render("scale-out-values.yaml")) == collector
    assert "sloscope-collector" not in {m["metadata"]["name"] for m in render("defaults").all("ConfigMap")}


def test_the_collector_resolves_the_headless_service_it_renders(render: Callable[..., Rendered]) -> None:
    """Its own name, namespace, cluster domain and gRPC port; and the headless Service without asking for it."""
    rendered = render(
        "defaults",
        "--set", "collector.enabled=true",
        "--set", "fullnameOverride=slo",
        "--set", "collector.clusterDomain=corp.internal",
        "--set", "ports.otlpGrpc=14317",
    )  # fmt: skip
    config = yaml.safe_load(rendered.one("ConfigMap", "slo-collector")["data"]["relay"])
    assert config["exporters"]["loadbalancing"]["resolver"]["dns"] == {
        "hostname": f"slo-headless.{NAMESPACE}.svc.corp.internal",
        "port": "14317",
        "interval": "5s",
        "timeout": "1s",
    }
    headless = rendered.one("Service", "slo-headless")
    assert {p["port"] for p in headless["spec"]["ports"] if p["name"] == "otlp-grpc"} == {14317}


@pytest.mark.parametrize("secured", ["tls", "auth"])
def test_a_plaintext_collector_for_secured_listeners_is_refused(helm: Path, secured: str) -> None:
    done = template(
        helm, "--set", "collector.enabled=true", "--set", f"{secured}.enabled=true", "--set", f"{secured}.secretName=s"
    )
    assert done.returncode != 0
    assert "collector.enabled renders a Collector configuration that exports plaintext OTLP/gRPC" in done.stderr


def test_the_collector_of_make_tools_validates_the_chart_configuration(
    render: Callable[..., Rendered], otelcol: Path, tmp_path: Path
) -> None:
    """The rendered configuration loads in a real Collector (the builder's distribution has every component it
    names): ``otelcol validate`` resolves and validates every component's settings without starting it."""
    path = tmp_path / "relay.yaml"
    path.write_text(render("scale-out-values.yaml").one("ConfigMap", "sloscope-collector")["data"]["relay"])
    done = subprocess.run(
        [str(otelcol), "validate", f"--config=file:{path}"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
