"""The simulator's own account of what happened: the ground truth sloscope's series must equal.

Computed from what the simulation measured, with the definitions of docs/configuration.md written out
again here (not by calling sloscope's evaluator): TTFT is the model server's, TPOT is
(e2e - TTFT) / (completion tokens - 1) for at least 2 tokens, an SLO is met when actual <= target, goodput
needs every SLO the request carries. The floats are the ones put on the spans, so the verdicts agree
exactly with sloscope's unless sloscope is wrong.

The llm-d demo adds (docs/demo.md): a P/D request counts once, on its decode pod, with the client's TTFT,
from the start of the sidecar's forward_request span (gateway.request without sidecar spans) to the decode
pod's first token, ``(decode start ns - routing start ns) / 1e9 + decode TTFT`` from the integer nanoseconds
the spans carry; its TPOT is the decode stage's own. An n > 1 request counts once with the smallest TTFT of
its choices and the largest per-choice TPOT. A failed request (:class:`FailedOutcome`) counts as a request,
in its failure reason, and as eligible for and violating every SLO it carried (goodput too, when it carried
any); it has no latency and no pod, so no pod's count has it.

Predictions: the router's own prediction for the pod it chose, the one the EPP routes on. True coverage
is the share of requests whose actual latency was at most that prediction (what a quantile predictor is
judged by); the true bias and MAE are the mean of actual - predicted and of its absolute value, in seconds
(what a mean predictor is judged by). Both are kept, whichever the predictor predicts. The last
``RECENT_PREDICTIONS`` of them are also kept by request id, with the actuals (:attr:`GroundTruth.recent`), so a
shadow prediction that strays can be set beside the router's (:mod:`sloscope.demo.shadow_check`).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sloscope.demo.records import Completion, SimRequest
from sloscope.predictor.features import Features

__all__ = ["FailedOutcome", "GroundTruth", "Outcome", "RoutedPrediction"]

SLOS = ("ttft", "tpot", "goodput")
SIGNALS = ("ttft", "tpot")
RECENT_PREDICTIONS = 50_000  # the demo runs for hours: what is kept per request is bounded


@dataclass(frozen=True, slots=True)
class RoutedPrediction:
    """What the router predicted for the pod it chose, beside what happened (seconds)."""

    pod: str
    arrival: float
    signal: str
    predicted: float
    actual: float
    waiting: int | None = None  # the pod state the router predicted from (None: not known)
    running: int | None = None
    kv_cache: float | None = None  # the KV-cache utilization it sent, 0..1


def _tpot(completion: Completion) -> float | None:
    n = completion.completion_tokens
    return (completion.e2e - completion.ttft) / (n - 1) if n >= 2 else None


@dataclass(frozen=True)
class Outcome:
    """A request that completed. ``completion`` is the one counted: the decode stage of a P/D request."""

    request: SimRequest
    completion: Completion
    routing: str  # "predicted" or "default"
    predicted_ttft_ms: float | None  # the router's prediction for the chosen pod
    predicted_tpot_ms: float | None
    choices: tuple[Completion, ...] = ()  # n > 1: every choice
    arrival_ns: int | None = None  # the gateway span's start, where the client's TTFT counts from, as exported
    served_ns: int | None = None  # the start of the llm_request whose first token counts (decode stage, fastest)
    routed_on: Features | None = None  # what the router knew of the chosen pod when it predicted

    @property
    def ttft(self) -> float:
        """From the request's arrival at its gateway to its first token (docs/sending-traces.md, which TTFT)."""
        own = min(c.ttft for c in self.choices) if self.choices else self.completion.ttft
        if self.arrival_ns is not None and self.served_ns is not None and self.served_ns >= self.arrival_ns:
            return (self.served_ns - self.arrival_ns) / 1e9 + own
        return own

    @property
    def tpot(self) -> float | None:
        if self.choices:
            per_choice = [t for t in map(_tpot, self.choices) if t is not None]
            return max(per_choice) if per_choice else None
        return _tpot(self.completion)


@dataclass(frozen=True)
class FailedOutcome:
    """A request that failed: reason shed, timeout, error or aborted; routing none when refused before scheduling."""

    request: SimRequest
    routing: str
    reason: str
    waited: float | None = None  # aborted: seconds from its arrival at the gateway until the client left


@dataclass
class GroundTruth:
    """Counts keyed like sloscope's series: (slo_class, routing) and (slo_class, routing, slo)."""

    default_class: str
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    eligible: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    violations: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    predictions: Counter[str] = field(default_factory=Counter)  # by signal
    covered: Counter[str] = field(default_factory=Counter)
    error_sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 0.0))  # actual - predicted, s
    absolute_error_sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 0.0))
    per_pod: Counter[str] = field(default_factory=Counter)
    failed: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (slo_class, routing, reason)
    # (request id, signal) -> the router's prediction, the last RECENT_PREDICTIONS of them
    recent: OrderedDict[tuple[str, str], RoutedPrediction] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _class(self, request: SimRequest) -> str:
        return request.slo_class if request.slo_ttft_ms is not None else self.default_class

    def add(self, outcome: Outcome | FailedOutcome) -> None:
        if isinstance(outcome, FailedOutcome):
            self._add_failed(outcome)
            return
        request, completion = outcome.request, outcome.completion
        key = (self._class(request), outcome.routing)
        ttft, tpot = outcome.ttft, outcome.tpot
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
                    error = actual - predicted_ms / 1000.0
                    self.error_sums[signal] += error
                    self.absolute_error_sums[signal] += abs(error)
                    self._keep(outcome, signal, predicted_ms / 1000.0, actual)

    def _keep(self, outcome: Outcome, signal: str, predicted: float, actual: float) -> None:
        request, state = outcome.request, outcome.routed_on
        self.recent[(request.request_id, signal)] = RoutedPrediction(
            outcome.completion.pod,
            request.arrival,
            signal,
            predicted,
            actual,
            None if state is None else state.num_request_waiting,
            None if state is None else state.num_request_running,
            None if state is None else state.kv_cache_percentage,
        )
        while len(self.recent) > RECENT_PREDICTIONS:
            self.recent.popitem(last=False)

    def routed(self) -> dict[tuple[str, str], RoutedPrediction]:
        """A copy of the recent predictions by (request id, signal), taken under the lock."""
        with self._lock:
            return dict(self.recent)

    def _add_failed(self, outcome: FailedOutcome) -> None:
        request = outcome.request
        key = (self._class(request), outcome.routing)
        targets = (("ttft", request.slo_ttft_ms), ("tpot", request.slo_tpot_ms))
        carried = [slo for slo, target in targets if target is not None]
        if outcome.reason == "aborted":  # the client left: only a TTFT target it outwaited was missed
            ttft_ms, waited = request.slo_ttft_ms, outcome.waited
            carried = ["ttft"] if ttft_ms is not None and (waited is None or waited * 1000.0 >= ttft_ms) else []
        if carried:
            carried.append("goodput")
        with self._lock:
            self.requests[key] += 1
            self.failed[(*key, outcome.reason)] += 1
            for slo in carried:
                self.eligible[(*key, slo)] += 1
                self.violations[(*key, slo)] += 1

    def counts(self, name: str) -> Counter[Any]:
        """A copy of one of the counters (requests, eligible, violations, failed, per_pod), taken under the lock."""
        with self._lock:
            return Counter(getattr(self, name))

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.requests.values())

    def coverage_counts(self, signal: str) -> tuple[int, int]:
        """(covered, compared) so far, to take differences between two moments."""
        with self._lock:
            return self.covered[signal], self.predictions[signal]

    def error_counts(self, signal: str) -> tuple[int, float, float]:
        """(compared, sum of actual - predicted, sum of its absolute value) so far, seconds."""
        with self._lock:
            return self.predictions[signal], self.error_sums[signal], self.absolute_error_sums[signal]

    def bias_and_mae(self, signal: str) -> tuple[float, float] | None:
        """(mean of actual - predicted, mean absolute error) of the router's predictions, seconds; None before one."""
        n, errors, absolute = self.error_counts(signal)
        return (errors / n, absolute / n) if n else None

    def coverage(self, signal: str) -> float | None:
        with self._lock:
            n = self.predictions[signal]
            return self.covered[signal] / n if n else None

    def attainment(self, slo_class: str, slo: str) -> float | None:
        with self._lock:
            eligible = sum(v for (c, _, s), v in self.eligible.items() if c == slo_class and s == slo)
            missed = sum(v for (c, _, s), v in self.violations.items() if c == slo_class and s == slo)
        return 1.0 - missed / eligible if eligible else None
