"""The clients: which requests arrive, when, and with which SLO headers.

Three kinds of traffic share one model, as on a real chat-and-agents deployment:

=========== ========= ============ ================ ================ ==========
class        share     x-slo-ttft   x-slo-tpot       prompt (median)  output
=========== ========= ============ ================ ================ ==========
interactive  50 %      500 ms       50 ms            600 tokens       150 tokens
standard     30 %      2000 ms      80 ms            2500 tokens      300 tokens
batch        20 %      none         none             1500 tokens      400 tokens
=========== ========= ============ ================ ================ ==========

Lengths are lognormal around those medians (sigma 0.6), capped. Arrivals are a Poisson process whose
rate follows a load curve: a base rate with a burst to ``burst_factor`` times it for ``burst_seconds`` of
every ``period_seconds``. Bursts push the fleet past its capacity, so queues grow, SLOs are missed and
the predictor has to follow the load; between bursts the fleet recovers.

The same class table writes the SLO spec sloscope runs with (:func:`demo_spec`), so what the simulator
calls a class is exactly what sloscope classifies: one source of truth.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sloscope.demo.records import SimRequest

__all__ = ["CLASSES", "Load", "TrafficClass", "Workload", "demo_spec"]


@dataclass(frozen=True)
class TrafficClass:
    name: str
    share: float
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    prompt_median: int
    output_median: int
    sigma: float = 0.6


CLASSES = (
    TrafficClass("interactive", 0.5, 500.0, 50.0, 600, 150),
    TrafficClass("standard", 0.3, 2000.0, 80.0, 2500, 300),
    TrafficClass("batch", 0.2, None, None, 1500, 400),
)
MAX_PROMPT_TOKENS = 8000
MAX_OUTPUT_TOKENS = 1024


def demo_spec(model: str) -> dict[str, Any]:
    """The SLO spec for sloscope: one class per traffic class with SLO headers, matched by the TTFT target."""
    classes = []
    for cls in CLASSES:
        if cls.slo_ttft_ms is None:
            continue
        classes.append(
            {
                "name": cls.name,
                "description": f"Demo traffic with x-slo-ttft-ms: {cls.slo_ttft_ms:g}.",
                "match": {"models": [model], "ttft_ms": {"min": cls.slo_ttft_ms, "max": cls.slo_ttft_ms}},
                "objectives": {"ttft": 0.95, "tpot": 0.95, "goodput": 0.9},
                "reference": {
                    "prompt_tokens": cls.prompt_median,
                    "ttft_ms": cls.slo_ttft_ms,
                    "tpot_ms": cls.slo_tpot_ms,
                },
            }
        )
    return {"version": "sloscope/v1", "service": "demo", "classes": classes, "default_class": "batch"}


@dataclass(frozen=True)
class Load:
    """Requests per second over time: ``rate``, times ``burst_factor`` during bursts."""

    rate: float = 6.5
    burst_factor: float = 2.0
    period_seconds: float = 45.0
    burst_seconds: float = 12.0
    first_burst_at: float = 20.0

    def at(self, t: float) -> float:
        """The arrival rate ``t`` seconds after the start."""
        if t >= self.first_burst_at and (t - self.first_burst_at) % self.period_seconds < self.burst_seconds:
            return self.rate * self.burst_factor
        return self.rate

    @property
    def peak(self) -> float:
        return self.rate * max(self.burst_factor, 1.0)


class Workload:
    """A seeded stream of (offset in seconds, request) pairs; arrival times are set when a request is sent."""

    def __init__(self, load: Load, model: str, rng: random.Random) -> None:
        self._load = load
        self._model = model
        self._rng = rng
        self._ids = itertools.count(1)

    def arrivals(self, duration: float) -> Iterator[tuple[float, SimRequest]]:
        """Poisson arrivals with a time-varying rate, by thinning a process at the peak rate."""
        t, peak = 0.0, self._load.peak
        while True:
            t += self._rng.expovariate(peak)
            if t >= duration:
                return
            if self._rng.random() * peak <= self._load.at(t):
                yield t, self.request()

    def request(self, traffic_class: TrafficClass | None = None) -> SimRequest:
        """The next request: of a class drawn by the shares, or of ``traffic_class``."""
        rng = self._rng
        cls = rng.choices(CLASSES, weights=[c.share for c in CLASSES])[0] if traffic_class is None else traffic_class
        return SimRequest(
            request_id=f"demo-{next(self._ids):06d}",
            slo_class=cls.name,
            model=self._model,
            prompt_tokens=_length(rng, cls.prompt_median, cls.sigma, MAX_PROMPT_TOKENS),
            output_tokens=_length(rng, cls.output_median, cls.sigma, MAX_OUTPUT_TOKENS),
            slo_ttft_ms=cls.slo_ttft_ms,
            slo_tpot_ms=cls.slo_tpot_ms,
            arrival=0.0,
        )

    def output_tokens(self, slo_class: str) -> int:
        """An output length drawn as for a request of the class."""
        cls = next(c for c in CLASSES if c.name == slo_class)
        return _length(self._rng, cls.output_median, cls.sigma, MAX_OUTPUT_TOKENS)


def _length(rng: random.Random, median: int, sigma: float, cap: int) -> int:
    return max(1, min(cap, round(median * math.exp(rng.gauss(0.0, sigma)))))
