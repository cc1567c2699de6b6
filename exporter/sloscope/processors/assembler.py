"""The trace assembler: spans in, one :class:`JoinedRequest` per model-server span out.

The model-server span (vLLM ``llm_request``; any span carrying the anchor attribute) *anchors*
a request. The other spans of its trace (EPP ``gateway.request*``, router or Envoy spans) are its
companions: they add pool, models, SLO headers, routing mode and predictions. An anchor is
emitted as soon as its whole ancestor chain, up to the trace root, has arrived, or when the join
window has passed since the anchor *arrived* (arrival time, not span time: exporters batch and
clocks differ), with what it has. When the anchor's own trace has no companion and joining by
request id is on, a companion of another trace carrying the same request id is used.

Memory is bounded: pending traces, spans per trace and remembered finished traces all have caps,
and everything dropped is counted by reason. Single-threaded by design: only the pipeline
worker calls it.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sloscope import conventions as c
from sloscope.attributes import Mapping, View
from sloscope.config import Join
from sloscope.records import JoinedRequest, Span

Emit = Callable[[JoinedRequest], None]
Count = Callable[[str, int], None]


@dataclass(slots=True)
class _Trace:
    first_seen: float
    spans: dict[str, Span] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)  # anchor span ids not yet emitted
    request_ids: list[str] = field(default_factory=list)  # companion request ids indexed for this trace
    anchor_request_ids: list[str] = field(default_factory=list)  # anchors waiting for a companion by id
    anchor_ids: set[str] = field(default_factory=set)  # every anchor span held, emitted or not
    lent: bool = False  # a companion of this trace completed an anchor of another trace

    @property
    def has_companions(self) -> bool:
        return len(self.spans) > len(self.anchor_ids)


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
    ) -> None:
        self._join = join
        self._mapping = mapping
        self._emit = emit
        self._dropped = count_dropped
        self._outcome = count_outcome
        self._clock = clock
        self._anchor_names = frozenset(join.anchor_span_names)
        self._anchor_attribute = join.anchor_attribute
        self._request_id = re.compile(join.request_id_pattern)
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        self._deadlines: deque[tuple[float, str, str]] = deque()  # (deadline, trace id, anchor span id)
        self._done: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._companions_by_request_id: dict[str, str] = {}  # request id -> trace id
        self._anchors_by_request_id: dict[str, tuple[str, str]] = {}  # request id -> (trace id, span id)

    @property
    def pending(self) -> int:
        return len(self._traces)

    # ---- input ------------------------------------------------------------------------------

    def consume(self, spans: list[Span]) -> None:
        now = self._clock()
        for span in spans:
            self._add(span, now)
        self.expire(now)

    def _is_anchor(self, span: Span) -> bool:
        return span.name in self._anchor_names or self._anchor_attribute in span.attributes

    def _add(self, span: Span, now: float) -> None:
        trace_id = span.trace_id
        done = self._done.get(trace_id)
        if done is not None and span.span_id in done:  # also when a late anchor reopened the trace
            self._dropped(c.DROP_DUPLICATE, 1)
            return
        is_anchor = self._is_anchor(span)
        trace = self._traces.get(trace_id)
        if trace is None:
            if done is not None and not is_anchor:
                self._dropped(c.DROP_LATE, 1)
                return
            trace = self._open(trace_id, now)
        elif span.span_id in trace.spans:
            self._dropped(c.DROP_DUPLICATE, 1)
            return
        if len(trace.spans) >= self._join.max_spans_per_trace:
            self._dropped(c.DROP_TRACE_TOO_LARGE, 1)
            return
        trace.spans[span.span_id] = span
        if is_anchor:
            trace.anchor_ids.add(span.span_id)
            trace.waiting.append(span.span_id)
            self._deadlines.append((now + self._join.window_seconds, trace_id, span.span_id))
        elif self._join.by_request_id and not trace.anchor_ids:
            # Only a trace without a model-server span can be another trace's gateway: when the
            # anchor is already here (the usual order: the gateway span ends last), the join is local.
            self._index_companion(trace_id, trace, span)
        self._try_complete(trace_id, trace)

    def _open(self, trace_id: str, now: float) -> _Trace:
        while len(self._traces) >= self._join.max_pending_traces:
            oldest_id, oldest = self._traces.popitem(last=False)
            self._forget_request_ids(oldest_id, oldest)
            if oldest.waiting:
                for anchor_id in oldest.waiting:
                    self._emit_request(oldest_id, oldest, anchor_id, c.OUTCOME_EVICTED, extra=())
            else:
                self._dropped(c.DROP_PENDING_CAP, len(oldest.spans))
            self._remember_done(oldest_id, oldest)
        trace = _Trace(first_seen=now)
        self._traces[trace_id] = trace
        return trace

    def _index_companion(self, trace_id: str, trace: _Trace, span: Span) -> None:
        request_id = self._joinable_id([span])
        if request_id is None:
            return
        self._companions_by_request_id[request_id] = trace_id
        trace.request_ids.append(request_id)
        waiting = self._anchors_by_request_id.pop(request_id, None)
        if waiting is not None and waiting[0] != trace_id:
            other = self._traces.get(waiting[0])
            if other is not None and waiting[1] in other.waiting:
                trace.lent = True
                other.waiting.remove(waiting[1])
                self._emit_request(waiting[0], other, waiting[1], c.OUTCOME_JOINED_BY_REQUEST_ID, extra=(trace,))
                self._close_if_finished(waiting[0], other)

    def _joinable_id(self, spans: list[Span]) -> str | None:
        raw = self._mapping.string("request_id", View(spans))
        if not raw:
            return None
        match = self._request_id.match(raw)
        return match.group("id") if match else raw

    # ---- completion -------------------------------------------------------------------------

    def _try_complete(self, trace_id: str, trace: _Trace) -> None:
        for anchor_id in list(trace.waiting):
            anchor = trace.spans[anchor_id]
            if not _chain_complete(trace, anchor):
                continue
            if trace.has_companions:
                self._finish(trace_id, trace, anchor_id, c.OUTCOME_JOINED, extra=())
                continue
            if not self._join.by_request_id:
                self._finish(trace_id, trace, anchor_id, c.OUTCOME_ANCHOR_ONLY, extra=())
                continue
            other = self._companion_trace(anchor)
            if other is not None:
                other.lent = True
                self._finish(trace_id, trace, anchor_id, c.OUTCOME_JOINED_BY_REQUEST_ID, extra=(other,))
                continue
            request_id = self._joinable_id([anchor])
            if request_id and request_id not in trace.anchor_request_ids:
                self._anchors_by_request_id[request_id] = (trace_id, anchor_id)
                trace.anchor_request_ids.append(request_id)
        self._close_if_finished(trace_id, trace)

    def _finish_with_what_it_has(self, trace_id: str, trace: _Trace, anchor_id: str) -> None:
        """The window is over (or the trace expires, or sloscope stops): the anchor's own companions if
        any, else a companion found by request id, else the anchor alone."""
        if trace.has_companions:
            self._finish(trace_id, trace, anchor_id, c.OUTCOME_JOINED, extra=())
            return
        other = self._companion_trace(trace.spans[anchor_id]) if self._join.by_request_id else None
        if other is not None:
            other.lent = True
            self._finish(trace_id, trace, anchor_id, c.OUTCOME_JOINED_BY_REQUEST_ID, extra=(other,))
        else:
            self._finish(trace_id, trace, anchor_id, c.OUTCOME_ANCHOR_ONLY, extra=())

    def _companion_trace(self, anchor: Span) -> _Trace | None:
        request_id = self._joinable_id([anchor])
        other_id = self._companions_by_request_id.get(request_id) if request_id else None
        return self._traces.get(other_id) if other_id else None

    def _finish(self, trace_id: str, trace: _Trace, anchor_id: str, outcome: str, extra: tuple[_Trace, ...]) -> None:
        trace.waiting.remove(anchor_id)
        self._emit_request(trace_id, trace, anchor_id, outcome, extra)

    def _close_if_finished(self, trace_id: str, trace: _Trace) -> None:
        """A trace whose anchors are all emitted is closed: later spans of it are duplicates or late."""
        if trace.waiting or not trace.anchor_ids:
            return
        self._traces.pop(trace_id, None)
        self._forget_request_ids(trace_id, trace)
        self._remember_done(trace_id, trace)

    def _forget_request_ids(self, trace_id: str, trace: _Trace) -> None:
        for request_id in trace.request_ids:
            if self._companions_by_request_id.get(request_id) == trace_id:
                del self._companions_by_request_id[request_id]
        for request_id in trace.anchor_request_ids:
            waiting = self._anchors_by_request_id.get(request_id)
            if waiting is not None and waiting[0] == trace_id:
                del self._anchors_by_request_id[request_id]

    def _remember_done(self, trace_id: str, trace: _Trace) -> None:
        seen = frozenset(trace.spans)
        earlier = self._done.pop(trace_id, None)  # a reopened trace keeps what it had seen
        self._done[trace_id] = seen if earlier is None else earlier | seen
        while len(self._done) > self._join.max_done_traces:
            self._done.popitem(last=False)

    # ---- time -------------------------------------------------------------------------------

    def expire(self, now: float | None = None) -> None:
        """Emit anchors whose join window has passed and expire traces that never got an anchor."""
        now = self._clock() if now is None else now
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, trace_id, anchor_id = deadlines.popleft()
            trace = self._traces.get(trace_id)
            if trace is None or anchor_id not in trace.waiting:
                continue
            self._finish_with_what_it_has(trace_id, trace, anchor_id)
            self._close_if_finished(trace_id, trace)
        ttl = self._join.trace_ttl_seconds
        while self._traces:
            trace_id, trace = next(iter(self._traces.items()))
            if trace.first_seen + ttl > now:
                break
            # An anchor that arrived late in its trace's life can still be waiting when the trace expires.
            for anchor_id in list(trace.waiting):
                self._finish_with_what_it_has(trace_id, trace, anchor_id)
            self._traces.popitem(last=False)
            self._forget_request_ids(trace_id, trace)
            if not trace.lent and not trace.anchor_ids:
                self._outcome(c.OUTCOME_NO_ANCHOR, 1)
            self._remember_done(trace_id, trace)

    def flush(self) -> int:
        """Emit every waiting anchor with what it has (shutdown): nothing accepted is lost. Returns how many."""
        flushed = 0
        for trace_id, trace in list(self._traces.items()):
            for anchor_id in list(trace.waiting):
                self._finish_with_what_it_has(trace_id, trace, anchor_id)
                flushed += 1
        self._traces.clear()
        self._deadlines.clear()
        self._companions_by_request_id.clear()
        self._anchors_by_request_id.clear()
        return flushed

    # ---- building the record ----------------------------------------------------------------

    def _emit_request(
        self, trace_id: str, trace: _Trace, anchor_id: str, outcome: str, extra: tuple[_Trace, ...]
    ) -> None:
        anchor = trace.spans[anchor_id]
        companions = _companions(trace, anchor) + [
            s for t in extra for s in t.spans.values() if s.span_id not in t.anchor_ids
        ]
        self._outcome(outcome, 1)
        self._emit(build_request(self._mapping, anchor, companions, outcome))


def _chain_complete(trace: _Trace, anchor: Span) -> bool:
    """True when every ancestor of ``anchor`` up to a root span is in the trace."""
    parent = anchor.parent_span_id
    for _ in range(len(trace.spans) + 1):
        if not parent:
            return True
        span = trace.spans.get(parent)
        if span is None:
            return False
        parent = span.parent_span_id
    return False  # a parent cycle: never complete, the window decides


def _companions(trace: _Trace, anchor: Span) -> list[Span]:
    """Non-anchor spans of the trace, the anchor's ancestors first (nearest first), then the rest."""
    ordered: list[Span] = []
    seen = {anchor.span_id}
    parent = anchor.parent_span_id
    while parent and parent not in seen:
        span = trace.spans.get(parent)
        if span is None:
            break
        if parent not in trace.anchor_ids:  # a prefill server above a decode server is no gateway
            ordered.append(span)
        seen.add(parent)
        parent = span.parent_span_id
    ordered.extend(s for s in trace.spans.values() if s.span_id not in seen and s.span_id not in trace.anchor_ids)
    return ordered


def build_request(mapping: Mapping, anchor: Span, companions: list[Span], outcome: str) -> JoinedRequest:
    """Read every field: model-server facts from the anchor, gateway facts from companions first.

    The model server's own numbers (latencies, tokens, its pod) come from its span alone: a gateway's
    value under the same attribute name must not stand in for them.
    """
    own = View([anchor])
    gateway = View([*companions, anchor])
    number, string = mapping.number, mapping.string
    gateway_ttft = number("gateway_ttft_seconds", gateway)
    if gateway_ttft is None:
        gateway_ttft_ms = number("gateway_ttft_ms", gateway)
        gateway_ttft = gateway_ttft_ms / 1000.0 if gateway_ttft_ms is not None else None
    server_ttft = number("ttft_seconds", own)
    if gateway_ttft is not None:
        ttft, ttft_source = gateway_ttft, "gateway"
    elif server_ttft is not None:
        ttft, ttft_source = server_ttft, "model_server"
    else:
        ttft, ttft_source = None, None
    return JoinedRequest(
        trace_id=anchor.trace_id,
        span_id=anchor.span_id,
        outcome=outcome,
        request_id=string("request_id", gateway),
        requested_model=string("requested_model", gateway),
        target_model=string("target_model", own) or string("target_model", gateway),
        pool=string("pool", gateway),
        pod=string("pod", own),  # the model-server span names its pod; a gateway's pod is not it
        endpoint=string("endpoint", gateway),
        slo_ttft_ms=mapping.header_number("slo_ttft_ms", gateway),
        slo_tpot_ms=mapping.header_number("slo_tpot_ms", gateway),
        routing=_routing(mapping, gateway),
        predicted_ttft_ms=number("predicted_ttft_ms", gateway),
        predicted_tpot_ms=number("predicted_tpot_ms", gateway),
        ttft_seconds=ttft,
        ttft_source=ttft_source,
        server_ttft_seconds=server_ttft,
        e2e_seconds=number("e2e_seconds", own),
        queue_seconds=number("queue_seconds", own),
        prefill_seconds=number("prefill_seconds", own),
        decode_seconds=number("decode_seconds", own),
        prompt_tokens=number("prompt_tokens", own),
        completion_tokens=number("completion_tokens", own),
        prefix_cache_score=number("prefix_cache_score", gateway),
        start_ns=anchor.start_ns,
        end_ns=anchor.end_ns,
        arrival_ns=min((s.start_ns for s in (*companions, anchor) if s.start_ns > 0), default=anchor.start_ns),
    )


def _routing(mapping: Mapping, view: View) -> str:
    """The EPP profile: x-prediction-based-scheduling (true/false), or presence of ...-off."""
    flag = mapping.header_bool("prediction_based_scheduling", view)
    if flag is True:
        return c.ROUTING_PREDICTED
    if flag is False or mapping.present("prediction_based_scheduling_off", view):
        return c.ROUTING_DEFAULT
    return c.ROUTING_UNKNOWN
