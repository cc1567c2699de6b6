"""The chart's wiring of the EPP's metrics authentication: the token mounted, the ClusterRole the EPP asks for.

llm-d-router's EPP (ebab687927f5331c1b39defcb579a07951bce56c) authenticates /metrics by default
(``pkg/epp/server/options.go:156``) with controller-runtime's filter, which authorizes ``get`` on the
non-resource URL ``/metrics`` (controller-runtime v0.23.3 ``pkg/metrics/filters/filters.go:29-32``);
llm-d-router's own chart grants its scraper exactly that (``config/charts/routerlib/templates/_gke.yaml:60-67``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import NAMESPACE, Rendered

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
EPP = "http://vllm-llama3-8b-instruct-epp.llm.svc:9090/metrics"


def _render(render: Callable[..., Rendered], tmp_path: Path, values: dict[str, Any]) -> Rendered:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return render("defaults", "--values", str(path))


def _values(epp: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"config": {"pools": [{"name": "llama", "epp": {"metrics_url": EPP, **epp}}]}, **extra}


def _pod(rendered: Rendered) -> dict[str, Any]:
    return dict(rendered.one("Deployment")["spec"]["template"]["spec"])


@pytest.mark.parametrize(
    "epp",
    [
        pytest.param({}, id="epp without auth: the pod's token, sloscope's default"),
        pytest.param({"auth": {"credentials_file": TOKEN}}, id="auth naming the token"),
    ],
)
def test_an_epp_scraped_with_the_token_gets_it_mounted_and_get_on_metrics(
    render: Callable[..., Rendered], tmp_path: Path, epp: dict[str, Any]
) -> None:
    rendered = _render(render, tmp_path, _values(epp))
    role = rendered.one("ClusterRole", "sloscope-epp-metrics")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    binding = rendered.one("ClusterRoleBinding", "sloscope-epp-metrics")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sloscope", "namespace": NAMESPACE}]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "sloscope-epp-metrics",
    }
    assert _pod(rendered)["automountServiceAccountToken"] is True
    assert not rendered.all("Role")  # no discovery: nothing namespaced is granted
    settings = yaml.safe_load(rendered.one("ConfigMap", "sloscope-settings")["data"]["settings.yaml"])
    assert settings["pools"][0]["epp"] == {"metrics_url": EPP, **epp}  # passed through as written


@pytest.mark.parametrize(
    ("epp", "extra"),
    [
        pytest.param({"auth": {}}, {}, id="auth {} sends no credentials"),
        pytest.param({"auth": {"credentials_file": "/etc/epp-token/token"}}, {}, id="a token of its own"),
        pytest.param({}, {"rbac": {"eppMetrics": False}}, id="rbac.eppMetrics off"),
    ],
)
def test_no_cluster_role_when_the_token_is_not_sent_or_the_toggle_is_off(
    render: Callable[..., Rendered], tmp_path: Path, epp: dict[str, Any], extra: dict[str, Any]
) -> None:
    rendered = _render(render, tmp_path, _values(epp, **extra))
    assert not rendered.all("ClusterRole")
    assert not rendered.all("ClusterRoleBinding")
    uses_token = "auth" not in epp
    assert _pod(rendered)["automountServiceAccountToken"] is uses_token


def test_the_epp_tls_settings_reach_the_settings_file(render: Callable[..., Rendered], tmp_path: Path) -> None:
    auth = {
        "credentials_file": TOKEN,
        "tls_config": {"ca_file": "/etc/epp-ca/ca.crt", "server_name": "vllm-llama3-8b-instruct-epp.llm.svc"},
    }
    volume = {"name": "epp-ca", "secret": {"secretName": "epp-metrics-ca"}}
    mount = {"name": "epp-ca", "mountPath": "/etc/epp-ca", "readOnly": True}
    values = _values({"auth": auth}, extraVolumes=[volume], extraVolumeMounts=[mount])
    rendered = _render(render, tmp_path, values)
    settings = yaml.safe_load(rendered.one("ConfigMap", "sloscope-settings")["data"]["settings.yaml"])
    assert settings["pools"][0]["epp"]["auth"] == auth
    assert volume in _pod(rendered)["volumes"]
    assert mount in rendered.container["volumeMounts"]
