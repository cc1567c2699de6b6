"""llm-d's coordinator: one client call made of one EPP call per phase, counted once with the client's TTFT.

The shapes are llm-d-router's at ebab687927f5331c1b39defcb579a07951bce56c: the coordinator (``pkg/coordinator``)
sends the client's call to the gateway once per phase with the client's ``x-request-id`` and headers
(``steps/prefill.go:101-102``, ``steps/decode_proxy.go:67-74``, ``pipeline/context.go:45-60``; it has no tracing of
its own, so its calls carry the client's ``traceparent`` or none), first a conditional decode the EPP may refuse
with 412 (``pkg/epp/requestcontrol/director.go:348-361``); the EPP's ``header-profile-handler`` runs the profile
the ``EPP-Profile`` header names (``pkg/epp/framework/plugins/scheduling/profilehandler/headerprofile/
header_profile_handler.go``) and ``run_scheduler_profile`` records its name (``pkg/epp/scheduling/scheduler.go:153``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Join, Settings
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline
from sloscope.processors import joined_batch
from sloscope.processors.calls import CallJoiner
from sloscope.processors.tracker_rows import leg_ttft
from sloscope.records import JoinedRequest, Span
from sloscope.testing import RecordWriter, coordinator_spans
from sloscope.upstream.llmd_router import Epp
from sloscope.upstream.writer import Process
from tests.support.engines import assembler_engine  # noqa: F401  (the fixture below)
from tests.unit.processors.test_assembler import Harness
from tests.unit.processors.test_assembler_upstream import AGENT_ROOT, EPP, MS, T0, epp_call, vllm033

# One call: the refused probe at 0-20 ms, the prefill leg at 30-530 ms, the decode leg at 540-2540 ms.
PROBE_MS, PREFILL_MS, DECODE_MS = 0, 30, 540


def probe(trace: int = 1) -> list[Span]:
    """The refused conditional decode's EPP spans, under the client's span."""
    return coordinator_spans(
        trace, 10, phase=None, request_id="r", parent=AGENT_ROOT, start_ns=T0 + PROBE_MS * MS, end_ns=T0 + 20 * MS
    )


def leg_gateway(trace: int, phase: str, *, parent: int = AGENT_ROOT) -> list[Span]:
    """The leg's EPP spans: under the client's span unless told (0: the root of a trace of its own)."""
    start, end = (PREFILL_MS, 530) if phase == c.PHASE_PREFILL else (DECODE_MS, 2540)
    base = 20 if phase == c.PHASE_PREFILL else 30
    return coordinator_spans(
        trace, base, phase=phase, request_id="r", parent=parent, start_ns=T0 + start * MS, end_ns=T0 + end * MS
    )


def leg_server(trace: int, phase: str, *, parent: int = AGENT_ROOT) -> Span:
    """The leg's vLLM span: under the client's span (its traceparent won) unless told."""
    if phase == c.PHASE_PREFILL:  # max_tokens 1: the prefill leg's answer is its KV transfer parameters
        return vllm033(
            trace, 29, parent, pod_name="prefill-0", request_id="chatcmpl-r", start_ms=35, ttft=0.4, e2e=0.45, tokens=1
        )
    return vllm033(trace, 39, parent, pod_name="decode-0", request_id="chatcmpl-r", start_ms=545, ttft=0.05, e2e=1.9)


FROM_PREFILL = (545 + 50 - PREFILL_MS) / 1000  # the decode pod's first token, from the prefill leg's arrival
CLIENT_TTFT = (545 + 50 - PROBE_MS) / 1000  # and from the refused probe's, the call's first EPP call
LEG_TTFT = (545 + 50 - DECODE_MS) / 1000  # the decode leg's own, from its gateway span's start


# ---- the join: each leg a request of its own gateway span, saying its phase ---------------------------------------


@pytest.mark.usefixtures("assembler_engine")
def test_legs_under_the_clients_span_join_their_own_gateway_spans_whatever_order_they_come_in() -> None:
    """Every leg's spans are siblings under the client's span and carry one request id: the probe reached no model
    server, and the prefill leg's gateway span does not enclose the decode leg's model-server span, so neither is
    its gateway. The decode leg's span comes before its gateway span (the EPP's exporter sends later) and waits.
    The probe says it is one on its own span: it is emitted at once, a leg for the call joiner, no request."""
    h = Harness(failure_window_seconds=15.0)
    h.feed(*probe())
    [refused] = h.emitted
    assert (refused.outcome, refused.phase, refused.request_id, refused.arrival_ns) == (
        c.OUTCOME_PROBE,
        c.PHASE_DECODE,
        "r",
        T0 + PROBE_MS * MS,
    )
    assert (refused.failure_reason, refused.pod, refused.ttft_seconds) == (None, None, None)
    h.emitted.clear()
    h.feed(*leg_gateway(1, c.PHASE_PREFILL))
    h.feed(leg_server(1, c.PHASE_DECODE))  # before the prefill leg's own model-server span, even
    assert h.emitted == []
    h.feed(leg_server(1, c.PHASE_PREFILL))
    h.feed(*leg_gateway(1, c.PHASE_DECODE))
    h.advance(5.0)  # the client's span, which would carry the SLO headers, ends after all: each waits out its window
    assert [(r.phase, r.pod, r.arrival_ns, r.outcome, r.routing) for r in h.emitted] == [  # in the order they came
        (c.PHASE_DECODE, "decode-0", T0 + DECODE_MS * MS, c.OUTCOME_JOINED, c.ROUTING_PREDICTED),
        (c.PHASE_PREFILL, "prefill-0", T0 + PREFILL_MS * MS, c.OUTCOME_JOINED, c.ROUTING_PREDICTED),
    ]
    assert [r.ttft_seconds for r in h.emitted] == [pytest.approx(LEG_TTFT), pytest.approx(0.405)]
    h.advance(15.1)
    assert (len(h.emitted), h.outcomes[c.OUTCOME_PROBE], h.outcomes[c.OUTCOME_FAILED]) == (2, 1, 0)
    assert not h.dropped


@pytest.mark.usefixtures("assembler_engine")
def test_a_leg_says_the_one_profile_its_scheduler_ran_when_it_is_named_for_a_phase() -> None:
    """Legs in traces of their own (no client traceparent: the EPP's span is the root, the model server's under it);
    the sidecar's two profiles in one call and the chart's ``default`` say no phase."""
    h = Harness()
    for trace, phase in ((1, c.PHASE_PREFILL), (2, c.PHASE_DECODE)):
        h.feed(
            *leg_gateway(trace, phase, parent=0),
            leg_server(trace, phase, parent=20 if phase == c.PHASE_PREFILL else 30),
        )
    sidecar = epp_call(3, 40, request_id="s", profile="decode", parent=0)
    writer = RecordWriter(3, 60)  # then the prefill profile's run, under the same orchestration (41)
    Epp(writer, Process(EPP)).schedule(
        41, sidecar[-1].end_ns, request_id="s", model="Qwen/Qwen3-8B", profile="prefill", scorers=("latency-scorer",)
    )
    sidecar += writer.spans
    h.feed(*sidecar, vllm033(3, 49, 40, pod_name="decode-1", request_id="chatcmpl-s"))
    h.feed(*epp_call(4, 50, request_id="t", parent=0), vllm033(4, 59, 50, pod_name="decode-1", request_id="chatcmpl-t"))
    assert [(r.request_id, r.phase) for r in h.emitted] == [
        ("r", c.PHASE_PREFILL),
        ("r", c.PHASE_DECODE),
        ("s", None),
        ("t", None),
    ]


# ---- the call joiner ----------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(phase: str | None, **fields: Any) -> JoinedRequest:
    """A leg as the join emits it (see the join tests above for the numbers)."""
    if phase == c.PHASE_PREFILL:
        leg = dict(pod="prefill-0", start_ms=35, arrival_ms=PREFILL_MS, ttft=0.405, queue=0.01, prefill=0.38)
    else:
        leg = dict(pod="decode-0", start_ms=545, arrival_ms=DECODE_MS, ttft=LEG_TTFT, queue=0.002, prefill=0.01)
    values: dict[str, Any] = dict(
        trace_id="1",
        span_id=f"{phase}",
        outcome=c.OUTCOME_JOINED,
        request_id="r",
        pool="pool-a",
        pod=leg["pod"],
        ttft_seconds=leg["ttft"],
        ttft_source=c.TTFT_GATEWAY_ARRIVAL,
        server_ttft_seconds=0.05,
        e2e_seconds=1.9,
        queue_seconds=leg["queue"],
        prefill_seconds=leg["prefill"],
        completion_tokens=11.0,
        start_ns=T0 + int(leg["start_ms"]) * MS,
        end_ns=T0 + int(leg["start_ms"]) * MS + 10**9,
        arrival_ns=T0 + int(leg["arrival_ms"]) * MS,
        phase=phase,
    )
    values.update(fields)
    return JoinedRequest(**values)


class Joiner:
    def __init__(self, **join: Any) -> None:
        self.clock = Clock()
        self.counts: Counter[tuple[str, str]] = Counter()
        self.calls = CallJoiner(
            Join(**join), lambda phase, result, n: self.counts.update({(phase, result): n}), clock=self.clock
        )


def test_the_prefill_leg_waits_for_its_decode_leg_and_they_are_one_call_with_the_clients_ttft() -> None:
    j = Joiner()
    assert j.calls.requests([request(c.PHASE_PREFILL)]) == []
    assert j.calls.pending == 1
    j.clock.now += 120.0  # the decode leg streams for two minutes
    [call] = j.calls.requests([request(c.PHASE_DECODE)])
    assert call == request(
        c.PHASE_DECODE,
        ttft_seconds=pytest.approx(FROM_PREFILL),
        ttft_source=c.TTFT_COORDINATOR,
        call_arrival_ns=T0 + PREFILL_MS * MS,
        prefill_pod="prefill-0",
        prefill_queue_seconds=0.01,
        prefill_seconds_on_prefill_pod=0.38,
    )
    assert leg_ttft(call, call.ttft_seconds) == pytest.approx(LEG_TTFT)  # what the EPP predicted for that leg
    assert j.counts == {(c.PHASE_PREFILL, c.LEG_JOINED): 1, (c.PHASE_DECODE, c.LEG_JOINED): 1}
    assert j.calls.pending == 0


def test_a_decode_leg_that_comes_first_waits_a_join_window_for_its_legs_once_the_traffic_has_had_some() -> None:
    j = Joiner(window_seconds=5.0)
    alone = request(c.PHASE_DECODE, request_id="alone")
    assert j.calls.requests([alone]) == [alone]  # no coordinator seen: a decode-phase call passes at once
    j.calls.requests([request(c.PHASE_PREFILL, request_id="earlier")])
    assert j.calls.requests([request(c.PHASE_DECODE)]) == []
    j.clock.now += 1.0
    assert j.calls.requests([request(c.PHASE_PREFILL)]) == []  # it came: the call waits out its window
    j.clock.now += 4.0
    [call] = j.calls.expire()
    assert (call.phase, call.ttft_seconds, call.prefill_pod) == (
        c.PHASE_DECODE,
        pytest.approx(FROM_PREFILL),
        "prefill-0",
    )
    hit = request(c.PHASE_DECODE, request_id="hit")  # a conditional-decode hit: no legs, its own TTFT after a window
    assert j.calls.requests([hit]) == []
    j.clock.now += 5.0
    assert j.calls.expire() == [hit]


@pytest.mark.parametrize(("wait", "held"), [("always", True), ("never", False)])
def test_join_wait_for_legs_decides_without_the_traffic(wait: str, held: bool) -> None:
    """``always``: a decode-phase call waits before any leg came; ``never``: not even once legs came."""
    j = Joiner(window_seconds=5.0, wait_for_legs=wait)
    if not held:
        j.calls.requests([request(c.PHASE_PREFILL, request_id="other")])  # legs came: auto would wait
    first = request(c.PHASE_DECODE, request_id="first")
    assert j.calls.requests([first]) == ([] if held else [first])


def test_the_refused_probe_is_a_leg_the_calls_ttft_counts_from_and_is_never_published() -> None:
    j = Joiner(max_request_seconds=600.0)
    refused = request(
        c.PHASE_DECODE, outcome=c.OUTCOME_PROBE, pod=None, ttft_seconds=None, arrival_ns=T0, start_ns=T0, end_ns=T0
    )
    assert j.calls.requests([refused, request(c.PHASE_PREFILL)]) == []
    [call] = j.calls.requests([request(c.PHASE_DECODE)])
    assert (call.ttft_seconds, call.call_arrival_ns, call.outcome) == (
        pytest.approx(CLIENT_TTFT),
        T0,
        c.OUTCOME_JOINED,
    )
    assert j.counts == {(c.PHASE_DECODE, c.LEG_JOINED): 2, (c.PHASE_PREFILL, c.LEG_JOINED): 1}
    lone = dataclasses.replace(refused, request_id=None)  # no id: no call to count it in, and still no request
    j.calls.requests([dataclasses.replace(refused, request_id="alone")])
    assert j.calls.requests([lone]) == []
    j.clock.now += 600.0
    assert j.calls.expire() == []  # a probe whose call never came: neither a call nor a failure
    assert j.counts[(c.PHASE_DECODE, c.LEG_WITHOUT_CALL)] == 1


def test_a_leg_whose_call_never_ends_is_no_call_unless_it_failed() -> None:
    j = Joiner(max_request_seconds=600.0)
    j.calls.requests([request(c.PHASE_PREFILL, request_id="lost"), request(c.PHASE_ENCODE, request_id="lost")])
    failed = request(c.PHASE_PREFILL, request_id="broken", failure_reason=c.FAILURE_ERROR, pod=None)
    j.calls.requests([request(c.PHASE_ENCODE, request_id="broken", arrival_ns=T0), failed])
    j.clock.now += 599.0
    assert j.calls.expire() == []
    j.clock.now += 1.0
    assert j.calls.expire() == [dataclasses.replace(failed, call_arrival_ns=T0)]  # the client got the prefill's error
    assert j.counts == {
        (c.PHASE_PREFILL, c.LEG_WITHOUT_CALL): 1,
        (c.PHASE_ENCODE, c.LEG_WITHOUT_CALL): 1,
        (c.PHASE_PREFILL, c.LEG_JOINED): 1,
        (c.PHASE_ENCODE, c.LEG_JOINED): 1,
    }


def test_the_held_ids_are_bounded_the_oldest_leaving_first() -> None:
    j = Joiner(max_pending_traces=2)
    for rid in ("a", "b", "c"):
        j.calls.requests([request(c.PHASE_PREFILL, request_id=rid)])
    assert (j.calls.pending, j.counts) == (2, {(c.PHASE_PREFILL, c.LEG_WITHOUT_CALL): 1})
    [call] = j.calls.requests([request(c.PHASE_DECODE, request_id="b")])
    assert call.prefill_pod == "prefill-0"


def test_a_record_batch_keeps_its_other_rows_columnar_and_gives_the_same_calls_as_objects() -> None:
    other = request(None, request_id="x", span_id="other")
    legs = [request(c.PHASE_PREFILL), other, request(c.PHASE_DECODE)]
    by_objects = Joiner().calls.requests(list(legs))
    j = Joiner()
    batch = joined_batch.from_requests(legs)
    kept, calls = j.calls.records(batch)
    assert joined_batch.to_requests(kept) == [other]
    assert [other, *calls] == by_objects
    plain = joined_batch.from_requests([other])
    assert j.calls.records(plain)[0] is plain  # no leg, nothing held: the batch itself


# ---- the pipeline: one call in the series, on both joins ----------------------------------------------------------


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("traceparent", ["client", "none"])
def test_the_pipeline_counts_a_coordinator_call_once_with_the_clients_ttft(engine: str, traceparent: str) -> None:
    clock = Clock()
    registry = CollectorRegistry()
    pipeline = Pipeline(Settings.model_validate({"join": {"engine": engine}}), default_spec(), registry, clock=clock)
    if traceparent == "client":  # one trace, every leg's spans under the client's span
        batches = [probe(), leg_gateway(1, c.PHASE_PREFILL), [leg_server(1, c.PHASE_PREFILL)]]
        batches += [[leg_server(1, c.PHASE_DECODE)], leg_gateway(1, c.PHASE_DECODE)]
    else:  # a trace per EPP call, the model server's span under the EPP's
        batches = [probe(1), [*leg_gateway(2, c.PHASE_PREFILL, parent=0), leg_server(2, c.PHASE_PREFILL, parent=20)]]
        batches += [[*leg_gateway(3, c.PHASE_DECODE, parent=0), leg_server(3, c.PHASE_DECODE, parent=30)]]
    for spans in batches:
        assert pipeline.queue.offer(spans)
        pipeline.drain()
    clock.now += 20.0
    pipeline.drain()
    assert pipeline.shutdown()
    value = registry.get_sample_value
    assert sum_of(registry, c.REQUESTS.name + "_total") == 1
    assert sum_of(registry, c.TTFT_SECONDS.name + "_sum") == pytest.approx(CLIENT_TTFT)
    assert value(c.CALL_LEGS.name + "_total", {c.PHASE: "prefill", c.RESULT: "joined"}) == 1
    assert value(c.CALL_LEGS.name + "_total", {c.PHASE: "decode", c.RESULT: "joined"}) == 2  # the probe, the answer
    assert value(c.CALL_LEGS.name + "_total", {c.PHASE: "encode", c.RESULT: "without_call"}) == 0
    assert value(c.TRACES_JOINED.name + "_total", {c.OUTCOME: c.OUTCOME_PROBE}) == 1


def sum_of(registry: CollectorRegistry, sample: str) -> float:
    return sum(s.value for m in registry.collect() for s in m.samples if s.name == sample)
