"""Building one :class:`JoinedRequest` from the spans the trace assembler grouped for it.

The assembler decides which spans make a request; this module reads them: the model server's own
numbers from its span alone, the gateway's facts from the companions nearest first, and the rules
of requests made of several model-server spans (P/D stages on the decode pod with the client's
TTFT, the choices of ``n > 1``) and of failed requests (``docs/sending-traces.md``).
"""

from __future__ import annotations

from collections.abc import Iterable

from sloscope import conventions as c
from sloscope.attributes import Mapping, View
from sloscope.processors import span_shapes as shapes
from sloscope.processors.trace_sampling import probability_of
from sloscope.processors.trace_state import PendingTrace
from sloscope.records import JoinedRequest, Span
from sloscope.slo.evaluate import tpot_seconds


class RequestBuilder:
    """Reads requests out of grouped spans with the configured attribute mapping."""

    def __init__(self, mapping: Mapping, latency_scorers: frozenset[str], *, unanswered_are_aborted: bool) -> None:
        self._mapping = mapping
        self._latency_scorers = latency_scorers
        self._unanswered_are_aborted = unanswered_are_aborted

    def request(
        self, trace: PendingTrace, anchors: list[Span], companions: list[Span], outcome: str, gateway: Span | None
    ) -> JoinedRequest:
        """One request of model-server spans: P/D stages, Responses-API turns, ``n > 1`` choices, or a single span.

        The routing sidecar's encoder requests came before the call's own: parts of it, neither choices nor stages.
        Alone (in a trace of their own) they are a leg of a call, not one (phase ``encode``, processors/calls.py)."""
        own = [a for a in anchors if not shapes.is_encoder_part(self._raw_id(a))]
        request = self._request(trace, own or anchors, companions, outcome, gateway)
        if not own:
            request.phase, request.outcome = c.PHASE_ENCODE, c.OUTCOME_ENCODER_PART
        return request

    def _request(
        self, trace: PendingTrace, anchors: list[Span], companions: list[Span], outcome: str, gateway: Span | None
    ) -> JoinedRequest:
        if disaggregated(trace, anchors, companions):
            decode = _decode_stage(trace, anchors)
            if decode is None:  # the decode stage never came: the client got no answer from a decode pod
                scope = [*anchors, *companions]
                reason = shapes.failure_reason(scope, answered=not self._unanswered_are_aborted)
                return self.failed(gateway or anchors[0], scope, reason or c.FAILURE_ABORTED)
            return self._disaggregated_request(
                trace, decode, anchors=anchors, companions=companions, outcome=outcome, gateway=gateway
            )
        turns = self._turns(anchors) if len(anchors) > 1 else None
        primary = turns[0] if turns else primary_anchor(trace, anchors)
        request = build_request(self._mapping, primary, companions, outcome, self._latency_scorers)
        if turns:
            _merge_sequence(self._mapping, request, turns[0], turns)
        elif len(anchors) > 1:
            _merge_choices(self._mapping, request, anchors)
        request.arrival_ns = _arrival(trace, primary, anchors, gateway)
        served = _fastest(self._mapping, anchors) if len(anchors) > 1 and not turns else primary
        _count_from(request, gateway, served.start_ns, c.TTFT_GATEWAY_ARRIVAL)
        if any(a.failed for a in anchors):
            request.failure_reason = shapes.failure_reason(anchors, answered=True) or c.FAILURE_ERROR
        return request

    def _raw_id(self, anchor: Span) -> str | None:
        return self._mapping.identifier("request_id", View([anchor]))

    def _turns(self, anchors: list[Span]) -> list[Span] | None:
        """The anchors in turn order when they are the turns of one Responses-API call (:func:`shapes.turn_of`):
        one call id, each turn once. Else None (choices)."""
        turns = [shapes.turn_of(self._raw_id(a)) for a in anchors]
        if any(t is None for t in turns):
            return None
        numbered = [(t[1], a) for t, a in zip(turns, anchors, strict=True) if t is not None]
        if len({t[0] for t in turns if t is not None}) != 1 or len({n for n, _ in numbered}) != len(numbered):
            return None
        return [a for _, a in sorted(numbered, key=lambda pair: pair[0])]

    def _disaggregated_request(
        self,
        trace: PendingTrace,
        decode: Span,
        *,
        anchors: list[Span],
        companions: list[Span],
        outcome: str,
        gateway: Span | None,
    ) -> JoinedRequest:
        request = build_request(self._mapping, decode, companions, outcome, self._latency_scorers)
        request.arrival_ns = _arrival(trace, decode, anchors, gateway)
        chunks = [a for a in anchors if leg_of(trace, a) == "decode"] or [decode]
        if len(chunks) > 1:  # chunked decode (--decode-chunk-size): one vLLM request per chunk
            _merge_sequence(self._mapping, request, decode, chunks)
        prefill = [a for a in anchors if a not in chunks]
        if prefill:
            stage = View([max(prefill, key=lambda s: s.end_ns)])
            request.prefill_pod = self._mapping.string("pod", stage)
            request.prefill_queue_seconds = self._mapping.number("queue_seconds", stage)
            request.prefill_seconds_on_prefill_pod = self._mapping.number("prefill_seconds", stage)
        if not _count_from(request, gateway, decode.start_ns, c.TTFT_PD_GATEWAY):
            routing = next((s for s in trace.ancestors(decode) if shapes.is_sidecar_routing(s)), None)
            _count_from(request, routing, decode.start_ns, c.TTFT_PD_SIDECAR)
        if decode.failed:
            request.failure_reason = shapes.failure_reason([decode], answered=True) or c.FAILURE_ERROR
        return request

    def probe(self, gateway: Span, scope: list[Span]) -> JoinedRequest:
        """The coordinator's refused conditional-decode probe: a leg of its call with no numbers of a model server's,
        neither a request nor a failure (processors/calls.py counts its call's TTFT from its arrival)."""
        request = self.failed(gateway, scope, c.FAILURE_INVALID)
        request.outcome, request.failure_reason, request.phase = c.OUTCOME_PROBE, None, c.PHASE_DECODE
        return request

    def failed(self, head: Span, scope: list[Span], reason: str) -> JoinedRequest:
        request = build_request(
            self._mapping, head, [s for s in scope if s is not head], c.OUTCOME_FAILED, self._latency_scorers
        )
        for name in (
            "ttft_seconds",
            "ttft_source",
            "server_ttft_seconds",
            "e2e_seconds",
            "queue_seconds",
            "prefill_seconds",
            "decode_seconds",
            "completion_tokens",
            "prompt_tokens",
            "pod",
        ):
            setattr(request, name, None)  # the gateway's own numbers are no model server's
        if request.routing == c.ROUTING_UNKNOWN:
            request.routing = c.ROUTING_NONE  # refused before it was scheduled
        request.failure_reason = reason
        request.arrival_ns = head.start_ns
        return request


def leg_of(trace: PendingTrace, anchor: Span) -> str | None:
    """The P/D leg an anchor ran in: its nearest sidecar leg span above it."""
    for above in trace.ancestors(anchor):
        found = shapes.leg(above)
        if found is not None:
            return found
    return None


def disaggregated(trace: PendingTrace, anchors: list[Span], companions: list[Span]) -> bool:
    """A P/D request: the EPP chose P/D, or a sidecar leg span is among its companions or above its anchors."""
    return shapes.disaggregated([*companions, *(s for a in anchors for s in trace.ancestors(a))])


def _decode_stage(trace: PendingTrace, anchors: list[Span]) -> Span | None:
    """The decode stage: under the sidecar's decode leg (its first chunk, when chunked), else the last to end."""
    legs = [a for a in anchors if leg_of(trace, a) == "decode"]
    if legs:
        return min(legs, key=lambda s: (s.start_ns, s.end_ns))
    if any(leg_of(trace, a) is not None for a in anchors) or len(anchors) < 2:
        return None
    return max(anchors, key=lambda s: (s.end_ns, s.start_ns))  # sidecar tracing off: the stage that ended last


def primary_anchor(trace: PendingTrace, anchors: list[Span]) -> Span:
    """The anchor whose ancestors come first in the request's view: the decode stage, else the first."""
    return _decode_stage(trace, anchors) or anchors[0]


def _fastest(mapping: Mapping, anchors: list[Span]) -> Span:
    """``n > 1``: the first choice with the smallest TTFT, the one whose first token the request's TTFT is."""
    timed = [
        (ttft, i) for i, a in enumerate(anchors) if (ttft := mapping.number("ttft_seconds", View([a]))) is not None
    ]
    return anchors[min(timed)[1]] if timed else anchors[0]


def _count_from(request: JoinedRequest, origin: Span | None, served_ns: int, source: str) -> bool:
    """The model server's TTFT counted from ``origin``'s start, the request's arrival in front of it (the user's
    wait: the EPP's scheduling, a P/D prefill and KV transfer), when both clocks agree that it came first; else the
    model server's own TTFT stands (``docs/sending-traces.md``, which TTFT)."""
    ttft = request.ttft_seconds
    if request.ttft_source != c.TTFT_MODEL_SERVER or ttft is None or origin is None:
        return False
    if origin.start_ns <= 0 or served_ns < origin.start_ns:
        return False
    request.ttft_seconds = (served_ns - origin.start_ns) / 1e9 + ttft
    request.ttft_source = source
    return True


def _arrival(trace: PendingTrace, primary: Span, anchors: list[Span], gateway: Span | None) -> int:
    if gateway is not None and gateway.start_ns > 0:
        return gateway.start_ns
    chain = trace.ancestors(primary)
    if chain and chain[-1].start_ns > 0:
        return chain[-1].start_ns
    return min((a.start_ns for a in anchors if a.start_ns > 0), default=primary.start_ns)


def _merge_sequence(mapping: Mapping, request: JoinedRequest, first: Span, parts: list[Span]) -> None:
    """Engine requests one after another that answer one call (a chunked decode's chunks, a Responses-API call's
    turns): the first one's first token; every one's tokens; from the first one's start to the last one's end (the
    time between them included: the client waits it)."""
    request.completion_tokens = _total(mapping.number("completion_tokens", View([part])) for part in parts)
    request.decode_seconds = _total(mapping.number("decode_seconds", View([part])) for part in parts)
    request.end_ns = max(part.end_ns for part in parts)
    request.e2e_seconds = (request.end_ns - first.start_ns) / 1e9


def _merge_choices(mapping: Mapping, request: JoinedRequest, anchors: list[Span]) -> None:
    """n > 1: one request with the first token of the fastest choice, the pace of the slowest, all the tokens."""
    ttfts, tpots, e2es, tokens = [], [], [], []
    for anchor in anchors:
        view = View([anchor])
        ttft, e2e = mapping.number("ttft_seconds", view), mapping.number("e2e_seconds", view)
        completion = mapping.number("completion_tokens", view)
        if ttft is not None:
            ttfts.append(ttft)
        if e2e is not None:
            e2es.append(e2e)
        tokens.append(completion)
        tpot = tpot_seconds(e2e, ttft, completion)
        if tpot is not None:
            tpots.append(tpot)
    request.choices = len(anchors)
    if request.ttft_source == c.TTFT_MODEL_SERVER and ttfts:
        request.ttft_seconds = min(ttfts)
    request.server_ttft_seconds = min(ttfts) if ttfts else request.server_ttft_seconds
    request.e2e_seconds = max(e2es) if e2es else request.e2e_seconds
    request.completion_tokens = _total(tokens)
    request.tpot_seconds = max(tpots) if tpots else None


def _total(values: Iterable[float | None]) -> float | None:
    """The sum, or None (unknown) when any of the values is."""
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def build_request(
    mapping: Mapping, anchor: Span, companions: list[Span], outcome: str, latency_scorers: frozenset[str] = frozenset()
) -> JoinedRequest:
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
        ttft, ttft_source = gateway_ttft, c.TTFT_GATEWAY
    elif server_ttft is not None:
        ttft, ttft_source = server_ttft, c.TTFT_MODEL_SERVER
    else:
        ttft, ttft_source = None, None
    return JoinedRequest(
        trace_id=anchor.trace_id,
        span_id=anchor.span_id,
        outcome=outcome,
        request_id=mapping.identifier("request_id", gateway),
        requested_model=string("requested_model", gateway) or None,
        target_model=string("target_model", own) or string("target_model", gateway) or None,
        pool=string("pool", gateway),
        pod=string("pod", own),  # the model-server span names its pod; a gateway's pod is not it
        endpoint=string("endpoint", gateway),
        slo_ttft_ms=mapping.header_number("slo_ttft_ms", gateway),
        slo_tpot_ms=mapping.header_number("slo_tpot_ms", gateway),
        routing=shapes.routing(companions, latency_scorers) or _routing(mapping, gateway),
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
        arrival_ns=anchor.start_ns,
        phase=shapes.phase(companions),
        # The gateway's identity from its own spans: a model server's resource is not the gateway's.
        gateway=string("gateway", gateway if outcome == c.OUTCOME_FAILED else View(companions)),
        sampling_probability=_sampling_probability([anchor, *companions]),
    )


def _sampling_probability(spans: list[Span]) -> float | None:
    """The probability the request's trace was kept with: the anchor's tracestate says it, else the companions'
    nearest first (a parent-based sampler passes its root's on, so they agree when both say)."""
    for span in spans:
        probability = probability_of(span.tracestate)
        if probability is not None:
            return probability
    return None


def _routing(mapping: Mapping, view: View) -> str:
    """The late-2025 EPP profile headers: x-prediction-based-scheduling (true/false), or presence of ...-off."""
    flag = mapping.header_bool("prediction_based_scheduling", view)
    if flag is True:
        return c.ROUTING_PREDICTED
    if flag is False or mapping.present("prediction_based_scheduling_off", view):
        return c.ROUTING_DEFAULT
    return c.ROUTING_UNKNOWN
