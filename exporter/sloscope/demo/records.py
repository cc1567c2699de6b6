"""What crosses the demo's seams: a simulated request, its outcome on a pod, a pod's observable state."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Completion", "PodSnapshot", "SimRequest", "ns"]


def ns(seconds: float) -> int:
    """A span timestamp: unix seconds as integer nanoseconds, as the demo's spans carry them."""
    return round(seconds * 1e9)


@dataclass(slots=True)
class SimRequest:
    """One client request. Times are unix seconds (wall clock: spans and scrapes must agree)."""

    request_id: str
    slo_class: str
    model: str
    prompt_tokens: int
    output_tokens: int  # tokens the request will generate (at least 1)
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    arrival: float  # reached the gateway


@dataclass(frozen=True, slots=True)
class Completion:
    """What a pod measured for a request, as vLLM reports it (seconds; times unix seconds)."""

    pod: str
    arrived: float  # reached the pod
    scheduled: float  # left the waiting queue (prefill started)
    first_token: float
    finished: float
    prompt_tokens: int
    completion_tokens: int

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrived

    @property
    def e2e(self) -> float:
        return self.finished - self.arrived

    @property
    def queue_time(self) -> float:
        return self.scheduled - self.arrived

    @property
    def prefill_time(self) -> float:
        return self.first_token - self.scheduled

    @property
    def decode_time(self) -> float:
        return self.finished - self.first_token


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    """A pod's state as its /metrics page shows it."""

    waiting: int
    running: int
    kv_cache_utilization: float  # 0..1
