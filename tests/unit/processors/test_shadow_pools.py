"""Shadow predictions of several pools: each pool's rounds run on their own, and nothing taken is ever lost.

Pool A's prediction server is stuck (its answer never comes) or answers values out of range; pool B's
answers well. The HTTP exchanges go through httpx's in-process transport: the deadlines themselves are
tested against a real trickling peer in tests/integration/test_outbound_deadlines.py.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import httpx
import pyarrow as pa
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Headroom, Predictions
from sloscope.predictor.client import PredictionClient
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.prediction_series import PredictionSeries
from sloscope.processors.predictions import PredictionTracker
from sloscope.processors.running_slos import RunningSLOs
from sloscope.processors.shadow import ShadowPredictor
from sloscope.processors.streaming_modes import StreamingModes
from sloscope.receivers.discovery import Target
from sloscope.receivers.protocols import PodState
from tests.support.joined_requests import answered
from tests.support.records import rows_of
from tests.support.stage import publishing_to

PODS = {"pool-a": Target("pool-a", "vllm-a", "10.0.0.1:8000"), "pool-b": Target("pool-b", "vllm-b", "10.0.0.2:8000")}
STATE = PodState(waiting=3.0, running=27.0, kv_cache_utilization=0.5, lora=None, models=frozenset())
SETTINGS = Predictions(timeout_seconds=30.0, batch_wait_seconds=0.01, breaker_failures=100, max_per_second=10_000)

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def answer(quantile: float = 0.9) -> Handler:
    async def handler(request: httpx.Request) -> httpx.Response:
        size = len(httpx.Response(200, content=request.content).json()["requests"])
        entry = {"ttft_ms": 120.0, "tpot_ms": 12.0, "model_type": "xgboost", "quantile": quantile}
        return httpx.Response(200, json={"predictions": [entry] * size})

    return handler


class Stuck:
    """A server that takes every call and never answers (until the call is cancelled)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class Pools:
    def __init__(self, handlers: dict[str, Handler]) -> None:
        self.tables: list[pa.RecordBatch] = []
        self.registry = CollectorRegistry()
        history = PodHistory(8, 300.0, 60.0)
        for target in PODS.values():
            history.track(target)
            history.record(target.key, 100.0, STATE)
        series = PredictionSeries(self.registry, list(PODS))
        self.tracker = PredictionTracker(
            settings=SETTINGS,
            headroom=Headroom(),
            history=history,
            running=RunningSLOs(),
            series=series,
            predicted_pools=set(PODS),
            streaming_of=StreamingModes({}, default=True).streaming,
            rng=random.Random(7),
            sink=self.tables.append,
        )
        self._publish = publishing_to(
            self.tracker, pool_of_pod=lambda placed: "pool-a" if placed.pod == "vllm-a" else "pool-b"
        )
        self.http = [httpx.AsyncClient(transport=httpx.MockTransport(handler)) for handler in handlers.values()]
        clients = {
            pool: PredictionClient([f"http://{pool}:8001"], SETTINGS, http, functools.partial(series.call, pool))
            for (pool, _), http in zip(handlers.items(), self.http, strict=True)
        }
        self.shadow = ShadowPredictor(self.tracker, history, clients, SETTINGS)

    @property
    def records(self) -> list[SimpleNamespace]:
        """The records so far, a row each (its columns as attributes)."""
        return rows_of(self.tables)

    def publish(self, pool: str, count: int) -> None:
        for n in range(count):
            request = answered(f"{pool}-{n}".encode().hex().rjust(32, "0")[:32], PODS[pool].pod)
            self._publish(request)

    def outcomes(self) -> Counter[tuple[str, str, str | None]]:
        return Counter((r.pool, r.prediction_source, r.prediction_skipped) for r in self.records)

    def calls(self, pool: str, result: str) -> float:
        labels = {"pool": pool, "purpose": c.PURPOSE_SHADOW, "result": result}
        return self.registry.get_sample_value("sloscope_predictor_requests_total", labels) or 0.0

    async def close(self) -> None:
        for http in self.http:
            await http.aclose()


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_stuck_predictor_of_one_pool_leaves_the_other_pools_predictions_flowing() -> None:
    async def go() -> Pools:
        stuck = Stuck()
        pools = Pools({"pool-a": stuck, "pool-b": answer()})
        run = asyncio.create_task(pools.shadow.run())
        pools.publish("pool-a", 3)
        await asyncio.wait_for(stuck.entered.wait(), 10)
        pools.publish("pool-b", 2)
        await until(lambda: pools.outcomes()[("pool-b", c.SOURCE_SHADOW, None)] == 2)
        assert not run.done()
        assert pools.outcomes() == {("pool-b", c.SOURCE_SHADOW, None): 2}  # pool A's call is still out
        run.cancel()  # what shutdown does first: the call's requests are recorded, not lost with it
        await asyncio.gather(run, return_exceptions=True)
        await pools.close()
        return pools

    pools = asyncio.run(go())
    assert pools.outcomes() == {("pool-b", c.SOURCE_SHADOW, None): 2, ("pool-a", c.SOURCE_NONE, c.SKIP_SHUTDOWN): 3}


def test_at_shutdown_a_call_that_does_not_end_in_time_is_cut_and_its_requests_recorded() -> None:
    async def go() -> tuple[Pools, int]:
        pools = Pools({"pool-a": Stuck(), "pool-b": answer()})
        pools.publish("pool-a", 150)  # one call of 100 in flight at the deadline, 50 still queued
        pools.publish("pool-b", 5)
        given_up = await pools.shadow.finish(0.3)
        await pools.close()
        return pools, given_up

    pools, given_up = asyncio.run(go())
    assert given_up == 150
    assert pools.outcomes() == {
        ("pool-a", c.SOURCE_NONE, c.SKIP_SHUTDOWN): 150,
        ("pool-b", c.SOURCE_SHADOW, None): 5,
    }
    assert pools.tracker.waiting() == 0


def test_an_answer_out_of_range_costs_its_own_predictions_only() -> None:
    async def go() -> Pools:
        pools = Pools({"pool-a": answer(quantile=90), "pool-b": answer()})
        pools.publish("pool-a", 3)
        pools.publish("pool-b", 2)
        await asyncio.gather(pools.shadow.drain_once("pool-a"), pools.shadow.drain_once("pool-b"))
        await pools.close()
        return pools

    pools = asyncio.run(go())
    assert pools.outcomes() == {("pool-a", c.SOURCE_NONE, c.SKIP_FAILED): 3, ("pool-b", c.SOURCE_SHADOW, None): 2}
    assert pools.calls("pool-a", c.RESULT_INVALID_ANSWER) == 1
    assert pools.calls("pool-b", c.RESULT_SUCCESS) == 1


def test_a_full_queue_of_one_pool_never_refuses_another_pools_requests() -> None:
    pools = Pools({"pool-a": Stuck(), "pool-b": answer()})
    pools.tracker._settings = SETTINGS.model_copy(update={"max_pending": 2})
    pools.publish("pool-a", 3)
    pools.publish("pool-b", 2)
    assert pools.outcomes() == {("pool-a", c.SOURCE_NONE, c.SKIP_QUEUE_FULL): 1}
    assert (pools.tracker.waiting("pool-a"), pools.tracker.waiting("pool-b")) == (2, 2)
