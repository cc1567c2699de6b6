"""The pure half of Kubernetes discovery: which pod is a target, and what an InferencePool selects."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sloscope.receivers.discovery import Target
from sloscope.receivers.discovery.kubernetes import api_message, format_selector, is_ready, pod_target, pool_selector

DATA = Path(__file__).resolve().parents[2] / "data" / "kubernetes"
NAME = "vllm-llama3-8b-instruct-7d9f8c6b5d-x2k9p"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def base_pod() -> dict[str, Any]:
    """The recorded ready pod: Running, Ready=True, with a podIP."""
    pods: list[dict[str, Any]] = load("pods-list.json")["items"]
    return copy.deepcopy(next(pod for pod in pods if pod["metadata"]["name"] == NAME))


def _ready(pod: dict[str, Any], status: str) -> None:
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition["status"] = status


LABELS = (("app", "vllm-llama3-8b-instruct"), ("pod-template-hash", "7d9f8c6b5d"))  # the recorded pod's


def test_a_ready_running_pod_is_a_target_at_its_ip_and_the_port_with_its_labels() -> None:
    assert pod_target("llama", base_pod(), (8000,)) == Target("llama", NAME, "10.52.3.17:8000", labels=LABELS)
    assert pod_target("llama", base_pod(), (8000,)).label("app") == "vllm-llama3-8b-instruct"  # type: ignore[union-attr]


def _pending(pod: dict[str, Any]) -> None:
    pod["status"]["phase"] = "Pending"


def _no_ip(pod: dict[str, Any]) -> None:
    del pod["status"]["podIP"]


def _empty_ip(pod: dict[str, Any]) -> None:
    pod["status"]["podIP"] = ""


def _not_ready(pod: dict[str, Any]) -> None:
    _ready(pod, "False")


def _ready_unknown(pod: dict[str, Any]) -> None:
    _ready(pod, "Unknown")  # the node stopped reporting


def _no_ready_condition(pod: dict[str, Any]) -> None:
    pod["status"]["conditions"] = [c for c in pod["status"]["conditions"] if c["type"] != "Ready"]


def _only_containers_ready(pod: dict[str, Any]) -> None:
    _no_ready_condition(pod)  # ContainersReady=True alone is not Ready (readiness gates)


def _terminating(pod: dict[str, Any]) -> None:
    pod["metadata"]["deletionTimestamp"] = "2026-11-30T12:03:11Z"


def _succeeded(pod: dict[str, Any]) -> None:
    pod["status"]["phase"] = "Succeeded"


def _no_status(pod: dict[str, Any]) -> None:
    del pod["status"]


def _no_name(pod: dict[str, Any]) -> None:
    del pod["metadata"]["name"]


def _conditions_not_a_list(pod: dict[str, Any]) -> None:
    pod["status"]["conditions"] = None


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_pending, id="pending"),
        pytest.param(_no_ip, id="no podIP yet"),
        pytest.param(_empty_ip, id="an empty podIP"),
        pytest.param(_not_ready, id="Ready=False (model still loading)"),
        pytest.param(_ready_unknown, id="Ready=Unknown"),
        pytest.param(_no_ready_condition, id="no Ready condition"),
        pytest.param(_only_containers_ready, id="ContainersReady without Ready"),
        pytest.param(_terminating, id="being deleted though still Ready"),
        pytest.param(_succeeded, id="finished"),
        pytest.param(_no_status, id="no status"),
        pytest.param(_no_name, id="no name"),
        pytest.param(_conditions_not_a_list, id="conditions null"),
    ],
)
def test_pods_that_are_not_targets(change: Any) -> None:
    pod = base_pod()
    change(pod)
    assert pod_target("llama", pod, (8000,)) is None


def test_an_ipv6_pod_ip_is_bracketed() -> None:
    pod = base_pod()
    pod["status"]["podIP"] = "fd00:10:52::3:17"
    assert pod_target("llama", pod, (8000,)) == Target("llama", NAME, "[fd00:10:52::3:17]:8000", labels=LABELS)


def test_every_recorded_pod_once_ready_in_the_watch() -> None:
    events = load("watch-events.json")
    targets = [pod_target("llama", event["object"], (8000,)) for event in events]
    assert [target.pod if target else None for target in targets] == [
        None,  # B running, model loading
        "vllm-llama3-8b-instruct-7d9f8c6b5d-r7m4q",
        None,  # C pending
        None,  # C running, not ready
        "vllm-llama3-8b-instruct-7d9f8c6b5d-b5n8t",
        None,  # bookmark
        None,  # A terminating
        None,  # A deleted
    ]
    assert is_ready(events[6]["object"]) is True  # the terminating pod is excluded by its deletionTimestamp alone


def test_inference_pool_v1() -> None:
    assert pool_selector(load("inferencepool-v1.json")) == ("app=vllm-llama3-8b-instruct", (8000,))


def test_inference_pool_v1alpha2() -> None:
    assert pool_selector(load("inferencepool-v1alpha2.json")) == ("app=vllm-llama3-8b-instruct", (8000,))


def test_a_multi_port_pool_makes_each_target_port_a_rank_limited_to_the_pods_active_ports() -> None:
    """llm-d's multi-port data parallelism: rank i serves on the pool's i-th target port, limited to the pod's
    llm-d.ai/active-ports (or the deprecated inference.networking.k8s.io/active-ports) when it has one, junk and
    ports outside the pool ignored (llm-d-router ebab6879 pkg/epp/datastore/datastore.go:330-346,494-517)."""
    pool = load("inferencepool-v1.json")
    pool["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8001}, {"number": 8002}, {"name": "no number"}]
    selector, ports = pool_selector(pool)
    assert (selector, ports) == ("app=vllm-llama3-8b-instruct", (8000, 8001, 8002))
    every = pod_target("llama", base_pod(), ports)
    assert every == Target("llama", NAME, "10.52.3.17:8000", labels=LABELS, ranks=((0, 8000), (1, 8001), (2, 8002)))
    assert every.endpoints() == [(0, "10.52.3.17:8000"), (1, "10.52.3.17:8001"), (2, "10.52.3.17:8002")]
    assert (every.rank_of("10.52.3.17:8002"), every.rank_of("10.52.3.17:9000"), every.rank_of(None)) == (2, None, None)
    for key in ("llm-d.ai/active-ports", "inference.networking.k8s.io/active-ports"):
        pod = base_pod()
        pod["metadata"].setdefault("annotations", {})[key] = " 8002,x, 8001 ,9000"
        assert pod_target("llama", pod, ports) == Target(
            "llama", NAME, "10.52.3.17:8001", labels=LABELS, ranks=((1, 8001), (2, 8002))
        )
    pod["metadata"]["annotations"] = {"llm-d.ai/active-ports": "9000"}
    assert pod_target("llama", pod, ports) is None  # no active port: the EPP sends it nothing


def test_selector_labels_are_sorted_and_the_port_may_be_missing() -> None:
    pool = load("inferencepool-v1.json")
    pool["spec"]["selector"]["matchLabels"] = {"tier": "gpu", "app": "vllm"}
    del pool["spec"]["targetPorts"]
    assert pool_selector(pool) == ("app=vllm,tier=gpu", ())


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        pytest.param({"selector": {"matchLabels": {}}, "targetPorts": [{"number": 8000}]}, "empty", id="v1 empty"),
        pytest.param({"selector": {}, "targetPortNumber": 8000}, "empty", id="v1alpha2 empty"),
        pytest.param({"targetPortNumber": 8000}, "empty or missing", id="no selector"),
        pytest.param({"selector": {"app": 1}}, "not a map of strings", id="a number value"),
    ],
)
def test_a_pool_that_would_select_every_pod_or_nothing_sensible_is_refused(spec: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        pool_selector({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "spec": spec})


def test_format_selector() -> None:
    assert format_selector({"b": "2", "a": "1"}) == "a=1,b=2"


def test_an_api_refusal_is_explained_by_the_api_servers_own_message() -> None:
    # The Status body kube-apiserver v1.35.4 answered a user without RBAC (tests/e2e/test_kubernetes_discovery.py).
    refusal = 'pods is forbidden: User "stranger" cannot list resource "pods" in API group "" in the namespace "fleet"'
    body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": refusal,
            "reason": "Forbidden",
            "code": 403,
        }
    )
    expected = ": " + refusal
    assert api_message(body) == expected
    assert api_message(body.encode()) == expected
    assert api_message("<html>bad gateway</html>") == ""
    assert api_message('{"message": ""}') == ""
    assert api_message(None) == ""
