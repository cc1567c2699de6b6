"""Start, drain and stop: SIGTERM flushes everything accepted; stop is safe without start and twice."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from sloscope.config import Settings
from sloscope.demo.ports import free_port
from sloscope.loading import default_spec
from sloscope.receivers.otlp_http import PROTOBUF
from sloscope.service.server import Service
from sloscope.testing import export_request, span, vllm_attributes

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

ORPHAN = export_request([span(0xF1, 2, "llm_request", vllm_attributes(), parent=1)]).SerializeToString()


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, body, {"Content-Type": PROTOBUF})
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def test_sigterm_flushes_waiting_requests_and_keeps_metrics_up_for_a_final_scrape(
    serve: Callable[..., Server],
) -> None:
    server = serve(join={"window_seconds": 60, "trace_ttl_seconds": 120}, final_scrape_wait_seconds=60)
    assert post(server.otlp_http, ORPHAN) == 200
    wait_until(lambda: server.value("sloscope_traces_pending") == 1, what="the orphan to be pending")
    assert server.total("sloscope_requests_total") == 0
    server.process.send_signal(signal.SIGTERM)
    # The request flushed by the drain is on /metrics for the final scrape; that scrape lets sloscope exit.
    wait_until(lambda: server.total("sloscope_requests_total") == 1, what="the flushed request on /metrics")
    # Keep scraping as Prometheus would: the scrape that first saw it may have started before the record sinks
    # had flushed, and only one that starts after them is final.
    wait_until(lambda: scraped_or_exited(server), timeout=30, what="sloscope to exit after a final scrape")
    assert server.process.wait(5) == 0
    assert any("pipeline drained: 1 waiting request(s) flushed" in line for line in server.log), server.log
    assert any("sloscope stopped" in line for line in server.log)


def scraped_or_exited(server: Server) -> bool:
    """One more scrape of /metrics; True once the process has exited."""
    if server.process.poll() is not None:
        return True
    with contextlib.suppress(OSError):  # the listener closes as sloscope exits
        server.total("sloscope_requests_total")
    return False


def loopback_settings(**ports: int) -> Settings:
    return Settings(
        final_scrape_wait_seconds=0,
        listeners={"host": "127.0.0.1", "otlp_grpc_port": 0, "otlp_http_port": 0, "metrics_port": 0, **ports},
        join={"window_seconds": 60, "trace_ttl_seconds": 120},
    )


def test_stop_flushes_into_the_series_in_process() -> None:
    registry = CollectorRegistry()

    async def run() -> None:
        service = Service(loopback_settings(), default_spec(), registry)
        ports = await service.start()
        status = await asyncio.to_thread(post, f"http://127.0.0.1:{ports.otlp_http}/v1/traces", ORPHAN)
        assert status == 200
        await service.stop()

    asyncio.run(run())
    # vLLM's span names no model (0.33 sets none) and no gateway span came: every label is unknown
    labels = {"model": "unknown", "pool": "unknown", "slo_class": "none", "routing": "unknown"}
    assert registry.get_sample_value("sloscope_requests_total", labels) == 1
    assert registry.get_sample_value("sloscope_traces_joined_total", {"outcome": "anchor_only"}) == 1


def test_stop_without_start_and_twice_is_harmless() -> None:
    async def run() -> None:
        service = Service(loopback_settings(), default_spec())
        await service.stop()
        await service.stop()

    asyncio.run(run())


def test_a_new_instance_can_reuse_the_same_ports() -> None:
    fixed = {"otlp_grpc_port": free_port(), "otlp_http_port": free_port(), "metrics_port": free_port()}

    async def run() -> None:
        for _ in range(2):
            service = Service(loopback_settings(**fixed), default_spec())
            ports = await service.start()
            assert (ports.otlp_grpc, ports.otlp_http, ports.metrics) == tuple(fixed.values())
            ready = await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{ports.metrics}/readyz")
            assert ready.status == 200
            await service.stop()
            await service.stop()

    asyncio.run(run())


def test_a_port_in_use_fails_start_and_cleans_up() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]

        async def run() -> None:
            service = Service(loopback_settings(otlp_http_port=busy), default_spec())
            with pytest.raises(OSError):
                await service.start()
            assert not service.pipeline.running

        asyncio.run(run())


def test_ctrl_c_does_not_wait_for_a_final_scrape(serve: Callable[..., Server]) -> None:
    server = serve(final_scrape_wait_seconds=600)
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(30) == 0  # long before the 600 s a SIGTERM would wait for a scrape
    assert not any("waiting up to" in line for line in server.log)
