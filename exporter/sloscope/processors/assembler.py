"""The trace assembler: spans in, one :class:`JoinedRequest` per LLM call out.

A model-server span (vLLM ``llm_request``; any span carrying the anchor attribute) *anchors* a
request. One trace can hold many LLM calls (an agent's, whose root never reaches sloscope), so
each anchor belongs to its gateway span (the EPP's ``gateway.request``): the nearest one above
it, else one of the trace whose subtree carries its request id. Its companions are its own
ancestors, that gateway's descendants and the trace's spans outside every gateway that carry
its request id (an Envoy span with captured headers); another call's spans never join it.
Without any gateway span the trace's other spans are its companions, as late-2025 traces had
them. Anchors of one gateway are one request: P/D stages (counted once, on the decode pod) or
the choices of ``n > 1``.

A request is emitted once its anchors are there and reach their gateway (P/D: once the decode
stage is there) and either an SLO header or the gateway's chain to the trace root has come (the
Envoy or client span holding the headers ends after the EPP's), or, without a gateway, once its
whole chain to the trace root has; else when the join window has passed since the anchor
*arrived* (arrival time, not span time: exporters batch and clocks differ), with what it has. A
P/D prefill stage's window does not end the wait for its decode stage, which may stream for
minutes: the gateway's failure window or ``join.max_request_seconds`` does. Completion is checked
after each whole batch, so the choices of one request exported together are counted once. A
gateway span that no anchor joins within the failure window is a failed request
(``docs/sending-traces.md`` gives the reasons), if it was an LLM call at all. When the anchor's
own trace has no companion and joining by request id is on, a companion of another trace
carrying the same request id is used (EPPs before 2026).

Traces stay open for later calls: spans of an emitted request leave the pending trace and are
remembered, so a retried span is a duplicate and one arriving under an emitted request is late,
while a later call of the same trace joins as usual. Memory is bounded: pending traces (in count and
in estimated bytes), spans per trace (spans that carry nothing make way for ones that do) and
remembered spans all have caps,
and everything dropped is counted by reason. Single-threaded by design: only the pipeline worker
calls it.
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable

from sloscope import conventions as c
from sloscope.attributes import Mapping, View
from sloscope.config import Join
from sloscope.processors import span_shapes as shapes
from sloscope.processors.deadlines import Deadlines
from sloscope.processors.joined_request import RequestBuilder, disaggregated, leg_of, primary_anchor
from sloscope.processors.recent import Recent
from sloscope.processors.trace_state import Footprint, PendingTrace, SeenSpans, span_bytes
from sloscope.records import JoinedRequest, Span


class GatewayMemory:
    """When a gateway span last arrived, on the join's clock: one for every shard of a pipeline, so that whether
    the gateway traces is the traffic's and not one shard's (``join.wait_for_gateway``)."""

    def __init__(self) -> None:
        self.seen: float | None = None

    def note(self, now: float) -> None:
        if self.seen is None or now > self.seen:
            self.seen = now


Emit = Callable[[JoinedRequest], None]
Count = Callable[[str, int], None]
_GroupKey = tuple[str, str, str]  # ("gateway", gateway span id, "") or ("parent", parent span id, request id)
_GATEWAY = "gateway"
_PARENT = "parent"


class TraceAssembler:
    """Groups spans by trace id and emits joined requests. See the module docstring for the rules."""

    def __init__(
        self,
        join: Join,
        mapping: Mapping,
        emit: Emit,
        *,
        count_dropped: Count,
        count_outcome: Count,
        clock: Callable[[], float] = time.monotonic,
        gateway_memory: GatewayMemory | None = None,
    ) -> None:
        """``gateway_memory`` is shared with the pipeline's other shards (when a gateway span last came)."""
        self._join = join
        self._mapping = mapping
        self._emit = emit
        self._dropped = count_dropped
        self._outcome = count_outcome
        self._clock = clock
        self._anchor_names = frozenset(join.anchor_span_names)
        self._anchor_attribute = join.anchor_attribute
        self._gateway_names = frozenset(join.gateway_span_names)
        self._latency_scorers = frozenset(join.latency_scorer_types)
        self._request_id = re.compile(join.request_id_pattern)
        self._build = RequestBuilder(mapping, self._latency_scorers, unanswered_are_aborted=join.unanswered_are_aborted)
        self._done_cap = 4 * join.max_spans_per_trace
        self._traces: OrderedDict[str, PendingTrace] = OrderedDict()
        self._footprint = Footprint()  # estimated bytes of every pending trace's spans
        self._anchor_deadlines = Deadlines()
        self._gateway_deadlines = Deadlines()
        self._done: Recent[str, SeenSpans] = Recent(join.max_done_traces)
        self._companions_by_request_id: dict[str, str] = {}  # request id -> trace id
        self._anchors_by_request_id: dict[str, tuple[str, str]] = {}  # request id -> (trace id, span id)
        self._answered: Recent[str, None] = Recent(join.max_done_traces)  # request ids of emitted model-server spans
        self._gateway_memory = join.gateway_memory_seconds
        self._gateway_seen = gateway_memory or GatewayMemory()  # when the last gateway span arrived, late ones too
        self._now = 0.0  # the clock at the batch being consumed

    @property
    def pending(self) -> int:
        return len(self._traces)

    @property
    def pending_bytes(self) -> int:
        return self._footprint.total

    # ---- input ------------------------------------------------------------------------------

    def consume(self, spans: list[Span]) -> None:
        now = self._now = self._clock()
        touched: dict[str, None] = {}
        for span in spans:
            if self._add(span, now):
                touched[span.trace_id] = None
        for trace_id in touched:  # after the whole batch: the choices of one request exported together are one
            trace = self._traces.get(trace_id)
            if trace is not None:
                self._try_complete(trace_id, trace)
        self.expire(now)

    def _is_anchor(self, span: Span) -> bool:
        return span.name in self._anchor_names or self._anchor_attribute in span.attributes

    def _is_bare(self, span: Span) -> bool:
        """A span that tells nothing by itself (an agent's tool call): kept only while there is room."""
        if span.attributes or span.name in self._gateway_names:
            return False
        return shapes.leg(span) is None and not shapes.is_sidecar_routing(span) and not shapes.is_scheduling(span)

    def _add(self, span: Span, now: float) -> bool:
        trace_id = span.trace_id
        is_gateway = span.name in self._gateway_names
        if is_gateway:
            self._gateway_seen.note(now)
        done = self._done.get(trace_id)
        if done is not None:
            verdict = done.verdict(span)
            if verdict is not None:
                self._dropped(verdict, 1)
                return False
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._open(trace_id, now)
        elif span.span_id in trace.spans:
            self._dropped(c.DROP_DUPLICATE, 1)
            return False
        size = span_bytes(span)
        if not self._make_room(trace, span) or not self._fit_bytes(trace_id, size):
            self._dropped(c.DROP_TRACE_TOO_LARGE, 1)
            self._close_if_finished(trace_id, trace)
            return False
        trace.add(span, size)
        if self._is_anchor(span):
            trace.anchors[span.span_id] = now
            self._anchor_deadlines.push(now + self._join.window_seconds, trace_id, span.span_id, self._waiting_anchor)
            return True
        if is_gateway:
            trace.gateways[span.span_id] = None
            deadline = now + self._join.failure_window_seconds
            self._gateway_deadlines.push(deadline, trace_id, span.span_id, self._waiting_gateway)
        elif self._is_bare(span):
            trace.bare.append(span.span_id)
        if self._join.by_request_id and not trace.anchors and not trace.emitted:
            # Only a trace without a model-server span can be another trace's gateway: when the
            # anchor is already here (the usual order: the gateway span ends last), the join is local.
            self._index_companion(trace_id, trace, span)
        return True

    def _waiting_anchor(self, trace_id: str, anchor_id: str) -> bool:
        trace = self._traces.get(trace_id)
        return trace is not None and anchor_id in trace.anchors

    def _waiting_gateway(self, trace_id: str, gateway_id: str) -> bool:
        trace = self._traces.get(trace_id)
        return trace is not None and gateway_id in trace.gateways

    def _make_room(self, trace: PendingTrace, span: Span) -> bool:
        if len(trace.spans) < self._join.max_spans_per_trace:
            return True
        if self._is_bare(span) or not trace.bare:
            return False
        evicted = trace.bare.popleft()  # a span that carries nothing makes way for one that does
        trace.remove(evicted)
        self._dropped(c.DROP_TRACE_TOO_LARGE, 1)
        return True

    def _fit_bytes(self, trace_id: str, size: int) -> bool:
        """Evicts the oldest other traces until ``size`` more bytes fit under ``join.max_pending_bytes``."""
        while self._footprint.total + size > self._join.max_pending_bytes:
            victim = next((t for t in self._traces if t != trace_id), None)  # the oldest, or the one after it
            if victim is None:
                return False
            self._evict(victim)
        return True

    def _open(self, trace_id: str, now: float) -> PendingTrace:
        while len(self._traces) >= self._join.max_pending_traces:
            self._evict(next(iter(self._traces)))
        trace = PendingTrace(first_seen=now, footprint=self._footprint)
        self._traces[trace_id] = trace
        return trace

    def _evict(self, trace_id: str) -> None:
        """A pending-trace cap is reached: the trace leaves early, its requests emitted with what they have."""
        oldest = self._traces.pop(trace_id)
        self._forget_request_ids(trace_id, oldest)
        if oldest.anchors:
            while oldest.anchors:
                self._finish_with_what_it_has(trace_id, oldest, next(iter(oldest.anchors)), c.OUTCOME_EVICTED)
        else:
            self._dropped(c.DROP_PENDING_CAP, len(oldest.spans))
        self._remember(trace_id, oldest.spans.values(), claimed=False)
        oldest.release()

    def _index_companion(self, trace_id: str, trace: PendingTrace, span: Span) -> None:
        request_id = self._joinable_id([span])
        if request_id is None:
            return
        indexed = self._traces.get(self._companions_by_request_id.get(request_id, ""))
        if indexed is None or indexed is trace or not indexed.gateways or trace.gateways:
            self._companions_by_request_id[request_id] = trace_id  # a trace with the gateway span keeps the id
            trace.request_ids.append(request_id)
        waiting = self._anchors_by_request_id.pop(request_id, None)
        if waiting is not None and waiting[0] != trace_id:
            other = self._traces.get(waiting[0])
            if other is not None and waiting[1] in other.anchors:
                self._lend(trace)
                self._emit_group(
                    waiting[0], other, self._key(other, other.spans[waiting[1]]), c.OUTCOME_JOINED_BY_REQUEST_ID, trace
                )

    def _joinable_id(self, spans: list[Span]) -> str | None:
        raw = self._mapping.identifier("request_id", View(spans))
        if not raw:
            return None
        match = self._request_id.match(raw)
        return match.group("id") if match else raw

    @staticmethod
    def _lend(trace: PendingTrace) -> None:
        """A trace whose companions answered another trace's anchor: its gateway spans are accounted for."""
        trace.lent = True
        trace.gateways.clear()

    # ---- grouping ---------------------------------------------------------------------------

    def _key(self, trace: PendingTrace, anchor: Span) -> _GroupKey:
        """The request an anchor belongs to: its gateway's, else its parent's and request id's."""
        for above in trace.ancestors(anchor):
            if above.name in self._gateway_names:
                return (_GATEWAY, above.span_id, "")
        request_id = self._joinable_id([anchor]) or ""
        if request_id:
            for gateway_id in trace.gateways:  # the caller's traceparent won at the gateway: a sibling
                if request_id in self._request_ids_under(trace, gateway_id) and self._may_answer(
                    trace, gateway_id, anchor
                ):
                    return (_GATEWAY, gateway_id, "")
        return (_PARENT, anchor.parent_span_id, request_id)

    def _may_answer(self, trace: PendingTrace, gateway_id: str, anchor: Span) -> bool:
        """Whether a sibling gateway span of the anchor's request id can be the one that sent it there.

        The coordinator's legs all carry the client's request id (and traceparent): its refused conditional-decode
        probe reached no model server, and an encode or prefill leg's gateway span encloses in time the model-server
        span it sent (the EPP's span ends with the response), so a later leg's span is not its.
        """
        gateway = trace.spans[gateway_id]
        if shapes.is_conditional_probe([gateway]):
            return False
        if shapes.phase(trace.descendants(gateway_id)) not in c.EARLY_PHASES:
            return True
        return gateway.start_ns <= anchor.start_ns <= gateway.end_ns

    def _request_ids_under(self, trace: PendingTrace, gateway_id: str) -> set[str]:
        ids = set()
        for span in [trace.spans[gateway_id], *trace.descendants(gateway_id)]:
            if not self._is_anchor(span):
                request_id = self._joinable_id([span])
                if request_id:
                    ids.add(request_id)
        return ids

    def _groups(self, trace: PendingTrace) -> dict[_GroupKey, list[Span]]:
        groups: dict[_GroupKey, list[Span]] = {}
        for anchor_id in trace.anchors:
            anchor = trace.spans[anchor_id]
            groups.setdefault(self._key(trace, anchor), []).append(anchor)
        return groups

    def _in_a_gateway(self, trace: PendingTrace, span: Span) -> bool:
        return span.name in self._gateway_names or any(s.name in self._gateway_names for s in trace.ancestors(span))

    def _scope(self, trace: PendingTrace, key: _GroupKey, anchors: list[Span]) -> list[Span]:
        """The request's companions, nearest first: what its fields are read from, and what it claims."""
        primary = primary_anchor(trace, anchors)
        ordered = [s for s in trace.ancestors(primary) if s.span_id not in trace.anchors]
        listed = {s.span_id for s in ordered} | {a.span_id for a in anchors}
        if key[0] == _GATEWAY:
            gateway = trace.spans[key[1]]
            extra = [gateway, *trace.ancestors(gateway)] if gateway.span_id not in listed else []
            extra += trace.descendants(gateway.span_id)
            extra += self._beside(trace, gateway, anchors, listed)
        else:
            extra = [s for s in trace.spans.values() if not self._in_a_gateway(trace, s)]
        for span in extra:
            if span.span_id not in listed and span.span_id not in trace.anchors:
                ordered.append(span)
                listed.add(span.span_id)
        return ordered

    def _beside(self, trace: PendingTrace, gateway: Span, anchors: list[Span], listed: set[str]) -> list[Span]:
        """Spans outside every gateway that belong to this one's request: an Envoy span with its headers.

        They carry its request id; or, when its EPP spans carry none (refused before scheduling), they
        share the gateway span's parent and enclose it in time and carry no other call's request id.
        """
        candidates = [
            s
            for s in trace.spans.values()
            if s.span_id not in listed and s.span_id not in trace.anchors and not self._in_a_gateway(trace, s)
        ]
        if not candidates:  # the usual case: every span of the trace is in some gateway's subtree
            return []
        request_ids = self._request_ids_under(trace, gateway.span_id)
        request_ids.update(filter(None, (self._joinable_id([a]) for a in anchors)))
        others: set[str] = set()
        if not request_ids:
            for other in trace.gateways:
                if other != gateway.span_id:
                    others |= self._request_ids_under(trace, other)
        out = []
        for span in candidates:
            request_id = self._joinable_id([span])
            same_id = request_id is not None and request_id in request_ids
            if same_id or (not request_ids and request_id not in others and _encloses(span, gateway)):
                out.append(span)
        return out

    # ---- completion -------------------------------------------------------------------------

    def _try_complete(self, trace_id: str, trace: PendingTrace) -> None:
        self._settle_probes(trace_id, trace)
        for key, anchors in self._groups(trace).items():
            if key[0] == _GATEWAY:
                scope = self._scope(trace, key, anchors)
                if (
                    _placed(trace, key[1], anchors)
                    and self._stages(trace, anchors, scope)[1]
                    and self._headers_settled(trace, key, scope)
                ):
                    self._emit_group(trace_id, trace, key, c.OUTCOME_JOINED, anchors=anchors, scope=scope)
                continue
            if not trace.chain_complete(anchors[0]):
                continue
            gateway_trace = self._gateway_trace(trace, anchors[0])
            waits = self._awaits_gateway()
            if gateway_trace is not None:  # the EPP's spans in a trace of their own (a gateway forwarded another)
                self._lend(gateway_trace)
                self._emit_group(trace_id, trace, key, c.OUTCOME_JOINED_BY_REQUEST_ID, gateway_trace, anchors=anchors)
            elif not waits and (scope := self._scope(trace, key, anchors)):
                self._emit_group(trace_id, trace, key, c.OUTCOME_JOINED, anchors=anchors, scope=scope)
            elif not self._join.by_request_id:
                if not waits:
                    self._emit_group(trace_id, trace, key, c.OUTCOME_ANCHOR_ONLY)
            elif (other := self._companion_trace(anchors[0])) is not None and other is not trace:
                self._lend(other)
                self._emit_group(trace_id, trace, key, c.OUTCOME_JOINED_BY_REQUEST_ID, other)
            else:
                request_id = key[2]
                if request_id and request_id not in trace.anchor_request_ids:
                    self._anchors_by_request_id[request_id] = (trace_id, anchors[0].span_id)
                    trace.anchor_request_ids.append(request_id)
        self._close_if_finished(trace_id, trace)

    def _awaits_gateway(self) -> bool:
        """A request no gateway span claims waits for one, up to its window, while the gateway traces
        (``join.wait_for_gateway``): the caller's traceparent made the EPP's span a sibling of the model
        server's, and the EPP's exporter sends it later. ``always`` waits from the start, before any gateway span
        came."""
        if self._gateway_memory == math.inf:
            return True
        seen = self._gateway_seen.seen
        return seen is not None and self._now - seen <= self._gateway_memory

    def _headers_settled(self, trace: PendingTrace, key: _GroupKey, scope: list[Span]) -> bool:
        """The EPP's spans carry no SLO headers: a gateway's or client's span does, and it ends after the EPP's.
        A request is complete once that span is here, or its chain to the trace root is, or its window passed."""
        return trace.chain_complete(trace.spans[key[1]]) or self._has_slo(View(scope))

    @staticmethod
    def _stages(trace: PendingTrace, anchors: list[Span], scope: list[Span]) -> tuple[bool, bool]:
        """(Its decode stage is here, both its stages are): a P/D request waits for its decode stage, which may
        stream for minutes, and then for its prefill stage, no longer than the decode stage's window (each pod
        exports its own spans, so the prefill pod's may come after the decode pod's). Any other request has
        both once an anchor is here."""
        if not disaggregated(trace, anchors, scope):
            return True, True
        decode = any(leg_of(trace, a) == "decode" for a in anchors) or (
            len(anchors) >= 2 and not any(shapes.leg(s) is not None for s in scope)
        )
        return decode, decode and len(anchors) >= 2

    def _finish_with_what_it_has(self, trace_id: str, trace: PendingTrace, anchor_id: str, outcome: str) -> None:
        """The window is over (or the trace expires, or sloscope stops): the anchor's companions if any,
        else a companion found by request id, else the anchor alone."""
        key = self._key(trace, trace.spans[anchor_id])
        if key[0] == _PARENT and len(trace.gateways) == 1 and not trace.chain_complete(trace.spans[anchor_id]):
            key = (_GATEWAY, next(iter(trace.gateways)), "")  # a span between it and the trace's one gateway is missing
        anchors = self._group(trace, key)
        if anchor_id not in {a.span_id for a in anchors}:
            anchors.append(trace.spans[anchor_id])  # adopted by the gateway
        if key[0] == _GATEWAY or self._scope(trace, key, anchors):
            self._emit_group(trace_id, trace, key, outcome, anchors=anchors)
            return
        other = self._companion_trace(trace.spans[anchor_id]) if self._join.by_request_id else None
        if other is not None:
            self._lend(other)
            self._emit_group(trace_id, trace, key, c.OUTCOME_JOINED_BY_REQUEST_ID, other, anchors=anchors)
        else:
            fallback = c.OUTCOME_ANCHOR_ONLY if outcome == c.OUTCOME_JOINED else outcome
            self._emit_group(trace_id, trace, key, fallback, anchors=anchors)

    def _group(self, trace: PendingTrace, key: _GroupKey) -> list[Span]:
        return [trace.spans[a] for a in trace.anchors if self._key(trace, trace.spans[a]) == key]

    def _gateway_trace(self, trace: PendingTrace, anchor: Span) -> PendingTrace | None:
        """Another pending trace holding the gateway span of the anchor's request id, if joining by id is on."""
        if not self._join.by_request_id:
            return None
        other = self._companion_trace(anchor)
        return other if other is not None and other is not trace and other.gateways else None

    def _companion_trace(self, anchor: Span) -> PendingTrace | None:
        request_id = self._joinable_id([anchor])
        other_id = self._companions_by_request_id.get(request_id) if request_id else None
        return self._traces.get(other_id) if other_id else None

    def _close_if_finished(self, trace_id: str, trace: PendingTrace) -> None:
        """A trace with nothing left is closed; later spans of it are duplicates, late, or a new call."""
        if trace.spans or trace.lent:
            return
        self._traces.pop(trace_id, None)
        trace.release()
        self._forget_request_ids(trace_id, trace)

    def _forget_request_ids(self, trace_id: str, trace: PendingTrace) -> None:
        for request_id in trace.request_ids:
            if self._companions_by_request_id.get(request_id) == trace_id:
                del self._companions_by_request_id[request_id]
        for request_id in trace.anchor_request_ids:
            waiting = self._anchors_by_request_id.get(request_id)
            if waiting is not None and waiting[0] == trace_id:
                del self._anchors_by_request_id[request_id]

    def _answered_id(self, request_id: str | None) -> None:
        if request_id is None:
            return
        if request_id not in self._answered:
            self._answered.put(request_id, None)

    def _remember(self, trace_id: str, spans: Iterable[Span], *, claimed: bool) -> None:
        done = self._done.take(trace_id) or SeenSpans()  # put again: the most recent trace is forgotten last
        done.remember(spans, claimed=claimed, cap=self._done_cap)
        self._done.put(trace_id, done)

    # ---- time -------------------------------------------------------------------------------

    def expire(self, now: float | None = None) -> None:
        """Emit anchors whose join window has passed, resolve gateways whose failure window has, and
        expire traces past their time to live."""
        now = self._clock() if now is None else now
        while (due := self._anchor_deadlines.pop_due(now)) is not None:
            trace_id, anchor_id = due
            trace = self._traces.get(trace_id)
            if trace is None or anchor_id not in trace.anchors or self._awaits_decode(trace, anchor_id):
                continue  # a prefill stage waits for its decode stage: the gateway's failure window decides
            self._finish_with_what_it_has(trace_id, trace, anchor_id, c.OUTCOME_JOINED)
            self._close_if_finished(trace_id, trace)
        while (due := self._gateway_deadlines.pop_due(now)) is not None:
            trace_id, gateway_id = due
            trace = self._traces.get(trace_id)
            if trace is not None and gateway_id in trace.gateways:
                self._resolve_unanswered(trace_id, trace, gateway_id)
                self._close_if_finished(trace_id, trace)
        self._expire_traces(now)

    def _expire_traces(self, now: float) -> None:
        ttl = self._join.trace_ttl_seconds
        while self._traces:
            trace_id, trace = next(iter(self._traces.items()))
            if trace.first_seen + ttl > now:
                break
            # An anchor that arrived late in its trace's life can still be waiting when the trace expires.
            longest = self._join.max_request_seconds
            decoding = [a for a, at in trace.anchors.items() if now - at < longest and self._awaits_decode(trace, a)]
            for anchor_id in [a for a in trace.anchors if a not in decoding]:
                if anchor_id in trace.anchors:
                    self._finish_with_what_it_has(trace_id, trace, anchor_id, c.OUTCOME_JOINED)
            if trace.gateways or decoding:  # a gateway in its failure window, or a long decode, keeps the trace
                self._traces.move_to_end(trace_id)
                trace.first_seen = now
                continue
            self._traces.popitem(last=False)
            trace.release()
            self._forget_request_ids(trace_id, trace)
            if not trace.lent and not trace.emitted:
                self._outcome(c.OUTCOME_NO_ANCHOR, 1)
            self._remember(trace_id, trace.spans.values(), claimed=False)

    def _awaits_decode(self, trace: PendingTrace, anchor_id: str) -> bool:
        """A P/D prefill stage whose decode stage has not come: the decode may stream for minutes."""
        anchor = trace.spans[anchor_id]
        key = self._key(trace, anchor)
        anchors = self._group(trace, key)
        return not self._stages(trace, anchors, self._scope(trace, key, anchors))[0]

    def _resolve_unanswered(self, trace_id: str, trace: PendingTrace, gateway_id: str) -> None:
        """The failure window of a gateway span passed: its anchors with what they have, else a failed request."""
        key: _GroupKey = (_GATEWAY, gateway_id, "")
        if self._group(trace, key):
            self._emit_group(trace_id, trace, key, c.OUTCOME_JOINED)
            return
        del trace.gateways[gateway_id]
        gateway = trace.spans[gateway_id]
        scope = [gateway, *self._scope(trace, key, [gateway])]
        if not self._is_llm_call(scope):
            return  # not an LLM call: it stays a companion until the trace expires, as any span
        if shapes.is_conditional_probe(scope):  # a step of a call that goes on (its later legs answered), not a call
            self._emit_probe(trace_id, trace, key, scope)
            return
        if any(request_id in self._answered for request_id in self._request_ids_under(trace, gateway_id)):
            return  # a model server answered it in another trace (the gateway forwarded another traceparent)
        answered = not self._join.unanswered_are_aborted
        reason = shapes.failure_reason(scope, answered=answered)
        if reason is None:
            return
        self._claim(trace_id, trace, key, [], scope)
        self._outcome(c.OUTCOME_FAILED, 1)
        self._emit(self._build.failed(gateway, scope, reason))

    def _settle_probes(self, trace_id: str, trace: PendingTrace) -> None:
        """A conditional-decode probe the EPP refused says so on its own gateway span: it is emitted once its
        request id has come (on its scheduling spans), for the call joiner to count the call's TTFT from it."""
        for gateway_id in list(trace.gateways):
            gateway = trace.spans[gateway_id]
            if not shapes.is_conditional_probe([gateway]):
                continue
            key: _GroupKey = (_GATEWAY, gateway_id, "")
            scope = [gateway, *self._scope(trace, key, [gateway])]
            if any(self._joinable_id([s]) for s in scope) and not self._group(trace, key):
                self._emit_probe(trace_id, trace, key, scope)

    def _emit_probe(self, trace_id: str, trace: PendingTrace, key: _GroupKey, scope: list[Span]) -> None:
        """The probe, a step of a call that goes on: no request and no failure, but a leg of its call
        (outcome ``conditional_decode_probe``), which the call joiner never publishes."""
        probe = self._build.probe(scope[0], scope)
        self._claim(trace_id, trace, key, [], scope)
        self._outcome(c.OUTCOME_PROBE, 1)
        self._emit(probe)

    def _is_llm_call(self, scope: list[Span]) -> bool:
        """A model, an SLO header or a gen_ai attribute beyond the request id: a /tokenize or a GET that the
        EPP passes through is scheduled with a request id and no model, and is no LLM call."""
        view = View(scope)
        if self._names_a_model(view) or self._has_slo(view):
            return True
        return any(
            key.startswith("gen_ai.") and key != "gen_ai.request.id" and value not in ("", None)
            for key, value in view.attributes.items()
        )

    def _names_a_model(self, view: View) -> bool:
        return bool(self._mapping.string("requested_model", view) or self._mapping.string("target_model", view))

    def _has_slo(self, view: View) -> bool:
        return self._mapping.present("slo_ttft_ms", view) or self._mapping.present("slo_tpot_ms", view)

    def flush(self) -> int:
        """Emit every waiting anchor with what it has (shutdown): nothing accepted is lost. Returns how many."""
        flushed = 0
        for trace_id, trace in list(self._traces.items()):
            while trace.anchors:
                before = len(trace.anchors)
                self._finish_with_what_it_has(trace_id, trace, next(iter(trace.anchors)), c.OUTCOME_JOINED)
                flushed += before - len(trace.anchors)
        self._traces.clear()
        self._footprint.total = 0
        self._anchor_deadlines.clear()
        self._gateway_deadlines.clear()
        self._companions_by_request_id.clear()
        self._anchors_by_request_id.clear()
        return flushed

    # ---- building the record ----------------------------------------------------------------

    def _emit_group(
        self,
        trace_id: str,
        trace: PendingTrace,
        key: _GroupKey,
        outcome: str,
        lender: PendingTrace | None = None,
        *,
        anchors: list[Span] | None = None,
        scope: list[Span] | None = None,
    ) -> None:
        anchors = self._group(trace, key) if anchors is None else anchors
        scope = self._scope(trace, key, anchors) if scope is None else scope
        lent = [s for s in lender.spans.values() if s.span_id not in lender.anchors] if lender is not None else []
        gateway = trace.spans.get(key[1]) if key[0] == _GATEWAY else None
        request = self._build.request(trace, anchors, [*scope, *lent], outcome, gateway)
        self._claim(trace_id, trace, key, anchors, scope)
        for anchor in anchors:
            self._answered_id(self._joinable_id([anchor]))
        self._outcome(request.outcome, 1)
        self._emit(request)

    def _claim(
        self, trace_id: str, trace: PendingTrace, key: _GroupKey, anchors: list[Span], scope: list[Span]
    ) -> None:
        """The spans of an emitted request leave the pending trace; shared ancestors of a gateway stay."""
        if key[0] == _GATEWAY:
            gateway = trace.spans[key[1]]
            shared = {s.span_id for s in trace.ancestors(gateway)}
            trace.gateways.pop(gateway.span_id, None)
        else:
            shared = set()
        claimed = [*anchors, *(s for s in scope if s.span_id not in shared)]
        if len(claimed) == len(trace.spans):  # the usual case: the request was the whole trace
            trace.clear()
        else:
            for span in claimed:
                trace.anchors.pop(span.span_id, None)
                if span.span_id in trace.spans:
                    trace.remove(span.span_id)
            if trace.bare:
                trace.bare = deque(s for s in trace.bare if s in trace.spans)
        trace.emitted = True
        self._remember(trace_id, claimed, claimed=True)


def _placed(trace: PendingTrace, gateway_id: str, anchors: list[Span]) -> bool:
    """Every anchor hangs from its gateway span, or its chain to the trace root is whole.

    An anchor whose parent has not arrived was matched to its gateway by request id alone: the spans between
    them (a routing sidecar's, exported by another process) may still come, and they decide its P/D stages and
    TTFT, so the request waits for them, at most its window.
    """
    return all(
        any(above.span_id == gateway_id for above in trace.ancestors(anchor)) or trace.chain_complete(anchor)
        for anchor in anchors
    )


def _encloses(span: Span, gateway: Span) -> bool:
    """A sibling of the gateway span that started before it and ended after it: the same call's."""
    return (
        span.parent_span_id == gateway.parent_span_id
        and span.start_ns <= gateway.start_ns
        and span.end_ns >= gateway.end_ns
    )
