"""Live headroom of a pod asked of a real prediction server over HTTP, with the pool's EPP streaming and not.

The stand-in (tests/support/prediction_server.py) predicts by its documented formula. Pod state: the recorded vLLM
page's 3 waiting, 27 running, KV cache 0.5873; the reference request is 800 tokens (600 words, the gie-2025
features), its targets 500 ms TTFT and 20 ms TPOT, which the pod is predicted to miss (24.373 ms). With streaming
off in the EPP (llm-d-router and GIE v1.5.0's default, predictedlatency/plugin.go) the predicted "TTFT" is an
end-to-end latency, which that EPP holds against the TTFT target and judges no TPOT by (prediction.go): sloscope's
live headroom does the same, as signal ``e2e``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope.config import Headroom, Predictions
from sloscope.predictor.client import PredictionClient
from sloscope.processors.live_headroom import LiveHeadroom
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.running_slos import RunningSLOs
from sloscope.receivers.discovery import Target, sorted_labels
from sloscope.receivers.protocols import PodState
from sloscope.slo.spec import SLOSpec
from tests.support.prediction_server import PredictionServer, predicted_tpot_ms, predicted_ttft_ms
from tests.support.series import Samples, samples

pytestmark = pytest.mark.integration

POD = Target(pool="pool-a", pod="vllm-0", address="10.0.0.1:8000")
STATE = PodState(waiting=3.0, running=27.0, kv_cache_utilization=0.5873, lora=None, models=frozenset())
SPEC = SLOSpec.model_validate(
    {
        "version": "sloscope/v1",
        "classes": [
            {
                "name": "interactive",
                "match": {"ttft_ms": {"max": 1000}},
                "reference": {"prompt_tokens": 800, "ttft_ms": 500, "tpot_ms": 20},
            }
        ],
    }
)
REFERENCE = {
    "num_request_waiting": 3,
    "num_request_running": 27,
    "input_token_length": 600,
    "kv_cache_percentage": 0.5873,
}


@pytest.fixture(scope="module")
def predictor() -> Iterator[PredictionServer]:
    with PredictionServer() as server:
        yield server


def headroom(
    predictor: PredictionServer,
    *,
    streaming: bool,
    pods: tuple[Target, ...] = (POD,),
    predictions: Predictions | None = None,
) -> Samples:
    """One round of live headroom (the clock at the pods' scrape, each in ``STATE``), read as Prometheus reads it."""

    async def run() -> Samples:
        history = PodHistory(8, 30.0, 60.0)
        for pod in pods:
            history.track(pod)
            history.record(pod.key, 1000.0, STATE)
        settings = predictions or Predictions()
        async with httpx.AsyncClient() as http:
            live = LiveHeadroom(
                spec=SPEC,
                history=history,
                running=RunningSLOs(),
                clients={"pool-a": PredictionClient([predictor.url], settings, http)},
                settings=Headroom(),
                predictions=settings,
                clock=lambda: 1000.0,
                streaming_of=lambda pool: streaming,
            )
            await live.update_once()
        registry = CollectorRegistry()
        registry.register(live)
        return samples(generate_latest(registry).decode())

    return asyncio.run(run())


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def test_streaming_judges_ttft_and_tpot(predictor: PredictionServer) -> None:
    ttft, tpot = predicted_ttft_ms(REFERENCE) / 1000, predicted_tpot_ms(REFERENCE) / 1000  # 0.17873 s, 0.024373 s
    pod = {"pool": "pool-a", "pod": "vllm-0", "slo_class": "interactive"}
    assert headroom(predictor, streaming=True) == {
        key("sloscope_pod_headroom_seconds", signal="ttft", **pod): pytest.approx(0.5 - ttft),
        key("sloscope_pod_headroom_seconds", signal="tpot", **pod): pytest.approx(0.02 - tpot),
        key("sloscope_pool_pods_with_headroom", pool="pool-a", slo_class="interactive"): 0.0,  # TPOT has none
    }


def test_streaming_off_judges_the_end_to_end_prediction_against_the_ttft_target_alone(
    predictor: PredictionServer,
) -> None:
    e2e = predicted_ttft_ms(REFERENCE) / 1000
    pod = {"pool": "pool-a", "pod": "vllm-0", "slo_class": "interactive"}
    assert headroom(predictor, streaming=False) == {
        key("sloscope_pod_headroom_seconds", signal="e2e", **pod): pytest.approx(0.5 - e2e),
        key("sloscope_pool_pods_with_headroom", pool="pool-a", slo_class="interactive"): 1.0,  # TPOT not judged
    }


def test_a_prefill_pod_of_a_pd_pool_is_judged_by_its_ttft_alone(predictor: PredictionServer) -> None:
    """A prefill pod generates no tokens: the EPP neutralizes its TPOT when its endpointRoleLabel value is
    "prefill" (llm-d-router ebab6879 predictedlatency/prediction.go:106-115,181-188), and so does sloscope. The
    decode pod keeps both signals; in the same state, only the prefill pod has headroom."""
    role = "llm-d.ai/role"
    prefill = Target("pool-a", "prefill-0", "10.0.0.2:8000", labels=sorted_labels({role: "prefill"}))
    decode = Target("pool-a", "decode-0", "10.0.0.3:8000", labels=sorted_labels({role: "decode"}))
    ttft, tpot = predicted_ttft_ms(REFERENCE) / 1000, predicted_tpot_ms(REFERENCE) / 1000
    got = headroom(predictor, streaming=True, pods=(prefill, decode), predictions=Predictions(endpoint_role_label=role))
    labels = {"pool": "pool-a", "slo_class": "interactive"}
    assert got == {
        key("sloscope_pod_headroom_seconds", signal="ttft", pod="prefill-0", **labels): pytest.approx(0.5 - ttft),
        key("sloscope_pod_headroom_seconds", signal="ttft", pod="decode-0", **labels): pytest.approx(0.5 - ttft),
        key("sloscope_pod_headroom_seconds", signal="tpot", pod="decode-0", **labels): pytest.approx(0.02 - tpot),
        key("sloscope_pool_pods_with_headroom", **labels): 1.0,
    }
