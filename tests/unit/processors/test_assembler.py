"""The trace assembler: join rules, windows in arrival time, duplicates, caps, request-id join."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from sloscope import conventions as c
from sloscope.attributes import Mapping
from sloscope.config import Attributes, Join
from sloscope.processors.assembler import TraceAssembler
from sloscope.processors.trace_state import span_bytes
from sloscope.records import JoinedRequest
from sloscope.testing import gateway_attributes, span, vllm_attributes
from tests.support.engines import assembler_engine  # noqa: F401  (the fixture below)

pytestmark = pytest.mark.usefixtures("assembler_engine")  # every test on both engines


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    def __init__(self, **join: Any) -> None:
        self.clock = Clock()
        self.emitted: list[JoinedRequest] = []
        self.dropped: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.assembler = TraceAssembler(
            Join(**{"window_seconds": 5.0, **join}),
            Mapping(Attributes()),
            self.emitted.append,
            count_dropped=lambda reason, n: self.dropped.update({reason: n}),
            count_outcome=lambda outcome, n: self.outcomes.update({outcome: n}),
            clock=self.clock,
        )

    def feed(self, *spans: Any) -> None:
        self.assembler.consume(list(spans))

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.assembler.expire()


def gateway(trace: int, *, span_id: int = 1, **kw: Any) -> Any:
    return span(trace, span_id, "gateway.request", gateway_attributes(**kw), resource={"service.name": "epp"})


def vllm(trace: int, *, span_id: int = 2, parent: int = 1, pod: str = "vllm-0", **kw: Any) -> Any:
    return span(
        trace,
        span_id,
        "llm_request",
        vllm_attributes(**kw),
        parent=parent,
        resource={"service.name": "vllm", "k8s.pod.name": pod},
    )


def test_anchor_then_parent_joins_at_once() -> None:
    h = Harness()
    h.feed(vllm(1, ttft=0.12, e2e=0.62))
    assert h.emitted == []  # waits for its parent
    h.feed(gateway(1, slo_ttft_ms="200", slo_tpot_ms="50"))
    [request] = h.emitted
    assert request.outcome == c.OUTCOME_JOINED
    assert (request.slo_ttft_ms, request.slo_tpot_ms) == (200.0, 50.0)
    # both spans start at the same time: the user's TTFT is vLLM's own
    assert (request.ttft_seconds, request.ttft_source, request.e2e_seconds) == (0.12, "gateway_arrival", 0.62)
    assert (request.pod, request.target_model, request.completion_tokens) == ("vllm-0", "llama-3-8b", 11.0)
    assert h.assembler.pending == 0


T0 = 1_700_000_000_000_000_000


@pytest.mark.parametrize(
    ("vllm_starts_ms", "ttft", "source"),
    [(30, 0.03 + 0.12, c.TTFT_GATEWAY_ARRIVAL), (-5, 0.12, c.TTFT_MODEL_SERVER)],
    ids=["after-the-gateway", "clocks-disagree"],
)
def test_ttft_counts_from_the_gateways_arrival(vllm_starts_ms: int, ttft: float, source: str) -> None:
    """The SLO's TTFT is the user's: from the gateway span's start (the EPP received the request) to the first
    token, the EPP's scheduling included; vLLM's own TTFT is kept. When the model server's clock puts its start
    before the gateway's, the offset is unknowable and vLLM's own TTFT stands."""
    h = Harness()
    h.feed(
        span(1, 1, "gateway.request", gateway_attributes(), resource={"service.name": "epp"}, start_ns=T0),
        span(
            1,
            2,
            "llm_request",
            vllm_attributes(ttft=0.12, e2e=0.62),
            parent=1,
            start_ns=T0 + vllm_starts_ms * 1_000_000,
        ),
    )
    [request] = h.emitted
    assert (request.ttft_seconds, request.ttft_source) == (pytest.approx(ttft, abs=1e-12), source)
    assert (request.server_ttft_seconds, request.e2e_seconds, request.arrival_ns) == (0.12, 0.62, T0)


def test_parent_first_then_anchor_joins_at_once() -> None:
    h = Harness()
    h.feed(gateway(1, slo_ttft_ms="200"))
    h.feed(vllm(1))
    assert [r.outcome for r in h.emitted] == [c.OUTCOME_JOINED]


def test_anchor_without_gateway_is_emitted_when_the_window_passes_in_arrival_time() -> None:
    h = Harness()
    h.feed(vllm(1))
    h.advance(4.9)
    assert h.emitted == []
    h.advance(0.2)
    [request] = h.emitted
    assert request.outcome == c.OUTCOME_ANCHOR_ONLY
    assert request.slo_ttft_ms is None


def test_intermediate_span_missing_keeps_waiting_then_emits_what_it_has() -> None:
    h = Harness()
    h.feed(gateway(1, slo_ttft_ms="300"))
    h.feed(vllm(1, span_id=3, parent=2))  # parent 2 (a proxy span) never arrives
    assert h.emitted == []
    h.advance(5.0)
    [request] = h.emitted
    assert request.outcome == c.OUTCOME_JOINED
    assert request.slo_ttft_ms == 300.0


def test_root_anchor_without_request_id_join_is_emitted_at_once() -> None:
    h = Harness(by_request_id=False)
    h.feed(vllm(1, parent=0))
    assert [r.outcome for r in h.emitted] == [c.OUTCOME_ANCHOR_ONLY]


def test_duplicate_spans_count_once_before_and_after_emission() -> None:
    h = Harness()
    h.feed(vllm(1), vllm(1))
    h.feed(gateway(1), gateway(1))
    h.feed(vllm(1))
    assert len(h.emitted) == 1
    assert h.dropped == Counter({c.DROP_DUPLICATE: 3})


def test_late_companion_of_an_emitted_trace_is_dropped_as_late() -> None:
    h = Harness()
    h.feed(vllm(1), gateway(1))
    h.feed(span(1, 9, "gateway.request_orchestration", {"target_model": "x"}, parent=1))
    assert h.dropped == Counter({c.DROP_LATE: 1})
    assert len(h.emitted) == 1


def test_trace_without_anchor_expires_as_no_anchor() -> None:
    h = Harness(trace_ttl_seconds=30.0)
    h.feed(span(1, 1, "gateway.request", {}))  # no model, no SLO, no gen_ai: not an LLM call
    h.advance(29.0)
    assert h.outcomes[c.OUTCOME_NO_ANCHOR] == 0
    h.advance(1.0)
    assert h.outcomes[c.OUTCOME_NO_ANCHOR] == 1
    assert h.assembler.pending == 0


def test_a_gateway_span_sent_again_after_its_trace_was_forgotten_waits_its_own_failure_window() -> None:
    """The first send's failure-window entry went stale when its request joined, and the queue dropped it once
    4,097 windows waited there (processors/deadlines.py): kept, it would resolve the second send 6 s early."""
    h = Harness(failure_window_seconds=15.0, max_done_traces=2)
    h.feed(gateway(1, request_id="r-1"), vllm(1, request_id="r-1"))
    for trace in range(2, 4_099):  # joined at once, each: every window but the last is stale
        h.feed(gateway(trace, request_id=f"r-{trace}"), vllm(trace, request_id=f"r-{trace}"))
    assert h.outcomes[c.OUTCOME_JOINED] == 4_098
    h.advance(10.0)
    h.feed(gateway(1, request_id="r-1"))  # trace 1 and r-1 are forgotten: a new call, no model server answered
    h.advance(5.5)  # past the first send's window
    assert h.outcomes[c.OUTCOME_FAILED] == 0 and h.assembler.pending == 1
    h.advance(9.5)  # the second send's window is over
    [failed] = h.emitted[4_098:]
    assert (failed.outcome, failed.failure_reason) == (c.OUTCOME_FAILED, c.FAILURE_ABORTED)


@pytest.mark.parametrize(
    ("model_server", "epp", "probability", "failure"),
    [
        ("ot=th:c", "ot=th:8", 0.25, 0.5),  # the model server's own: what decided that its span reached sloscope
        ("", "ot=th:8", 0.5, 0.5),  # else the gateway's (a hop that propagated no trace state)
        ("ot=th:zz", "ot=th:0", 1.0, 1.0),  # a malformed threshold says nothing
        ("vendor=1", "", None, None),  # a ratio sampler that records nothing: unknown, not 1
    ],
)
def test_a_request_carries_the_probability_its_trace_was_kept_with(
    model_server: str, epp: str, probability: float | None, failure: float | None
) -> None:
    h = Harness(failure_window_seconds=15.0)
    served, refused = vllm(1), gateway(2, request_id="r-2")
    served.tracestate, refused.tracestate = model_server, epp
    with_gateway = gateway(1)
    with_gateway.tracestate = epp
    h.feed(served, with_gateway, refused)
    h.advance(15.5)  # the refused call reached no model server: a failure, read from its gateway span
    joined, failed = h.emitted
    assert (joined.outcome, failed.outcome) == (c.OUTCOME_JOINED, c.OUTCOME_FAILED)
    assert joined.sampling_probability == probability
    assert failed.sampling_probability == failure


def test_join_by_request_id_across_traces_when_the_gateway_comes_later() -> None:
    h = Harness()
    h.feed(vllm(2, parent=0, request_id="chatcmpl-abc"))  # vLLM in its own trace
    assert h.emitted == []
    h.feed(gateway(1, request_id="abc", slo_ttft_ms="250"))
    [request] = h.emitted
    assert request.outcome == c.OUTCOME_JOINED_BY_REQUEST_ID
    assert request.slo_ttft_ms == 250.0
    h.advance(60.0)
    assert h.outcomes[c.OUTCOME_NO_ANCHOR] == 0  # the lent gateway trace is not a miss


def test_join_by_request_id_when_the_gateway_came_first() -> None:
    h = Harness()
    h.feed(gateway(1, request_id="abc", slo_ttft_ms="250"))
    h.feed(vllm(2, parent=0, request_id="chatcmpl-abc"))
    assert [r.outcome for r in h.emitted] == [c.OUTCOME_JOINED_BY_REQUEST_ID]


def test_pending_cap_emits_evicted_anchors_and_drops_companion_only_traces() -> None:
    h = Harness(max_pending_traces=2)
    h.feed(vllm(1))  # oldest: has an anchor
    h.feed(gateway(2))  # companion only
    h.feed(gateway(3))  # evicts trace 1
    h.feed(gateway(4))  # evicts trace 2
    assert [(r.trace_id[-1], r.outcome) for r in h.emitted] == [("1", c.OUTCOME_EVICTED)]
    assert h.dropped == Counter({c.DROP_PENDING_CAP: 1})
    assert h.assembler.pending == 2


def test_pending_bytes_cap_evicts_the_oldest_traces_as_the_count_cap_does() -> None:
    spans = [vllm(1), gateway(2), gateway(3), gateway(4), vllm(5)]
    sizes = [span_bytes(s) for s in spans]
    h = Harness(max_pending_bytes=sum(sizes[:3]))  # room for the first three
    h.feed(*spans[:3])
    assert (h.assembler.pending, h.assembler.pending_bytes) == (3, sum(sizes[:3]))
    h.feed(spans[3])  # evicts trace 1: its anchor emitted with what it has
    h.feed(spans[4])  # evicts trace 2: its span dropped
    assert [(r.trace_id[-1], r.outcome) for r in h.emitted] == [("1", c.OUTCOME_EVICTED)]
    assert h.dropped == Counter({c.DROP_PENDING_CAP: 1})
    assert (h.assembler.pending, h.assembler.pending_bytes) == (3, sum(sizes[2:]))


def test_pending_bytes_return_to_zero_once_every_request_is_emitted() -> None:
    h = Harness()
    h.feed(gateway(1, slo_ttft_ms="250"), vllm(1), vllm(2), gateway(3), span(3, 9, "child", {}, parent=1))
    assert h.assembler.pending_bytes > 0
    h.advance(60)  # windows and time to live pass: every trace emitted or expired
    assert (h.assembler.pending, h.assembler.pending_bytes) == (0, 0)
    h.feed(vllm(4), gateway(5))
    h.assembler.flush()
    assert h.assembler.pending_bytes == 0


def test_a_span_larger_than_the_whole_bytes_cap_is_dropped_and_leaves_no_trace() -> None:
    big = span(1, 1, "gateway.request", {"x-prompt": "p" * 10_000}, resource={"service.name": "epp"})
    h = Harness(max_pending_bytes=5_000)
    h.feed(big)
    assert h.dropped == Counter({c.DROP_TRACE_TOO_LARGE: 1})
    assert (h.assembler.pending, h.assembler.pending_bytes) == (0, 0)


def test_span_bytes_counts_strings_and_attributes() -> None:
    bare = span(1, 1, "n", {})
    assert span_bytes(span(1, 1, "n", {"k": "v" * 100})) - span_bytes(bare) == 100 + 1 + 100
    assert span_bytes(span(1, 1, "n", {"k": ["ab", "cd"]})) - span_bytes(bare) == 100 + 1 + 2 * (100 + 2)
    assert span_bytes(span(1, 1, "n", {"k": 7})) - span_bytes(bare) == 100 + 1


def test_spans_beyond_the_per_trace_cap_are_dropped() -> None:
    h = Harness(max_spans_per_trace=3)
    h.feed(*(span(1, i, f"child-{i}", {}, parent=100) for i in range(1, 6)))
    assert h.dropped == Counter({c.DROP_TRACE_TOO_LARGE: 2})


def test_flush_emits_every_waiting_anchor() -> None:
    h = Harness()
    h.feed(vllm(1), vllm(2), gateway(3))
    h.assembler.flush()
    assert sorted(r.trace_id[-1] for r in h.emitted) == ["1", "2"]
    assert h.assembler.pending == 0


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        pytest.param({"http.request.header.x-prediction-based-scheduling": ["true"]}, "predicted", id="flag true"),
        pytest.param({"x-prediction-based-scheduling": "false"}, "default", id="plain header false"),
        pytest.param({"http.request.header.x-prediction-based-scheduling-off": [""]}, "default", id="-off present"),
        pytest.param({}, "unknown", id="neither header"),
    ],
)
def test_routing_label_from_headers(attributes: dict[str, Any], expected: str) -> None:
    h = Harness()
    h.feed(vllm(1), gateway(1, extra=attributes))
    assert h.emitted[0].routing == expected


def test_gateway_ttft_is_preferred_and_its_source_recorded() -> None:
    h = Harness()
    h.assembler = TraceAssembler(
        Join(),
        Mapping(Attributes(gateway_ttft_seconds=["gateway.ttft"])),
        h.emitted.append,
        count_dropped=lambda *_: None,
        count_outcome=lambda *_: None,
        clock=h.clock,
    )
    h.feed(vllm(1, ttft=0.1), gateway(1, extra={"gateway.ttft": 0.13}))
    assert (h.emitted[0].ttft_seconds, h.emitted[0].ttft_source) == (0.13, "gateway")


def test_the_sidecar_true_ttft_is_not_a_ttft() -> None:
    """llm_d.pd_proxy.true_ttft_ms stops when the decode request is sent (llm-d-router ebab6879,
    pkg/sidecar/proxy/connector_nixlv2.go:449-467): it is no time to a first token."""
    h = Harness()
    sidecar = span(1, 3, "llm_d.pd_proxy.request", {"llm_d.pd_proxy.true_ttft_ms": 180.0}, parent=1)
    h.feed(gateway(1), sidecar, vllm(1, parent=3, ttft=0.05))
    assert (h.emitted[0].ttft_seconds, h.emitted[0].ttft_source) == (0.05, c.TTFT_GATEWAY_ARRIVAL)


def test_two_model_server_spans_without_gateway_are_not_companions_of_each_other() -> None:
    h = Harness()
    h.feed(
        vllm(1, span_id=2, request_id="chatcmpl-a"), vllm(1, span_id=3, request_id="chatcmpl-b")
    )  # parent 1 never arrives
    h.advance(5.0)
    assert [r.outcome for r in h.emitted] == [c.OUTCOME_ANCHOR_ONLY, c.OUTCOME_ANCHOR_ONLY]


def test_a_late_anchor_reopens_its_trace_and_earlier_spans_still_count_as_duplicates() -> None:
    h = Harness()
    h.feed(vllm(1), gateway(1))
    h.feed(vllm(1, span_id=5, parent=0))  # a second model-server span, after the trace was emitted
    h.feed(gateway(1), vllm(1))  # an exporter retries the first request's spans
    assert h.dropped == Counter({c.DROP_DUPLICATE: 2})
    assert [r.span_id[-1] for r in h.emitted] == ["2"]
    h.advance(5.0)
    assert [(r.span_id[-1], r.outcome) for r in h.emitted] == [("2", c.OUTCOME_JOINED), ("5", c.OUTCOME_ANCHOR_ONLY)]


def test_an_anchor_still_waiting_when_its_trace_expires_keeps_its_companions() -> None:
    h = Harness(window_seconds=5.0, trace_ttl_seconds=6.0)
    h.feed(gateway(1, slo_ttft_ms="250"))
    h.advance(4.0)
    h.feed(vllm(1, span_id=3, parent=2))  # parent 2 never arrives; window would end at 9 s, the trace at 6 s
    h.advance(2.0)
    [request] = h.emitted
    assert (request.outcome, request.slo_ttft_ms) == (c.OUTCOME_JOINED, 250.0)
    assert h.outcomes[c.OUTCOME_NO_ANCHOR] == 0


def test_the_pod_comes_from_the_model_server_span_only() -> None:
    h = Harness()
    epp = span(1, 1, "gateway.request", gateway_attributes(), resource={"k8s.pod.name": "epp-0"})
    server = span(1, 2, "llm_request", vllm_attributes(), parent=1, resource={"host.name": "vllm-a"})
    h.feed(epp, server)
    assert h.emitted[0].pod == "vllm-a"


def test_a_prefill_server_span_above_the_decode_server_span_is_not_its_gateway() -> None:
    h = Harness()
    prefill = span(1, 2, "llm_request", vllm_attributes(request_id="chatcmpl-prefill"), parent=1)
    decode = span(1, 3, "llm_request", vllm_attributes(request_id="chatcmpl-decode"), parent=2)
    h.feed(gateway(1, request_id="req-1"), decode, prefill)
    assert [r.request_id for r in h.emitted] == ["req-1"]  # one gateway request is one LLM call


def test_an_anchor_whose_ancestors_never_arrive_still_joins_by_request_id_when_the_window_ends() -> None:
    h = Harness()
    h.feed(gateway(1, request_id="abc", slo_ttft_ms="250"))  # an EPP that started its own trace
    h.feed(vllm(2, span_id=3, parent=2, request_id="chatcmpl-abc"))  # under an Envoy span sloscope never sees
    assert h.emitted == []
    h.advance(5.0)
    [request] = h.emitted
    assert (request.outcome, request.slo_ttft_ms) == (c.OUTCOME_JOINED_BY_REQUEST_ID, 250.0)
