"""Generated joined requests covering every case the SLO evaluation and the publisher tell apart.

Seeded and plain ``random``: the same seed gives the same requests, so a failing differential test can be
replayed. Values are drawn from small pools so label sets repeat (as in real traffic) and targets hit the
class ranges' edges exactly.
"""

from __future__ import annotations

import math
import random
from typing import Any

from sloscope import conventions as c
from sloscope.records import JoinedRequest
from sloscope.slo.spec import SLOSpec

# Classes matched by model pattern, by presence of an SLO, by TTFT and TPOT ranges, with and without
# default targets, so both target sources and the default class occur.
SPEC = SLOSpec.model_validate(
    {
        "version": "sloscope/v1",
        "classes": [
            {"name": "batch", "match": {"models": ["batch-*"], "has_slo": False}, "defaults": {"ttft_ms": 5000}},
            {"name": "interactive", "match": {"ttft_ms": {"max": 1000}}},
            {"name": "streaming", "match": {"tpot_ms": {"min": 10, "max": 80}}, "defaults": {"ttft_ms": 2000}},
            {"name": "tiny", "match": {"models": ["tiny?"], "has_slo": False}, "defaults": {"tpot_ms": 30}},
            {"name": "standard", "match": {"has_slo": True}},
        ],
        "default_class": "none",
    }
)

_MODELS = (None, "", "llama", "batch-7b", "tiny1", "qwen", "mistral")
_POOLS = (None, "", "pool-a", "pool-b")
_PODS = (None, "", "pod-1", "pod-2", "pod-3")
_ENDPOINTS = (None, "", "10.0.0.1:8000", "10.0.0.2:8000")
_ROUTINGS = ("unknown", "slo_aware", "random")
_TARGETS = (None, None, math.nan, math.inf, -5.0, 0.0, 10.0, 80.0, 200.0, 1000.0, 1000.5, 5000.0)
_BAD_SECONDS = (None, math.nan, math.inf, -math.inf, -0.1)
_BAD_TOKENS = (None, math.nan, math.inf, -1.0, 2.5)
_REASONS = (None,) * 6 + c.FAILURE_REASONS
# as traces record them (None: not at all); th:e666666666666 is OpenTelemetry's "one in ten", a little above 0.1
_PROBABILITIES = (None, 1.0, None, 0.5, 0.1, (2**56 - 0xE6666666666660) / 2**56, 0.01, None, 0.25, 1.0, 1 / 3)


def _seconds(rng: random.Random, scale: float) -> float | None:
    if rng.random() < 0.12:
        return rng.choice(_BAD_SECONDS)
    if rng.random() < 0.05:
        return rng.choice((0.0, 0.25, 1.0, 0.08))  # exactly on bucket bounds and targets
    return round(rng.expovariate(1 / scale), rng.choice((3, 6, 12)))


def _tokens(rng: random.Random) -> float | None:
    if rng.random() < 0.1:
        return rng.choice(_BAD_TOKENS)
    return float(rng.choice((0, 1, 2, 3, 17, 256, 4096)))


def joined_request(rng: random.Random, index: int, *, models: int = 0) -> JoinedRequest:
    """One request; ``models`` > 0 draws the model from that many distinct names instead (to pass label caps)."""
    model = f"m{rng.randrange(models)}" if models else rng.choice(_MODELS)
    ttft = _seconds(rng, 0.4)
    return JoinedRequest(
        trace_id=f"{index:032x}",
        span_id=f"{index:016x}",
        outcome=rng.choice((c.OUTCOME_JOINED, c.OUTCOME_ANCHOR_ONLY)),
        requested_model=rng.choice(_MODELS),
        target_model=model,
        pool=rng.choice(_POOLS),
        pod=rng.choice(_PODS),
        endpoint=rng.choice(_ENDPOINTS),
        slo_ttft_ms=rng.choice(_TARGETS),
        slo_tpot_ms=rng.choice(_TARGETS),
        routing=rng.choice(_ROUTINGS),
        ttft_seconds=ttft,
        server_ttft_seconds=rng.choice((None, None, ttft, _seconds(rng, 0.4))),
        e2e_seconds=_seconds(rng, 3.0),
        prompt_tokens=_tokens(rng),
        completion_tokens=_tokens(rng),
        failure_reason=rng.choice(_REASONS),
        tpot_seconds=rng.choice((None,) * 5 + (_seconds(rng, 0.05),)),
        start_ns=1_700_000_000_000_000_000 + index,
        end_ns=1_700_000_000_500_000_000 + index,
        sampling_probability=_PROBABILITIES[index * 7 % len(_PROBABILITIES)],  # not drawn: earlier seeds keep theirs
    )


def joined_requests(seed: int, count: int, *, models: int = 0) -> list[JoinedRequest]:
    rng = random.Random(seed)
    return [joined_request(rng, i, models=models) for i in range(count)]


def answered(trace_id: str, pod: str, **fields: Any) -> JoinedRequest:
    """One answered llama request on ``pod``, arrived at 101 s, 400 prompt and 11 completion tokens, TTFT 0.1 s of
    0.3 s; ``fields`` override or add (``pool``, ``prefill_pod``, ...)."""
    values: dict[str, Any] = {
        "trace_id": trace_id,
        "span_id": "cd" * 8,
        "outcome": c.OUTCOME_JOINED,
        "target_model": "llama",
        "pod": pod,
        "ttft_seconds": 0.1,
        "server_ttft_seconds": 0.1,
        "e2e_seconds": 0.3,
        "completion_tokens": 11,
        "prompt_tokens": 400,
        "start_ns": 101_000_000_000,
        "end_ns": 102_000_000_000,
        "arrival_ns": 101_000_000_000,
    }
    return JoinedRequest(**{**values, **fields})
