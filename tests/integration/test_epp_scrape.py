"""EPPScraper against a real HTTP server on loopback: the fixture page, failures, staleness, the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope import conventions as c
from sloscope.predictor.generation import GIE_2025, GIE_V15, LLM_D
from sloscope.processors.inflight_history import InflightHistory
from sloscope.publishers.epp import EPPCollector
from sloscope.receivers.epp import EPPScraper
from sloscope.receivers.off_loop import INLINE_BYTES
from sloscope.telemetry import Telemetry

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
TEXT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = TEXT


class FakeEPP:
    """A /metrics endpoint whose next answers the test sets; counts the requests it served."""

    def __init__(self) -> None:
        self.reply = Reply()
        self.requests = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                reply = fake.reply
                fake.requests += 1
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), name="fake-epp", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def epp(shared: Path) -> Iterator[FakeEPP]:
    fake = FakeEPP()
    fake.reply = Reply(body=(shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_bytes())
    yield fake
    fake.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    registry: CollectorRegistry
    telemetry: Telemetry
    clock: Clock

    def scrapes(self, result: str) -> float:
        value = self.registry.get_sample_value(f"{c.SCRAPES.name}_total", {"kind": c.KIND_EPP, "result": result})
        assert value is not None
        return value

    def epp_lines(self) -> list[str]:
        """The republished EPP series (the EPP's own up gauge aside)."""
        text = generate_latest(self.registry).decode()
        return [line for line in text.splitlines() if line.startswith("sloscope_epp_") and "epp_up" not in line]

    def up(self) -> float | None:
        return self.registry.get_sample_value(c.EPP_UP.name, {"pool": "pool-a"})


@pytest.fixture
def rig() -> Rig:
    registry = CollectorRegistry()
    return Rig(registry, Telemetry(registry), Clock())


def scraper(rig: Rig, url: str, client: httpx.AsyncClient, **overrides: float) -> EPPScraper:
    settings = {"interval": 5.0, "timeout": 3.0, "stale_after": 30.0, **overrides}
    return EPPScraper("pool-a", url, client, rig.telemetry, clock=rig.clock, **settings)


def test_fixture_page_scraped_and_republished(epp: FakeEPP, rig: Rig) -> None:
    async def run() -> str:
        async with httpx.AsyncClient() as client:
            s = scraper(rig, epp.url, client)
            rig.registry.register(EPPCollector(lambda: [s.latest]))
            return await s.scrape_once()

    assert asyncio.run(run()) == c.RESULT_SUCCESS
    labels = f'model="{LLAMA}",pool="pool-a",target_model="{LLAMA}"'
    assert rig.epp_lines() == [
        f'sloscope_epp_ttft_seconds_bucket{{le="0.2",{labels}}} 0.0',
        f'sloscope_epp_ttft_seconds_bucket{{le="0.4",{labels}}} 1.0',
        f'sloscope_epp_ttft_seconds_bucket{{le="+Inf",{labels}}} 1.0',
        f"sloscope_epp_ttft_seconds_count{{{labels}}} 1.0",
        f"sloscope_epp_ttft_seconds_sum{{{labels}}} 0.231",
        f'sloscope_epp_slo_violations_total{{model="{LLAMA}",plugin_name="",plugin_type="",pool="pool-a",'
        f'target_model="{LLAMA}",type="ttft"}} 1.0',
    ]
    assert rig.scrapes(c.RESULT_SUCCESS) == 1


@pytest.mark.parametrize(
    ("reply", "result"),
    [
        pytest.param(Reply(status=500, body=b"internal error"), c.RESULT_HTTP_ERROR, id="500 is http_error"),
        pytest.param(
            Reply(body=b'<html>\ninference_objective_request_ttft_seconds_bucket{le="0.2" oops\n</html>\n'),
            c.RESULT_PARSE_ERROR,
            id="garbage in a wanted line is parse_error",
        ),
        pytest.param(
            Reply(
                body=b"inference_objective_request_slo_violation_total 1\n", content_type="application/openmetrics-text"
            ),
            c.RESULT_PARSE_ERROR,
            id="OpenMetrics page cut before # EOF is parse_error",
        ),
        pytest.param(
            Reply(
                body=b"app_unread_total 1\n" * (INLINE_BYTES // 18)
                + b"inference_objective_request_slo_violation_total{ 1\n"
            ),
            c.RESULT_PARSE_ERROR,
            id="a broken line of a page read off the event loop is parse_error",
        ),
    ],
)
def test_failed_scrape_counted_exactly_once(epp: FakeEPP, rig: Rig, reply: Reply, result: str) -> None:
    epp.reply = reply
    before = {r: rig.scrapes(r) for r in c.SCRAPE_RESULTS}

    async def run() -> tuple[str, object]:
        async with httpx.AsyncClient() as client:
            s = scraper(rig, epp.url, client)
            return await s.scrape_once(), s.latest

    assert asyncio.run(run()) == (result, None)
    after = {r: rig.scrapes(r) for r in c.SCRAPE_RESULTS}
    assert after == {**before, result: before[result] + 1}


def test_unreachable_epp_is_connection_error(rig: Rig) -> None:
    with socket.socket() as bound:  # bound but not listening: connections are refused, and the port stays ours
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/metrics"

        async def run() -> str:
            async with httpx.AsyncClient() as client:
                return await scraper(rig, url, client).scrape_once()

        assert asyncio.run(run()) == c.RESULT_CONNECTION_ERROR
    assert rig.scrapes(c.RESULT_CONNECTION_ERROR) == 1


def test_failed_scrapes_keep_the_last_page_until_stale(epp: FakeEPP, rig: Rig) -> None:
    good = epp.reply

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            s = scraper(rig, epp.url, client, stale_after=30.0)
            rig.registry.register(EPPCollector(lambda: [s.latest], up=lambda: [(s.pool, s.up)]))
            assert rig.up() is None  # not scraped yet: neither up nor down
            assert await s.scrape_once() == c.RESULT_SUCCESS
            assert rig.up() == 1.0
            page = s.latest
            assert page is not None
            epp.reply = Reply(status=503)
            rig.clock.now += 25
            assert await s.scrape_once() == c.RESULT_HTTP_ERROR
            assert s.latest is page  # a short outage: the series stay
            assert len(rig.epp_lines()) == 6
            assert rig.up() == 0.0  # but the EPP is down, now
            rig.clock.now += 6  # 31 s after the last good scrape
            assert s.latest is None
            assert rig.epp_lines() == []
            assert await s.scrape_once() == c.RESULT_HTTP_ERROR
            assert s.latest is None
            assert rig.up() == 0.0
            epp.reply = good
            assert await s.scrape_once() == c.RESULT_SUCCESS
            assert len(rig.epp_lines()) == 6
            assert rig.up() == 1.0

    asyncio.run(run())


def test_dropped_series_warned_once_not_every_scrape(epp: FakeEPP, rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        async with httpx.AsyncClient() as client:
            s = scraper(rig, epp.url, client)
            for _ in range(3):
                assert await s.scrape_once() == c.RESULT_SUCCESS

    with caplog.at_level(logging.INFO, logger="sloscope.receivers.epp"):
        asyncio.run(run())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # The fixture abbreviates three histograms to buckets without +Inf: each is dropped, and said so once.
    assert len(warnings) == 3
    assert all("no +Inf bucket" in w for w in warnings)
    assert any(
        'inference_objective_request_ttft_prediction_duration_seconds{model_name="' + LLAMA + '",target_model_name=""}'
        in w
        for w in warnings
    )
    fixes = [r.getMessage() for r in caplog.records if "known EPP label defects" in r.getMessage()]
    assert len(fixes) == 1


def test_run_loop_survives_failures_until_cancelled(epp: FakeEPP, rig: Rig) -> None:
    good = epp.reply

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            s = scraper(rig, epp.url, client, interval=0.02, timeout=1.0)
            task = asyncio.create_task(s.run())
            await _until(lambda: rig.scrapes(c.RESULT_SUCCESS) >= 2)
            epp.reply = Reply(status=500)
            await _until(lambda: rig.scrapes(c.RESULT_HTTP_ERROR) >= 3)
            epp.reply = Reply(body=b'inference_objective_request_ttft_seconds_sum{model_name="" 1\n')
            await _until(lambda: rig.scrapes(c.RESULT_PARSE_ERROR) >= 2)
            epp.reply = good
            await _until(lambda: rig.scrapes(c.RESULT_SUCCESS) >= 4)
            assert not task.done()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert task.cancelled()

    asyncio.run(run())


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the scrape loop")
        await asyncio.sleep(0.01)


def test_each_pages_generation_is_kept_with_its_in_flight_load(epp: FakeEPP, rig: Rig, shared: Path) -> None:
    """What shadow predictions ask as (sloscope.predictor.generation): the late-2025 page, GIE v1.5.0's real page
    (tests/data/epp, its predicted-latency-producer timed) and llm-d-router v0.10.0's real page
    (captured-v0.10.0, llm_d_epp_* families)."""
    gie_v15 = Path(__file__).resolve().parents[1] / "data/epp/gie-v1.5.0-streaming-off.prom"
    llm_d = shared / "fixtures/llm-d-router/captured-v0.10.0/epp-metrics-k8s.prom"

    async def run() -> list[str | None]:
        history = InflightHistory(4, stale_after=30.0, clock=rig.clock)
        seen = []
        async with httpx.AsyncClient() as client:
            s = EPPScraper("pool-a", epp.url, client, rig.telemetry, 5.0, 3.0, stale_after=30.0, inflight=history)
            for body in (epp.reply.body, gie_v15.read_bytes(), llm_d.read_bytes()):
                epp.reply = Reply(body=body)
                rig.clock.now += 1
                assert await s.scrape_once() == c.RESULT_SUCCESS
                seen.append(history.generation("pool-a"))
        return seen

    assert asyncio.run(run()) == [GIE_2025, GIE_V15, LLM_D]
