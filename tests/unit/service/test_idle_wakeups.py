"""An idle sloscope does not wake itself for nothing: each wake-up of an idle process costs CPU (on a virtual
machine about a quarter of a millisecond), and an idle process used to wake 24 times a second (9 ms of CPU a
second, several times the Collector's). The HTTP servers' loops wait for their exit flag and wake once a second for
the Date header; the pipeline's worker sleeps while no trace is pending, until spans come."""

from __future__ import annotations

import asyncio
import threading
import time

import uvicorn
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope import pipeline as pipeline_module
from sloscope.config import Settings
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline
from sloscope.service.server import _Server
from sloscope.testing import span, vllm_attributes


async def _app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("never called: no listener")


def _requests(registry: CollectorRegistry) -> float:
    return sum(
        sample.value
        for metric in registry.collect()
        if metric.name == c.REQUESTS.name
        for sample in metric.samples
        if sample.name == f"{c.REQUESTS.name}_total"
    )


class _Ticking(_Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


def test_an_http_servers_loop_wakes_for_the_date_header_and_at_once_to_exit() -> None:
    async def scenario() -> tuple[int, float, float, int, list[tuple[bytes, bytes]]]:
        config = uvicorn.Config(_app, log_config=None)
        config.load()
        server = _Ticking(config)
        started = time.monotonic()
        loop = asyncio.create_task(server.main_loop())
        await asyncio.sleep(0.6)  # uvicorn's own loop ticks every 100 ms: 6 or 7 times by now
        idle_ticks, idle = server.ticks, time.monotonic() - started
        server.should_exit = True
        await asyncio.wait_for(loop, 5)
        exited = time.monotonic() - started
        return idle_ticks, idle, exited, server.ticks, server.server_state.default_headers

    idle_ticks, idle, exited, ticks, headers = asyncio.run(scenario())
    assert idle_ticks == 1 + int(idle)  # the first tick, then one a second (1: unless the machine stalled)
    assert ticks == idle_ticks + 1  # the exit flag woke it, and it returned,
    assert exited < idle_ticks  # before its next tick was due (at 1 s, 2 s, ...)
    assert [name for name, _ in headers] == [b"date", b"server"]


def test_the_exit_flag_reads_back_as_uvicorns_attribute_does() -> None:
    server = _Server(uvicorn.Config(_app))
    assert server.should_exit is False
    server.should_exit = True
    assert server.should_exit is True
    server.should_exit = False
    assert server.should_exit is False


def test_an_idle_worker_sleeps_until_spans_come_and_watches_windows_while_traces_wait() -> None:
    registry = CollectorRegistry()
    pipe = Pipeline(Settings.model_validate({"join": {"window_seconds": 1.0}}), default_spec(), registry)
    queue = pipe._shards[0].queue
    waits: list[float] = []
    take = queue.take
    taken = threading.Event()

    def recording_take(timeout: float) -> list[object]:
        waits.append(timeout)
        batches = take(timeout)
        if batches:
            taken.set()
        return batches  # type: ignore[return-value]

    queue.take = recording_take  # type: ignore[method-assign,assignment]
    pipe.start()
    try:
        deadline = time.monotonic() + 10
        while pipeline_module._IDLE_SECONDS not in waits and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waits[:2] == [pipeline_module._TICK_SECONDS, pipeline_module._IDLE_SECONDS]
        asleep = len(waits)  # the worker is in its 5 s sleep
        server = vllm_attributes(ttft=0.1, e2e=1.0, completion_tokens=10, request_id="chatcmpl-1")
        # a model-server span alone: its trace waits out the join window for a gateway span, watched by ticks
        assert queue.offer([span(1, 2, "llm_request", server, parent=1, resource={"k8s.pod.name": "vllm-0"})])
        assert taken.wait(2)  # the offer woke the sleeping worker
        while pipeline_module._IDLE_SECONDS not in waits[asleep:] and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        assert pipe.shutdown(5)
    assert _requests(registry) == 1
    after = waits[asleep:]
    # woken by the spans; ticks while the trace waits out its window; asleep again once it was emitted
    assert after[0] == pipeline_module._TICK_SECONDS
    assert pipeline_module._IDLE_SECONDS in after
    first_sleep = after.index(pipeline_module._IDLE_SECONDS)
    # a window of 1 s watched every 0.25 s: 4 ticks, 2 at least unless the machine stalls for 0.75 s
    assert first_sleep >= 2 and set(after[:first_sleep]) == {pipeline_module._TICK_SECONDS}
