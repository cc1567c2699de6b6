"""The clients of the llm-d demo: agents, each session one trace holding a few sequential LLM calls.

An agent session starts at a Poisson arrival (the load curve of :class:`~sloscope.demo.workload.Load`,
divided by the mean number of calls, so the fleet sees about ``rate`` calls per second), keeps one traffic
class for all its calls, and makes 1 to 5 calls one after the other, with a short think time (a tool
running) between them. Its root span (``invoke_agent``) belongs to the agent's own process and is never
exported to sloscope: the calls' spans point at a parent sloscope never receives.

Everything a call will be is drawn here, from the workload's seeded generator, when the session is made:
the API (chat or completions), ``n``, the SLO header generation, whether it goes through P/D and how the
routing sidecar traces it, and whether and how it fails. Only the routing (the router's own generator)
and the latencies are decided later, by the fleet.

=============================== ====================================================================
share                           what
=============================== ====================================================================
``CHAT_SHARE`` 70 %             ``/v1/chat/completions`` (vLLM id ``chatcmpl-<x-request-id>``), else
                                ``/v1/completions`` (``cmpl-<x-request-id>-0``)
``N_CHOICES_SHARE`` 5 %         of completions calls: ``n = 3`` (three vLLM spans with one request id)
``OLD_HEADERS_SHARE`` 20 %      of sessions: the deprecated ``x-slo-*`` headers instead of ``x-llm-d-slo-*``
``PD_SHARE`` 15 %               P/D through the decode pod's sidecar: half NIXL (serial), a quarter
                                P2P (concurrent), a quarter with sidecar tracing off
``FAILURES``                    shed by flow control 1.5 %, refused by the latency-slo-admitter 1 % (only
                                calls with SLO headers, sheddable priority -1), timed out in the queue
                                1 %, model-server error 1.5 %, client disconnect mid-stream 1.5 %
=============================== ====================================================================
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from sloscope.demo.records import SimRequest
from sloscope.demo.workload import CLASSES, Load, Workload

__all__ = [
    "CALLS_PER_SESSION",
    "AgentWorkload",
    "Call",
    "Failure",
    "PdMode",
    "Session",
]

Api = Literal["chat", "completions"]
PdMode = Literal["nixl", "p2p", "off"]
Failure = Literal["shed", "refused", "timeout", "error", "aborted"]

CALLS_PER_SESSION = ((1, 0.35), (2, 0.2), (3, 0.15), (4, 0.1), (5, 0.2))
MEAN_CALLS = sum(n * w for n, w in CALLS_PER_SESSION)
THINK_SECONDS = (0.1, 0.6)  # uniform: a tool call between two LLM calls
CHAT_SHARE = 0.7
N_CHOICES_SHARE = 0.05
N_CHOICES = 3
OLD_HEADERS_SHARE = 0.2
PD_SHARE = 0.15
PD_MODES: tuple[tuple[PdMode, float], ...] = (("nixl", 0.5), ("p2p", 0.25), ("off", 0.25))
FAILURES: tuple[tuple[Failure, float], ...] = (
    ("shed", 0.015),
    ("refused", 0.01),
    ("timeout", 0.01),
    ("error", 0.015),
    ("aborted", 0.015),
)
ABORT_AFTER_SECONDS = (0.3, 1.5)  # uniform: when a disconnecting client goes away

_T = TypeVar("_T")


@dataclass(frozen=True)
class Call:
    """One LLM call of a session, as planned when the session was made."""

    request: SimRequest  # its request_id is the x-request-id the agent sends
    api: Api
    n: int = 1
    pd: PdMode | None = None  # None: served by one pod
    failure: Failure | None = None
    think_seconds: float = 0.0  # the pause before this call (0 for the first)
    abort_after: float = 0.0  # failure "aborted": seconds after routing the client disconnects
    choice_tokens: tuple[int, ...] = ()  # n > 1: each choice's output tokens

    @property
    def priority(self) -> int:
        """The InferenceObjective priority; the latency-slo-admitter only refuses sheddable (negative) ones."""
        return -1 if self.failure == "refused" else 0

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"

    @property
    def vllm_request_id(self) -> str:
        """vLLM 0.33's ``gen_ai.request.id`` for this x-request-id (the first prompt's, for completions)."""
        rid = self.request.request_id
        return f"chatcmpl-{rid}" if self.api == "chat" else f"cmpl-{rid}-0"


@dataclass(frozen=True)
class Session:
    """One agent session: one trace, whose root span the agent's process keeps to itself."""

    trace_id: int  # 128 bits
    root_span_id: int  # 64 bits: the invoke_agent span, never exported
    slo_class: str
    old_headers: bool  # x-slo-* rather than x-llm-d-slo-*
    calls: tuple[Call, ...]


class AgentWorkload:
    """A seeded stream of (offset in seconds, session) pairs at ``load`` calls per second (about)."""

    def __init__(self, load: Load, model: str, rng: random.Random) -> None:
        self._rng = rng
        self._sessions = Workload(
            Load(
                rate=load.rate / MEAN_CALLS,
                burst_factor=load.burst_factor,
                period_seconds=load.period_seconds,
                burst_seconds=load.burst_seconds,
                first_burst_at=load.first_burst_at,
            ),
            model,
            rng,
        )
        self._requests = Workload(load, model, rng)  # draws request sizes for a given class

    def arrivals(self, duration: float) -> Iterator[tuple[float, Session]]:
        for offset, first in self._sessions.arrivals(duration):
            yield offset, self._session(first)

    def _session(self, first: SimRequest) -> Session:
        rng = self._rng
        cls = next(c for c in CLASSES if c.name == first.slo_class)
        count = rng.choices([n for n, _ in CALLS_PER_SESSION], weights=[w for _, w in CALLS_PER_SESSION])[0]
        old_headers = rng.random() < OLD_HEADERS_SHARE
        calls = []
        for i in range(count):
            request = first if i == 0 else self._requests.request(cls)
            request.request_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            calls.append(self._call(request, think=0.0 if i == 0 else rng.uniform(*THINK_SECONDS)))
        return Session(
            trace_id=rng.getrandbits(128) or 1,
            root_span_id=rng.getrandbits(64) or 1,
            slo_class=cls.name,
            old_headers=old_headers,
            calls=tuple(calls),
        )

    def _call(self, request: SimRequest, think: float) -> Call:
        rng = self._rng
        api: Api = "chat" if rng.random() < CHAT_SHARE else "completions"
        failure = _pick(rng, FAILURES)
        if failure == "refused" and request.slo_ttft_ms is None and request.slo_tpot_ms is None:
            failure = None  # the admitter admits requests without SLOs
        if failure is not None:
            abort_after = rng.uniform(*ABORT_AFTER_SECONDS) if failure == "aborted" else 0.0
            return Call(request, api, failure=failure, think_seconds=think, abort_after=abort_after)
        if rng.random() < PD_SHARE:
            pd = _pick(rng, PD_MODES)
            assert pd is not None  # the modes' shares add up to 1
            return Call(request, api, pd=pd, think_seconds=think)
        if api == "completions" and rng.random() < N_CHOICES_SHARE:
            tokens = tuple(max(2, self._requests.output_tokens(request.slo_class)) for _ in range(N_CHOICES))
            request.output_tokens = max(tokens)
            return Call(request, api, n=N_CHOICES, think_seconds=think, choice_tokens=tokens)
        return Call(request, api, think_seconds=think)


def _pick(rng: random.Random, shares: tuple[tuple[_T, float], ...]) -> _T | None:
    """One of the values with its probability, or None for the rest of the probability."""
    draw = rng.random()
    for value, share in shares:
        if draw < share:
            return value
        draw -= share
    return None
