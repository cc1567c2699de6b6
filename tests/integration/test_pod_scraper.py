"""The pod scrape loop against real HTTP servers: outcomes counted by result, discovery changes, vanished pods."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sloscope.config import Pool, Scrape
from sloscope.demo.ports import free_port
from sloscope.processors.pod_history import PodHistory
from sloscope.publishers.pod_state import PodStateCollector
from sloscope.receivers.discovery import Target
from sloscope.receivers.off_loop import INLINE_BYTES
from sloscope.receivers.pod_scraper import PodScraper, scrape_offset
from sloscope.telemetry import Telemetry
from tests.support.page_server import PageServer, vllm_page

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scraper_for(registry: CollectorRegistry, clock: Clock, **scrape: float) -> tuple[PodScraper, PodHistory]:
    settings = Scrape(**{"timeout_seconds": 0.5, **scrape})  # type: ignore[arg-type]
    history = PodHistory(settings.history_samples, settings.stale_after_seconds, settings.vanished_grace_seconds)
    scraper = PodScraper(
        pools=[Pool(name="pool-a")],
        settings=settings,
        history=history,
        telemetry=Telemetry(registry),
        http=httpx.AsyncClient(),
        clock=clock,
    )
    registry.register(PodStateCollector(history, ["pool-a"], clock=clock))
    return scraper, history


def scrapes(registry: CollectorRegistry, result: str) -> float:
    return registry.get_sample_value("sloscope_scrapes_total", {"kind": "model_server", "result": result}) or 0.0


def gauge(registry: CollectorRegistry, name: str, pod: str) -> float | None:
    return registry.get_sample_value(name, {"pool": "pool-a", "pod": pod})


def test_every_failure_is_one_counted_result_and_a_down_pod(shared: Path) -> None:
    async def scenario() -> None:
        registry, clock = CollectorRegistry(), Clock()
        scraper, history = scraper_for(registry, clock)
        with PageServer(vllm_page(shared)) as page:
            target = Target("pool-a", "vllm-0", page.address)
            scraper.on_targets({target.key: target})
            assert await scraper.scrape_once(target) == "success"
            assert gauge(registry, "sloscope_pod_up", "vllm-0") == 1.0
            assert gauge(registry, "sloscope_pod_requests_running", "vllm-0") == 27.0
            page.status = 503
            assert await scraper.scrape_once(target) == "http_error"
            assert gauge(registry, "sloscope_pod_up", "vllm-0") == 0.0
            assert gauge(registry, "sloscope_pod_requests_running", "vllm-0") == 27.0  # the last state is kept
            page.status = 200
            page.page = 'vllm:num_requests_running{model_name="m" 3\n'  # a broken label block
            assert await scraper.scrape_once(target) == "parse_error"
            page.page = vllm_page(shared) + "app_unread_total 1\n" * (INLINE_BYTES // 18)  # read off the loop
            assert await scraper.scrape_once(target) == "success"
            assert gauge(registry, "sloscope_pod_requests_running", "vllm-0") == 27.0
            page.page += 'vllm:num_requests_running{model_name="m" 3\n'
            assert await scraper.scrape_once(target) == "parse_error"
        refused = Target("pool-a", "vllm-1", f"127.0.0.1:{free_port()}")
        scraper.on_targets({target.key: target, refused.key: refused})
        assert await scraper.scrape_once(refused) == "connection_error"
        assert (scrapes(registry, "success"), scrapes(registry, "http_error")) == (2, 1)
        assert (scrapes(registry, "parse_error"), scrapes(registry, "connection_error")) == (2, 1)
        assert len(history) == 2
        await scraper.stop()

    asyncio.run(scenario())


def test_the_servers_own_counters_pass_through_and_reset_with_it(shared: Path) -> None:
    """The real vLLM 0.33 page over HTTP: vllm:prefix_cache_hits_total 136480, vllm:prefix_cache_queries_total 566788,
    vllm:num_preemptions_total 14 become the pod's counters; a restarted server's lower value is published as is
    (a reset, which rate() reads as Prometheus reads any scraped counter's), never a made-up difference."""

    async def scenario() -> None:
        registry, clock = CollectorRegistry(), Clock()
        scraper, _ = scraper_for(registry, clock)
        counters = ("sloscope_pod_prefix_cache_hits_total", "sloscope_pod_prefix_cache_queries_total")
        with PageServer(vllm_page(shared)) as page:
            target = Target("pool-a", "vllm-0", page.address)
            scraper.on_targets({target.key: target})
            assert await scraper.scrape_once(target) == "success"
            assert [gauge(registry, name, "vllm-0") for name in counters] == [136480.0, 566788.0]
            assert gauge(registry, "sloscope_pod_preemptions_total", "vllm-0") == 14.0
            page.page = vllm_page(shared).replace(" 136480.0", " 12.0")  # the server restarted since
            assert await scraper.scrape_once(target) == "success"
            assert gauge(registry, counters[0], "vllm-0") == 12.0
        await scraper.stop()

    asyncio.run(scenario())


def test_a_slow_pod_is_a_timeout() -> None:
    async def scenario() -> None:
        registry, clock = CollectorRegistry(), Clock()
        scraper, _ = scraper_for(registry, clock, timeout_seconds=0.2)
        with socket.socket() as silent:  # accepts connections, never answers
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            target = Target("pool-a", "vllm-0", f"127.0.0.1:{silent.getsockname()[1]}")
            scraper.on_targets({target.key: target})
            assert await scraper.scrape_once(target) == "timeout"
        assert scrapes(registry, "timeout") == 1
        await scraper.stop()

    asyncio.run(scenario())


def test_discovery_changes_start_and_retire_scrapes_and_vanished_pods_expire(shared: Path) -> None:
    async def scenario() -> None:
        registry, clock = CollectorRegistry(), Clock()
        scraper, history = scraper_for(registry, clock, interval_seconds=0.05, vanished_grace_seconds=60)
        with PageServer(vllm_page(shared)) as page:
            target = Target("pool-a", "vllm-0", page.address)
            scraper.on_targets({target.key: target})
            for _ in range(200):  # the target's own task scrapes it on its schedule
                if page.requests >= 2:
                    break
                await asyncio.sleep(0.02)
            assert page.requests >= 2
            scraper.on_targets({})  # the pod left discovery
            seen = page.requests
            await asyncio.sleep(0.2)
            assert page.requests == seen  # its task was cancelled
            assert gauge(registry, "sloscope_pod_up", "vllm-0") == 1.0  # kept during the grace period
            clock.now += 59
            scraper.expire()
            assert len(history) == 1
            clock.now += 1
            scraper.expire()
            assert len(history) == 0
            assert gauge(registry, "sloscope_pod_up", "vllm-0") is None  # its series are gone
        await scraper.stop()

    asyncio.run(scenario())


def test_scrape_offsets_are_stable_and_spread_over_the_interval() -> None:
    targets = [Target("pool-a", f"vllm-{i}", f"10.0.0.{i}:8000") for i in range(200)]
    offsets = [scrape_offset(t, 5.0) for t in targets]
    assert offsets == [scrape_offset(t, 5.0) for t in targets]  # the same on every run
    assert all(0 <= o < 5.0 for o in offsets)
    per_second = [sum(1 for o in offsets if s <= o < s + 1) for s in range(5)]
    assert min(per_second) >= 20  # 40 expected per second; no second left empty or crowded
