"""Ready model-server pods from the Kubernetes API: an InferencePool's selector (or a label selector), list, watch.

The official client blocks, so one thread per source lists the pods, watches from the list's
resourceVersion and hands each changed target list to the event loop with ``call_soon_threadsafe``.
A pod is a target only while it has an IP, is Running, has condition Ready=True and is not being
deleted: the same pods the EPP routes to. API errors are logged and retried with bounded backoff,
and the last good list stays in force meanwhile; an expired resourceVersion (410 Gone) re-lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch import Watch

from sloscope import threads
from sloscope.config import KubernetesSD
from sloscope.receivers.discovery import Target, Update, sorted_labels

__all__ = [
    "INFERENCE_POOL_APIS",
    "KubernetesDiscovery",
    "api_message",
    "format_selector",
    "is_ready",
    "pod_target",
    "pool_selector",
]

log = logging.getLogger(__name__)

INFERENCE_POOL_APIS = (("inference.networking.k8s.io", "v1"), ("inference.networking.x-k8s.io", "v1alpha2"))
"""(group, version) tried in order: v1 first, the older v1alpha2 when v1 answers 404."""
_PLURAL = "inferencepools"
_GONE = 410
_NOT_FOUND = 404
_CONNECT_SECONDS = 10.0
# kubernetes ships py.typed, but Watch, ApiClient.close and the config loaders have no annotations:
# pyproject.toml lets mypy accept those calls (untyped_calls_exclude).
_RETRYABLE = (k8s.ApiException, urllib3.exceptions.HTTPError, OSError, ValueError, ConfigException)


# ---- pure functions --------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Condition Ready is "True" (the kubelet's verdict from the readiness probe)."""
    conditions = _mapping(pod.get("status")).get("conditions")
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(condition, Mapping) and condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in conditions
    )


ACTIVE_PORTS = ("llm-d.ai/active-ports", "inference.networking.k8s.io/active-ports")  # the second deprecated


def pod_target(pool: str, pod: Mapping[str, Any], ports: tuple[int, ...]) -> Target | None:
    """The target of a pod as the API returns it (a dict), or None while it should not be scraped.

    Scraped: a pod with a podIP, phase Running and condition Ready=True, not being deleted. A pod
    with a deletionTimestamp is going away (the EPP stops routing to it too); its last requests'
    spans still find the pod's recent samples, which the scrape loop keeps for a grace period.

    ``ports``: the pool's target ports. With several, rank *i* serves on the i-th (llm-d's multi-port data
    parallelism), limited to the pod's ``llm-d.ai/active-ports`` annotation when it has one, as the EPP does
    (``extractActivePorts``, llm-d-router ebab6879 ``pkg/epp/datastore/datastore.go:330-346,494-517``); a pod with
    no active port gets no traffic and is not scraped.
    """
    metadata = _mapping(pod.get("metadata"))
    status = _mapping(pod.get("status"))
    name = metadata.get("name")
    ip = status.get("podIP")
    if not isinstance(name, str) or not name or not isinstance(ip, str) or not ip:
        return None
    if metadata.get("deletionTimestamp") or status.get("phase") != "Running" or not is_ready(pod):
        return None
    host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod IP
    labels = _mapping(metadata.get("labels"))
    pod_labels = sorted_labels({str(k): v for k, v in labels.items() if isinstance(v, str)})
    active = _active_ports(metadata, ports)
    ranks = [(rank, port) for rank, port in enumerate(ports) if port in active]
    if not ranks:
        return None
    return Target(pool, name, f"{host}:{ranks[0][1]}", labels=pod_labels, ranks=tuple(ranks) if len(ports) > 1 else ())


def _active_ports(metadata: Mapping[str, Any], ports: tuple[int, ...]) -> set[int]:
    """The ports of the annotation (comma-separated, unknown ones and junk ignored), else all of ``ports``."""
    annotations = _mapping(metadata.get("annotations"))
    written = next((v for key in ACTIVE_PORTS if isinstance(v := annotations.get(key), str)), None)
    if written is None:
        return set(ports)
    listed = {int(part) for part in (p.strip() for p in written.split(",")) if part.isdigit()}
    return listed & set(ports)


def api_message(body: object) -> str:
    """The API server's own explanation in an error's Status body (``: <message>``), or "".

    A refusal names the user, the verb and the resource (``pods is forbidden: User "x" cannot list resource "pods"
    ...``): what an operator needs to fix RBAC, where the status line alone says only ``403 Forbidden``.
    """
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if not isinstance(body, str):
        return ""
    try:
        status = json.loads(body)
    except ValueError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return f": {message}" if isinstance(message, str) and message else ""


def format_selector(labels: Mapping[str, str]) -> str:
    """``k=v,k2=v2`` in key order: the labelSelector query of an equality-only selector."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def pool_selector(pool: Mapping[str, Any]) -> tuple[str, tuple[int, ...]]:
    """The label selector and target ports of an InferencePool object; ValueError when it has neither shape.

    v1 has ``spec.selector.matchLabels`` and ``spec.targetPorts: [{number: N}, ...]`` (several: the ranks of
    multi-port data parallelism); v1alpha2 has a plain label map in ``spec.selector`` and ``spec.targetPortNumber``.
    An empty selector is refused: it would select every pod of the namespace.
    """
    spec = _mapping(pool.get("spec"))
    selector = _mapping(spec.get("selector"))
    labels = selector.get("matchLabels") if isinstance(selector.get("matchLabels"), Mapping) else selector
    assert isinstance(labels, Mapping)
    if not labels:
        raise ValueError("the InferencePool's selector is empty or missing")
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in labels.items()):
        raise ValueError(f"the InferencePool's selector is not a map of strings: {dict(labels)!r}")
    listed = spec.get("targetPorts")
    ports: tuple[int, ...] = ()
    if isinstance(listed, list):
        ports = tuple(number for entry in listed if isinstance(number := _mapping(entry).get("number"), int))
    elif isinstance(spec.get("targetPortNumber"), int):
        ports = (spec["targetPortNumber"],)
    return format_selector(labels), ports


# ---- the worker thread -----------------------------------------------------------------------


def _json(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A client call's body as plain dicts and lists, without the client's model classes."""
    response = call(*args, _preload_content=False, **kwargs)
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


class _ExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again, at once."""


class _Worker:
    """One list-and-watch session after another until stopped; runs in its own thread."""

    def __init__(
        self,
        pool: str,
        config: KubernetesSD,
        api_client: k8s.ApiClient | None,
        deliver: Callable[[list[Target]], None],
        *,
        watch_seconds: int,
        request_seconds: float,
        backoff_seconds: float,
        max_backoff_seconds: float,
    ) -> None:
        self._pool = pool
        self._config = config
        self._api_client = api_client
        self._deliver = deliver
        self._watch_seconds = watch_seconds
        self._request_seconds = request_seconds
        self._backoff_seconds = backoff_seconds
        self._max_backoff_seconds = max_backoff_seconds
        self._delay = backoff_seconds
        self._stopped = threading.Event()
        self._watch: Watch | None = None
        self._reported: list[Target] | None = None
        self._where = f"pool {pool}: kubernetes {config.namespace}/" + (
            f"InferencePool {config.inference_pool}" if config.inference_pool else f"pods {config.label_selector}"
        )

    def stop(self) -> None:
        """Ask the thread to end; a watch blocked on its socket is woken by shutting the socket down."""
        self._stopped.set()
        watch = self._watch
        if watch is not None:
            watch.stop()

    def run(self) -> None:
        api = self._api_client
        owned = api is None
        try:
            while not self._stopped.is_set():
                try:
                    if api is None:
                        api = self._connect()
                    self._list_and_watch(api)
                except _ExpiredError:
                    log.info("%s: resourceVersion expired (410 Gone); listing again", self._where)
                except _RETRYABLE as exc:
                    if self._stopped.is_set():
                        break
                    self._back_off(exc)
        finally:
            if owned and api is not None:
                api.close()

    def _connect(self) -> k8s.ApiClient:
        configuration = k8s.Configuration()
        if self._config.kubeconfig:
            path = self._config.kubeconfig
            k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
        return k8s.ApiClient(configuration)

    def _back_off(self, exc: BaseException) -> None:
        if isinstance(exc, k8s.ApiException):
            reason = f"API answered {exc.status} {exc.reason}{api_message(exc.body)}"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        delay = self._delay * random.uniform(0.8, 1.2)  # jitter: many exporters must not retry in step
        kept = len(self._reported or [])
        log.warning("%s: %s; keeping the last %d target(s), retrying in %.1fs", self._where, reason, kept, delay)
        self._delay = min(self._delay * 2, self._max_backoff_seconds)
        self._stopped.wait(delay)

    def _resolve(self, api: k8s.ApiClient) -> tuple[str, tuple[int, ...]]:
        """The label selector and metrics ports: the settings', or the InferencePool's (``port`` overrides them)."""
        config = self._config
        if config.inference_pool is None:
            assert config.label_selector is not None and config.port is not None  # KubernetesSD validates this
            return config.label_selector, (config.port,)
        custom = k8s.CustomObjectsApi(api)
        for group, version in INFERENCE_POOL_APIS:
            try:
                body = _json(
                    custom.get_namespaced_custom_object,
                    group,
                    version,
                    config.namespace,
                    _PLURAL,
                    config.inference_pool,
                    _request_timeout=(_CONNECT_SECONDS, self._request_seconds),
                )
            except k8s.ApiException as exc:
                if exc.status == _NOT_FOUND:
                    continue
                raise
            selector, ports = pool_selector(body)
            ports = (config.port,) if config.port else ports
            if not ports:
                raise ValueError(f"InferencePool {config.inference_pool} names no target port; set port")
            return selector, ports
        apis = " nor ".join(f"{group}/{version}" for group, version in INFERENCE_POOL_APIS)
        raise ValueError(f"InferencePool {config.inference_pool} not found in {apis}")

    def _list_and_watch(self, api: k8s.ApiClient) -> None:
        """List, report, then watch from the list's resourceVersion until stopped or the pool changes."""
        core = k8s.CoreV1Api(api)
        selector, ports = self._resolve(api)
        body = _json(
            core.list_namespaced_pod,
            self._config.namespace,
            label_selector=selector,
            _request_timeout=(_CONNECT_SECONDS, self._request_seconds),
        )
        version = str(_mapping(body.get("metadata")).get("resourceVersion") or "")
        items = body.get("items")
        if not version or not isinstance(items, list):
            raise ValueError("the pod list has no metadata.resourceVersion or no items")
        targets: dict[str, Target] = {}
        for pod in items:
            target = pod_target(self._pool, _mapping(pod), ports)
            if target is not None:
                targets[target.pod] = target
        self._report(targets)
        while not self._stopped.is_set():
            version = self._watch_once(core, selector, ports, version, targets)
            if self._config.inference_pool is not None and self._resolve(api) != (selector, ports):
                log.info("%s: the InferencePool's selector or port changed; listing again", self._where)
                return

    def _watch_once(
        self, core: k8s.CoreV1Api, selector: str, ports: tuple[int, ...], version: str, targets: dict[str, Target]
    ) -> str:
        """One watch request, until the server ends it (timeoutSeconds); the newest resourceVersion seen."""
        # return_type "object": events keep the API's dicts instead of the client's model classes.
        watch = Watch(return_type="object")
        self._watch = watch
        if self._stopped.is_set():
            return version
        try:
            stream = watch.stream(
                core.list_namespaced_pod,
                self._config.namespace,
                label_selector=selector,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_seconds,
                _request_timeout=(_CONNECT_SECONDS, self._watch_seconds + self._request_seconds),
            )
            for event in stream:
                if self._stopped.is_set():
                    break
                if isinstance(event, Mapping):  # the client yields None for a line that is not JSON
                    version = self._apply(event, ports, targets) or version
                    self._delay = self._backoff_seconds  # the API works: the next failure starts the backoff anew
        except k8s.ApiException as exc:
            if exc.status == _GONE:  # the client turns an ERROR event into an ApiException
                raise _ExpiredError from exc
            raise
        finally:
            self._watch = None
        self._delay = self._backoff_seconds
        return version

    def _apply(self, event: Mapping[str, Any], ports: tuple[int, ...], targets: dict[str, Target]) -> str | None:
        kind = event.get("type")
        pod = _mapping(event.get("raw_object"))
        metadata = _mapping(pod.get("metadata"))
        name = metadata.get("name")
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            log.warning("%s: ignoring a watch event of type %r", self._where, kind)
        elif kind != "BOOKMARK" and isinstance(name, str):  # a BOOKMARK only moves the resourceVersion on
            target = pod_target(self._pool, pod, ports) if kind != "DELETED" else None
            if target is None:
                targets.pop(name, None)
            else:
                targets[name] = target
        self._report(targets)
        version = metadata.get("resourceVersion")
        return str(version) if version else None

    def _report(self, targets: dict[str, Target]) -> None:
        current = sorted(targets.values(), key=lambda target: target.pod)
        if current != self._reported and not self._stopped.is_set():
            self._reported = current
            self._deliver(current)


# ---- the source ------------------------------------------------------------------------------


class KubernetesDiscovery:
    """Pods of ``config.namespace`` picked by an InferencePool or a label selector.

    ``api_client`` replaces the client built from ``kubeconfig`` or the in-cluster service account
    (tests point one at a loopback server). ``watch_seconds`` is the server-side length of one watch
    request; ``backoff_seconds`` doubles after each failure up to ``max_backoff_seconds``.
    """

    def __init__(
        self,
        pool: str,
        config: KubernetesSD,
        *,
        api_client: k8s.ApiClient | None = None,
        watch_seconds: int = 300,
        request_seconds: float = 30.0,
        backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 30.0,
        stop_seconds: float = 5.0,
    ) -> None:
        self._pool = pool
        self._config = config
        self._api_client = api_client
        self._watch_seconds = watch_seconds
        self._request_seconds = request_seconds
        self._backoff_seconds = backoff_seconds
        self._max_backoff_seconds = max_backoff_seconds
        self._stop_seconds = stop_seconds

    async def run(self, update: Update) -> None:
        """Run the list-and-watch thread until cancelled; cancelling stops the thread before returning."""
        loop = asyncio.get_running_loop()

        def deliver(targets: list[Target]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed under a thread about to end
                loop.call_soon_threadsafe(update, targets)

        worker = _Worker(
            self._pool,
            self._config,
            self._api_client,
            deliver,
            watch_seconds=self._watch_seconds,
            request_seconds=self._request_seconds,
            backoff_seconds=self._backoff_seconds,
            max_backoff_seconds=self._max_backoff_seconds,
        )
        finished: asyncio.Future[None] = loop.create_future()

        def body() -> None:
            error: BaseException | None = None
            try:
                worker.run()
            except BaseException as exc:  # handed to the event loop: the manager logs and restarts
                error = exc
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, finished, error)

        thread = threads.start(body, f"sloscope-discovery-{self._pool}")
        try:
            await asyncio.shield(finished)
        finally:
            await self._stop(worker, thread)
            if finished.done():
                finished.exception()  # retrieved: an error while stopping is not news

    async def _stop(self, worker: _Worker, thread: threading.Thread) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._stop_seconds
        while thread.is_alive() and loop.time() < deadline:
            worker.stop()  # again each turn: a watch that connected after the first call is shut too
            await asyncio.sleep(0.01)
        if thread.is_alive():
            log.warning(
                "pool %s: the kubernetes discovery thread did not stop within %ss", self._pool, self._stop_seconds
            )


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
