"""KubernetesDiscovery against recorded API answers served on loopback the way the API server serves them.

The fake answers ``GET /api/v1/namespaces/{ns}/pods`` with a PodList, ``...&watch=true`` with a
chunked stream of newline-delimited watch events the test releases one by one, and custom-object
GETs with the recorded InferencePool; anything else is the API server's 404 Status. The official
client talks to it through a ``Configuration(host=...)``, so its real list, watch and error paths run.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from kubernetes import client as k8s

from sloscope.config import KubernetesSD
from sloscope.receivers.discovery import Target
from sloscope.receivers.discovery.kubernetes import KubernetesDiscovery

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes"
NS = "llm"
APP = "vllm-llama3-8b-instruct"
PODS = f"/api/v1/namespaces/{NS}/pods"
POOL_V1 = f"/apis/inference.networking.k8s.io/v1/namespaces/{NS}/inferencepools/{APP}"
POOL_V1ALPHA2 = f"/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/{NS}/inferencepools/{APP}"
A = f"{APP}-7d9f8c6b5d-x2k9p"  # ready in the first list; deleted by the watch
B = f"{APP}-7d9f8c6b5d-r7m4q"  # pending in the first list; ready after two MODIFIED events
C = f"{APP}-7d9f8c6b5d-b5n8t"  # ADDED pending, then running, then ready
ADDRESS = {A: "10.52.3.17:8000", B: "10.52.5.9:8000", C: "10.52.7.21:8000"}


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


# ---- the fake API server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


class WatchStream:
    """One watch response: events the test sends are written as they come; end() closes it."""

    def __init__(self) -> None:
        self._events: queue.Queue[dict[str, Any] | str | None] = queue.Queue()

    def send(self, event: dict[str, Any]) -> None:
        self._events.put(event)

    def send_raw(self, line: str) -> None:
        """A line as is, JSON or not."""
        self._events.put(line)

    def end(self) -> None:
        self._events.put(None)

    def next(self, timeout: float) -> dict[str, Any] | str | bool | None:
        """The next event, None at the end, False when nothing came within timeout."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return False


class FakeKubeAPI:
    """Recorded answers per path (in turn, the last one repeating) and scripted watch responses."""

    def __init__(self) -> None:
        self.replies: dict[str, list[Reply]] = {}
        self.watches: queue.Queue[WatchStream | Reply] = queue.Queue()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def reply(self, path: str, *replies: Reply) -> None:
        self.replies[path] = list(replies)

    def watch(self) -> WatchStream:
        """The response of the next watch request not yet scripted."""
        stream = WatchStream()
        self.watches.put(stream)
        return stream

    def fail_watch(self, reply: Reply) -> None:
        self.watches.put(reply)

    def lists(self) -> list[dict[str, str]]:
        return [query for path, query in self.requests if path == PODS and query.get("watch") != "true"]

    def watch_requests(self) -> list[dict[str, str]]:
        return [query for path, query in self.requests if path == PODS and query.get("watch") == "true"]

    def close(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()


def _handler(api: FakeKubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # chunked watch streams, as the API server sends them

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = dict(parse_qsl(url.query))
            api.requests.append((url.path, query))
            if query.get("watch") == "true":
                self._watch()
                return
            replies = api.replies.get(url.path)
            if not replies:
                self._send(Reply(404, load("status-not-found.json")))
                return
            self._send(replies.pop(0) if len(replies) > 1 else replies[0])

        def _send(self, reply: Reply) -> None:
            body = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _watch(self) -> None:
            scripted: WatchStream | Reply | None = None
            with contextlib.suppress(queue.Empty):
                scripted = api.watches.get_nowait()
            if isinstance(scripted, Reply):
                self._send(scripted)
                return
            self.send_response(200)  # the API server answers a watch at once, then streams
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            while scripted is None:  # an idle watch until the test scripts one
                if api.closing.is_set():
                    return
                with contextlib.suppress(queue.Empty):
                    item = api.watches.get(timeout=0.05)
                    scripted = item if isinstance(item, WatchStream) else None
            self._stream(scripted)

        def _stream(self, stream: WatchStream) -> None:
            try:
                while not api.closing.is_set():
                    event = stream.next(timeout=0.05)
                    if event is False:
                        continue
                    if event is None:
                        self.wfile.write(b"0\r\n\r\n")
                        return
                    line = ((event if isinstance(event, str) else json.dumps(event)) + "\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
            except OSError:  # the client shut the watch down
                self.close_connection = True

    return Handler


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI()
    yield server
    server.close()


# ---- running a source --------------------------------------------------------------------------


class Reports:
    """Every list the source reported, in order."""

    def __init__(self) -> None:
        self.lists: list[dict[str, str]] = []
        self.targets: list[list[Target]] = []

    def __call__(self, targets: Sequence[Target]) -> None:
        self.targets.append(list(targets))
        self.lists.append({target.pod: target.address for target in targets})

    @property
    def latest(self) -> dict[str, str] | None:
        return self.lists[-1] if self.lists else None


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Poll until true; the timeout only turns a hang into a failure, it is not what is tested."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def pods(*names: str) -> dict[str, str]:
    return {name: ADDRESS[name] for name in names}


def run(api: FakeKubeAPI, config: KubernetesSD, body: Callable[[Reports], Awaitable[None]]) -> Reports:
    """Run a KubernetesDiscovery while ``body`` drives the fake, then cancel it and check its thread ended."""
    reports = Reports()

    async def main() -> None:
        client = k8s.ApiClient(k8s.Configuration(host=api.url))
        source = KubernetesDiscovery(
            "llama", config, api_client=client, watch_seconds=60, backoff_seconds=0.01, max_backoff_seconds=0.05
        )
        task = asyncio.create_task(source.run(reports))
        try:
            await body(reports)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            client.close()
        alive = [thread.name for thread in threading.enumerate() if thread.name == "sloscope-discovery-llama"]
        assert alive == [], "the list-and-watch thread outlived the cancelled source"

    asyncio.run(main())
    return reports


SELECTOR = KubernetesSD(namespace=NS, label_selector=f"app={APP}", port=8000)


# ---- scenarios ---------------------------------------------------------------------------------


def test_list_then_watch_follows_readiness_additions_and_deletions(api: FakeKubeAPI) -> None:
    events = load("watch-events.json")
    api.reply(PODS, Reply(200, load("pods-list.json")))
    first = api.watch()
    second = api.watch()

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == pods(A), "the ready pod of the list")
        for event in events[:2]:  # B: running but loading the model, then Ready
            first.send(event)
        await wait_until(lambda: reports.latest == pods(A, B), "B once Ready")
        for event in events[2:5]:  # C: ADDED pending, running not ready, then Ready
            first.send(event)
        await wait_until(lambda: reports.latest == pods(A, B, C), "C once Ready")
        first.send(events[5])  # BOOKMARK
        first.end()
        await wait_until(lambda: len(api.watch_requests()) == 2, "the watch to resume")
        second.send(events[6])  # A gets a deletionTimestamp: no longer scraped, though still Ready
        await wait_until(lambda: reports.latest == pods(B, C), "A gone once terminating")
        second.send(events[7])  # DELETED A
        second.end()
        await wait_until(lambda: len(api.watch_requests()) == 3, "the watch to resume again")

    reports = run(api, SELECTOR, body)

    assert reports.lists == [pods(A), pods(A, B), pods(A, B, C), pods(B, C)]  # no report for events that change nothing
    assert [(t.pool, t.pod, t.address) for t in reports.targets[-1]] == [
        ("llama", C, ADDRESS[C]),
        ("llama", B, ADDRESS[B]),
    ]
    assert {t.label("app") for t in reports.targets[-1]} == {APP}  # the pods' metadata labels come along
    assert api.lists() == [{"labelSelector": f"app={APP}"}]
    watches = api.watch_requests()
    assert [query["resourceVersion"] for query in watches] == ["418523", "418800", "418870"]  # list, bookmark, DELETED
    assert all(query["labelSelector"] == f"app={APP}" for query in watches)
    assert all(query["allowWatchBookmarks"] == "true" and query["timeoutSeconds"] == "60" for query in watches)


def test_inference_pool_v1_gives_the_selector_and_the_port(api: FakeKubeAPI) -> None:
    api.reply(POOL_V1, Reply(200, load("inferencepool-v1.json")))
    api.reply(PODS, Reply(200, load("pods-list.json")))

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest is not None, "the first report")

    reports = run(api, KubernetesSD(namespace=NS, inference_pool=APP), body)

    assert reports.lists == [{A: "10.52.3.17:8000"}]  # port 8000 from spec.targetPorts
    assert [path for path, _ in api.requests][:2] == [POOL_V1, PODS]
    assert api.lists() == [{"labelSelector": f"app={APP}"}]  # from spec.selector.matchLabels


def test_inference_pool_falls_back_to_v1alpha2_when_v1_is_not_served(api: FakeKubeAPI) -> None:
    pool = load("inferencepool-v1alpha2.json")
    pool["spec"]["selector"] = {"app": APP, "tier": "gpu"}
    pool["spec"]["targetPortNumber"] = 8200
    api.reply(POOL_V1ALPHA2, Reply(200, pool))
    api.reply(PODS, Reply(200, load("pods-list.json")))

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest is not None, "the first report")

    reports = run(api, KubernetesSD(namespace=NS, inference_pool=APP), body)

    assert reports.lists == [{A: "10.52.3.17:8200"}]
    assert [path for path, _ in api.requests][:3] == [POOL_V1, POOL_V1ALPHA2, PODS]
    assert api.lists() == [{"labelSelector": f"app={APP},tier=gpu"}]


def test_configured_port_overrides_the_pools(api: FakeKubeAPI) -> None:
    api.reply(POOL_V1, Reply(200, load("inferencepool-v1.json")))
    api.reply(PODS, Reply(200, load("pods-list.json")))

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest is not None, "the first report")

    reports = run(api, KubernetesSD(namespace=NS, inference_pool=APP, port=9090), body)

    assert reports.lists == [{A: "10.52.3.17:9090"}]


def test_a_changed_inference_pool_is_listed_again_with_its_new_selector(api: FakeKubeAPI) -> None:
    changed = load("inferencepool-v1.json")
    changed["spec"]["selector"]["matchLabels"] = {"app": APP, "pod-template-hash": "7d9f8c6b5d"}
    api.reply(POOL_V1, Reply(200, load("inferencepool-v1.json")), Reply(200, load("inferencepool-v1.json")))
    api.reply(PODS, Reply(200, load("pods-list.json")), Reply(200, load("pods-list-relisted.json")))
    first = api.watch()

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == pods(A), "the first list")
        api.reply(POOL_V1, Reply(200, changed))
        first.end()  # the server ends the watch; the pool is read again before the next one
        await wait_until(lambda: reports.latest == pods(B, C), "the list under the new selector")

    reports = run(api, KubernetesSD(namespace=NS, inference_pool=APP), body)

    assert reports.lists == [pods(A), pods(B, C)]
    assert [query["labelSelector"] for query in api.lists()] == [
        f"app={APP}",
        f"app={APP},pod-template-hash=7d9f8c6b5d",
    ]


def test_gone_error_event_lists_again_and_watches_from_the_new_list(
    api: FakeKubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    api.reply(PODS, Reply(200, load("pods-list.json")), Reply(200, load("pods-list-relisted.json")))
    first = api.watch()

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == pods(A), "the first list")
        first.send({"type": "ERROR", "object": load("status-gone.json")})
        await wait_until(lambda: reports.latest == pods(B, C), "the second list")
        await wait_until(lambda: len(api.watch_requests()) == 2, "the watch from the second list")

    with caplog.at_level(logging.INFO, logger="sloscope.receivers.discovery.kubernetes"):
        reports = run(api, SELECTOR, body)

    assert reports.lists == [pods(A), pods(B, C)]
    assert len(api.lists()) == 2
    assert [query["resourceVersion"] for query in api.watch_requests()] == ["418523", "420117"]
    assert any("410 Gone" in record.getMessage() for record in caplog.records)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]  # expected, not a failure


def test_api_errors_are_retried_and_the_last_good_list_stays(
    api: FakeKubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    failure = Reply(500, load("status-internal-error.json"))
    api.reply(PODS, Reply(200, load("pods-list.json")), failure, failure, Reply(200, load("pods-list-relisted.json")))
    api.fail_watch(failure)

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == pods(B, C), "the list after the errors")

    with caplog.at_level(logging.WARNING, logger="sloscope.receivers.discovery.kubernetes"):
        reports = run(api, SELECTOR, body)

    assert reports.lists == [pods(A), pods(B, C)]  # nothing reported (no empty list) while failing
    assert len(api.lists()) == 4  # the first list, two failed ones, the good one
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 3  # the failed watch and the two failed lists
    assert all("API answered 500" in message and "keeping the last 1 target(s)" in message for message in warnings)


def test_a_pod_list_without_resource_version_is_an_error_not_a_crash(
    api: FakeKubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    broken = copy.deepcopy(load("pods-list.json"))
    del broken["metadata"]["resourceVersion"]
    api.reply(PODS, Reply(200, broken), Reply(200, load("pods-list.json")))

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == pods(A), "the good list")

    with caplog.at_level(logging.WARNING, logger="sloscope.receivers.discovery.kubernetes"):
        reports = run(api, SELECTOR, body)

    assert reports.lists == [pods(A)]
    assert any("no metadata.resourceVersion" in record.getMessage() for record in caplog.records)


def test_a_watch_line_that_is_not_json_is_skipped(api: FakeKubeAPI) -> None:
    events = load("watch-events.json")
    api.reply(PODS, Reply(200, load("pods-list.json")))
    stream = api.watch()

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == pods(A), "the first list")
        stream.send_raw('{"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {')  # cut short by a proxy
        stream.send_raw("")
        stream.send(events[1])  # B Ready
        await wait_until(lambda: reports.latest == pods(A, B), "the event after the bad line")

    reports = run(api, SELECTOR, body)
    assert reports.lists == [pods(A), pods(A, B)]
    assert len(api.watch_requests()) == 1  # the same watch went on
