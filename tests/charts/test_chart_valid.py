"""The chart lints, renders and validates: every manifest against the Kubernetes or CRD schemas, and the rendered
settings and SLO spec against sloscope itself (``sloscope check-config``), for the defaults and every ci/ file."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

import sloscope
from sloscope.config import Settings, load_settings
from tests.charts.conftest import CASES, CHART, Rendered, run_helm, template, values_args
from tests.support.crd import crd_schema

KUBERNETES_VERSIONS = ["1.29", "1.37"]
"""The oldest version the chart declares and the newest whose schemas kubernetes-validate ships."""

SLOSCOPE = Path(sys.executable).with_name("sloscope")


def test_the_chart_deploys_this_version_of_sloscope() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == sloscope.__version__


@pytest.mark.parametrize("case", CASES)
def test_helm_lint_strict(helm: Path, case: str) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), "--kube-version", "1.29.0", *values_args(case))
    assert done.returncode == 0, done.stdout + done.stderr


# ---- schemas -------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def crd_schemas(shared: Path) -> dict[str, dict[str, Any]]:
    """Strict schemas of the prometheus-operator kinds the chart renders.

    ../shared has the ServiceMonitor and PrometheusRule CRDs but no PodMonitor CRD. A PodMonitor is checked
    against a schema made from the ServiceMonitor's: the same selector, namespaceSelector and jobLabel (a string in
    both CRDs, the name of a label of the Service or of the pod), and each
    podMetricsEndpoints entry against an endpoints entry (the fields the chart uses, port, path, interval,
    scrapeTimeout, honorLabels, relabelings and metricRelabelings, have the same definitions in both CRDs).
    """
    service_monitor = crd_schema(shared / "schemas" / "crd-servicemonitors.yaml", strict=True)
    spec = service_monitor["properties"]["spec"]
    pod_monitor = {
        **service_monitor,
        "properties": {
            **service_monitor["properties"],
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector"],
                "properties": {
                    "selector": spec["properties"]["selector"],
                    "namespaceSelector": spec["properties"]["namespaceSelector"],
                    "jobLabel": spec["properties"]["jobLabel"],
                    "podMetricsEndpoints": spec["properties"]["endpoints"],
                },
            },
        },
    }
    return {
        "ServiceMonitor": service_monitor,
        "PodMonitor": pod_monitor,
        "PrometheusRule": crd_schema(shared / "schemas" / "crd-prometheusrules.yaml", strict=True),
    }


@pytest.mark.parametrize("case", CASES)
def test_every_manifest_validates(
    render: Callable[..., Rendered], crd_schemas: dict[str, dict[str, Any]], case: str
) -> None:
    rendered = render(case)
    assert rendered.manifests
    for manifest in rendered.manifests:
        where = f"{case}: {manifest['kind']} {manifest['metadata']['name']}"
        if manifest["apiVersion"].startswith("monitoring.coreos.com/"):
            assert manifest["apiVersion"] == "monitoring.coreos.com/v1", where
            try:
                jsonschema.validate(manifest, crd_schemas[manifest["kind"]])
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{where}: {exc.message} at {list(exc.absolute_path)}")
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where} (Kubernetes {version}): {exc.message} at {list(exc.absolute_path)}")


def test_strict_validation_catches_a_misspelt_field(render: Callable[..., Rendered]) -> None:
    deployment = render("defaults").one("Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_strict_crd_validation_catches_a_misspelt_field(
    render: Callable[..., Rendered], crd_schemas: dict[str, dict[str, Any]]
) -> None:
    monitor = render("servicemonitor-values.yaml").one("ServiceMonitor")
    endpoint = {**monitor["spec"]["endpoints"][0], "honourLabels": True}
    broken = {**monitor, "spec": {**monitor["spec"], "endpoints": [endpoint]}}
    with pytest.raises(jsonschema.ValidationError, match="honourLabels"):
        jsonschema.validate(broken, crd_schemas["ServiceMonitor"])


# ---- the settings and spec sloscope will read --------------------------------------------------------


def _config_dir(rendered: Rendered, tmp_path: Path) -> Path:
    """The two ConfigMaps written where the projected volume puts them: side by side."""
    deployment = rendered.one("Deployment")
    (config,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    for source in config["projected"]["sources"]:
        configmap = rendered.one("ConfigMap", source["configMap"]["name"])
        for name, text in configmap["data"].items():
            (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("case", CASES)
def test_the_rendered_settings_and_spec_pass_check_config(
    render: Callable[..., Rendered], tmp_path: Path, case: str
) -> None:
    rendered = render(case)
    folder = _config_dir(rendered, tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["settings.yaml", "slo.yaml"]
    args = rendered.container["args"]
    assert args == ["--config", "/etc/sloscope/settings.yaml"]
    done = subprocess.run(
        [str(SLOSCOPE), "check-config", str(folder / "settings.yaml"), str(folder / "slo.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _settings(rendered: Rendered, tmp_path: Path) -> Settings:
    folder = _config_dir(rendered, tmp_path)
    path = folder / "settings.yaml"
    return load_settings(path, yaml.safe_load(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("case", CASES)
def test_the_settings_listen_where_the_pod_and_services_expose(
    render: Callable[..., Rendered], tmp_path: Path, case: str
) -> None:
    rendered = render(case)
    settings = _settings(rendered, tmp_path)
    ports = {p["name"]: p["containerPort"] for p in rendered.container["ports"]}
    assert ports == {
        "otlp-grpc": settings.listeners.otlp_grpc_port,
        "otlp-http": settings.listeners.otlp_http_port,
        "metrics": settings.listeners.metrics_port,
    }
    assert settings.slo_spec == (tmp_path / "slo.yaml").resolve()


@pytest.mark.parametrize("case", CASES)
def test_the_grace_period_covers_the_drain_and_the_final_scrape(
    render: Callable[..., Rendered], tmp_path: Path, case: str
) -> None:
    rendered = render(case)
    settings = _settings(rendered, tmp_path)
    grace = rendered.one("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > settings.shutdown_grace_seconds + settings.final_scrape_wait_seconds + 2


@pytest.mark.parametrize("case", CASES)
def test_the_record_store_writes_to_the_data_volume(render: Callable[..., Rendered], tmp_path: Path, case: str) -> None:
    """The root filesystem is read-only: the store's directory must lie on the data volume."""
    rendered = render(case)
    settings = _settings(rendered, tmp_path)
    (mount,) = [m["mountPath"] for m in rendered.container["volumeMounts"] if m["name"] == "data"]
    assert settings.store.directory.is_relative_to(mount)


def test_persistence_turns_the_record_store_on(render: Callable[..., Rendered], tmp_path: Path) -> None:
    assert _settings(render("persistence-values.yaml"), tmp_path).store.enabled


def test_large_numbers_reach_the_settings_as_written(render: Callable[..., Rendered], tmp_path: Path) -> None:
    """Helm keeps numbers as floats; a large one must still read back as the same integer."""
    settings = _settings(render("scale-out-values.yaml"), tmp_path)
    assert settings.limits.queue_spans == 400_000
    assert settings.limits.max_request_bytes == 16_777_216


def test_an_slo_spec_of_ones_own_goes_into_the_spec_configmap(render: Callable[..., Rendered], tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    spec = {
        "version": "sloscope/v1",
        "service": "chat",
        "compliance_period": "7d",
        "classes": [{"name": "fast", "match": {"ttft_ms": {"max": 500}}, "objectives": {"ttft": 0.999}}],
    }
    values.write_text(yaml.safe_dump({"sloSpec": spec}), encoding="utf-8")
    rendered = render("defaults", "--values", str(values))
    written = yaml.safe_load(rendered.one("ConfigMap", "sloscope-slo-spec")["data"]["slo.yaml"])
    assert written == spec
    folder = tmp_path / "config"
    folder.mkdir()
    _config_dir(rendered, folder)
    done = subprocess.run(
        [str(SLOSCOPE), "check-config", str(folder / "settings.yaml")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ---- what the chart refuses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--set", "terminationGracePeriodSeconds=20"],
            "terminationGracePeriodSeconds",
            id="a grace period shorter than the drain and the final scrape",
        ),
        pytest.param(
            ["--set", "config.final_scrape_wait_seconds=60"],
            "terminationGracePeriodSeconds",
            id="a final scrape wait the default grace period cannot hold",
        ),
        pytest.param(
            ["--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true"],
            "not both",
            id="a ServiceMonitor and a PodMonitor at once",
        ),
        pytest.param(
            ["--set", "persistence.enabled=true", "--set", "replicaCount=2"],
            "needs persistence.accessModes [ReadWriteMany]",
            id="one ReadWriteOnce claim for several replicas",
        ),
        pytest.param(["--set", "config.slo_spec=/x.yaml"], "/config/slo_spec", id="slo_spec in config"),
        pytest.param(["--set", "config.listeners.metrics_port=9000"], "metrics_port", id="a listener port in config"),
        pytest.param(["--set", "replicas=2"], "replicas", id="an unknown top-level key"),
        pytest.param(["--set", "serviceMonitor.honorLabels=false"], "honorLabels", id="honorLabels is not a value"),
        pytest.param(
            ["--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.minAvailable=1"],
            "exactly one",
            id="a PDB with both bounds",
        ),
    ],
)
def test_the_chart_refuses(helm: Path, args: list[str], message: str) -> None:
    done = template(helm, *args)
    assert done.returncode != 0, f"helm template accepted {args}"
    assert message in done.stderr, done.stderr
