"""Simulated pods' pages over real HTTP on loopback: one port per pod, read by sloscope's own scraper."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sloscope.config import Pool, Scrape
from sloscope.demo.pod import PodParams, SimPod
from sloscope.demo.pod_server import PodServers, serve_pods
from sloscope.demo.records import SimRequest
from sloscope.processors.pod_history import PodHistory
from sloscope.receivers.discovery import Target
from sloscope.receivers.pod_scraper import PodScraper
from sloscope.telemetry import Telemetry

pytestmark = pytest.mark.integration

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def pods() -> list[SimPod]:
    return [SimPod(name, f"model-{name}", PodParams(), random.Random(1)) for name in ("pod-a", "pod-b")]


def with_servers(scenario: Callable[[list[SimPod], PodServers], Awaitable[None]]) -> None:
    async def main() -> None:
        fleet = pods()
        servers = await serve_pods(fleet)
        try:
            await scenario(fleet, servers)
        finally:
            await servers.stop()

    asyncio.run(main())


async def raw_exchange(address: str, request: bytes) -> bytes:
    """Sends ``request`` as is and reads until the server closes the connection."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await writer.wait_closed()
    return answer


def test_each_pod_serves_its_own_page_on_its_own_port() -> None:
    async def scenario(fleet: list[SimPod], servers: PodServers) -> None:
        a, b = fleet
        fleet[0].submit(SimRequest("r1", "batch", a.model, 100, 10, None, None, 0.0))  # queued: the pod is not run
        assert servers.address_of("pod-a") != servers.address_of("pod-b")
        assert set(servers.addresses) == {"pod-a", "pod-b"}
        async with httpx.AsyncClient() as http:
            for pod, waiting in ((a, "1.0"), (b, "0.0")):
                address = servers.address_of(pod.name)
                assert address.startswith("127.0.0.1:")
                response = await http.get(f"http://{address}/metrics")
                assert response.status_code == 200
                assert response.headers["content-type"] == TEXT_FORMAT
                assert response.text == pod.metrics_text()
                line = f'vllm:num_requests_waiting{{engine="0",model_name="{pod.model}"}} {waiting}'
                assert line in response.text.splitlines()
                again = await http.get(f"http://{address}/metrics?second=1")  # the same kept-alive connection
                assert again.status_code == 200

    with_servers(scenario)


def test_other_paths_and_methods_are_refused() -> None:
    async def scenario(fleet: list[SimPod], servers: PodServers) -> None:
        base = f"http://{servers.address_of('pod-a')}"
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{base}/")).status_code == 404
            assert (await http.get(f"{base}/metrics/extra")).status_code == 404
            assert (await http.post(f"{base}/metrics")).status_code == 405
            head = await http.head(f"{base}/metrics")
            assert (head.status_code, head.content) == (200, b"")
            assert (await http.get(f"{base}/metrics")).status_code == 200  # still served after all that
        bad = await raw_exchange(servers.address_of("pod-a"), b"NONSENSE\r\n\r\n")
        assert bad.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        closed = await raw_exchange(servers.address_of("pod-b"), b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert closed.startswith(b"HTTP/1.1 200 OK\r\n")
        assert closed.endswith(fleet[1].metrics_text().encode())

    with_servers(scenario)


def test_sloscope_s_scraper_reads_each_pod_s_state() -> None:
    async def scenario(fleet: list[SimPod], servers: PodServers) -> None:
        a, _ = fleet
        for i in range(3):
            a.submit(SimRequest(f"r{i}", "batch", a.model, 100, 10, None, None, 0.0))
        registry = CollectorRegistry()
        settings = Scrape()
        history = PodHistory(settings.history_samples, settings.stale_after_seconds, settings.vanished_grace_seconds)
        async with httpx.AsyncClient() as http:
            scraper = PodScraper(
                pools=[Pool(name="pool-a")],
                settings=settings,
                history=history,
                telemetry=Telemetry(registry),
                http=http,
            )
            for pod in fleet:
                target = Target("pool-a", pod.name, servers.address_of(pod.name))
                history.track(target)
                assert await scraper.scrape_once(target) == "success"
                sample = history.as_of(target.key, time.time() + 1)
                assert sample is not None
                state, snapshot = sample.state, pod.snapshot()
                assert (state.waiting, state.running, state.kv_cache_utilization) == (
                    snapshot.waiting,
                    snapshot.running,
                    snapshot.kv_cache_utilization,
                )
            await scraper.stop()
        assert a.snapshot().waiting == 3

    with_servers(scenario)


def test_stop_closes_the_ports_and_open_connections() -> None:
    async def main() -> None:
        fleet = pods()
        servers = await serve_pods(fleet)
        addresses = [servers.address_of(pod.name) for pod in fleet]
        async with httpx.AsyncClient() as http:
            for address in addresses:  # leaves a kept-alive connection open on every server
                assert (await http.get(f"http://{address}/metrics")).status_code == 200
            await asyncio.wait_for(servers.stop(), 10)
            await servers.stop()  # a second stop is harmless
            for address in addresses:
                with pytest.raises(httpx.ConnectError):
                    await http.get(f"http://{address}/metrics")
        for address in addresses:  # the port can be bound again
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", int(address.rsplit(":", 1)[1])))

    asyncio.run(main())


def test_pod_names_must_be_unique() -> None:
    async def main() -> None:
        twin = [SimPod("pod-a", "m", PodParams(), random.Random(1)) for _ in range(2)]
        with pytest.raises(ValueError, match="unique"):
            await serve_pods(twin)

    asyncio.run(main())
