"""What the rendered chart does: a locked-down pod, probes, scraping with honorLabels, the generated dashboards
and rules byte for byte, least-privilege discovery RBAC, and the optional objects of each ci/ values file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sloscope.generators import RULES_FILE
from tests.charts.conftest import CASES, NAMESPACE, ROOT, Rendered, template

MONITORING_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


def _pod(rendered: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = rendered.one("Deployment")["spec"]["template"]["spec"]
    return spec


# ---- the pod -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_pod_runs_non_root_on_a_read_only_root_filesystem(render: Callable[..., Rendered], case: str) -> None:
    rendered = render(case)
    pod = _pod(rendered)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = rendered.container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m for m in rendered.container["volumeMounts"]}
    assert "/tmp" in mounts, "Python and its libraries need a writable /tmp"
    assert mounts["/etc/sloscope"]["readOnly"] is True
    assert set(rendered.container["resources"]) == {"requests", "limits"}


@pytest.mark.parametrize("case", CASES)
def test_probes_ask_healthz_and_readyz_on_the_metrics_port(render: Callable[..., Rendered], case: str) -> None:
    container = render(case).container
    tls = {"scheme": "HTTPS"} if case == "listener-security-values.yaml" else {}  # TLS on the metrics listener
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", **tls}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", **tls}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", **tls}


@pytest.mark.parametrize("case", CASES)
def test_no_service_links_reach_the_environment(render: Callable[..., Rendered], case: str) -> None:
    """A Service named sloscope would put SLOSCOPE_SERVICE_HOST in the environment, which sloscope refuses."""
    assert _pod(render(case))["enableServiceLinks"] is False


def test_a_settings_change_rolls_the_pods(render: Callable[..., Rendered]) -> None:
    before = render("defaults").one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    after = render("defaults", "--set", "config.log_level=DEBUG").one("Deployment")["spec"]["template"]["metadata"]
    assert after["annotations"]["checksum/settings"] != before["checksum/settings"]
    assert after["annotations"]["checksum/slo-spec"] == before["checksum/slo-spec"]


def test_the_image_is_the_app_version_or_a_digest(render: Callable[..., Rendered]) -> None:
    assert render("defaults").container["image"] == "sloscope:0.1.0"
    digest = "sha256:" + "0" * 63 + "1"
    assert render("persistence-values.yaml").container["image"] == f"sloscope@{digest}"


# ---- services ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_service_exposes_otlp_and_metrics(render: Callable[..., Rendered], case: str) -> None:
    service = render(case).one("Service", "sloscope")
    ports = {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {("otlp-grpc", 4317, "otlp-grpc"), ("otlp-http", 4318, "otlp-http"), ("metrics", 9464, "metrics")}


def test_the_headless_service_resolves_every_replica_for_the_collector(render: Callable[..., Rendered]) -> None:
    rendered = render("scale-out-values.yaml")
    assert rendered.one("Deployment")["spec"]["replicas"] == 3
    headless = rendered.one("Service", "sloscope-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in headless["spec"]["ports"]} == {4317, 4318}
    assert headless["spec"]["selector"] == rendered.one("Deployment")["spec"]["selector"]["matchLabels"]
    assert not render("defaults").all("Service")[1:], "no headless Service unless asked for"


# ---- scraping, rules and dashboards ----------------------------------------------------------------------


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        present = expression["key"] in labels
        if expression["operator"] == "DoesNotExist" and present:
            return False
        if expression["operator"] == "Exists" and not present:
            return False
    return True


@pytest.mark.parametrize("case", CASES)
def test_scrape_configs_keep_sloscopes_pod_label(render: Callable[..., Rendered], case: str) -> None:
    rendered = render(case)
    monitors = rendered.all("ServiceMonitor") + rendered.all("PodMonitor")
    assert len(monitors) <= 1
    for monitor in monitors:
        endpoints = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
        assert [(e["port"], e["path"], e["honorLabels"]) for e in endpoints] == [("metrics", "/metrics", True)]


def test_the_service_monitor_selects_the_service_but_not_the_headless_one(render: Callable[..., Rendered]) -> None:
    rendered = render("servicemonitor-values.yaml", "--set", "headlessService.enabled=true")
    selector = rendered.one("ServiceMonitor")["spec"]["selector"]
    selected = [s["metadata"]["name"] for s in rendered.all("Service") if _matches(selector, s["metadata"]["labels"])]
    assert selected == ["sloscope"]


def test_the_pod_monitor_selects_the_pods(render: Callable[..., Rendered]) -> None:
    rendered = render("podmonitor-values.yaml")
    monitor = rendered.one("PodMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["team"] == "inference"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    pod_labels = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert _matches(monitor["spec"]["selector"], pod_labels)


@pytest.mark.parametrize("case", ["podmonitor-values.yaml", "servicemonitor-values.yaml"])
def test_the_monitors_targets_get_the_job_sloscope_or_the_operators_own(
    render: Callable[..., Rendered], case: str
) -> None:
    """prometheus-operator names a PodMonitor's job ``<namespace>/<name>`` (a ServiceMonitor's: the Service's
    name) unless ``jobLabel`` names a label of the pod (Service) whose value it takes instead."""
    kind = "PodMonitor" if case.startswith("podmonitor") else "ServiceMonitor"
    rendered = render(case)
    label = rendered.one(kind)["spec"]["jobLabel"]
    target = rendered.one("Deployment")["spec"]["template"] if kind == "PodMonitor" else rendered.one("Service")
    assert (label, target["metadata"]["labels"][label]) == ("app.kubernetes.io/name", "sloscope")
    key = "podMonitor" if kind == "PodMonitor" else "serviceMonitor"
    assert "jobLabel" not in render(case, "--set", f"{key}.jobLabel=").one(kind)["spec"]


def test_nothing_needs_the_operator_crds_by_default(render: Callable[..., Rendered]) -> None:
    assert not [m for m in render("defaults").manifests if m["kind"] in MONITORING_KINDS]


def test_the_prometheus_rule_holds_the_generated_groups(render: Callable[..., Rendered]) -> None:
    generated = yaml.safe_load((ROOT / "alerts" / RULES_FILE).read_text(encoding="utf-8"))
    rule = render("kube-prometheus-stack-values.yaml").one("PrometheusRule")
    assert rule["spec"]["groups"] == generated["groups"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_additional_labels_reach_what_the_operator_and_grafana_select(render: Callable[..., Rendered]) -> None:
    rendered = render("kube-prometheus-stack-values.yaml")
    selected = [m for m in rendered.manifests if m["kind"] in MONITORING_KINDS] + [
        m for m in rendered.all("ConfigMap") if "grafana_dashboard" in m["metadata"]["labels"]
    ]
    assert {m["kind"] for m in selected} == {"PodMonitor", "PrometheusRule", "ConfigMap"}
    for manifest in selected:
        assert manifest["metadata"]["labels"]["release"] == "kube-prometheus-stack", manifest["metadata"]["name"]
    assert "release" not in rendered.one("Deployment")["metadata"]["labels"]


@pytest.mark.parametrize("case", ["defaults", "kube-prometheus-stack-values.yaml"])
def test_dashboards_are_the_generated_files_labelled_for_the_grafana_sidecar(
    render: Callable[..., Rendered], case: str
) -> None:
    rendered = render(case)
    configmaps = [m for m in rendered.all("ConfigMap") if "grafana_dashboard" in m["metadata"]["labels"]]
    generated = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "dashboards").glob("*.json")}
    assert generated
    shipped: dict[str, str] = {}
    for configmap in configmaps:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["annotations"]["grafana_folder"]
        assert len(configmap["data"]) == 1
        shipped.update(configmap["data"])
    assert shipped == generated, "the dashboards in the chart differ from dashboards/*.json"
    folder = "LLM inference" if case != "defaults" else "sloscope"
    assert {m["metadata"]["annotations"]["grafana_folder"] for m in configmaps} == {folder}


def test_dashboards_can_be_left_out(render: Callable[..., Rendered]) -> None:
    rendered = render("defaults", "--set", "dashboards.enabled=false")
    assert not [m for m in rendered.all("ConfigMap") if "grafana_dashboard" in m["metadata"]["labels"]]


# ---- discovery RBAC ------------------------------------------------------------------------------------


def test_discovery_gets_a_role_per_pool_namespace_and_nothing_more(render: Callable[..., Rendered]) -> None:
    rendered = render("inferencepool-values.yaml")
    # Discovery is namespaced; the one cluster-scoped grant is the EPP's /metrics (tests/charts/test_chart_epp_auth.py).
    assert [r["metadata"]["name"] for r in rendered.all("ClusterRole")] == ["sloscope-epp-metrics"]
    roles = {r["metadata"]["namespace"]: r["rules"] for r in rendered.all("Role")}
    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    assert roles == {
        "llm": [
            pods,
            {
                "apiGroups": ["inference.networking.k8s.io", "inference.networking.x-k8s.io"],
                "resources": ["inferencepools"],
                "verbs": ["get"],
                "resourceNames": ["vllm-llama3-8b-instruct", "vllm-qwen3-32b"],
            },
        ],
        "llm-batch": [pods],  # a label-selector pool reads no InferencePool
    }
    for binding in rendered.all("RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sloscope", "namespace": NAMESPACE}]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "sloscope-discovery",
        }
    assert {b["metadata"]["namespace"] for b in rendered.all("RoleBinding")} == set(roles)
    assert _pod(rendered)["automountServiceAccountToken"] is True


@pytest.mark.parametrize("case", [c for c in CASES if c != "inferencepool-values.yaml"])
def test_without_kubernetes_discovery_there_is_no_role_and_no_token(render: Callable[..., Rendered], case: str) -> None:
    rendered = render(case)
    assert not rendered.all("Role")
    assert not rendered.all("RoleBinding")
    assert _pod(rendered)["automountServiceAccountToken"] is False
    assert rendered.one("ServiceAccount")["automountServiceAccountToken"] is False


# ---- storage, network policy, disruption budget --------------------------------------------------------


def _volume(rendered: Rendered, name: str) -> dict[str, Any]:
    (volume,) = [v for v in _pod(rendered)["volumes"] if v["name"] == name]
    return dict(volume)


def test_the_data_volume_is_an_empty_dir_by_default(render: Callable[..., Rendered]) -> None:
    rendered = render("defaults")
    assert _volume(rendered, "data") == {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}
    assert not rendered.all("PersistentVolumeClaim")
    assert rendered.one("Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"


def test_persistence_claims_a_volume_and_recreates_on_rollout(render: Callable[..., Rendered]) -> None:
    rendered = render("persistence-values.yaml")
    claim = rendered.one("PersistentVolumeClaim")
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "standard-rwo"
    assert _volume(rendered, "data")["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
    assert {"name": "data", "mountPath": "/var/lib/sloscope"} in rendered.container["volumeMounts"]
    assert rendered.one("Deployment")["spec"]["strategy"] == {"type": "Recreate"}


def test_replicas_share_a_read_write_many_claim_each_named_by_its_pod(render: Callable[..., Rendered]) -> None:
    """Each replica's record store files carry its id, the pod name from the downward API (POD_NAME, read by
    sloscope.store.replica), so replicas on one claim never delete each other's files in flight."""
    rendered = render("shared-store-values.yaml", "--set-json", 'extraEnv=[{"name":"TZ","value":"UTC"}]')
    deployment = rendered.one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    claim = rendered.one("PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert _volume(rendered, "data")["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
    assert rendered.container["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "TZ", "value": "UTC"},
    ]


@pytest.mark.parametrize("case", CASES)
def test_every_pod_knows_its_name_for_the_record_store(render: Callable[..., Rendered], case: str) -> None:
    env = render(case).container["env"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env, env


def test_an_existing_claim_is_used_as_is(render: Callable[..., Rendered]) -> None:
    rendered = render("persistence-values.yaml", "--set", "persistence.existingClaim=store")
    assert not rendered.all("PersistentVolumeClaim")
    assert _volume(rendered, "data")["persistentVolumeClaim"] == {"claimName": "store"}


def test_the_network_policy_admits_otlp_and_scrapes_from_the_given_peers(render: Callable[..., Rendered]) -> None:
    policy = render("networkpolicy-pdb-values.yaml").one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    otlp, metrics = policy["ingress"]
    assert {p["port"] for p in otlp["ports"]} == {4317, 4318}
    assert len(otlp["from"]) == 2
    assert [p["port"] for p in metrics["ports"]] == [9464]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    dns, *rest = policy["egress"]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert len(rest) == 2


@pytest.mark.parametrize(
    ("case", "bound"),
    [("networkpolicy-pdb-values.yaml", {"minAvailable": 1}), ("scale-out-values.yaml", {"maxUnavailable": 1})],
)
def test_the_disruption_budget_has_one_bound(render: Callable[..., Rendered], case: str, bound: dict[str, int]) -> None:
    spec = render(case).one("PodDisruptionBudget")["spec"]
    assert {k: v for k, v in spec.items() if k != "selector"} == bound


# ---- Grafana data source with exemplar trace links ------------------------------------------------------------


def _datasource(rendered: Rendered) -> dict[str, Any]:
    (configmap,) = [m for m in rendered.all("ConfigMap") if "grafana_datasource" in m["metadata"]["labels"]]
    assert configmap["metadata"]["labels"]["grafana_datasource"] == "1"
    (datasource,) = yaml.safe_load(configmap["data"]["sloscope-datasource.yaml"])["datasources"]
    assert datasource["type"] == "prometheus" and datasource["uid"] == "sloscope-prometheus"
    return dict(datasource["jsonData"])


def test_no_grafana_datasource_by_default(render: Callable[..., Rendered]) -> None:
    assert not [m for m in render("defaults").all("ConfigMap") if "grafana_datasource" in m["metadata"]["labels"]]


def test_exemplars_open_their_trace_in_tempo_by_datasource_uid(render: Callable[..., Rendered]) -> None:
    rendered = render(
        "defaults",
        *("--set", "grafanaDatasource.enabled=true", "--set", "grafanaDatasource.traces.backend=tempo"),
        *("--set", "grafanaDatasource.traces.tempoDatasourceUid=my-tempo"),
    )
    assert _datasource(rendered)["exemplarTraceIdDestinations"] == [{"name": "trace_id", "datasourceUid": "my-tempo"}]


def test_exemplars_open_their_trace_in_jaegers_ui_by_url(render: Callable[..., Rendered]) -> None:
    rendered = render(
        "defaults",
        *("--set", "grafanaDatasource.enabled=true", "--set", "grafanaDatasource.traces.backend=jaeger"),
        *("--set-string", "grafanaDatasource.traces.jaegerUrl=https://jaeger.example.com/trace/${__value.raw}"),
    )
    # Grafana expands $VAR in provisioning files: $$ is a literal $, so Grafana reads ${__value.raw} itself.
    assert _datasource(rendered)["exemplarTraceIdDestinations"] == [
        {
            "name": "trace_id",
            "url": "https://jaeger.example.com/trace/$${__value.raw}",
            "urlDisplayLabel": "Trace in Jaeger",
        }
    ]


def test_a_jaeger_backend_without_a_trace_url_is_refused(helm: Path) -> None:
    result = template(
        helm, "--set", "grafanaDatasource.enabled=true", "--set", "grafanaDatasource.traces.backend=jaeger"
    )
    assert result.returncode != 0 and "jaegerUrl" in result.stderr
