"""The chart's wiring of the listeners' TLS and token: Secrets mounted whole, settings pointing at them, probes
and the Prometheus monitors matching what each listener serves.

Field names are prometheus-operator's monitoring.coreos.com/v1 (``../shared/schemas/crd-servicemonitors.yaml``:
an endpoint's ``scheme``, ``tlsConfig.ca.secret``, ``tlsConfig.cert.secret``, ``tlsConfig.keySecret``,
``tlsConfig.serverName``, ``authorization.type`` and ``authorization.credentials``); the manifests are
validated against that schema by test_chart_valid.py for the ci/listener-security-values.yaml case.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import Rendered, template

CASE = "listener-security-values.yaml"


def _render(render: Callable[..., Rendered], tmp_path: Path, values: dict[str, Any]) -> Rendered:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return render("defaults", "--values", str(path))


def _settings(rendered: Rendered) -> dict[str, Any]:
    return dict(yaml.safe_load(rendered.one("ConfigMap", "sloscope-settings")["data"]["settings.yaml"]))


def _probe_schemes(rendered: Rendered) -> set[str | None]:
    container = rendered.container
    return {container[probe]["httpGet"].get("scheme") for probe in ("startupProbe", "livenessProbe", "readinessProbe")}


def test_tls_and_the_token_come_from_mounted_secrets(render: Callable[..., Rendered]) -> None:
    rendered = render(CASE)
    listeners = _settings(rendered)["listeners"]
    assert listeners["tls"] == {
        "cert_file": "/etc/sloscope-tls/tls.crt",
        "key_file": "/etc/sloscope-tls/tls.key",
        "client_ca_file": "/etc/sloscope-tls/ca.crt",
        "client_auth_type": "VerifyClientCertIfGiven",
        "listeners": ["otlp_http", "metrics"],
    }
    assert listeners["auth"] == {
        "token_file": "/etc/sloscope-auth/token",
        "listeners": ["otlp_grpc", "otlp_http", "metrics"],
    }
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert {"name": "listener-tls", "secret": {"secretName": "sloscope-tls"}} in pod["volumes"]
    assert {"name": "listener-auth", "secret": {"secretName": "sloscope-listener-token"}} in pod["volumes"]
    mounts = {m["name"]: m for m in rendered.container["volumeMounts"]}
    for name, path in (("listener-tls", "/etc/sloscope-tls"), ("listener-auth", "/etc/sloscope-auth")):
        assert mounts[name] == {"name": name, "mountPath": path, "readOnly": True}  # no subPath: updates arrive
    # The probes' paths need no credentials; the metrics listener serves TLS, so they speak HTTPS.
    assert _probe_schemes(rendered) == {"HTTPS"}


def test_the_service_monitor_scrapes_over_https_with_the_token(render: Callable[..., Rendered]) -> None:
    (endpoint,) = render(CASE).one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "sloscope-tls", "key": "ca.crt"}},
        "serverName": "sloscope.monitoring.svc",
    }
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "sloscope-listener-token", "key": "token"},
    }


def test_the_pod_monitor_gets_the_same_and_a_client_certificate(
    render: Callable[..., Rendered], tmp_path: Path
) -> None:
    values = {
        "tls": {"enabled": True, "secretName": "tls", "scrape": {"clientSecretName": "prometheus-client"}},
        "auth": {"enabled": True, "secretName": "token", "tokenKey": "bearer"},
        "podMonitor": {"enabled": True},
    }
    (endpoint,) = _render(render, tmp_path, values).one("PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "tls", "key": "ca.crt"}},
        "cert": {"secret": {"name": "prometheus-client", "key": "tls.crt"}},
        "keySecret": {"name": "prometheus-client", "key": "tls.key"},
    }
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "token", "key": "bearer"}}


def test_tls_on_the_otlp_listeners_only_leaves_probes_and_scrapes_plain(
    render: Callable[..., Rendered], tmp_path: Path
) -> None:
    values = {
        "tls": {"enabled": True, "secretName": "tls", "listeners": ["otlp_grpc", "otlp_http"]},
        "auth": {"enabled": True, "secretName": "token", "listeners": ["otlp_grpc", "otlp_http"]},
        "serviceMonitor": {"enabled": True},
    }
    rendered = _render(render, tmp_path, values)
    assert _probe_schemes(rendered) == {None}
    (endpoint,) = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    assert not {"scheme", "tlsConfig", "authorization"} & set(endpoint)
    assert "client_ca_file" not in _settings(rendered)["listeners"]["tls"]  # NoClientCert: no CA file


def test_by_default_nothing_is_mounted_and_everything_is_plain(render: Callable[..., Rendered]) -> None:
    rendered = render("servicemonitor-values.yaml")
    assert _probe_schemes(rendered) == {None}
    assert not {"tls", "auth"} & set(_settings(rendered)["listeners"])
    names = {v["name"] for v in rendered.one("Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert not {"listener-tls", "listener-auth"} & names
    (endpoint,) = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    assert not {"scheme", "tlsConfig", "authorization"} & set(endpoint)


def test_listener_limits_pass_through_config(render: Callable[..., Rendered], tmp_path: Path) -> None:
    limits = {"max_connections": 2000, "header_timeout_seconds": 5.0, "grpc": {"max_connection_age_seconds": 600}}
    listeners = _settings(_render(render, tmp_path, {"config": {"listeners": limits}}))["listeners"]
    assert {key: listeners[key] for key in limits} == limits


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--set", "tls.enabled=true", "--set", "tls.secretName=t", "--set",
             "tls.clientAuthType=RequireAndVerifyClientCert"],
            "probes present no client certificate",
            id="client certificates required on the metrics listener the probes use",
        ),
        pytest.param(
            ["--set", "tls.enabled=true", "--set", "tls.secretName=t", "--set",
             "tls.clientAuthType=VerifyClientCertIfGiven"],
            "gRPC can only require",
            id="an optional client certificate on gRPC",
        ),
        pytest.param(["--set", "tls.enabled=true"], "secretName", id="TLS without its Secret"),
        pytest.param(["--set", "auth.enabled=true"], "secretName", id="a token without its Secret"),
        pytest.param(["--set", "tls.listeners={otlp_http,admin}"], "listeners", id="an unknown listener"),
    ],
)  # fmt: skip
def test_the_chart_refuses_listener_security_it_cannot_serve(helm: Path, args: list[str], message: str) -> None:
    done = template(helm, *args)
    assert done.returncode != 0, f"helm template accepted {args}"
    assert message in done.stderr, done.stderr
