"""The coordinator's legs joined into one call: the client's request counted once, with the client's TTFT.

llm-d-router's coordinator (``pkg/coordinator`` at llm-d-router ebab6879) serves one client call as a pipeline of
EPP calls, one per phase: encode (one per multimodal item, in parallel), prefill, decode, each with the client's
``x-request-id`` and scheduled by the profile its ``EPP-Profile`` header names. The join makes a request of each
leg (its gateway span, its model-server span); this stage, between the join and the evaluation, makes one call of
them, so that a call is counted once, on its decode pod, and its TTFT is the wait its client had:

* an encode or prefill leg waits, by request id, for its call's final leg, up to ``join.max_request_seconds``
  (the decode may stream for minutes);
* the final leg (any request of that id that is not an early leg) is the call: its pod, tokens, predictions and
  arrival stay its own (the EPP predicted and trained on that leg), its TTFT is counted from the first leg's
  arrival (``ttft_source`` ``coordinator``, the first arrival in ``call_arrival_ns``) and the prefill leg's pod
  and times are its prefill stage's;
* the final leg may be joined before the others (each pod exports its own spans): while the traffic has had
  coordinator legs (in the last ten minutes; ``join.wait_for_legs``), a decode-phase request waits
  ``join.window_seconds`` for its legs;
* a leg whose final leg never comes is the call's failure when it failed (the coordinator answers the client
  with it), else a leg of a call sloscope did not see (its final leg sampled out or lost), counted and left out.

The conditional-decode probe the EPP refused (outcome ``conditional_decode_probe``, phase ``decode``) is a leg
that is never the call: the call's TTFT counts from it when it came first, and it is never published. Memory is
bounded: at most ``join.max_pending_traces`` request ids wait, the
oldest leaving first as if its time were up.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sloscope import conventions as c
from sloscope.columnar.batch import Batch
from sloscope.columnar.columns import Codes, Mask
from sloscope.config import Join
from sloscope.processors import joined_batch
from sloscope.records import JoinedRequest

CountLegs = Callable[[str, str, int], None]  # (phase, result, how many)
# TTFT sources counted from the request's arrival (the gateway span's start); the others from the model server's.
_FROM_ARRIVAL = frozenset({c.TTFT_GATEWAY, c.TTFT_GATEWAY_ARRIVAL, c.TTFT_PD_GATEWAY, c.TTFT_PD_SIDECAR})


@dataclass
class _Call:
    """What waits for one request id: its early legs, and its final leg when that came first."""

    due: float  # when it is released with what it has
    legs: list[JoinedRequest] = field(default_factory=list)
    final: JoinedRequest | None = None


class CallJoiner:
    """Holds coordinator legs until their call's final leg; single-threaded (the pipeline's hand-over calls it)."""

    def __init__(self, join: Join, count: CountLegs, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._leg_seconds = join.max_request_seconds
        self._final_seconds = join.window_seconds
        self._legs_memory = join.legs_memory_seconds
        self._cap = join.max_pending_traces
        self._count = count
        self._clock = clock
        self._calls: dict[str, _Call] = {}  # by request id
        # The ids in the order they fall due: legs alone (due when the last leg's wait ends), and calls whose final
        # leg came first (due a join window after it). Each order's dues only grow, so expiry reads from the front.
        self._legs_due: OrderedDict[str, None] = OrderedDict()
        self._finals_due: OrderedDict[str, None] = OrderedDict()
        self._legs_seen: float | None = None  # when an early leg last came

    @property
    def holding(self) -> bool:
        """Whether any call waits (cheap: the worker asks on every tick)."""
        return bool(self._calls)

    @property
    def pending(self) -> int:
        """Requests held: early legs and final legs waiting for theirs."""
        return sum(len(call.legs) + (call.final is not None) for call in self._calls.values())

    def records(self, batch: Batch) -> tuple[Batch, list[JoinedRequest]]:
        """The batch's rows the joiner need not see, columnar as they came, and then, as objects, what the others
        give (:meth:`requests` gives the same in the same order). A batch without legs, from a fleet without a
        coordinator, passes through with a test of one column."""
        taken = self._taken(batch)
        if taken is None:
            return batch, []
        return batch.filter(~taken), self._join(joined_batch.to_requests(batch.filter(taken)))

    def requests(self, requests: list[JoinedRequest]) -> list[JoinedRequest]:
        """The requests the joiner need not see, in their order, then the calls the others complete or let go.
        Calls whose time is up wait for :meth:`expire`: the pipeline asks once every worker has handed over."""
        early = [r for r in requests if _is_leg(r)]
        decode_too = bool(early) or self._awaiting_legs()
        ids = {r.request_id for r in early if r.request_id is not None} | self._calls.keys()

        def seen(request: JoinedRequest) -> bool:
            return _is_leg(request) or request.request_id in ids or (decode_too and request.phase == c.PHASE_DECODE)

        if not ids and not decode_too:
            return requests
        return [r for r in requests if not seen(r)] + self._join([r for r in requests if seen(r)])

    def _taken(self, batch: Batch) -> Mask | None:
        """The rows :meth:`requests` would have the joiner see: early legs, the rows of their ids (held, or legs of
        this batch), and decode-phase rows when legs are in the batch or the traffic has had some."""
        phase, phases = batch.coded("phase")
        if not phases and not self._calls:  # no leg has a phase of none: probes have decode
            return None
        rows = _among(phase, phases, c.EARLY_PHASES) | _among(*batch.coded("outcome"), (c.OUTCOME_PROBE,))
        ids = {*self._calls, *(rid for rid in batch.texts("request_id", np.flatnonzero(rows).tolist()) if rid)}
        if ids:
            rows |= np.fromiter((rid in ids for rid in batch.texts("request_id")), dtype=bool, count=len(batch))
        if rows.any() or self._awaiting_legs():
            rows |= _among(phase, phases, (c.PHASE_DECODE,))
        return rows if rows.any() else None

    def _join(self, requests: list[JoinedRequest]) -> list[JoinedRequest]:
        now = self._clock()
        out: list[JoinedRequest] = []
        for request in requests:
            rid = request.request_id
            if rid is None:
                if request.outcome != c.OUTCOME_PROBE:  # a probe is never published
                    out.append(request)
            elif _is_leg(request):
                self._legs_seen = now
                self._add_leg(rid, request, now)
            elif rid in self._calls:
                call = self._take(rid)
                if call.final is None:
                    out.append(self._merge(request, call.legs))
                else:  # the same id again while its final leg waits: a reused id, two calls
                    out += [self._merge(call.final, call.legs), request]
            elif request.phase == c.PHASE_DECODE and self._awaiting_legs(now):
                self._calls[rid] = _Call(now + self._final_seconds, final=request)
                self._finals_due[rid] = None
            else:
                out.append(request)
        while len(self._calls) > self._cap:  # the oldest waits no longer: the legs' first (they wait the longest)
            order = self._legs_due or self._finals_due
            released = self._release(self._take(next(iter(order))))
            if released is not None:
                out.append(released)
        return out

    def expire(self, now: float | None = None) -> list[JoinedRequest]:
        """The calls whose time is up, with what they have."""
        now = self._clock() if now is None else now
        out: list[JoinedRequest] = []
        for order in (self._finals_due, self._legs_due):
            while order:
                rid = next(iter(order))
                if self._calls[rid].due > now:
                    break
                released = self._release(self._take(rid))
                if released is not None:
                    out.append(released)
        return out

    def flush(self) -> list[JoinedRequest]:
        """Every call held, with what it has (shutdown)."""
        out = [r for call in self._calls.values() if (r := self._release(call)) is not None]
        self._calls.clear()
        self._legs_due.clear()
        self._finals_due.clear()
        return out

    def _awaiting_legs(self, now: float | None = None) -> bool:
        """Whether a decode-phase request waits for its legs: while legs came recently (``join.wait_for_legs``)."""
        if self._legs_memory == math.inf:
            return True
        seen = self._legs_seen
        return seen is not None and (self._clock() if now is None else now) - seen <= self._legs_memory

    def _add_leg(self, rid: str, leg: JoinedRequest, now: float) -> None:
        call = self._calls.get(rid)
        if call is None:
            call = self._calls[rid] = _Call(now + self._leg_seconds)
            self._legs_due[rid] = None
        elif call.final is None:  # legs wait for the final leg from the last one on
            call.due = now + self._leg_seconds
            self._legs_due.move_to_end(rid)
        call.legs.append(leg)

    def _take(self, rid: str) -> _Call:
        self._legs_due.pop(rid, None)
        self._finals_due.pop(rid, None)
        return self._calls.pop(rid)

    def _release(self, call: _Call) -> JoinedRequest | None:
        if call.final is not None:
            return self._merge(call.final, call.legs)
        failed = [leg for leg in call.legs if leg.failure_reason is not None]  # a probe is no failure
        if not failed:
            for leg in call.legs:
                self._count(leg.phase or c.PHASE_PREFILL, c.LEG_WITHOUT_CALL, 1)
            return None
        return self._merge(max(failed, key=lambda leg: leg.end_ns), [leg for leg in call.legs if leg not in failed])

    def _merge(self, final: JoinedRequest, legs: list[JoinedRequest]) -> JoinedRequest:
        """The call: the final leg, with the client's TTFT counted from the first leg's arrival and the prefill
        leg's pod and times as its prefill stage."""
        if not legs:
            return final
        for leg in (final, *legs):
            self._count(leg.phase or c.PHASE_DECODE, c.LEG_JOINED, 1)
        first = min((_arrived(leg) for leg in (final, *legs)), default=0)
        changes: dict[str, object] = {"call_arrival_ns": first}
        prefill = [leg for leg in legs if leg.phase == c.PHASE_PREFILL]
        if prefill:
            stage = max(prefill, key=lambda leg: leg.end_ns)
            changes.update(
                prefill_pod=stage.pod,
                prefill_queue_seconds=stage.queue_seconds,
                prefill_seconds_on_prefill_pod=stage.prefill_seconds,
            )
        ttft = client_ttft(final, first) if final.failure_reason is None else None
        if ttft is not None:
            changes.update(ttft_seconds=ttft, ttft_source=c.TTFT_COORDINATOR)
        for name in ("slo_ttft_ms", "slo_tpot_ms", "requested_model", "pool"):  # the client's, on every leg
            if getattr(final, name) is None:
                changes[name] = next((v for leg in legs if (v := getattr(leg, name)) is not None), None)
        return dataclasses.replace(final, **changes)  # type: ignore[arg-type]


def _is_leg(request: JoinedRequest) -> bool:
    """An encode or prefill leg, or the refused probe: never the call itself."""
    return request.phase in c.EARLY_PHASES or request.outcome == c.OUTCOME_PROBE


def _among(codes: Codes, values: list[str], wanted: tuple[str, ...]) -> Mask:
    """Rows whose label is one of ``wanted`` (never a null one)."""
    chosen = np.array([value in wanted for value in values] + [False], dtype=bool)
    return chosen[codes]


def _arrived(request: JoinedRequest) -> int:
    return request.arrival_ns or request.start_ns


def client_ttft(final: JoinedRequest, first_arrival_ns: int) -> float | None:
    """The final leg's first token counted from the call's first arrival; None when the final leg has no TTFT
    or the clocks disagree that the call arrived before the final leg's TTFT began (its own TTFT stands)."""
    ttft = final.ttft_seconds
    if ttft is None or first_arrival_ns <= 0:
        return None
    origin = _arrived(final) if final.ttft_source in _FROM_ARRIVAL else final.start_ns
    if origin <= 0 or first_arrival_ns > origin:
        return None
    return (origin - first_arrival_ns) / 1e9 + ttft
