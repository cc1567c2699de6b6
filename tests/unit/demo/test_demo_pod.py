"""The simulated pod's continuous-batching physics, in virtual time: every step's duration and every
completion time is computed here from the formulas of ``sloscope.demo.pod`` and compared exactly."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

import pytest

from sloscope.demo.pod import PodParams, SimPod
from sloscope.demo.records import Completion, PodSnapshot, SimRequest

T0 = 1000.0
EXACT = PodParams(noise_sigma=0.0)


class VirtualTime:
    """A clock and an async sleep that advances it at once; ``hook(i)`` runs before the i-th sleep."""

    def __init__(self) -> None:
        self.now = T0
        self.sleeps: list[float] = []
        self.hook: Callable[[int], object] | None = None

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if self.hook is not None:
            self.hook(len(self.sleeps))
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def request(rid: str, prompt: int, output: int) -> SimRequest:
    return SimRequest(rid, "interactive", "m", prompt, output, None, None, arrival=T0)


def make_pod(vt: VirtualTime, params: PodParams = EXACT, seed: int = 1) -> SimPod:
    return SimPod("pod-a", "m", params, random.Random(seed), clock=vt.clock, sleep=vt.sleep)


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(scenario())


async def complete(pod: SimPod, requests: Sequence[SimRequest]) -> list[Completion]:
    """Submits ``requests`` now, runs the pod until they are all done, stops it."""
    futures = [pod.submit(r) for r in requests]
    task = asyncio.create_task(pod.run())
    try:
        return list(await asyncio.gather(*futures))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def prefill(p: PodParams, tokens: int) -> float:
    return p.prefill_base_s + p.prefill_per_token_s * tokens


def decode(p: PodParams, decoding: int, kv_used: int) -> float:
    return p.decode_base_s + p.decode_per_running_s * decoding + p.decode_per_kv_s * (kv_used / p.kv_capacity_tokens)


def ends(durations: Sequence[float]) -> list[float]:
    """The end time of each step, summed the way the virtual clock sums them."""
    out, now = [], T0
    for d in durations:
        now += d
        out.append(now)
    return out


def test_a_single_request_on_an_idle_pod_takes_one_prefill_step_then_one_decode_step_per_token() -> None:
    vt = VirtualTime()
    pod = make_pod(vt)
    (done,) = run(lambda: complete(pod, [request("r1", 1000, 5)]))

    steps = [prefill(EXACT, 1000)] + [decode(EXACT, 1, 1000 + k) for k in range(1, 5)]
    assert vt.sleeps == steps
    t = ends(steps)
    assert done == Completion(
        pod="pod-a", arrived=T0, scheduled=T0, first_token=t[0], finished=t[4], prompt_tokens=1000, completion_tokens=5
    )
    assert done.ttft == t[0] - T0
    assert steps[0] == 0.012 + 0.00012 * 1000  # the formula with the defaults: 132 ms
    assert pod.snapshot() == PodSnapshot(waiting=0, running=0, kv_cache_utilization=0.0)


def test_a_one_token_request_finishes_at_its_first_token() -> None:
    vt = VirtualTime()
    (done,) = run(lambda: complete(make_pod(vt), [request("r1", 50, 1)]))
    assert vt.sleeps == [prefill(EXACT, 50)]
    assert done.first_token == done.finished == T0 + prefill(EXACT, 50)


def test_requests_admitted_together_share_one_prefill_step_then_decode_as_a_batch() -> None:
    vt = VirtualTime()
    short, long = run(lambda: complete(make_pod(vt), [request("short", 300, 2), request("long", 700, 3)]))

    # one prefill of both prompts; a decode of both (each holding prompt + 1 token); long alone
    steps = [prefill(EXACT, 1000), decode(EXACT, 2, 301 + 701), decode(EXACT, 1, 702)]
    assert vt.sleeps == steps
    t = ends(steps)
    assert (short.scheduled, short.first_token, short.finished) == (T0, t[0], t[1])
    assert (long.scheduled, long.first_token, long.finished) == (T0, t[0], t[2])


def test_a_request_arriving_mid_step_waits_for_the_next_step_which_decodes_and_prefills_together() -> None:
    vt = VirtualTime()
    pod = make_pod(vt)
    late: list[asyncio.Future[Completion]] = []

    def arrive(step: int) -> None:
        if step == 0:
            late.append(pod.submit(request("late", 200, 2)))

    vt.hook = arrive

    async def scenario() -> tuple[Completion, Completion]:
        (first,) = await complete(pod, [request("first", 100, 3)])
        return first, late[0].result()

    first, second = run(scenario)
    steps = [
        prefill(EXACT, 100),
        decode(EXACT, 1, 101 + 200) + prefill(EXACT, 200),  # first decodes while late is prefilled
        decode(EXACT, 2, 102 + 201),
    ]
    assert vt.sleeps == steps
    t = ends(steps)
    assert (second.arrived, second.scheduled, second.first_token, second.finished) == (T0, t[0], t[1], t[2])
    assert second.queue_time == t[0] - T0
    assert first.finished == t[2]


def test_requests_beyond_max_running_queue_until_a_slot_frees() -> None:
    vt = VirtualTime()
    params = replace(EXACT, max_running=1)
    pod = make_pod(vt, params)
    seen: dict[int, PodSnapshot] = {}
    vt.hook = lambda step: seen.setdefault(step, pod.snapshot())
    a, b = run(lambda: complete(pod, [request("a", 100, 3), request("b", 100, 2)]))

    steps = [prefill(params, 100), decode(params, 1, 101), decode(params, 1, 102)]
    steps += [prefill(params, 100), decode(params, 1, 101)]
    assert vt.sleeps == steps
    t = ends(steps)
    assert a.finished == t[2]
    assert (b.scheduled, b.first_token, b.finished) == (t[2], t[3], t[4])
    assert b.queue_time == a.e2e
    assert seen[0] == PodSnapshot(waiting=1, running=1, kv_cache_utilization=100 / 40_000)
    assert seen[3] == PodSnapshot(waiting=0, running=1, kv_cache_utilization=100 / 40_000)


def test_a_prompt_waits_for_kv_room_and_blocks_the_queue_behind_it() -> None:
    vt = VirtualTime()
    params = replace(EXACT, kv_capacity_tokens=1000)
    # a holds 601 tokens after its prefill; b needs 501 and waits; small would fit but stays behind b
    requests = [request("a", 600, 3), request("b", 500, 2), request("small", 100, 1)]
    a, b, small = run(lambda: complete(make_pod(vt, params), requests))

    steps = [prefill(params, 600), decode(params, 1, 601), decode(params, 1, 602)]
    steps += [prefill(params, 600), decode(params, 1, 501)]
    assert vt.sleeps == steps
    t = ends(steps)
    assert a.finished == t[2]
    assert b.scheduled == small.scheduled == t[2]
    assert (small.first_token, small.finished) == (t[3], t[3])
    assert b.finished == t[4]


def test_a_full_kv_cache_preempts_the_newest_request_which_recomputes_and_still_completes() -> None:
    vt = VirtualTime()
    params = replace(EXACT, kv_capacity_tokens=1000)
    pod = make_pod(vt, params)
    seen: dict[int, PodSnapshot] = {}
    vt.hook = lambda step: seen.setdefault(step, pod.snapshot())
    old, new = run(lambda: complete(pod, [request("old", 400, 150), request("new", 400, 150)]))

    assert vt.sleeps[0] == prefill(params, 800)
    # After step k both hold 400 + (k + 1) tokens. Step 100 would need 1000 + 2 > 1000: "new" (admitted
    # last) is preempted with 100 tokens generated; "old" runs alone to its 150th token at step 149; then
    # "new" recomputes 400 + 100 tokens in one prefill, which yields its 101st token, and decodes 49 more.
    assert pod.preemptions == 1
    assert vt.sleeps[99] == decode(params, 2, 998)
    assert vt.sleeps[100] == decode(params, 1, 500)
    assert vt.sleeps[150] == prefill(params, 500)
    assert vt.sleeps[151] == decode(params, 1, 501)
    assert len(vt.sleeps) == 200
    t = ends(vt.sleeps)
    assert seen[100] == PodSnapshot(waiting=1, running=1, kv_cache_utilization=0.5)
    assert (old.first_token, old.finished) == (t[0], t[149])
    assert (new.scheduled, new.first_token, new.finished) == (T0, t[0], t[199])  # first admission, first token kept
    assert new.completion_tokens == old.completion_tokens == 150
    assert max(s.kv_cache_utilization for s in seen.values()) <= 1.0


def test_step_durations_carry_lognormal_noise_from_the_seeded_rng() -> None:
    vt = VirtualTime()
    params = PodParams(noise_sigma=0.05)
    run(lambda: complete(make_pod(vt, params, seed=7), [request("r1", 1000, 2)]))
    rng = random.Random(7)
    assert vt.sleeps == [
        prefill(params, 1000) * math.exp(rng.gauss(0.0, 0.05)),
        decode(params, 1, 1001) * math.exp(rng.gauss(0.0, 0.05)),
    ]


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    def simulate(seed: int) -> tuple[list[float], list[Completion]]:
        vt = VirtualTime()
        pod = make_pod(vt, replace(PodParams(), max_running=4, kv_capacity_tokens=3000), seed)
        workload = random.Random(3)
        requests = [request(f"r{i}", workload.randint(50, 900), workload.randint(1, 60)) for i in range(20)]
        return vt.sleeps, run(lambda: complete(pod, requests))

    assert simulate(7) == simulate(7)
    assert simulate(7)[0] != simulate(8)[0]


def test_completion_times_stay_ordered_when_the_clock_steps_back() -> None:
    vt = VirtualTime()

    def step_back(step: int) -> None:
        vt.now -= 5.0  # the wall clock is corrected backwards during every step

    vt.hook = step_back
    (done,) = run(lambda: complete(make_pod(vt), [request("r1", 100, 3)]))
    assert done.arrived <= done.scheduled <= done.first_token <= done.finished


def test_a_request_whose_client_gave_up_is_dropped() -> None:
    vt = VirtualTime()
    pod = make_pod(vt)

    async def scenario() -> Completion:
        kept = pod.submit(request("kept", 100, 2))
        pod.submit(request("abandoned", 100, 2)).cancel()
        task = asyncio.create_task(pod.run())
        done = await kept
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return done

    run(scenario)
    assert vt.sleeps == [prefill(EXACT, 100), decode(EXACT, 1, 101)]  # only "kept" was computed


def test_stopping_the_pod_cancels_the_requests_still_in_it() -> None:
    async def scenario() -> None:
        vt = VirtualTime()
        pod = make_pod(vt, replace(EXACT, max_running=1))
        futures = [pod.submit(request("running", 100, 10_000)), pod.submit(request("waiting", 100, 1))]
        task = asyncio.create_task(pod.run())
        while len(vt.sleeps) < 3:
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert all(f.cancelled() for f in futures)
        assert pod.snapshot() == PodSnapshot(waiting=0, running=0, kv_cache_utilization=0.0)
        with pytest.raises(RuntimeError, match="already running"):
            await pod.run()

    run(scenario)


@pytest.mark.parametrize(
    ("prompt", "output"),
    [
        pytest.param(0, 10, id="no prompt token"),
        pytest.param(10, 0, id="no output token"),
        pytest.param(39_000, 1_001, id="more tokens than the KV cache holds"),
    ],
)
def test_a_request_that_could_never_run_is_refused(prompt: int, output: int) -> None:
    async def scenario() -> None:
        pod = make_pod(VirtualTime())
        with pytest.raises(ValueError, match="r1"):
            pod.submit(request("r1", prompt, output))
        pod.submit(request("r2", 39_000, 1_000))  # exactly the KV cache: accepted

    run(scenario)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"kv_capacity_tokens": 1}, id="KV cache below two tokens"),
        pytest.param({"max_running": 0}, id="no batch slot"),
        pytest.param({"decode_base_s": -0.001}, id="negative cost"),
        pytest.param({"noise_sigma": math.nan}, id="NaN noise"),
    ],
)
def test_impossible_parameters_are_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PodParams(**change)


def test_in_real_time_a_request_completes_with_ordered_times() -> None:
    async def scenario() -> Completion:
        pod = SimPod("pod-a", "m", PodParams(), random.Random(1))
        return (await complete(pod, [request("r1", 20, 3)]))[0]

    done = run(scenario)
    assert done.arrived <= done.scheduled <= done.first_token <= done.finished
    assert done.completion_tokens == 3
