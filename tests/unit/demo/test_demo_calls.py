"""How the llm-d demo serves one call on real simulated pods (fast ones): P/D stages, n > 1 choices, failures."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import replace

import httpx
import pytest

from sloscope.demo.agents import Call
from sloscope.demo.calls import (
    MODEL_SERVER_ERROR,
    QUEUE_TTL_SECONDS,
    REFUSED_MESSAGE,
    SHED_MESSAGE,
    TIMEOUT_MESSAGE,
    CallRecord,
    CallRunner,
    outcome,
)
from sloscope.demo.pod import PodParams, SimPod
from sloscope.demo.records import Completion, PodSnapshot, SimRequest, ns
from sloscope.demo.router import Decision, Router, RouterPod
from tests.support.demo_calls import PODS, request, session

FAST = PodParams(
    kv_capacity_tokens=20_000,
    max_running=8,
    prefill_base_s=0.001,
    prefill_per_token_s=0.0,
    decode_base_s=0.0005,
    decode_per_running_s=0.0,
    decode_per_kv_s=0.0,
    noise_sigma=0.0,
)


class StubRouter(Router):
    """Routes every call to vllm-1 (no predictor); vllm-0 looks busy, so P/D prefills on vllm-2."""

    def __init__(self, routing: str = "predicted") -> None:
        pods = [RouterPod(name, "127.0.0.1:1") for name in PODS]
        super().__init__(
            pods, ["http://unused"], "http://unused", httpx.AsyncClient(), random.Random(1), default_share=0
        )
        self._state["vllm-0"] = PodSnapshot(5, 8, 0.9)
        self.routing = routing
        self.routed: list[str] = []
        self.finished_with: list[tuple[str, str, int]] = []
        self.released_ids: list[str] = []

    async def route(self, request: SimRequest) -> Decision:
        self.routed.append(request.request_id)
        self._started(request, "vllm-1")
        candidates = self._candidates(self._pods)
        return Decision("vllm-1", self.routing, self._features("vllm-1", request), 300.0, 40.0, candidates)

    def finished(self, request: SimRequest, decision: Decision, completion: Completion) -> None:
        self.finished_with.append((request.request_id, completion.pod, completion.completion_tokens))

    def released(self, request: SimRequest, decision: Decision) -> None:
        self.released_ids.append(request.request_id)


class Fleet:
    def __init__(self, routing: str = "predicted") -> None:
        self.router = StubRouter(routing)
        self.pods = {name: SimPod(name, "m", FAST, random.Random(i)) for i, name in enumerate(PODS)}
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def serve(self, call: Call) -> CallRecord:
        async def scenario() -> CallRecord:
            engines = [asyncio.create_task(pod.run()) for pod in self.pods.values()]
            runner = CallRunner(self.router, lambda pod, r: self.pods[pod].submit(r), sleep=self.sleep)
            call.request.arrival = time.time()  # the client sends it now, as the demo's sessions do
            try:
                record = await runner.run(session(call), call)
                await asyncio.sleep(0.01)  # a step or two: a pod drops what its client abandoned
                return record
            finally:
                for engine in engines:
                    engine.cancel()
                await asyncio.gather(*engines, return_exceptions=True)

        return asyncio.run(scenario())


def small(output_tokens: int = 20) -> SimRequest:
    return replace(request(), output_tokens=output_tokens, prompt_tokens=200)


def in_order(*times: float) -> bool:
    return all(a <= b for a, b in itertools.pairwise(times))


def test_a_call_runs_on_the_routed_pod() -> None:
    fleet = Fleet()
    record = fleet.serve(Call(small(), "chat"))
    (done,) = record.completions
    assert (done.pod, done.completion_tokens, record.routing, record.shape) == ("vllm-1", 20, "predicted", "chat")
    assert [s.profile for s in record.schedules] == ["predicted-latency"]
    assert fleet.router.finished_with == [(record.call.request.request_id, "vllm-1", 20)]
    assert in_order(record.arrival, record.schedules[0].start, record.schedules[0].end, record.routed, done.arrived)
    assert in_order(done.finished, record.end)


def test_nixl_p_d_prefills_one_token_on_another_pod_then_decodes() -> None:
    fleet = Fleet()
    record = fleet.serve(Call(small(), "chat", pd="nixl"))
    assert [(s.profile, s.decision.pod) for s in record.schedules] == [("decode", "vllm-1"), ("prefill", "vllm-2")]
    prefill, (decode,) = record.prefill, record.completions
    assert prefill is not None and record.sidecar is not None
    assert (prefill.pod, prefill.completion_tokens, decode.pod, decode.completion_tokens) == ("vllm-2", 1, "vllm-1", 20)
    t = record.sidecar
    assert t.connector == "nixlv2" and record.shape == "pd-nixl"
    assert in_order(
        record.routed, t.start, t.forward_start, t.prefill_start, t.prefill_post_start, prefill.arrived,
        prefill.finished, t.prefill_post_end, t.prefill_end, t.decode_start, t.decode_post_start, decode.arrived,
        decode.finished, t.decode_post_end, t.decode_end, t.forward_end, t.end, record.end,
    )  # fmt: skip
    assert fleet.router.finished_with == [(record.call.request.request_id, "vllm-1", 20)]  # learns from the decode
    # the client's TTFT counts from gateway.request's start to the decode pod's first token
    assert outcome(record).ttft == (ns(decode.arrived) - ns(record.arrival)) / 1e9 + decode.ttft


def test_p2p_p_d_runs_both_stages_at_once() -> None:
    record = Fleet().serve(Call(small(40), "chat", pd="p2p"))
    prefill, (decode,) = record.prefill, record.completions
    assert prefill is not None and record.sidecar is not None and record.sidecar.connector == "offloading"
    assert decode.arrived < prefill.finished  # dispatched together
    assert in_order(record.sidecar.forward_start, record.sidecar.prefill_start, record.sidecar.decode_post_start)
    assert in_order(prefill.finished, record.sidecar.prefill_end) and in_order(
        decode.finished, record.sidecar.decode_end
    )


def test_p_d_with_sidecar_tracing_off_keeps_both_stages_and_no_sidecar_times() -> None:
    record = Fleet().serve(Call(small(), "completions", pd="off"))
    assert record.sidecar is None and record.prefill is not None
    assert record.prefill.finished <= record.completions[0].arrived  # NIXL, untraced
    decode = record.completions[0]
    assert outcome(record).ttft == (ns(decode.arrived) - ns(record.arrival)) / 1e9 + decode.ttft


def test_n_3_runs_three_choices_on_one_pod() -> None:
    record = Fleet().serve(Call(small(30), "completions", n=3, choice_tokens=(12, 30, 5)))
    assert sorted((c.pod, c.completion_tokens) for c in record.completions) == [
        ("vllm-1", 5), ("vllm-1", 12), ("vllm-1", 30),
    ]  # fmt: skip
    assert record.shape == "n3"


@pytest.mark.parametrize(
    ("failure", "message", "status", "slept"),
    [
        pytest.param("shed", SHED_MESSAGE, 429, [], id="shed"),
        pytest.param("refused", REFUSED_MESSAGE, 500, [], id="refused by the admitter"),
        pytest.param("timeout", TIMEOUT_MESSAGE, 429, [QUEUE_TTL_SECONDS], id="timeout in the queue"),
    ],
)
def test_a_call_refused_before_scheduling_reaches_no_router_and_no_pod(
    failure: str, message: str, status: int, slept: list[float]
) -> None:
    fleet = Fleet()
    record = fleet.serve(Call(small(), "chat", failure=failure))  # type: ignore[arg-type]
    assert (record.error, record.orchestration_error, record.http_status) == (message, message, status)
    assert (record.schedules, record.completions, record.routing) == ((), (), "none")
    assert fleet.router.routed == [] and fleet.slept == slept
    assert record.shape == {"refused": "admitter-refused"}.get(failure, failure)


def test_a_model_server_error_is_scheduled_and_then_released() -> None:
    fleet = Fleet()
    record = fleet.serve(Call(small(), "chat", failure="error"))
    assert (record.error, record.http_status, record.completions, record.failure) == (
        MODEL_SERVER_ERROR,
        500,
        (),
        "error",
    )
    assert fleet.router.released_ids == [record.call.request.request_id] and fleet.router.finished_with == []


def test_a_client_that_disconnects_mid_stream_abandons_its_request_on_the_pod() -> None:
    fleet = Fleet("default")
    record = fleet.serve(Call(small(5000), "chat", failure="aborted", abort_after=0.02))
    assert record.aborted and record.completions == () and record.failure == "aborted"
    assert record.routing == "default" and record.shape == "aborted"
    assert fleet.router.released_ids == [record.call.request.request_id]
    assert fleet.pods["vllm-1"].snapshot() == PodSnapshot(0, 0, 0.0)  # the pod dropped it, as vLLM aborts
    assert record.end - record.routed == pytest.approx(0.02, abs=0.015)
