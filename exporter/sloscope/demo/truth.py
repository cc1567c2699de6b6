"""The simulator's own account of what happened: the ground truth sloscope's series must equal.

Computed from what the simulation measured, with the definitions of docs/configuration.md written out
again here (not by calling sloscope's evaluator): TTFT is the model server's, TPOT is
(e2e - TTFT) / (completion tokens - 1) for at least 2 tokens, an SLO is met when actual <= target, goodput
needs every SLO the request carries. The floats are the ones put on the spans, so the verdicts agree
exactly with sloscope's unless sloscope is wrong.

Predictions: the router's own prediction for the pod it chose, the one the EPP routes on. True coverage
is the share of requests whose actual latency was at most that prediction.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from sloscope.demo.records import Completion, SimRequest

__all__ = ["GroundTruth", "Outcome"]

SLOS = ("ttft", "tpot", "goodput")


@dataclass(frozen=True)
class Outcome:
    request: SimRequest
    completion: Completion
    routing: str  # "predicted" or "default"
    predicted_ttft_ms: float | None  # the router's prediction for the chosen pod
    predicted_tpot_ms: float | None

    @property
    def tpot(self) -> float | None:
        n = self.completion.completion_tokens
        return (self.completion.e2e - self.completion.ttft) / (n - 1) if n >= 2 else None


@dataclass
class GroundTruth:
    """Counts keyed like sloscope's series: (slo_class, routing) and (slo_class, routing, slo)."""

    default_class: str
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    eligible: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    violations: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    predictions: Counter[str] = field(default_factory=Counter)  # by signal
    covered: Counter[str] = field(default_factory=Counter)
    per_pod: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, outcome: Outcome) -> None:
        request, completion = outcome.request, outcome.completion
        cls = request.slo_class if request.slo_ttft_ms is not None else self.default_class
        key = (cls, outcome.routing)
        ttft, tpot = completion.ttft, outcome.tpot
        verdicts: dict[str, bool] = {}
        if request.slo_ttft_ms is not None:
            verdicts["ttft"] = ttft <= request.slo_ttft_ms / 1000.0
        if request.slo_tpot_ms is not None and tpot is not None:
            verdicts["tpot"] = tpot <= request.slo_tpot_ms / 1000.0
        if verdicts:
            verdicts["goodput"] = all(verdicts.values())
        with self._lock:
            self.requests[key] += 1
            self.per_pod[completion.pod] += 1
            for slo, met in verdicts.items():
                self.eligible[(*key, slo)] += 1
                if not met:
                    self.violations[(*key, slo)] += 1
            for signal, actual, predicted_ms in (
                ("ttft", ttft, outcome.predicted_ttft_ms),
                ("tpot", tpot, outcome.predicted_tpot_ms),
            ):
                if actual is not None and predicted_ms is not None and predicted_ms > 0:
                    self.predictions[signal] += 1
                    self.covered[signal] += actual <= predicted_ms / 1000.0

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.requests.values())

    def coverage_counts(self, signal: str) -> tuple[int, int]:
        """(covered, compared) so far, to take differences between two moments."""
        with self._lock:
            return self.covered[signal], self.predictions[signal]

    def coverage(self, signal: str) -> float | None:
        with self._lock:
            n = self.predictions[signal]
            return self.covered[signal] / n if n else None

    def attainment(self, slo_class: str, slo: str) -> float | None:
        with self._lock:
            eligible = sum(v for (c, _, s), v in self.eligible.items() if c == slo_class and s == slo)
            missed = sum(v for (c, _, s), v in self.violations.items() if c == slo_class and s == slo)
        return 1.0 - missed / eligible if eligible else None
