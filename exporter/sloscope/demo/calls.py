"""How the llm-d fleet serves one agent call, and the record of what happened to it.

:class:`CallRunner` plays the EPP, the decode pod's routing sidecar and the pods' vLLM for one
:class:`~sloscope.demo.agents.Call`, in real time:

* a call planned to fail is refused before scheduling (``shed`` by flow control, ``refused`` by the
  latency-slo-admitter, ``timeout`` after waiting ``QUEUE_TTL_SECONDS`` in the EPP's queue), or is
  scheduled and then fails (``error``: the model server answers 500; ``aborted``: the client disconnects
  ``abort_after`` seconds after routing, and the pod drops the request, as vLLM aborts it; a call that
  completes before its client would have gone away is a normal completion);
* a P/D call is scheduled twice (the decode profile picks the pod the router picks, the prefill profile
  the least loaded other pod); the prefill stage runs on the prefill pod with one output token, the decode
  stage runs the whole request on the decode pod: one after the other for NIXL (and with sidecar tracing
  off, where the sidecar runs its default NIXL connector untraced), at the same time for P2P;
* an ``n = 3`` call runs three choices of one prompt on its pod at once;
* every other call runs on the pod the router picked.

The :class:`CallRecord` keeps every time the spans need (seconds, wall clock), so the spans
(:mod:`sloscope.demo.llmd_spans`) and the ground truth (:func:`outcome`) are made from the same numbers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal

from sloscope.demo.agents import Call, Session
from sloscope.demo.records import Completion, SimRequest, ns
from sloscope.demo.router import Decision, Router
from sloscope.demo.truth import FailedOutcome, Outcome

__all__ = ["QUEUE_TTL_SECONDS", "CallRecord", "CallRunner", "Scheduling", "SidecarTimes", "outcome"]

QUEUE_TTL_SECONDS = 1.0  # how long a call planned to time out waits in the EPP's flow-control queue
MODEL_SERVER_ERROR_SECONDS = 0.01  # how long a failing model server takes to answer 500

# The gateway.request status messages of llm-d-router ebab6879 (pkg/common/error/error.go "inference error: %s - %s";
# the flow-control outcomes of pkg/epp/requestcontrol/admission.go with the errors of pkg/epp/flowcontrol/types;
# the admission plugins' denial of pkg/epp/requestcontrol/director.go:331 with the latency-slo-admitter's reason).
SHED_MESSAGE = "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
REFUSED_MESSAGE = (
    "inference error: Internal - request cannot be admitted: no valid endpoint available to serve the request"
)
TIMEOUT_MESSAGE = (
    "inference error: ResourceExhausted - request timed out in queue: request evicted from queue: request TTL expired"
)
MODEL_SERVER_ERROR = "ModelServerError"  # the status description when the model server answered != 200

Reason = Literal["shed", "timeout", "error", "aborted"]
_REASONS: dict[str, Reason] = {"shed": "shed", "refused": "shed", "timeout": "timeout", "error": "error"}


@dataclass(frozen=True)
class Scheduling:
    """One run_scheduler_profile: the profile, when it ran, and what it decided."""

    profile: str
    start: float
    end: float
    decision: Decision


@dataclass(frozen=True)
class SidecarTimes:
    """The decode pod's routing sidecar, when its tracing is on: its spans' times."""

    connector: Literal["nixlv2", "offloading"]
    request_uuid: str  # llm_d.pd_proxy.request_id (a v1 UUID in the sidecar)
    start: float  # the otelhttp server span
    forward_start: float
    prefill_start: float  # the prefill leg span
    prefill_post_start: float  # its HTTP POST to the prefill pod
    prefill_post_end: float
    prefill_end: float
    decode_start: float  # the decode leg span
    decode_post_start: float  # its HTTP POST to the local vLLM
    decode_post_end: float
    decode_end: float
    forward_end: float
    end: float


@dataclass(frozen=True)
class CallRecord:
    """What happened to one call; see the module docstring."""

    session: Session
    call: Call
    arrival: float  # the gateway received it (ingress and gateway.request start)
    end: float  # the last byte went back, or the client went away
    routed: float  # the EPP finished scheduling (or refusing): gateway.request_orchestration ends
    schedules: tuple[Scheduling, ...] = ()  # one per profile run (P/D: decode, then prefill)
    completions: tuple[Completion, ...] = ()  # the decode stage, or the n choices; none for a failed call
    prefill: Completion | None = None  # P/D: the prefill stage on the prefill pod
    sidecar: SidecarTimes | None = None
    http_status: int = 200  # what the gateway answered the client
    error: str | None = None  # gateway.request's error status message
    orchestration_error: str | None = None  # gateway.request_orchestration's (a refusal before scheduling)
    aborted: bool = False

    def predicted(self) -> Decision:
        """The decode profile's decision with the predictions the EPP keeps for the call: for a P/D call, the prefill
        pod's TTFT (:meth:`Decision.with_prefill`)."""
        decision = self.schedules[0].decision
        return decision.with_prefill(self.schedules[1].decision) if len(self.schedules) > 1 else decision

    @property
    def routing(self) -> str:
        """predicted (the latency scorer ran), default (scheduled without it) or none (refused before)."""
        return self.schedules[0].decision.routing if self.schedules else "none"

    @property
    def failure(self) -> Reason | None:
        if self.aborted:
            return "aborted"
        return _REASONS.get(self.call.failure or "")

    @property
    def shape(self) -> str:
        """What kind of call it was: shed, admitter-refused, timeout, error, aborted, pd-<mode>, n<n>, or its API."""
        if self.call.failure == "refused":
            return "admitter-refused"
        if self.failure is not None:
            return self.failure
        if self.call.pd is not None:
            return f"pd-{self.call.pd}"
        return f"n{self.call.n}" if self.call.n > 1 else self.call.api


def outcome(record: CallRecord) -> Outcome | FailedOutcome:
    """The ground truth's account of the call, from the numbers its spans carry."""
    request = record.call.request
    reason = record.failure
    if reason is not None:
        waited = record.end - record.arrival if reason == "aborted" else None
        return FailedOutcome(request, record.routing, reason, waited=waited)
    decision = record.predicted()
    counted = record.completions[0] if record.call.n == 1 else min(record.completions, key=lambda c: c.ttft)
    return Outcome(
        request,
        counted,
        record.routing,
        decision.predicted_ttft_ms,
        decision.predicted_tpot_ms,
        choices=record.completions if record.call.n > 1 else (),
        arrival_ns=ns(record.arrival),  # gateway.request's start
        served_ns=ns(counted.arrived),
        routed_on=decision.features,
    )


Submit = Callable[[str, SimRequest], "asyncio.Future[Completion]"]


class CallRunner:
    """Serves calls on the fleet: the router picks pods, ``submit(pod, request)`` queues a request on one."""

    def __init__(
        self,
        router: Router,
        submit: Submit,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._router = router
        self._submit = submit
        self._clock = clock
        self._sleep = sleep

    async def run(self, session: Session, call: Call) -> CallRecord:
        arrival = call.request.arrival
        if call.failure in ("shed", "refused", "timeout"):
            return await self._refused(session, call, arrival)
        start = self._clock()
        decision = await self._router.route(call.request)
        schedules = [Scheduling(_profile(call, decision, "decode"), start, self._clock(), decision)]
        if call.pd is not None:
            start = self._clock()
            prefill = self._router.pick_prefill(call.request, decision)
            schedules.append(Scheduling("prefill", start, self._clock(), prefill))
        record = CallRecord(session, call, arrival, arrival, self._clock(), tuple(schedules))
        if call.failure == "error":
            await self._sleep(MODEL_SERVER_ERROR_SECONDS)
            self._router.released(call.request, decision)
            return replace(record, end=self._clock(), http_status=500, error=MODEL_SERVER_ERROR)
        if call.pd is not None:
            record = await self._disaggregated(record)
        elif call.n > 1:
            choices = [replace(call.request, output_tokens=tokens) for tokens in call.choice_tokens]
            completions = await asyncio.gather(*(self._submit(decision.pod, c) for c in choices))
            record = replace(record, completions=tuple(completions), end=self._clock())
        else:
            record = await self._single(record, decision)
            if record.aborted:
                self._router.released(call.request, decision)
                return record
        self._router.finished(call.request, record.predicted(), record.completions[0])
        return record

    async def _refused(self, session: Session, call: Call, arrival: float) -> CallRecord:
        if call.failure == "timeout":
            await self._sleep(QUEUE_TTL_SECONDS)
        message = {"shed": SHED_MESSAGE, "refused": REFUSED_MESSAGE, "timeout": TIMEOUT_MESSAGE}[call.failure or ""]
        routed = self._clock()
        status = 500 if call.failure == "refused" else 429  # Internal -> 500, ResourceExhausted -> 429
        return CallRecord(
            session,
            call,
            arrival,
            self._clock(),
            routed,
            http_status=status,
            error=message,
            orchestration_error=message,
        )

    async def _single(self, record: CallRecord, decision: Decision) -> CallRecord:
        call = record.call
        future = self._submit(decision.pod, call.request)
        if call.failure != "aborted":
            return replace(record, completions=(await future,), end=self._clock())
        try:
            completion = await asyncio.wait_for(future, call.abort_after)
        except TimeoutError:  # the client went away: wait_for cancelled the request, and the pod drops it
            return replace(record, end=self._clock(), aborted=True)
        return replace(record, completions=(completion,), end=self._clock())

    async def _disaggregated(self, record: CallRecord) -> CallRecord:
        call = record.call
        decode_pod, prefill_pod = (s.decision.pod for s in record.schedules)
        prefill_request = replace(call.request, output_tokens=1)  # the sidecar caps the prefill leg at one token
        stamps: dict[str, float] = {}

        def stamp(*names: str) -> None:
            now = self._clock()
            for name in names:
                stamps[name] = now

        async def leg(pod: str, request: SimRequest, post: str) -> Completion:
            stamp(f"{post}_post_start")
            completion = await self._submit(pod, request)
            stamp(f"{post}_post_end")
            return completion

        stamp("start", "forward_start")
        if call.pd == "p2p":  # prefill and decode dispatched at once
            prefill_task = asyncio.ensure_future(
                _then(leg(prefill_pod, prefill_request, "prefill"), stamp, "prefill_end")
            )
            stamp("prefill_start", "decode_start")
            decode = await leg(decode_pod, call.request, "decode")
            stamp("decode_end")
            prefill = await prefill_task
        else:  # NIXL: prefill, then decode (also when the sidecar traces nothing)
            stamp("prefill_start")
            prefill = await leg(prefill_pod, prefill_request, "prefill")
            stamp("prefill_end", "decode_start")
            decode = await leg(decode_pod, call.request, "decode")
            stamp("decode_end")
        stamp("forward_end", "end")
        sidecar = None
        if call.pd != "off":
            connector: Literal["nixlv2", "offloading"] = "nixlv2" if call.pd == "nixl" else "offloading"
            sidecar = SidecarTimes(connector, _v1_uuid(call), **stamps)
        return replace(record, prefill=prefill, completions=(decode,), sidecar=sidecar, end=self._clock())


async def _then(work: Awaitable[Completion], stamp: Callable[..., None], name: str) -> Completion:
    result = await work
    stamp(name)
    return result


def _profile(call: Call, decision: Decision, pd_name: str) -> str:
    """The scheduling profile's name: decode / prefill under P/D, else the profile the router took."""
    if call.pd is not None:
        return pd_name
    return "predicted-latency" if decision.routing == "predicted" else "default"


def _v1_uuid(call: Call) -> str:
    """A v1-style UUID for the sidecar's own request id, derived from the call (the demo stays seeded)."""
    value = uuid.UUID(call.request.request_id).int
    return str(uuid.UUID(int=value, version=1))
