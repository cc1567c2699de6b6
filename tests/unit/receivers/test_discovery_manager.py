"""DiscoveryManager: sources built from the pools, merged with precedence, listeners told of changes only."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sloscope.config import Pool
from sloscope.receivers.discovery import Discovery, Target, Update
from sloscope.receivers.discovery.file_sd import FileSDDiscovery
from sloscope.receivers.discovery.kubernetes import KubernetesDiscovery
from sloscope.receivers.discovery.manager import DiscoveryManager, TargetMap, build_sources, merge
from sloscope.receivers.discovery.static import StaticDiscovery

LOGGER = "sloscope.receivers.discovery.manager"


class Manual:
    """A source the test drives: it keeps the update callback and runs until cancelled."""

    def __init__(self) -> None:
        self.update: Update | None = None
        self.runs = 0
        self.cancelled = 0

    async def run(self, update: Update) -> None:
        self.update = update
        self.runs += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    def report(self, *targets: Target) -> None:
        assert self.update is not None
        self.update(list(targets))


class Crashing:
    """Reports a list, then raises; on its second run reports another list and stays up."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.runs = 0

    async def run(self, update: Update) -> None:
        self.runs += 1
        if self.runs == 1:
            update([Target(self.pool, "vllm-9", "10.52.9.9:8000")])
            raise RuntimeError("bug in a source")
        if self.runs == 2:
            return  # returning is as wrong as raising
        update([Target(self.pool, "vllm-9", "10.52.9.10:8000")])
        await asyncio.Event().wait()


def pool(name: str = "llama", **targets: Any) -> Pool:
    return Pool(name=name, targets=targets)


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run(manager: DiscoveryManager, body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        await manager.start()
        try:
            await body()
        finally:
            await manager.stop()

    asyncio.run(main())


T0 = Target("llama", "vllm-0", "10.52.3.17:8000")
T0_OTHER = Target("llama", "vllm-0", "10.52.3.99:8000", interval_seconds=1.0)
T1 = Target("llama", "vllm-1", "10.52.5.9:8000")


def test_build_sources_in_precedence_order() -> None:
    built = build_sources(
        pool(
            static=[{"address": "10.52.3.17:8000"}],
            file_sd={"files": ["/etc/sloscope/sd/*.json"]},
            kubernetes={"namespace": "llm", "inference_pool": "vllm-llama3-8b-instruct"},
        )
    )
    assert [type(source) for source in built] == [StaticDiscovery, FileSDDiscovery, KubernetesDiscovery]
    assert len(build_sources(pool(file_sd={"files": ["a.json"]}))) == 1
    assert build_sources(pool()) == []


def test_merge_keeps_the_first_target_of_each_key() -> None:
    assert merge([[T0], [T0_OTHER, T1]]) == {T0.key: T0, T1.key: T1}
    assert merge([[T0_OTHER, T1], [T0]]) == {T0.key: T0_OTHER, T1.key: T1}


def test_two_sources_of_one_pool_merge_with_the_earlier_winning() -> None:
    first, second, other_pool = Manual(), Manual(), Manual()
    pools = [pool("llama"), pool("qwen")]
    sources: dict[str, list[Discovery]] = {"llama": [first, second], "qwen": [other_pool]}
    manager = DiscoveryManager(pools, build=lambda p: sources[p.name])
    q0 = Target("qwen", "vllm-0", "10.60.1.2:8000")

    async def body() -> None:
        await wait_until(lambda: all(s.update is not None for s in (first, second, other_pool)), "sources running")
        second.report(T0_OTHER, T1)
        assert manager.targets() == {T0.key: T0_OTHER, T1.key: T1}
        first.report(T0)
        assert manager.targets() == {T0.key: T0, T1.key: T1}  # the first source wins vllm-0
        other_pool.report(q0)
        assert manager.targets() == {T0.key: T0, T1.key: T1, q0.key: q0}  # same pod name, another pool
        first.report()
        assert manager.targets() == {T0.key: T0_OTHER, T1.key: T1, q0.key: q0}  # the second's again

    run(manager, body)


def test_real_static_and_file_sd_sources_merge_with_static_first(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    path.write_text(
        json.dumps(
            [
                {"targets": ["10.52.3.99:8000"], "labels": {"pod": "vllm-0"}},
                {"targets": ["10.52.5.9:8000"], "labels": {"pod": "vllm-1"}},
            ]
        )
    )
    config = pool(
        static=[{"address": "10.52.3.17:8000", "pod": "vllm-0"}],
        file_sd={"files": [str(path)], "refresh_seconds": 0.01},
    )
    manager = DiscoveryManager([config])

    async def body() -> None:
        await wait_until(lambda: len(manager.targets()) == 2, "both sources")

    run(manager, body)
    assert manager.targets() == {T0.key: T0, T1.key: T1}


def test_listeners_are_told_of_changes_only() -> None:
    source = Manual()
    manager = DiscoveryManager([pool()], build=lambda p: [source])
    seen: list[TargetMap] = []
    manager.subscribe(seen.append)

    async def body() -> None:
        await wait_until(lambda: source.update is not None, "the source running")
        source.report(T0, T1)
        source.report(T1, T0)  # the same set in another order
        source.report(T0, T1)
        source.report(T0_OTHER, T1)  # one target's address and interval changed
        source.report(T0_OTHER, T1)
        source.report()

    run(manager, body)
    assert seen == [{T0.key: T0, T1.key: T1}, {T0.key: T0_OTHER, T1.key: T1}, {}]


def test_a_failing_listener_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    source = Manual()
    manager = DiscoveryManager([pool()], build=lambda p: [source])
    seen: list[TargetMap] = []

    def broken(targets: TargetMap) -> None:
        raise RuntimeError("listener bug")

    manager.subscribe(broken)
    manager.subscribe(seen.append)

    async def body() -> None:
        await wait_until(lambda: source.update is not None, "the source running")
        source.report(T0)

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        run(manager, body)
    assert seen == [{T0.key: T0}]
    assert [record.getMessage().startswith("discovery listener") for record in caplog.records] == [True]


def test_a_crashing_source_is_restarted_and_the_others_keep_running(caplog: pytest.LogCaptureFixture) -> None:
    steady, crashing = Manual(), Crashing("llama")
    manager = DiscoveryManager([pool()], build=lambda p: [steady, crashing], restart_seconds=0.01)
    seen: list[TargetMap] = []
    manager.subscribe(seen.append)
    crashed = Target("llama", "vllm-9", "10.52.9.9:8000")
    restarted = Target("llama", "vllm-9", "10.52.9.10:8000")

    async def body() -> None:
        await wait_until(lambda: steady.update is not None, "the steady source running")
        steady.report(T0)
        await wait_until(lambda: crashing.runs == 3, "two restarts")
        await wait_until(lambda: restarted.key in manager.targets(), "the restarted source's report")
        steady.report(T0, T1)  # still running, still heard

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        run(manager, body)

    assert steady.runs == 1 and steady.cancelled == 1  # never restarted, cancelled once by stop()
    assert manager.targets() == {T0.key: T0, crashed.key: restarted, T1.key: T1}
    assert seen[0] == {crashed.key: crashed}  # reported before it crashed
    assert all(crashed.key in targets for targets in seen)  # and kept while it was down
    messages = [record.getMessage() for record in caplog.records]
    assert "crashed; restarting it" in messages[0] and "Crashing" in messages[0]
    assert caplog.records[0].exc_info is not None  # the traceback is logged
    assert "returned; a source runs until cancelled" in messages[1]


def test_stop_cancels_every_source_and_is_safe_twice_and_without_start() -> None:
    sources = [Manual(), Manual()]
    manager = DiscoveryManager([pool()], build=lambda p: list(sources))

    async def main() -> None:
        await manager.stop()  # never started
        await manager.start()
        await manager.start()  # a second start builds nothing more
        await wait_until(lambda: all(source.update is not None for source in sources), "both running")
        await manager.stop()
        await manager.stop()

    asyncio.run(main())
    assert [(source.runs, source.cancelled) for source in sources] == [(1, 1), (1, 1)]


def test_reports_after_stop_are_ignored() -> None:
    source = Manual()
    manager = DiscoveryManager([pool()], build=lambda p: [source])
    seen: list[TargetMap] = []
    manager.subscribe(seen.append)

    async def main() -> None:
        await manager.start()
        await wait_until(lambda: source.update is not None, "the source running")
        await manager.stop()
        source.report(T0)  # a report already queued when stop began (a thread's call_soon_threadsafe)

    asyncio.run(main())
    assert seen == []
    assert manager.targets() == {}


def test_a_source_reporting_another_pools_targets_is_kept_to_its_own(caplog: pytest.LogCaptureFixture) -> None:
    source = Manual()
    manager = DiscoveryManager([pool()], build=lambda p: [source])
    stray = Target("qwen", "vllm-0", "10.60.1.2:8000")

    async def body() -> None:
        await wait_until(lambda: source.update is not None, "the source running")
        source.report(T0, stray)

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        run(manager, body)
    assert manager.targets() == {T0.key: T0}
    assert "reported targets of another pool" in caplog.records[0].getMessage()
