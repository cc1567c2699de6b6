"""The demo's clients, ground truth and router choices, on exact inputs."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from sloscope.demo.records import Completion, PodSnapshot, SimRequest
from sloscope.demo.router import Router, RouterPod
from sloscope.demo.truth import GroundTruth, Outcome
from sloscope.demo.workload import CLASSES, Load, Workload, demo_spec
from sloscope.slo.spec import SLOSpec


def test_the_load_curve_bursts_on_schedule() -> None:
    load = Load(rate=6.5, burst_factor=2.0, period_seconds=45.0, burst_seconds=12.0, first_burst_at=20.0)
    assert [load.at(t) for t in (0.0, 19.9, 20.0, 31.9, 32.0, 64.9, 65.0, 77.0)] == [
        6.5, 6.5, 13.0, 13.0, 6.5, 6.5, 13.0, 6.5,
    ]  # fmt: skip


def test_arrivals_follow_the_rate_and_the_class_shares() -> None:
    workload = Workload(Load(rate=10.0, burst_factor=1.0), "m", random.Random(5))
    arrivals = list(workload.arrivals(2000.0))
    assert len(arrivals) == pytest.approx(20_000, rel=0.03)
    offsets = [t for t, _ in arrivals]
    assert offsets == sorted(offsets) and offsets[-1] < 2000.0
    shares = {cls.name: sum(r.slo_class == cls.name for _, r in arrivals) / len(arrivals) for cls in CLASSES}
    assert shares == pytest.approx({"interactive": 0.5, "standard": 0.3, "batch": 0.2}, abs=0.015)
    assert len({r.request_id for _, r in arrivals}) == len(arrivals)
    assert all(1 <= r.prompt_tokens <= 8000 and 1 <= r.output_tokens <= 1024 for _, r in arrivals)


def test_the_same_seed_gives_the_same_requests() -> None:
    def first(seed: int) -> list[tuple[float, str, int]]:
        arrivals = Workload(Load(), "m", random.Random(seed)).arrivals(30.0)
        return [(t, r.slo_class, r.prompt_tokens) for t, r in arrivals]

    assert first(3) == first(3)
    assert first(3) != first(4)


def test_the_spec_classifies_each_traffic_class_as_itself() -> None:
    spec = SLOSpec.model_validate(demo_spec("m"))
    for cls in CLASSES:
        found = spec.classify("m", cls.slo_ttft_ms, cls.slo_tpot_ms)
        assert (found.name if found else spec.default_class) == cls.name


def outcome(slo_class: str, ttft: float, e2e: float, tokens: int, routing: str = "predicted") -> Outcome:
    cls = next(c for c in CLASSES if c.name == slo_class)
    request = SimRequest("r", slo_class, "m", 100, tokens, cls.slo_ttft_ms, cls.slo_tpot_ms, 1000.0)
    completion = Completion("vllm-0", 1000.0, 1000.0, 1000.0 + ttft, 1000.0 + e2e, 100, tokens)
    return Outcome(request, completion, routing, predicted_ttft_ms=300.0, predicted_tpot_ms=40.0)


def test_ground_truth_verdicts() -> None:
    truth = GroundTruth(default_class="batch")
    truth.add(outcome("interactive", ttft=0.4, e2e=0.4 + 10 * 0.045, tokens=11))  # both met
    truth.add(outcome("interactive", ttft=0.6, e2e=0.6 + 10 * 0.060, tokens=11))  # both missed
    truth.add(outcome("interactive", ttft=0.2, e2e=0.2, tokens=1, routing="default"))  # no TPOT for one token
    truth.add(outcome("batch", ttft=5.0, e2e=9.0, tokens=100))  # no SLO
    assert truth.requests == {("interactive", "predicted"): 2, ("interactive", "default"): 1, ("batch", "predicted"): 1}
    assert truth.eligible[("interactive", "predicted", "tpot")] == 2
    assert truth.eligible[("interactive", "default", "tpot")] == 0
    assert truth.eligible[("interactive", "default", "goodput")] == 1
    assert truth.violations == {
        ("interactive", "predicted", "ttft"): 1,
        ("interactive", "predicted", "tpot"): 1,
        ("interactive", "predicted", "goodput"): 1,
    }
    assert truth.attainment("interactive", "ttft") == pytest.approx(2 / 3)
    # predictions: TTFT 300 ms covers 0.4? no; 0.6? no; 0.2 yes; 5.0 no
    assert truth.coverage_counts("ttft") == (1, 4)
    assert truth.coverage_counts("tpot") == (0 + 0 + 0, 3)  # 45 ms, 60 ms and batch's 40.4 ms > 40 ms


class FixedPredictions(Router):
    """The router with its predictor call answered from a table (the HTTP call is tested end to end)."""

    def __init__(self, predictions: list[tuple[float, float]], states: list[PodSnapshot]) -> None:
        pods = [RouterPod(f"vllm-{i}", f"127.0.0.1:{9000 + i}") for i in range(len(states))]
        super().__init__(
            pods, ["http://unused"], "http://unused", httpx.AsyncClient(), random.Random(1), default_share=0
        )
        self._answers = predictions
        for pod, state in zip(pods, states, strict=True):
            self._state[pod.name] = state

    async def _predict(self, rows: object) -> list[tuple[float, float]] | None:
        return self._answers


def route(predictions: list[tuple[float, float]], slo_ttft: float | None = 500.0, slo_tpot: float | None = 50.0) -> str:
    states = [PodSnapshot(i, 10, 0.5) for i in range(len(predictions))]
    router = FixedPredictions(predictions, states)
    request = SimRequest("r", "interactive", "m", 600, 100, slo_ttft, slo_tpot, 0.0)
    return asyncio.run(router.route(request)).pod


def test_least_strategy_packs_onto_the_positive_pod_with_the_least_headroom() -> None:
    # TTFT headrooms 400, 100, 300 ms and TPOT 30, 5, 20 ms: all positive; the least is vllm-1
    assert route([(100.0, 20.0), (400.0, 45.0), (200.0, 30.0)]) == "vllm-1"


def test_without_positive_pods_the_router_takes_the_one_closest_to_its_slos() -> None:
    # every pod misses the TPOT SLO: the best combined headroom wins (vllm-2)
    assert route([(900.0, 80.0), (700.0, 90.0), (600.0, 60.0)]) == "vllm-2"


def test_requests_without_slos_go_to_the_lowest_predicted_ttft() -> None:
    assert route([(300.0, 20.0), (120.0, 60.0), (200.0, 10.0)], slo_ttft=None, slo_tpot=None) == "vllm-1"


def test_the_demo_command_refuses_bad_options_before_starting_anything(capsys: pytest.CaptureFixture[str]) -> None:
    from sloscope.cli import main

    assert main(["demo", "--pods", "0"]) == 2
    assert "--pods and --prediction-servers must be at least 1" in capsys.readouterr().err
    assert main(["demo", "--with-prometheus", "/nonexistent/prometheus"]) == 2
    assert "no Prometheus binary found" in capsys.readouterr().err


def test_the_demo_has_two_upstreams_and_llm_d_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    from sloscope.cli import main
    from sloscope.demo.runner import DemoOptions

    assert DemoOptions().upstream == "llm-d"
    with pytest.raises(ValueError, match="upstream must be one of llm-d, gie-2025"):
        DemoOptions(upstream="gie-2024")
    with pytest.raises(SystemExit):
        main(["demo", "--upstream", "gie-2024"])
    assert "invalid choice: 'gie-2024'" in capsys.readouterr().err
