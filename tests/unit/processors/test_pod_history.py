"""PodHistory: as-of lookups never return a later sample, bounded rings, vanished pods expire."""

from __future__ import annotations

import random

import numpy as np

from sloscope.processors.pod_history import PodHistory
from sloscope.processors.running_slos import RunningSLOs
from sloscope.receivers.discovery import Target
from sloscope.receivers.protocols import PodState

POD = Target(pool="pool-a", pod="vllm-0", address="10.0.0.1:8000")


def state(waiting: float) -> PodState:
    return PodState(waiting=waiting, running=1.0, kv_cache_utilization=0.5, lora=None, models=frozenset())


def waiting_as_of(h: PodHistory, at: float) -> float | None:
    sample = h.as_of(POD.key, at)
    assert sample is not None, f"no sample as of {at}"
    return sample.state.waiting


def history(**kwargs: float) -> PodHistory:
    h = PodHistory(
        max_samples=int(kwargs.get("max_samples", 8)),
        stale_after=kwargs.get("stale_after", 30.0),
        vanished_grace=kwargs.get("grace", 60.0),
    )
    h.track(POD)
    return h


def test_as_of_all_finds_for_every_row_the_sample_as_of_finds() -> None:
    """Rows of two pods (one never scraped), a pod discovery does not know and rows of no pod, at times before
    the first sample, on a sample, between samples and past staleness: each row's sample is :meth:`as_of`'s."""
    h = history(stale_after=4.0)
    other = Target(pool="pool-a", pod="vllm-1", address="10.0.0.2:8000")
    h.track(other)
    for at, waiting in ((100.0, 1), (105.0, 2), (110.0, 3)):
        h.record(POD.key, at, state(waiting))
    keys = [POD.key, other.key, ("pool-b", "gone")]
    rng = random.Random(4)
    codes = np.array([rng.choice((-1, 0, 0, 1, 2)) for _ in range(200)], dtype=np.intp)
    times = np.array([rng.choice((99.0, 100.0, 103.0, 104.5, 105.0, 109.99, 110.0, 113.9, 114.1)) for _ in codes])
    found, samples = h.as_of_all(keys, codes, times)
    expected = [h.as_of(keys[code], at) if code >= 0 else None for code, at in zip(codes, times, strict=True)]
    assert [samples[i] if i >= 0 else None for i in found.tolist()] == expected
    assert any(e is None for e, code in zip(expected, codes, strict=True) if code == 0)  # stale and too early
    assert any(e is not None for e in expected)


def test_as_of_takes_the_sample_at_or_just_before_the_time() -> None:
    h = history()
    for at, waiting in ((100.0, 1), (105.0, 2), (110.0, 3)):
        h.record(POD.key, at, state(waiting))
    assert h.as_of(POD.key, 99.9) is None  # nothing was known yet
    assert waiting_as_of(h, 100.0) == 1  # at: included
    assert waiting_as_of(h, 104.999) == 1  # never the later 105 sample
    assert waiting_as_of(h, 105.0) == 2
    assert h.as_of(POD.key, 200.0) is None  # the newest is 90 s older than the time: stale


def test_failed_scrapes_mark_the_pod_down_and_keep_its_history() -> None:
    h = history()
    h.record(POD.key, 100.0, state(4))
    h.record(POD.key, 105.0, None)
    (record,) = h.snapshot()
    assert not record.up
    assert record.last_attempt == 105.0
    assert waiting_as_of(h, 106.0) == 4
    assert list(h.fresh("pool-a", 106.0)) == []  # a down pod is not a fresh pod


def test_the_ring_keeps_the_newest_samples_and_ignores_out_of_order_ones() -> None:
    h = history(max_samples=3)
    for at in range(10):
        h.record(POD.key, float(at), state(at))
    h.record(POD.key, 5.0, state(99))  # a slow scrape finishing late
    assert h.as_of(POD.key, 6.5) is None  # sample 6 fell out of the ring; 7, 8, 9 remain
    assert waiting_as_of(h, 7.5) == 7
    assert waiting_as_of(h, 9.0) == 9


def test_resolve_by_name_by_name_alone_and_by_address() -> None:
    h = history()
    assert h.resolve("pool-a", "vllm-0") == POD.key
    assert h.resolve("unknown", "vllm-0") == POD.key  # spans without a pool name still find the pod
    assert h.resolve(None, None, "10.0.0.1:8000") == POD.key  # x-gateway-destination-endpoint
    assert h.resolve("pool-b", None, "10.0.0.1:8000") is None
    assert h.resolve("pool-a", "vllm-9") is None


def test_vanished_pods_expire_after_the_grace_period_unless_they_return() -> None:
    h = history(grace=60.0)
    h.record(POD.key, 100.0, state(1))
    h.vanish(POD.key, 110.0)
    assert h.expire(169.0) == []
    assert len(h) == 1
    assert h.expire(170.0) == [POD.key]
    assert len(h) == 0
    assert h.resolve("pool-a", "vllm-0") is None
    h.track(POD)
    h.vanish(POD.key, 200.0)
    h.track(POD)  # back before the grace ended
    assert h.expire(1000.0) == []


def test_running_slos_tightest_at_an_instant_and_recently() -> None:
    running = RunningSLOs(per_pod=3)
    key = POD.key
    running.add(key, 10.0, 20.0, 0.05)
    running.add(key, 12.0, 15.0, 0.02)
    running.add(key, 30.0, 40.0, 0.04)
    assert running.tightest_at(key, 13.0) == 0.02
    assert running.tightest_at(key, 15.0) == 0.05  # the 20 ms request ended at 15: end is exclusive
    assert running.tightest_at(key, 25.0) is None
    assert running.tightest_recent(key, now=45.0, window=10.0) == 0.04
    assert running.tightest_recent(key, now=45.0, window=30.0) == 0.02
    running.add(key, 50.0, 60.0, 0.1)  # per_pod=3: the one that ended first (12..15) is dropped
    assert running.tightest_at(key, 13.0) == 0.05
    assert running.tightest_at(key, 55.0) == 0.1
    running.add(key, 5.0, 8.0, 0.01)  # ended before every other one kept: dropped at once
    assert running.tightest_at(key, 6.0) is None
    assert running.tightest_at(key, 18.0) == 0.05


def test_running_slos_lookups_agree_with_a_plain_scan_of_every_request() -> None:
    rng = random.Random(3)
    running = RunningSLOs(per_pod=10**6)
    runs = []
    for _ in range(2000):  # out of end order, overlapping, with repeated ends
        start = rng.uniform(0, 1000)
        end = start + rng.choice([0.0, rng.uniform(0, 30)])
        slo = rng.choice([0.01, 0.02, 0.05, 0.1])
        running.add(POD.key, start, end, slo)
        runs.append((start, end, slo))
    for _ in range(2000):
        at, window = rng.uniform(-10, 1040), rng.uniform(0, 50)
        assert running.tightest_at(POD.key, at) == min((s for b, e, s in runs if b <= at < e), default=None)
        recent = min((s for b, e, s in runs if e >= at - window and b <= at), default=None)
        assert running.tightest_recent(POD.key, at, window) == recent
