"""The simulated pod's /metrics page: vLLM 0.33's families exactly, values that match the completions,
and read by sloscope's own parser and vLLM protocol as the pod's state."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sloscope.demo.pod import SimPod
from sloscope.demo.pod_metrics import FINISHED_REASONS
from sloscope.demo.records import Completion, PodSnapshot, SimRequest
from sloscope.receivers.exposition import ExpositionParser
from sloscope.receivers.protocols import VLLM, PodCounters
from tests.unit.demo.test_demo_pod import EXACT, VirtualTime, complete, request

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REQUIRED = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
}  # family names as prometheus_client's parser gives them (a counter without its _total)


def families(text: str) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def label_names(family: Metric) -> set[str]:
    return {name for sample in family.samples for name in sample.labels if name != "le"}


def bounds(family: Metric) -> list[str]:
    return [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")]


def value(page: dict[str, Metric], family: str, sample: str, **labels: str) -> float:
    want = {"engine": "0", "model_name": MODEL, **labels}
    (found,) = [s.value for s in page[family].samples if s.name == sample and s.labels == want]
    return float(found)


def workload_pod(vt: VirtualTime) -> SimPod:
    # small enough to queue and preempt: latencies spread over several buckets
    params = replace(EXACT, kv_capacity_tokens=6000, max_running=6)
    return SimPod("pod-a", MODEL, params, random.Random(1), clock=vt.clock, sleep=vt.sleep)


def workload() -> list[SimRequest]:
    rng = random.Random(5)
    return [request(f"r{i}", rng.choice([20, 300, 1500, 2500]), rng.choice([1, 2, 40, 400])) for i in range(40)]


@pytest.fixture(scope="module")
def fixture_page(shared: Path) -> dict[str, Metric]:
    return families((shared / "fixtures" / "vllm" / "metrics-vllm-0.33.0.txt").read_text())


def test_every_published_family_has_the_fixture_s_name_type_help_labels_and_buckets(
    fixture_page: dict[str, Metric],
) -> None:
    async def scenario() -> str:
        vt = VirtualTime()
        pod = workload_pod(vt)
        await complete(pod, [request("r1", 100, 3)])
        return pod.metrics_text()

    page = families(asyncio.run(scenario()))
    assert {name: page[name].type for name in REQUIRED if name in page} == REQUIRED
    for name, family in page.items():  # the _created families included
        assert name in fixture_page, name
        reference = fixture_page[name]
        assert (family.type, family.documentation) == (reference.type, reference.documentation), name
        assert label_names(family) == label_names(reference), name
        assert bounds(family) == bounds(reference), name
    reasons = {s.labels["finished_reason"] for s in page["vllm:request_success"].samples}
    assert reasons == {s.labels["finished_reason"] for s in fixture_page["vllm:request_success"].samples}
    assert reasons == set(FINISHED_REASONS)


def observed(values: Sequence[float], page: dict[str, Metric], family: str) -> None:
    """The histogram's buckets, count and sum are those of ``values``."""
    for sample in page[family].samples:
        if sample.name.endswith("_bucket"):
            le = float(sample.labels["le"])
            assert sample.value == sum(1 for v in values if v <= le), (family, le)
    assert value(page, family, family + "_count") == len(values)
    assert value(page, family, family + "_sum") == pytest.approx(sum(values), rel=1e-12, abs=1e-12)


def test_histograms_and_counters_are_what_the_completions_imply() -> None:
    async def scenario() -> tuple[SimPod, list[Completion]]:
        vt = VirtualTime()
        pod = workload_pod(vt)
        return pod, await complete(pod, workload())

    pod, done = asyncio.run(scenario())
    page = families(pod.metrics_text())
    assert pod.preemptions > 0  # the workload exercises the preemption path

    observed([c.ttft for c in done], page, "vllm:time_to_first_token_seconds")
    observed([c.e2e for c in done], page, "vllm:e2e_request_latency_seconds")
    observed([c.queue_time for c in done], page, "vllm:request_queue_time_seconds")
    observed([c.prefill_time for c in done], page, "vllm:request_prefill_time_seconds")
    observed([c.decode_time for c in done], page, "vllm:request_decode_time_seconds")
    observed([c.finished - c.scheduled for c in done], page, "vllm:request_inference_time_seconds")
    tpot = [c.decode_time / (c.completion_tokens - 1) if c.completion_tokens > 1 else 0.0 for c in done]
    observed(tpot, page, "vllm:request_time_per_output_token_seconds")
    observed([c.prompt_tokens for c in done], page, "vllm:request_prompt_tokens")
    observed([c.completion_tokens for c in done], page, "vllm:request_generation_tokens")

    # one inter-token latency per token after the first; for each request they add up to its decode time
    itl = "vllm:inter_token_latency_seconds"
    assert value(page, itl, itl + "_count") == sum(c.completion_tokens - 1 for c in done)
    assert value(page, itl, itl + "_sum") == pytest.approx(sum(c.decode_time for c in done), rel=1e-12)
    assert value(page, itl, itl + "_bucket", le="+Inf") == value(page, itl, itl + "_count")

    assert value(page, "vllm:prompt_tokens", "vllm:prompt_tokens_total") == sum(c.prompt_tokens for c in done)
    assert value(page, "vllm:generation_tokens", "vllm:generation_tokens_total") == sum(
        c.completion_tokens for c in done
    )
    assert value(page, "vllm:num_preemptions", "vllm:num_preemptions_total") == pod.preemptions
    queried = "vllm:prefix_cache_queries"
    assert value(page, queried, queried + "_total") == sum(c.prompt_tokens for c in done)
    assert value(page, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") == 0  # no prefix cache simulated
    preempted = "vllm:request_num_preemptions"
    assert value(page, preempted, preempted + "_sum") == pod.preemptions
    for reason in FINISHED_REASONS:
        expected = len(done) if reason == "length" else 0
        assert value(page, "vllm:request_success", "vllm:request_success_total", finished_reason=reason) == expected


def test_an_abandoned_request_counts_as_abort() -> None:
    async def scenario() -> SimPod:
        vt = VirtualTime()
        pod = workload_pod(vt)
        pod.submit(request("gone", 100, 2)).cancel()
        await complete(pod, [request("kept", 100, 2)])
        return pod

    page = families(asyncio.run(scenario()).metrics_text())
    success = "vllm:request_success_total"
    assert value(page, "vllm:request_success", success, finished_reason="abort") == 1
    assert value(page, "vllm:request_success", success, finished_reason="length") == 1
    assert value(page, "vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == 1


def test_sloscope_reads_the_pod_s_state_from_the_page_as_the_snapshot_gives_it() -> None:
    captured: list[tuple[str, PodSnapshot]] = []

    async def scenario() -> None:
        vt = VirtualTime()
        pod = workload_pod(vt)
        vt.hook = lambda step: captured.append((pod.metrics_text(), pod.snapshot())) if step == 30 else None
        await complete(pod, workload())

    asyncio.run(scenario())
    ((text, snapshot),) = captured
    assert snapshot.waiting > 0 and snapshot.running > 0 and 0 < snapshot.kv_cache_utilization < 1
    state = VLLM.pod_state(ExpositionParser(VLLM.families).parse(text), MODEL)
    assert (state.waiting, state.running, state.kv_cache_utilization) == (
        snapshot.waiting,
        snapshot.running,
        snapshot.kv_cache_utilization,
    )
    assert state.models == {MODEL}
    assert state.lora is None  # the pods run no LoRA adapters: vLLM publishes no lora_requests_info then
    page = families(text)
    assert state.counters == PodCounters(
        prefix_cache_hits=0.0,
        prefix_cache_queries=value(page, "vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total"),
        preemptions=value(page, "vllm:num_preemptions", "vllm:num_preemptions_total"),
    )
    assert state.counters.prefix_cache_queries
