"""A real inference fleet on loopback, end to end: the EPP of gateway-api-inference-extension v1.5.0 routing through
an ext_proc front to llm-d-inference-sim pods, watched by a real Kubernetes API server, traced into a real sloscope.

What runs (every binary is a ``make tools`` build, pinned in ``tools/fleet/``):

- etcd v3.6.5 and kube-apiserver v1.35.4 (:mod:`tests.support.fleet.kube`), with the InferencePool and
  InferenceObjective CRDs of the EPP's module, the pool, its objectives, RBAC for the EPP and sloscope, and one
  Pod object a simulated pod, its status set as a kubelet would (IP ``127.0.0.<10+i>``, Running, Ready);
- per pod, llm-d-inference-sim v0.10.2 on a port of its own and, on the pod's address, the traced proxy that
  emits vLLM 0.33's span (:mod:`tests.support.fleet.vllm_proxy`);
- sloscope's predictor stand-ins as the EPP's training and prediction sidecars (:mod:`tests.support.fleet.predictor`);
- the EPP (``cmd/epp``), configured as its chart renders ``epplib/templates/_config.yaml`` (with or without
  ``latencyPredictor.enabled``), tracing over OTLP/gRPC to sloscope;
- the ext_proc front in place of Envoy (``tools/fleet/gateway``), tracing as Envoy with the custom_tags of
  docs/sending-traces.md;
- ``sloscope serve`` with Kubernetes discovery of the pool and the EPP's ``/metrics`` scraped with a bearer token
  that the EPP checks against the API server (TokenReview, SubjectAccessReview).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sloscope.demo.ports import free_ports
from sloscope.service.server import BoundPorts
from tests.support.fleet.kube import ControlPlane, User, random_token
from tests.support.fleet.process import Child, http_ok, logged, spawn, wait_for
from tests.support.series import page

NAMESPACE = "fleet"
POOL = "fleet-pool"
MODEL = "fleet/sim-model"
EPP_VERSION = "v1.5.0"
SIM_VERSION = "v0.10.2"


@dataclass(frozen=True)
class PodSpec:
    """One simulated model server: its speed and capacity (llm-d-inference-sim's flags)."""

    ttft_ms: int
    itl_ms: int
    max_num_seqs: int = 8
    kv_cache_blocks: int | None = None  # --enable-kvcache with this many blocks of 16 tokens; None: no KV cache


@dataclass(frozen=True)
class Objective:
    name: str
    priority: int


@dataclass(frozen=True)
class FleetSpec:
    pods: tuple[PodSpec, ...] = (PodSpec(40, 8), PodSpec(80, 12), PodSpec(160, 20), PodSpec(300, 30))
    latency_routing: bool = True  # the chart's inferenceExtension.latencyPredictor.enabled
    streaming_mode: bool | None = None  # predicted-latency-producer's streamingMode; None: the plugin's default
    sampler_arg: str = "1.0"
    predictor_objective: str = "quantile"  # the stand-ins' LATENCY_OBJECTIVE_TYPE (llm-d-router's chart: mean)
    objectives: tuple[Objective, ...] = (Objective("critical", 10), Objective("sheddable", -1))
    gateway_traces: bool = True
    sloscope_settings: dict[str, Any] = field(default_factory=dict)
    pool_settings: dict[str, Any] = field(default_factory=dict)  # merged into sloscope's one pool


@dataclass
class PodHandle:
    name: str
    address: str
    spec: PodSpec
    sim: Child
    proxy: Child


class Fleet:
    def __init__(self, tools: Path, folder: Path, spec: FleetSpec) -> None:
        self.tools = tools
        self.folder = folder
        self.spec = spec
        self.kube = ControlPlane(tools, folder)
        self.pods: list[PodHandle] = []
        self.children: list[Child] = []
        # sloscope binds port 0 and logs what it bound (read back in _start_sloscope)
        self.sloscope_grpc = self.sloscope_http = self.sloscope_metrics = 0
        ports = free_ports(5)
        self.epp_grpc, self.epp_health, self.epp_metrics = ports[0:3]
        self.gateway_port = ports[3]
        # every pod listens on the pool's one target port, at an address of its own (127.0.0.<10+i>); a port of the
        # fleet's own keeps two fleets on one machine apart
        self.pod_port = ports[4]
        self.training_url = ""
        self.prediction_urls: list[str] = []
        self.predictor_bodies = folder / "predictor-bodies.jsonl"  # every body the prediction servers received

    # ---- start ------------------------------------------------------------------------------------

    def start(self) -> None:
        self.kube.start(
            [
                User("epp", "epp-" + random_token()),
                User("sloscope", "sloscope-" + random_token()),
                User("stranger", "stranger-" + random_token()),
            ]
        )
        self._cluster_objects()
        self._start_predictor()
        self._start_sloscope()
        for index, spec in enumerate(self.spec.pods):
            self.pods.append(self._start_pod(index, spec))
        for handle in self.pods:
            self.set_pod_ready(handle.name, True)
        self._start_epp()
        self._start_gateway()

    def _cluster_objects(self) -> None:
        k = self.kube
        k.install_crds(self.tools / "fleet-crds")
        k.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        k.apply(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
        reads = ["get", "list", "watch"]
        self._grant(
            "epp",
            [
                {"apiGroups": [""], "resources": ["pods"], "verbs": reads},
                {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": reads},
                {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["*"], "verbs": reads},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            ],
        )
        self._grant(
            "sloscope",
            [
                {"apiGroups": [""], "resources": ["pods"], "verbs": reads},
                {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": reads},
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
            ],
        )
        k.apply(
            f"/apis/inference.networking.k8s.io/v1/namespaces/{NAMESPACE}/inferencepools",
            {
                "apiVersion": "inference.networking.k8s.io/v1",
                "kind": "InferencePool",
                "metadata": {"name": POOL, "namespace": NAMESPACE},
                "spec": {
                    "selector": {"matchLabels": {"app": "fleet-sim"}},
                    "targetPorts": [{"number": self.pod_port}],
                    "endpointPickerRef": {"name": "fleet-epp", "port": {"number": 9002}},
                },
            },
        )
        for objective in self.spec.objectives:
            k.apply(
                f"/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/inferenceobjectives",
                {
                    "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
                    "kind": "InferenceObjective",
                    "metadata": {"name": objective.name, "namespace": NAMESPACE},
                    "spec": {
                        "priority": objective.priority,
                        "poolRef": {"group": "inference.networking.k8s.io", "name": POOL},
                    },
                },
            )

    def _grant(self, user: str, rules: list[dict[str, Any]]) -> None:
        name = f"fleet-{user}"
        self.kube.apply(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": rules,
            },
        )
        self.kube.apply(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
                "roleRef": {"kind": "ClusterRole", "name": name, "apiGroup": "rbac.authorization.k8s.io"},
            },
        )

    def _start_predictor(self, name: str = "predictor", *args: str) -> None:
        argv = [
            sys.executable,
            "-m",
            "tests.support.fleet.predictor",
            f"--objective={self.spec.predictor_objective}",
            f"--record={self.predictor_bodies}",
        ]
        child = spawn(name, [*argv, *args], self.folder, _pythonpath())
        self.children.append(child)
        wait_for(child, lambda: logged(child, "training="), 30, "predictor URLs")
        line = next(li for li in child.log.read_text().splitlines() if li.startswith("training="))
        training, prediction = (part.split("=", 1)[1] for part in line.split())
        self.training_url, self.prediction_urls = training, prediction.split(",")

    def stop_predictor(self) -> None:
        """The predictor sidecars go away (the EPP and sloscope keep their URLs)."""
        for child in self.children:
            if child.name.startswith("predictor"):
                child.stop()

    def restart_predictor(self, *args: str) -> None:
        """The predictor sidecars come back on their ports as a new process would: default models, no samples;
        ``args`` are the stand-in's (``--retrain-seconds=3600``: it then never retrains)."""
        self.stop_predictor()
        ports = ",".join(url.rsplit(":", 1)[1] for url in [self.training_url, *self.prediction_urls])
        restarts = sum(child.name.startswith("predictor") for child in self.children)
        self._start_predictor(f"predictor-{restarts + 1}", f"--ports={ports}", *args)

    def _start_sloscope(self) -> None:
        token = self.folder / "sloscope.token"
        token.write_text(self.kube.users["sloscope"].token)
        settings: dict[str, Any] = {
            "listeners": {
                "host": "127.0.0.1",
                "otlp_grpc_port": 0,
                "otlp_http_port": 0,
                "metrics_port": 0,
            },
            "final_scrape_wait_seconds": 0,
            "scrape": {"interval_seconds": 1.0, "timeout_seconds": 1.0},
            "pools": [
                {
                    "name": POOL,
                    "model": MODEL,
                    "targets": {
                        "kubernetes": {
                            "namespace": NAMESPACE,
                            "inference_pool": POOL,
                            "kubeconfig": str(self.kube.kubeconfig("sloscope")),
                        }
                    },
                    "predictor": {"training_url": self.training_url, "prediction_urls": self.prediction_urls},
                    "epp": {
                        # GIE v1.5.0 serves /metrics in plain HTTP ("secure": false), authenticated by the API server
                        "metrics_url": f"http://127.0.0.1:{self.epp_metrics}/metrics",
                        "auth": {"credentials_file": str(token)},
                    },
                    **self.spec.pool_settings,
                }
            ],
        }
        settings = _merge(settings, self.spec.sloscope_settings)
        path = self.folder / "sloscope.yaml"
        path.write_text(yaml.safe_dump(settings, sort_keys=False))
        child = spawn("sloscope", [sys.executable, "-m", "sloscope", "serve", "--config", path], self.folder)
        self.children.append(child)
        wait_for(child, lambda: self._sloscope_bound(child), 60, "sloscope's listening line")
        wait_for(child, lambda: http_ok(self.sloscope_url("/metrics")), 60, "sloscope /metrics")

    def _sloscope_bound(self, child: Child) -> bool:
        for line in child.log.read_text(errors="replace").splitlines():
            bound = BoundPorts.from_log(line)
            if bound is not None:
                self.sloscope_grpc, self.sloscope_http, self.sloscope_metrics = (
                    bound.otlp_grpc,
                    bound.otlp_http,
                    bound.metrics,
                )
                return True
        return False

    def _start_pod(self, index: int, pod: PodSpec) -> PodHandle:
        name = f"sim-{index}"
        address = f"127.0.0.{10 + index}"
        (sim_port,) = free_ports(1)
        argv: list[str | Path] = [
            self.tools / "llm-d-inference-sim",
            f"--port={sim_port}",
            f"--model={MODEL}",
            "--mode=random",
            f"--time-to-first-token={pod.ttft_ms}ms",
            f"--inter-token-latency={pod.itl_ms}ms",
            f"--max-num-seqs={pod.max_num_seqs}",
            f"--seed={index + 1}",
            "--force-dummy-tokenizer",
        ]
        if pod.kv_cache_blocks is not None:
            # the simulator's KV cache fills with each running request's prompt blocks and reports
            # vllm:kv_cache_usage_perc from it; it refuses to start without the pod's IP (POD_IP). No KV events:
            # nothing here subscribes to them (an empty ZMQ endpoint publishes none)
            argv += ["--enable-kvcache", f"--kv-cache-size={pod.kv_cache_blocks}", "--zmq-endpoint="]
        sim = spawn(name, argv, self.folder, {"POD_IP": address})
        self.children.append(sim)
        wait_for(sim, lambda: http_ok(f"http://127.0.0.1:{sim_port}/v1/models"), 30, "simulator /v1/models")
        proxy = spawn(
            f"{name}-proxy",
            [
                sys.executable,
                "-m",
                "tests.support.fleet.vllm_proxy",
                f"--listen={address}:{self.pod_port}",
                f"--upstream=127.0.0.1:{sim_port}",
                f"--pod={name}",
                f"--namespace={NAMESPACE}",
                f"--otlp=127.0.0.1:{self.sloscope_grpc}",
            ],
            self.folder,
            _pythonpath(),
        )
        self.children.append(proxy)
        wait_for(proxy, lambda: http_ok(f"http://{address}:{self.pod_port}/v1/models"), 30, "proxy /v1/models")
        self.create_pod_object(name)
        return PodHandle(name, address, pod, sim, proxy)

    def create_pod_object(self, name: str) -> None:
        """The Pod object of a simulated pod, not yet Ready (:meth:`set_pod_ready` reports it)."""
        self.kube.apply(
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "fleet-sim"}},
                "spec": {"containers": [{"name": "vllm", "image": "llm-d-inference-sim:" + SIM_VERSION}]},
            },
        )

    def delete_pod_object(self, name: str) -> None:
        """Deletes the Pod object at once (grace period 0: no kubelet runs to finish it); the processes stay."""
        self.kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", {"gracePeriodSeconds": 0})

    def set_pod_ready(self, name: str, ready: bool) -> None:
        """The status a kubelet would report: Running with the pod's IP, condition Ready as asked."""
        address = next(p.address for p in self.pods if p.name == name)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        flag = "True" if ready else "False"
        status = {
            "status": {
                "phase": "Running",
                "podIP": address,
                "podIPs": [{"ip": address}],
                "conditions": [
                    {"type": "Ready", "status": flag, "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                ],
            }
        }
        self.kube.request(
            "PATCH",
            f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
            status,
            patch="application/merge-patch+json",
        )

    def epp_config(self) -> dict[str, Any]:
        """The EndpointPickerConfig the chart renders (``config/charts/epplib/templates/_config.yaml``)."""
        plugins: list[dict[str, Any]] = [
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "prefix-cache-scorer"},
            {
                "type": "metrics-data-source",
                "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True},
            },
            {"type": "core-metrics-extractor"},
        ]
        if not self.spec.latency_routing:
            profile = [
                {"pluginRef": "queue-scorer", "weight": 2},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                {"pluginRef": "prefix-cache-scorer", "weight": 3},
            ]
        else:
            producer: dict[str, Any] = {"type": "predicted-latency-producer"}
            if self.spec.streaming_mode is not None:
                producer["parameters"] = {"streamingMode": self.spec.streaming_mode}
            plugins += [
                producer,
                {
                    "name": "strict-affinity-filter",
                    "type": "prefix-cache-affinity-filter",
                    "parameters": {"affinityThreshold": 0.99},
                },
                {
                    "name": "loose-affinity-filter",
                    "type": "prefix-cache-affinity-filter",
                    "parameters": {"affinityThreshold": 0.80},
                },
                {"type": "latency-scorer"},
                {"type": "weighted-random-picker"},
                {"type": "slo-headroom-tier-filter"},
                {"type": "latency-slo-admitter"},
            ]
            profile = [
                {"pluginRef": ref}
                for ref in (
                    "predicted-latency-producer",
                    "strict-affinity-filter",
                    "slo-headroom-tier-filter",
                    "loose-affinity-filter",
                    "latency-scorer",
                    "weighted-random-picker",
                )
            ]
        return {
            "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
            "kind": "EndpointPickerConfig",
            "plugins": plugins,
            "schedulingProfiles": [{"name": "default", "plugins": profile}],
        }

    def _start_epp(self) -> None:
        config = self.folder / "epp-config.yaml"
        config.write_text(yaml.safe_dump(self.epp_config(), sort_keys=False))
        env = {
            "KUBECONFIG": str(self.kube.kubeconfig("epp")),
            "NAMESPACE": NAMESPACE,
            "POD_NAME": "fleet-epp-0",
            "OTEL_SERVICE_NAME": "gateway-api-inference-extension/epp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.sloscope_grpc}",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_RESOURCE_ATTRIBUTES": f"k8s.namespace.name={NAMESPACE},k8s.pod.name=fleet-epp-0",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": self.spec.sampler_arg,
            "TRAINING_SERVER_URL": self.training_url,
            "PREDICTION_SERVER_URL": ",".join(self.prediction_urls),
        }
        child = spawn(
            "epp",
            [
                self.tools / "epp",
                f"--pool-name={POOL}",
                f"--pool-namespace={NAMESPACE}",
                f"--grpc-port={self.epp_grpc}",
                f"--grpc-health-port={self.epp_health}",
                f"--metrics-port={self.epp_metrics}",
                f"--config-file={config}",
                "--zap-encoder=json",
                "--v=2",
            ],
            self.folder,
            env,
        )
        self.children.append(child)
        wait_for(child, lambda: self._epp_serving(child), 60, "EPP health SERVING")

    def _epp_serving(self, epp: Child) -> bool:
        """The ext_proc server listens and the EPP collects from every pod: it can route."""
        log = epp.log.read_text(errors="replace")
        return '"name":"ext-proc"' in log and log.count('"msg":"starting collection"') >= len(self.pods)

    def _start_gateway(self) -> None:
        argv: list[Any] = [
            self.tools / "fleet-gateway",
            f"-listen=127.0.0.1:{self.gateway_port}",
            f"-epp=127.0.0.1:{self.epp_grpc}",
        ]
        if self.spec.gateway_traces:
            argv.append(f"-otlp=127.0.0.1:{self.sloscope_grpc}")
        child = spawn("gateway", argv, self.folder)
        self.children.append(child)
        wait_for(child, lambda: logged(child, "gateway: serving"), 20, "gateway listening")

    # ---- use --------------------------------------------------------------------------------------

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def sloscope_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.sloscope_metrics}{path}"

    def sloscope_text(self) -> str:
        return page(self.sloscope_url("/metrics"))

    def epp_text(self, user: str = "sloscope") -> str:
        return page(f"http://127.0.0.1:{self.epp_metrics}/metrics", self.kube.users[user].token)

    def logs(self) -> str:
        parts = [
            f"--- {c.name} ({c.log}) ---\n{c.tail()}"
            for c in [*self.children, self.kube.apiserver, self.kube.etcd]
            if c
        ]
        return "\n".join(parts)

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.kube.stop()


@contextmanager
def running_fleet(tools: Path, folder: Path, spec: FleetSpec) -> Iterator[Fleet]:
    fleet = Fleet(tools, folder, spec)
    try:
        fleet.start()
    except BaseException:
        print(fleet.logs(), file=sys.stderr)
        fleet.stop()
        raise
    try:
        yield fleet
    finally:
        fleet.stop()


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _pythonpath() -> dict[str, str]:
    root = Path(__file__).resolve().parents[3]
    return {"PYTHONPATH": str(root)}


__all__ = ["Fleet", "FleetSpec", "Objective", "PodSpec", "running_fleet"]
