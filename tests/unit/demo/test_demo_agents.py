"""The llm-d demo's agent clients: sessions of sequential calls, and the shares of every call shape."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from sloscope.demo.agents import CALLS_PER_SESSION, MEAN_CALLS, AgentWorkload, Session
from sloscope.demo.workload import CLASSES, Load


def sessions(seconds: float = 3000.0, seed: int = 5) -> list[tuple[float, Session]]:
    return list(AgentWorkload(Load(rate=10.0, burst_factor=1.0), "m", random.Random(seed)).arrivals(seconds))


def test_sessions_arrive_so_that_the_fleet_sees_the_calls_rate() -> None:
    made = sessions()
    calls = sum(len(s.calls) for _, s in made)
    assert pytest.approx(2.6) == MEAN_CALLS
    assert len(made) == pytest.approx(3000 * 10 / MEAN_CALLS, rel=0.04)
    assert calls / 3000 == pytest.approx(10.0, rel=0.04)
    sizes = Counter(len(s.calls) for _, s in made)
    assert {n: sizes[n] / len(made) for n in sizes} == pytest.approx(dict(CALLS_PER_SESSION), abs=0.02)


def test_a_session_keeps_its_class_headers_and_trace_and_its_calls_have_their_own_ids() -> None:
    made = [s for _, s in sessions(600.0)]
    for session in made:
        assert {c.request.slo_class for c in session.calls} == {session.slo_class}
        assert session.calls[0].think_seconds == 0.0
        assert all(0.1 <= c.think_seconds <= 0.6 for c in session.calls[1:])
        for call in session.calls:
            assert uuid.UUID(call.request.request_id).version == 4
    ids = [c.request.request_id for s in made for c in s.calls]
    assert len(set(ids)) == len(ids)
    assert len({s.trace_id for s in made}) == len(made)
    shares = Counter(s.slo_class for s in made)
    assert {c: shares[c] / len(made) for c in shares} == pytest.approx({c.name: c.share for c in CLASSES}, abs=0.03)
    assert sum(s.old_headers for s in made) / len(made) == pytest.approx(0.2, abs=0.03)


def test_the_shares_of_apis_p_d_n_and_failures() -> None:
    calls = [c for _, s in sessions(6000.0) for c in s.calls]
    total = len(calls)

    def share(predicate: object) -> float:
        return sum(1 for c in calls if predicate(c)) / total  # type: ignore[operator]

    assert share(lambda c: c.api == "chat") == pytest.approx(0.7, abs=0.01)
    failed = {f: share(lambda c, f=f: c.failure == f) for f in ("shed", "timeout", "error", "aborted")}
    assert failed == pytest.approx({"shed": 0.015, "timeout": 0.01, "error": 0.015, "aborted": 0.015}, abs=0.003)
    # the admitter refuses only requests with SLO headers (80 % of them), sheddable ones
    assert share(lambda c: c.failure == "refused") == pytest.approx(0.01 * 0.8, abs=0.002)
    refused = [c for c in calls if c.failure == "refused"]
    assert all(c.request.slo_ttft_ms is not None and c.priority == -1 for c in refused)
    unfailed = 1 - sum(failed.values()) - 0.008
    modes = {m: share(lambda c, m=m: c.pd == m) for m in ("nixl", "p2p", "off")}
    assert modes == pytest.approx(
        {"nixl": 0.075 * unfailed, "p2p": 0.0375 * unfailed, "off": 0.0375 * unfailed}, abs=0.004
    )
    choices = [c for c in calls if c.n > 1]
    assert all(c.api == "completions" and c.pd is None and c.failure is None for c in choices)
    assert len(choices) / sum(1 for c in calls if c.api == "completions") == pytest.approx(0.05 * 0.85, abs=0.01)
    assert all(len(c.choice_tokens) == 3 and min(c.choice_tokens) >= 2 for c in choices)
    assert all(c.request.output_tokens == max(c.choice_tokens) for c in choices)
    assert all(0.3 <= c.abort_after <= 1.5 for c in calls if c.failure == "aborted")


def test_the_same_seed_gives_the_same_sessions() -> None:
    def first(seed: int) -> list[tuple[float, int, str, str | None]]:
        return [(t, s.trace_id, c.request.request_id, c.pd) for t, s in sessions(60.0, seed) for c in s.calls]

    assert first(3) == first(3)
    assert first(3) != first(4)


def test_vllm_request_ids() -> None:
    call = next(c for _, s in sessions(60.0) for c in s.calls if c.api == "completions")
    rid = call.request.request_id
    assert call.vllm_request_id == f"cmpl-{rid}-0" and call.path == "/v1/completions"
    chat = next(c for _, s in sessions(60.0) for c in s.calls if c.api == "chat")
    assert chat.vllm_request_id == f"chatcmpl-{chat.request.request_id}" and chat.path == "/v1/chat/completions"
