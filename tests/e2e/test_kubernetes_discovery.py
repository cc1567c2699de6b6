"""sloscope's Kubernetes discovery against a real API server (kube-apiserver v1.35.4 on etcd v3.6.5), beside the EPP.

The pool is a real InferencePool (the v1 CRD of gateway-api-inference-extension v1.5.0,
``config/crd/bases/inference.networking.k8s.io_inferencepools.yaml``); its pods are Pod objects whose status the
fleet sets as a kubelet would. The EPP of v1.5.0 watches the same pods (``pkg/epp/controller/pod_reconciler.go``:
a pod counts while Ready and matching the pool's selector), so sloscope's view is checked against the EPP's own
``inference_pool_ready_pods`` over the same changes: a pod that turns not ready, one that is deleted, one that
comes back, across a restart of the API server; and a user RBAC refuses gets an error that says why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sloscope.demo.ports import free_ports
from tests.integration.conftest import wait_until
from tests.support.fleet.fleet import NAMESPACE, POOL, Fleet, FleetSpec, PodSpec, running_fleet
from tests.support.fleet.process import logged, spawn, wait_for
from tests.support.series import label_values, page, samples

pytestmark = pytest.mark.timeout(600)

PODS = (PodSpec(30, 4), PodSpec(40, 5), PodSpec(50, 6), PodSpec(60, 7))


@pytest.fixture(scope="module")
def fleet(fleet_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    settings = {"scrape": {"vanished_grace_seconds": 1.0, "stale_after_seconds": 5.0}}
    spec = FleetSpec(pods=PODS, sloscope_settings=settings, gateway_traces=False)
    with running_fleet(fleet_tools, tmp_path_factory.mktemp("fleet"), spec) as running:
        yield running


def series_pods(text: str) -> set[str]:
    """The pods sloscope publishes ``sloscope_pod_up`` for: the targets discovery reports (and their grace)."""
    return label_values(samples(text), "sloscope_pod_up", "pod")


def epp_ready_pods(fleet: Fleet) -> float | None:
    """The EPP's gauge, refreshed every ``--refresh-prometheus-metrics-interval`` (5 s); None before its first."""
    for line in fleet.epp_text().splitlines():
        if line.startswith(f'inference_pool_ready_pods{{name="{POOL}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


def both_see(fleet: Fleet, pods: set[str]) -> bool:
    return series_pods(fleet.sloscope_text()) == pods and epp_ready_pods(fleet) == len(pods)


def test_discovery_follows_pods_as_the_epp_does_across_an_api_server_restart(fleet: Fleet) -> None:
    everyone = {"sim-0", "sim-1", "sim-2", "sim-3"}
    wait_until(lambda: both_see(fleet, everyone), timeout=30, what="sloscope and the EPP see every pod")

    fleet.set_pod_ready("sim-3", False)
    wait_until(lambda: both_see(fleet, everyone - {"sim-3"}), timeout=30, what="sim-3 gone once not ready")

    fleet.delete_pod_object("sim-2")
    wait_until(lambda: both_see(fleet, {"sim-0", "sim-1"}), timeout=30, what="sim-2 gone once deleted")

    fleet.kube.restart_apiserver(down_seconds=2.0)
    fleet.create_pod_object("sim-2")
    fleet.set_pod_ready("sim-2", True)
    fleet.set_pod_ready("sim-3", True)
    wait_until(lambda: both_see(fleet, everyone), timeout=60, what="both watches resumed after the restart")

    fleet.set_pod_ready("sim-0", False)
    wait_until(lambda: both_see(fleet, everyone - {"sim-0"}), timeout=30, what="a change after the restart")
    fleet.set_pod_ready("sim-0", True)
    wait_until(lambda: both_see(fleet, everyone), timeout=30, what="sim-0 back")


def test_a_user_rbac_refuses_gets_an_error_that_names_what_was_refused(fleet: Fleet) -> None:
    grpc, http, metrics = free_ports(3)
    settings = {
        "listeners": {"host": "127.0.0.1", "otlp_grpc_port": grpc, "otlp_http_port": http, "metrics_port": metrics},
        "pools": [
            {
                "name": POOL,
                "targets": {
                    "kubernetes": {
                        "namespace": NAMESPACE,
                        "inference_pool": POOL,
                        "kubeconfig": str(fleet.kube.kubeconfig("stranger")),
                    }
                },
            }
        ],
    }
    path = fleet.folder / "stranger.yaml"
    path.write_text(yaml.safe_dump(settings))
    child = spawn("sloscope-stranger", [sys.executable, "-m", "sloscope", "serve", "--config", path], fleet.folder)
    try:
        forbidden = (
            'API answered 403 Forbidden: inferencepools.inference.networking.k8s.io "fleet-pool" is forbidden: '
            'User "stranger" cannot get resource "inferencepools" in API group "inference.networking.k8s.io" in the '
            f'namespace "{NAMESPACE}"'
        )
        wait_for(child, lambda: logged(child, forbidden), 30, "the refusal in the log")
        assert not any(
            line.startswith("sloscope_pod_up{") for line in page(f"http://127.0.0.1:{metrics}/metrics").splitlines()
        )
    finally:
        child.stop()
