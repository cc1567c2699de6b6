"""The trace assembler on today's upstream shapes: agent traces, P/D, n > 1, failures, routing, headers.

Span trees follow llm-d-router at ebab687927f5331c1b39defcb579a07951bce56c (EPP
``pkg/epp/handlers/server.go:377-383,460``, ``pkg/epp/requestcontrol/director.go:242-267``,
``pkg/epp/scheduling/scheduler_profile.go:153-382``; sidecar ``pkg/sidecar/proxy/connector_nixlv2.go:87,296``,
``connector_p2p.go:126-186``) and vLLM 0.33.0 (``vllm/v1/engine/output_processor.py:941-1001``), as
``shared/fixtures/llm-d-router/spans.md`` and ``shared/fixtures/vllm/llm_request-span-0.33.0.md`` describe them.
"""

from __future__ import annotations

from typing import Any

import pytest

from sloscope import conventions as c
from sloscope.loading import default_spec
from sloscope.records import STATUS_ERROR, JoinedRequest, Span
from sloscope.slo.evaluate import evaluate
from sloscope.testing import RecordWriter, epp_spans, sidecar_spans, span, vllm_033_attributes
from sloscope.upstream import coordinator
from sloscope.upstream.envoy import Envoy, captured_headers
from sloscope.upstream.llmd_router import Epp
from sloscope.upstream.pd_sidecar import LOCAL_VLLM, Sidecar
from sloscope.upstream.sglang import SchedulerSlices, SglangServer, request_attributes, sglang_process
from sloscope.upstream.writer import Process
from tests.support.engines import assembler_engine  # noqa: F401  (the fixture below)
from tests.unit.processors.test_assembler import Harness

pytestmark = pytest.mark.usefixtures("assembler_engine")  # every test on both engines

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
EPP = {"service.name": "llm-d-epp"}
AGENT_ROOT = 999  # the agent's span: a parent no span of it ever reaches sloscope


def pod(name: str) -> dict[str, Any]:
    return {"service.name": "unknown_service:python", "k8s.pod.name": name}


def vllm033(
    trace: int,
    span_id: int,
    parent: int,
    *,
    pod_name: str,
    request_id: str,
    start_ms: int = 0,
    ttft: float = 0.1,
    e2e: float = 1.0,
    tokens: int = 11,
    status: tuple[int, str] = (0, ""),
) -> Span:
    """vLLM 0.33's llm_request: no gen_ai.response.model, no pod name unless the deployment sets it."""
    attributes = vllm_033_attributes(
        request_id=request_id,
        ttft=ttft,
        e2e=e2e,
        completion_tokens=tokens,
        prompt_tokens=100,
        queue=0.01,
        max_tokens=256 if tokens > 1 else 1,
    )
    return span(
        trace,
        span_id,
        "llm_request",
        attributes,
        parent=parent,
        resource=pod(pod_name),
        start_ns=T0 + start_ms * MS,
        end_ns=T0 + start_ms * MS + int(e2e * 1e9),
        status=status,
    )


def epp_call(
    trace: int,
    base: int,
    *,
    request_id: str,
    parent: int = AGENT_ROOT,
    start_ms: int = 0,
    **fields: Any,
) -> list[Span]:
    return epp_spans(trace, base, request_id=request_id, parent=parent, start_ns=T0 + start_ms * MS, **fields)


def envoy(trace: int, span_id: int, attributes: dict[str, Any], *, parent: int = AGENT_ROOT) -> Span:
    """The catalogue's Envoy span with ``attributes`` (captured headers), for a second from T0; ``parent`` 0: a root."""
    writer = RecordWriter(trace, span_id)
    Envoy(writer).ingress(parent or None, T0, T0 + 1_000_000_000, attributes)
    return writer.spans[0]


def ingress(trace: int, span_id: int, *, request_id: str, ttft_header: str, name: str = "x-llm-d-slo-ttft-ms") -> Span:
    """The catalogue's Envoy span beside gateway.request (both under the caller's span), with captured headers."""
    return envoy(trace, span_id, captured_headers(request_id=request_id, headers={name: ttft_header}))


def by_pod(requests: list[JoinedRequest]) -> dict[str | None, int]:
    out: dict[str | None, int] = {}
    for request in requests:
        out[request.pod] = out.get(request.pod, 0) + 1
    return out


def test_an_agent_trace_of_five_calls_gives_five_requests_each_with_its_own_spans() -> None:
    h = Harness()
    pods = ["vllm-a", "vllm-b", "vllm-c", "vllm-a", "vllm-b"]
    for call, pod_name in enumerate(pods):
        base = 10 * (call + 1)
        rid = f"r{call}"
        h.feed(
            *epp_call(1, base, request_id=rid, start_ms=1000 * call),
            ingress(1, base + 8, request_id=rid, ttft_header=str(100 * (call + 1))),
        )
        h.feed(
            vllm033(
                1, base + 9, base, pod_name=pod_name, request_id=f"chatcmpl-{rid}", start_ms=1000 * call + 5, ttft=0.25
            )
        )
    assert [(r.request_id, r.slo_ttft_ms, r.outcome) for r in h.emitted] == [
        (f"r{i}", 100.0 * (i + 1), c.OUTCOME_JOINED) for i in range(5)
    ]
    assert by_pod(h.emitted) == {"vllm-a": 2, "vllm-b": 2, "vllm-c": 1}
    assert [r.arrival_ns for r in h.emitted] == [T0 + 1000 * i * MS for i in range(5)]  # each call's gateway span
    assert {r.target_model for r in h.emitted} == {"Qwen/Qwen3-8B"}
    assert {r.routing for r in h.emitted} == {c.ROUTING_PREDICTED}
    assert not h.dropped


def test_the_epps_gen_ai_request_model_is_the_target_model_and_the_clients_comes_from_the_header() -> None:
    """llm-d-router writes ``request.TargetModel`` (after any rewrite) to ``gen_ai.request.model`` of its scheduling
    spans (ebab6879 ``pkg/epp/scheduling/scheduler_profile.go:327``); GIE's body-based router writes the body's model
    to ``X-Gateway-Model-Name`` (v1.5.0 ``pkg/bbr/plugins/bodyfieldtoheader/body_field_to_header.go:34``), which a
    gateway may capture on its span. No released EPP names the client's model anywhere else."""
    h = Harness()
    for trace, header in ((1, None), (2, "qwen")):
        spans = epp_call(trace, 10, request_id=f"r{trace}", model="qwen-lora-a")
        for s in spans:  # the orchestration span's target_model out: gen_ai.request.model alone names the model
            s.attributes.pop("target_model", None)
        if header is not None:
            captured = captured_headers(request_id=f"r{trace}", headers={"x-gateway-model-name": header})
            spans.append(envoy(trace, 8, captured))
        h.feed(*spans, vllm033(trace, 19, 10, pod_name="vllm-a", request_id=f"chatcmpl-r{trace}"))
    h.advance(5.0)
    assert [(r.requested_model, r.target_model, r.model) for r in h.emitted] == [
        (None, "qwen-lora-a", "qwen-lora-a"),
        ("qwen", "qwen-lora-a", "qwen-lora-a"),
    ]


def test_a_later_call_of_a_trace_still_joins_after_the_trace_expired() -> None:
    h = Harness(trace_ttl_seconds=30.0)
    h.feed(*epp_call(1, 10, request_id="a"), vllm033(1, 19, 10, pod_name="vllm-a", request_id="chatcmpl-a"))
    h.advance(60.0)
    h.feed(*epp_call(1, 20, request_id="b"), vllm033(1, 29, 20, pod_name="vllm-b", request_id="chatcmpl-b"))
    assert [(r.request_id, r.pod) for r in h.emitted] == [("a", "vllm-a")]
    h.advance(5.0)  # no SLO header came, and the agent's root never will: the window ends the wait
    assert [(r.request_id, r.pod) for r in h.emitted] == [("a", "vllm-a"), ("b", "vllm-b")]
    h.feed(span(1, 17, "filter_endpoints", {}, parent=12, resource=EPP))  # under call a, emitted long ago
    h.feed(*epp_call(1, 10, request_id="a"))  # an exporter retries call a's batch
    assert h.dropped == {c.DROP_LATE: 1, c.DROP_DUPLICATE: 7}  # the seven spans of the call again


def test_vllm_under_the_callers_span_joins_its_gateway_by_request_id() -> None:
    """With overwrite-in-order the caller's traceparent wins at the gateway (spans.md 1.2): vLLM's span is then
    a sibling of gateway.request, under the caller's span."""
    h = Harness()
    h.feed(*epp_call(1, 10, request_id="a"), *epp_call(1, 20, request_id="b", scorer="prefix-cache-scorer"))
    h.feed(vllm033(1, 29, AGENT_ROOT, pod_name="vllm-b", request_id="chatcmpl-b"))
    h.feed(vllm033(1, 19, AGENT_ROOT, pod_name="vllm-a", request_id="chatcmpl-a"))
    h.advance(5.0)
    assert [(r.request_id, r.routing, r.arrival_ns) for r in h.emitted] == [
        ("b", c.ROUTING_DEFAULT, T0),
        ("a", c.ROUTING_PREDICTED, T0),
    ]


CLIENT = 900  # the caller's own span, the trace root, exported by the client


def client_call(trace: int, call: str) -> tuple[Span, list[Span], Span]:
    """A call whose caller's traceparent won at the gateway: the client's span (the root), the EPP's spans and the
    vLLM span both under it. The EPP's Go batch processor sends its spans after vLLM's (measured 0.5-0.8 s)."""
    headers = {"http.request.header.x-request-id": [call], "http.request.header.x-llm-d-slo-ttft-ms": ["200"]}
    client = span(trace, CLIENT, "POST /v1/chat/completions", headers, parent=0, resource={"service.name": "client"})
    vllm = vllm033(trace, 19, CLIENT, pod_name="vllm-a", request_id=f"chatcmpl-{call}")
    return client, epp_call(trace, 10, request_id=call, parent=CLIENT), vllm


def test_a_gateway_span_sent_after_vllms_keeps_its_request_once_the_gateway_is_known_to_trace() -> None:
    """join.wait_for_gateway auto: before any gateway span, a trace whose chain to its root is complete is a request
    at once, and its EPP spans, a second late, are dropped; that late gateway span tells the gateway traces, so
    the next call waits for its own (up to the window) and keeps its routing."""
    h = Harness()
    client, epp, vllm = client_call(1, "a")
    h.feed(client, vllm)
    h.advance(1.0)
    h.feed(*epp)
    assert [(r.request_id, r.routing, r.slo_ttft_ms) for r in h.emitted] == [("a", c.ROUTING_UNKNOWN, 200.0)]
    assert h.dropped == {c.DROP_LATE: 1}  # gateway.request, under the emitted client span
    client, epp, vllm = client_call(2, "b")
    h.feed(client, vllm)
    h.advance(1.0)
    assert len(h.emitted) == 1  # b waits
    h.feed(*epp)
    assert [(r.request_id, r.routing, r.slo_ttft_ms, r.outcome) for r in h.emitted[1:]] == [
        ("b", c.ROUTING_PREDICTED, 200.0, c.OUTCOME_JOINED)
    ]
    assert h.dropped == {c.DROP_LATE: 1}  # none of b's
    h.advance(601.0)  # over ten minutes without a gateway span: the next call is a request at once again
    client, _, vllm = client_call(3, "c")
    h.feed(client, vllm)
    assert [r.request_id for r in h.emitted] == ["a", "b", "c"]


@pytest.mark.parametrize(("setting", "waits"), [("always", True), ("never", False)], ids=["always", "never"])
def test_waiting_for_the_gateway_can_be_set(setting: str, waits: bool) -> None:
    h = Harness(wait_for_gateway=setting)
    h.feed(*client_call(1, "a")[1])  # a gateway span: auto would wait from here on
    h.advance(20.0)  # its failure window passes: a failed request
    client, _, vllm = client_call(2, "b")
    h.feed(client, vllm)
    assert [r.request_id for r in h.emitted] == (["a"] if waits else ["a", "b"])
    h.advance(5.0)  # the window ends the wait with what the trace has: the client's span
    assert [(r.request_id, r.routing) for r in h.emitted[1:]] == [("b", c.ROUTING_UNKNOWN)]


def test_always_waiting_for_the_gateway_waits_before_any_gateway_span_came() -> None:
    """``always`` waits from the start (docs/configuration.md): the first call's vLLM span, before sloscope ever saw
    a gateway span, waits for its EPP spans too, and the request keeps its routing. (It waited only once some
    gateway span had come, so the first requests' waits depended on which came first: on the order join workers
    took the first batch in.)"""
    h = Harness(wait_for_gateway="always")
    client, epp, vllm = client_call(1, "a")
    h.feed(client, vllm)
    h.advance(1.0)
    assert h.emitted == []
    h.feed(*epp)
    assert [(r.request_id, r.routing, r.outcome) for r in h.emitted] == [("a", c.ROUTING_PREDICTED, c.OUTCOME_JOINED)]
    assert h.dropped == {}


def nixl_request(trace: int) -> list[Span]:
    """A P/D request through the sidecar's NIXL connector: decode is a child of prefill (connector_nixlv2.go:87,296).
    The EPP's seven spans (10 to 16), the sidecar's six (30 to 35: server, forward_request, prefill, its POST,
    decode, its POST), the prefill and the decode pod's llm_request."""
    epp = epp_call(trace, 10, request_id="pd", parent=0)
    sidecar, (prefill_post, decode_post) = sidecar_spans(
        trace, 30, parent=10, forward_ns=T0 + 11 * MS, prefill=(T0 + 12 * MS, T0 + 154 * MS),
        decode=(T0 + 160 * MS, T0 + 2162 * MS),
    )  # fmt: skip
    prefill_vllm = vllm033(
        trace, 40, prefill_post, pod_name="prefill-0", request_id="chatcmpl-pd", start_ms=13, ttft=0.14, e2e=0.14,
        tokens=1,
    )  # fmt: skip
    decode_vllm = vllm033(
        trace, 41, decode_post, pod_name="decode-0", request_id="chatcmpl-pd", start_ms=161, ttft=0.02, e2e=2.0,
        tokens=101,
    )  # fmt: skip
    return [*epp, *sidecar, prefill_vllm, decode_vllm]


def test_pd_nixl_is_one_request_on_the_decode_pod_with_the_clients_ttft() -> None:
    h = Harness()
    spans = nixl_request(1)
    h.feed(*spans[:-1])  # everything but the decode pod's span: the prefill stage alone is no request
    assert h.emitted == []
    h.feed(spans[-1])
    [request] = h.emitted
    assert (request.pod, request.prefill_pod, request.ttft_source) == ("decode-0", "prefill-0", c.TTFT_PD_GATEWAY)
    assert request.ttft_seconds == pytest.approx(0.161 + 0.02, abs=1e-12)  # gateway.request start -> first token
    assert (request.completion_tokens, request.e2e_seconds, request.prefill_queue_seconds) == (101, 2.0, 0.01)
    # without the EPP's spans (tracing off in the EPP), the sidecar's forward_request is where the wait starts
    h = Harness(window_seconds=2.0)
    h.feed(*nixl_request(2)[3:])  # from the sidecar's server span on
    h.advance(2.0)
    [request] = h.emitted
    assert (request.pod, request.ttft_source) == ("decode-0", c.TTFT_PD_SIDECAR)
    assert request.ttft_seconds == pytest.approx(0.150 + 0.02, abs=1e-12)  # forward_request start -> first token


def test_pd_p2p_concurrent_connector() -> None:
    """connector_p2p.go:126-186: the prefill HTTP POST hangs under forward_request, llm_d.pd_proxy.decode under
    llm_d.pd_proxy.prefill; true_ttft_ms is about 1 ms and no TTFT."""
    h = Harness()
    epp = epp_call(1, 10, request_id="pd", parent=0)
    sidecar, (prefill_post, decode_post) = sidecar_spans(
        1, 30, parent=10, connector="offloading", forward_ns=T0 + 10 * MS, prefill=(T0 + 11 * MS, T0 + 143 * MS),
        decode=(T0 + 11 * MS, T0 + 2013 * MS),
    )  # fmt: skip
    prefill_vllm = vllm033(
        1, 40, prefill_post, pod_name="prefill-0", request_id="chatcmpl-pd", start_ms=12, ttft=0.13, e2e=0.13, tokens=1
    )
    decode_vllm = vllm033(
        1, 41, decode_post, pod_name="decode-0", request_id="chatcmpl-pd", start_ms=12, ttft=0.3, e2e=2.0, tokens=101
    )
    h.feed(*epp, *sidecar, prefill_vllm)
    assert h.emitted == []
    h.feed(decode_vllm)
    [request] = h.emitted
    assert (request.pod, request.prefill_pod, request.ttft_source) == ("decode-0", "prefill-0", c.TTFT_PD_GATEWAY)
    assert request.ttft_seconds == pytest.approx(0.012 + 0.3, abs=1e-12)


def test_pd_sidecar_spans_exported_after_the_pods_are_waited_for() -> None:
    """The sidecar exports its spans itself, so the pods' llm_request spans may come first: they then reach
    their gateway by request id alone, and the request waits for the spans between (which give its stages)."""
    h = Harness(window_seconds=2.0)
    spans = nixl_request(1)
    epp, sidecar, pods = spans[:-8], spans[-8:-2], spans[-2:]
    h.feed(*epp, *pods)
    h.advance(1.9)
    assert h.emitted == []
    h.feed(*sidecar)
    [request] = h.emitted
    assert (request.pod, request.prefill_pod, request.ttft_source) == ("decode-0", "prefill-0", c.TTFT_PD_GATEWAY)
    assert request.ttft_seconds == pytest.approx(0.161 + 0.02, abs=1e-12)
    assert not h.dropped
    # when they never come, the window ends the wait: with the EPP's word that it is P/D, it is one P/D request
    h2 = Harness(window_seconds=2.0)
    h2.feed(*nixl_request(2)[:-8], prepare_disaggregation(2), *nixl_request(2)[-2:])
    h2.advance(2.0)
    [request] = h2.emitted
    assert (request.pod, request.prefill_pod, request.ttft_source) == ("decode-0", "prefill-0", c.TTFT_PD_GATEWAY)
    assert request.ttft_seconds == pytest.approx(0.161 + 0.02, abs=1e-12)


def test_a_pd_decode_stage_waits_for_its_prefill_stage_at_most_its_window() -> None:
    """Each pod exports its own llm_request span: the prefill pod's may come after the decode pod's."""
    h = Harness(window_seconds=2.0)
    spans = nixl_request(1)
    h.feed(*spans[:-2], spans[-1])  # all but the prefill pod's span
    h.advance(1.9)
    assert h.emitted == []
    h.feed(spans[-2])
    [request] = h.emitted
    assert (request.pod, request.prefill_pod, request.prefill_queue_seconds) == ("decode-0", "prefill-0", 0.01)
    assert not h.dropped
    h = Harness(window_seconds=2.0)
    spans = nixl_request(2)
    h.feed(*spans[:-2], spans[-1])
    h.advance(2.0)  # it never came: the decode stage's window ends the wait
    [request] = h.emitted
    assert (request.pod, request.prefill_pod, request.ttft_source) == ("decode-0", None, c.TTFT_PD_GATEWAY)
    assert request.ttft_seconds == pytest.approx(0.161 + 0.02, abs=1e-12)


def prepare_disaggregation(trace: int) -> Span:
    """The EPP's prepare_disaggregation under the call's orchestration (11), after its seven spans (10 to 16)."""
    writer = RecordWriter(trace, 17)
    Epp(writer, Process(EPP)).prepare_disaggregation(
        11, T0, T0 + 1000 * MS, request_id="pd", model="Qwen/Qwen3-8B", prefill_address="10.0.2.11"
    )
    return writer.spans[0]


def test_pd_with_sidecar_tracing_off_counts_from_the_gateway_span() -> None:
    """Sidecar tracing is off by default (pkg/sidecar/proxy/options.go:227): both llm_request spans hang under
    gateway.request with the same request id."""
    h = Harness()
    epp = epp_call(1, 10, request_id="pd", parent=0)
    prefill_vllm = vllm033(
        1, 40, 10, pod_name="prefill-0", request_id="chatcmpl-pd", start_ms=20, ttft=0.1, e2e=0.1, tokens=1
    )
    decode_vllm = vllm033(
        1, 41, 10, pod_name="decode-0", request_id="chatcmpl-pd", start_ms=125, ttft=0.05, e2e=1.5, tokens=51
    )
    h.feed(*epp, prepare_disaggregation(1), prefill_vllm)
    assert h.emitted == []  # the EPP chose P/D: wait for the decode stage
    h.feed(decode_vllm)
    [request] = h.emitted
    assert (request.pod, request.prefill_pod, request.ttft_source) == ("decode-0", "prefill-0", c.TTFT_PD_GATEWAY)
    assert request.ttft_seconds == pytest.approx(0.125 + 0.05, abs=1e-12)


def test_completions_with_n3_are_one_request() -> None:
    """n > 1: n engine requests with the parent's id and n = 1 each (vllm/v1/engine/parallel_sampling.py:75-96)."""
    h = Harness()
    choices = [
        vllm033(1, 40 + i, 10, pod_name="vllm-a", request_id="cmpl-abc-0", ttft=ttft, e2e=e2e, tokens=tokens)
        for i, (ttft, e2e, tokens) in enumerate([(0.2, 1.2, 11), (0.1, 2.1, 21), (0.3, 0.8, 6)])
    ]
    h.feed(*epp_call(1, 10, request_id="abc", parent=0))
    h.feed(*choices)
    [request] = h.emitted
    assert (request.choices, request.ttft_seconds, request.completion_tokens) == (3, 0.1, 38)
    assert request.tpot_seconds == pytest.approx(max(1.0 / 10, 2.0 / 20, 0.5 / 5))
    assert request.e2e_seconds == 2.1


def failed_call(status: tuple[int, str], *, scheduled: bool, parent: int = AGENT_ROOT) -> list[Span]:
    orchestration = status if not scheduled else (0, "")
    return [
        *epp_call(
            1,
            10,
            request_id="f",
            parent=parent,
            scorer="latency-scorer" if scheduled else None,
            status=status,
            orchestration_status=orchestration,
        ),
    ]


SHED = (2, "inference error: Internal - request cannot be admitted: no valid endpoint available to serve the request")


@pytest.mark.parametrize(
    ("status", "scheduled", "reason", "routing"),
    [
        pytest.param(SHED, False, c.FAILURE_SHED, c.ROUTING_NONE, id="latency-slo-admitter"),
        pytest.param(
            (2, "inference error: ResourceExhausted - request rejected by flow control"),
            False,
            c.FAILURE_SHED,
            c.ROUTING_NONE,
            id="saturation",
        ),
        pytest.param(
            (2, "inference error: ResourceExhausted - request timed out in queue: ttl"),
            False,
            c.FAILURE_TIMEOUT,
            c.ROUTING_NONE,
            id="queue timeout",
        ),
        pytest.param((2, "ModelServerError"), True, c.FAILURE_ERROR, c.ROUTING_PREDICTED, id="model server"),
        pytest.param((0, ""), True, c.FAILURE_ABORTED, c.ROUTING_PREDICTED, id="client went away"),
        pytest.param(
            (2, "inference error: BadRequest - model not found in request body"),
            False,
            c.FAILURE_INVALID,
            c.ROUTING_NONE,
            id="client error",
        ),
    ],
)
def test_a_gateway_request_no_model_server_answered_is_failed(
    status: tuple[int, str], scheduled: bool, reason: str, routing: str
) -> None:
    h = Harness(failure_window_seconds=15.0)
    h.feed(*failed_call(status, scheduled=scheduled), ingress(1, 18, request_id="f", ttft_header="200"))
    h.advance(14.9)
    assert h.emitted == []
    h.advance(0.2)
    [request] = h.emitted
    assert (request.failure_reason, request.routing, request.outcome) == (reason, routing, c.OUTCOME_FAILED)
    assert (request.slo_ttft_ms, request.target_model, request.pod, request.ttft_seconds) == (
        200.0,
        "Qwen/Qwen3-8B",
        None,
        None,
    )
    assert h.outcomes[c.OUTCOME_FAILED] == 1


PROBE_REFUSED = (STATUS_ERROR, coordinator.PROBE_REFUSED)


def test_the_coordinators_refused_conditional_decode_probe_is_no_call_and_the_call_goes_on() -> None:
    """The coordinator first sends the decode call with ``Prefer: if-available``; the llm-d EPP schedules it and, when
    the chosen decode pod lacks the prompt's KV cache, answers 412 (ebab6879 ``pkg/epp/requestcontrol/
    director.go:348-361``, the error's text ``pkg/common/error/error.go:72-74``), and the coordinator runs the call
    on (``pkg/coordinator/steps/conditional_decode.go:61-85``). The probe is neither a request nor a failure: it is
    emitted as soon as its own span and request id are in, as a leg of its call (outcome ``conditional_decode_probe``)
    that only the call joiner reads (processors/calls.py: the call's TTFT counts from it); the call it belongs to is
    counted when a model server answers it."""
    h = Harness(failure_window_seconds=15.0)
    probe = epp_call(1, 10, request_id="r", scorer="latency-scorer", status=PROBE_REFUSED)
    h.feed(*probe, ingress(1, 18, request_id="r", ttft_header="200"))
    rows = [(r.request_id, r.pod, r.failure_reason, r.outcome, r.phase) for r in h.emitted]
    assert rows == [("r", None, None, c.OUTCOME_PROBE, c.PHASE_DECODE)]
    h.advance(15.1)
    assert (len(h.emitted), h.outcomes[c.OUTCOME_PROBE], h.outcomes[c.OUTCOME_FAILED]) == (1, 1, 0)
    h.feed(*epp_call(1, 20, request_id="r"), vllm033(1, 29, 20, pod_name="vllm-a", request_id="chatcmpl-r"))
    h.advance(5.0)
    assert [(r.request_id, r.pod, r.failure_reason, r.outcome) for r in h.emitted[1:]] == [
        ("r", "vllm-a", None, c.OUTCOME_JOINED)
    ]
    # a gateway that captures the status instead: Envoy's 412 on its own span, known at the failure window
    h.feed(*epp_call(2, 10, request_id="s", scorer=None), span(2, 18, "ingress", {"http.status_code": 412}, parent=10))
    assert len(h.emitted) == 2
    h.advance(15.1)
    assert ([r.outcome for r in h.emitted[2:]], h.outcomes[c.OUTCOME_PROBE]) == ([c.OUTCOME_PROBE], 2)
    assert not h.dropped


def test_an_envoy_429_is_shed() -> None:
    h = Harness(failure_window_seconds=1.0)
    shed = envoy(1, 18, captured_headers(request_id="f", headers={}, status_code=429), parent=0)
    h.feed(*failed_call((2, "inference error: Unknown - x"), scheduled=False, parent=0))
    h.feed(span(1, 10, "gateway.request", {}, parent=18, resource=EPP))  # a retry of the same span: duplicate
    h.feed(shed)
    h.advance(1.0)
    assert [r.failure_reason for r in h.emitted] == [c.FAILURE_SHED]


def test_a_gateway_trace_that_is_no_llm_call_is_ignored() -> None:
    h = Harness(failure_window_seconds=1.0, trace_ttl_seconds=5.0)
    h.feed(span(1, 1, "gateway.request", {}, resource=EPP, status=(2, "boom")))
    h.advance(5.0)
    assert h.emitted == []
    assert h.outcomes[c.OUTCOME_NO_ANCHOR] == 1


def test_a_model_server_span_with_error_status_is_a_failed_request_on_its_pod() -> None:
    h = Harness()
    h.feed(
        *epp_call(1, 10, request_id="e", parent=0),
        vllm033(1, 40, 10, pod_name="vllm-a", request_id="chatcmpl-e", status=(2, "engine dead")),
    )
    [request] = h.emitted
    assert (request.failure_reason, request.pod, request.outcome) == (c.FAILURE_ERROR, "vllm-a", c.OUTCOME_JOINED)


SPEC = default_spec()  # interactive: x-slo-ttft-ms <= 1000


def test_a_failed_request_misses_every_slo_it_carried_and_an_invalid_one_none() -> None:
    failed = JoinedRequest(
        trace_id="a" * 32,
        span_id="b" * 16,
        outcome=c.OUTCOME_FAILED,
        slo_ttft_ms=200.0,
        slo_tpot_ms=50.0,
        failure_reason=c.FAILURE_SHED,
    )
    evaluation = evaluate(failed, SPEC)
    assert [(v.eligible, v.met, v.target) for v in (evaluation.ttft, evaluation.tpot)] == [
        (True, False, 0.2),
        (True, False, 0.05),
    ]
    assert (evaluation.goodput.eligible, evaluation.goodput.met, evaluation.slo_class) == (True, False, "interactive")
    invalid = JoinedRequest(
        trace_id="a" * 32,
        span_id="b" * 16,
        outcome=c.OUTCOME_FAILED,
        slo_ttft_ms=200.0,
        failure_reason=c.FAILURE_INVALID,
    )
    evaluation = evaluate(invalid, SPEC)
    assert not (evaluation.ttft.eligible or evaluation.tpot.eligible or evaluation.goodput.eligible)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        pytest.param({"http.request.header.x-llm-d-slo-ttft-ms": ["150"]}, 150.0, id="llm-d array"),
        pytest.param({"x-llm-d-slo-ttft-ms": "160"}, 160.0, id="llm-d plain"),
        pytest.param({"http.request.header.x-slo-ttft-ms": ["170"]}, 170.0, id="late-2025 array"),
        pytest.param({"x-slo-ttft-ms": "180"}, 180.0, id="late-2025 plain"),
        pytest.param(
            {"http.request.header.x-slo-ttft-ms": ["170"], "x-llm-d-slo-ttft-ms": "160"}, 160.0, id="both: llm-d wins"
        ),
    ],
)
def test_slo_headers_of_both_generations(attributes: dict[str, Any], expected: float) -> None:
    h = Harness()
    headers = envoy(1, 18, {**captured_headers(request_id="h", headers={}), **attributes})  # in the form of the case
    h.feed(headers, *epp_call(1, 10, request_id="h"), vllm033(1, 40, 10, pod_name="vllm-a", request_id="chatcmpl-h"))
    assert h.emitted[0].slo_ttft_ms == expected


def test_an_sglang_request_has_no_queue_time() -> None:
    """SGLang 0.5.23: the root " Req <rid8>" carries gen_ai.* at finish and never time_in_queue
    (srt/observability/req_time_stats.py:535-562)."""
    h = Harness()
    writer = RecordWriter(1, 40)  # the root, the tokenizer's thread span and its two, the scheduler's and its slices
    server = SglangServer(writer, writer, sglang_process("sglang-0"))
    rid = "1a2b3c4d" * 4
    attributes = request_attributes(
        rid=rid, ttft=0.2, e2e=1.2, prefill=0.19, decode=1.0, inference=1.19, prompt_tokens=10, completion_tokens=11,
        cached_tokens=0, max_tokens=256, top_p=1.0, temperature=0.7, top_k=-1, model="qwen",
    )  # fmt: skip
    root = server.request(10, T0, T0 + 1000 * MS, rid=rid, attributes=attributes)
    dispatch = server.tokenizer_thread(root, T0, T0 + MS, T0 + 2 * MS, host_id="3f2a9c1e5b7d4a60", pid=87)
    at = [T0 + ms * MS for ms in (2, 3, 10, 200, 201, 1000)]
    slices = SchedulerSlices(*at, loops=[(at[4], at[5])])  # prefill_waiting from 3 to 10 ms: no queue time
    server.scheduler_thread(root, dispatch, slices, host_id="3f2a9c1e5b7d4a60", pid=143)
    h.feed(*epp_call(1, 10, request_id="s", parent=0), *writer.spans)
    [request] = h.emitted
    assert (request.queue_seconds, request.prefill_seconds, request.target_model, request.pod) == (
        None,
        0.19,
        "qwen",
        "sglang-0",
    )


def test_spans_that_carry_nothing_make_way_for_the_next_call() -> None:
    h = Harness(max_spans_per_trace=8)
    h.feed(*(span(1, 100 + i, "tool_call", {}, parent=AGENT_ROOT) for i in range(8)))  # an agent's own spans
    h.feed(*epp_call(1, 10, request_id="a"), vllm033(1, 19, 10, pod_name="vllm-a", request_id="chatcmpl-a"))
    h.advance(5.0)
    assert [r.request_id for r in h.emitted] == ["a"]
    assert h.dropped == {c.DROP_TRACE_TOO_LARGE: 8}  # every tool span: the call's seven EPP spans and vLLM's need 8


def test_a_long_pd_decode_is_waited_for_and_counted_once() -> None:
    h = Harness(window_seconds=5.0, failure_window_seconds=15.0)
    spans = nixl_request(1)
    gateway, decode_vllm = spans[0], spans[-1]
    h.feed(*spans[1:-1])  # the EPP's inner spans, the sidecar's and the prefill stage; the decode streams on
    h.advance(120.0)
    assert h.emitted == []
    h.feed(decode_vllm)
    h.feed(gateway)
    [request] = h.emitted
    assert (request.pod, request.failure_reason, request.outcome) == ("decode-0", None, c.OUTCOME_JOINED)
    h.advance(60.0)
    assert len(h.emitted) == 1


def test_a_prefill_stage_whose_decode_never_comes_is_a_failed_request_once_the_gateway_is_over() -> None:
    h = Harness(window_seconds=5.0, failure_window_seconds=15.0)
    spans = nixl_request(1)
    h.feed(*spans[:-1])
    h.advance(15.0)
    [request] = h.emitted
    assert (request.failure_reason, request.prefill_pod, request.pod) == (c.FAILURE_ABORTED, None, None)


def test_an_epp_trace_apart_from_envoy_and_vllm_is_one_request() -> None:
    """Envoy forwards its own traceparent to vLLM while the EPP, seeing none, starts a trace of its own: the
    two meet by the x-request-id the EPP read and forwarded (pkg/epp/handlers/server.go:442-449)."""
    h = Harness(failure_window_seconds=2.0)
    ingress_x1 = envoy(1, 1, captured_headers(request_id="x1", headers={"x-llm-d-slo-ttft-ms": "300"}), parent=0)
    h.feed(*epp_call(2, 10, request_id="x1", parent=0))  # the EPP's trace first
    h.feed(ingress_x1, vllm033(1, 3, 1, pod_name="vllm-a", request_id="chatcmpl-x1"))
    [request] = h.emitted
    assert (request.outcome, request.routing, request.slo_ttft_ms) == (
        c.OUTCOME_JOINED_BY_REQUEST_ID,
        c.ROUTING_PREDICTED,
        300.0,
    )
    h.feed(*epp_call(4, 10, request_id="x2", parent=0))  # and once with the EPP's trace last
    h.feed(
        vllm033(3, 3, 1, pod_name="vllm-a", request_id="chatcmpl-x2"),
        envoy(3, 1, captured_headers(request_id="x2", headers={}), parent=0),
    )
    h.advance(2.0)
    assert [r.outcome for r in h.emitted] == [c.OUTCOME_JOINED_BY_REQUEST_ID, c.OUTCOME_JOINED_BY_REQUEST_ID]
    assert h.outcomes[c.OUTCOME_FAILED] == 0


def test_a_chunked_decode_counts_every_chunk_of_one_request() -> None:
    """--decode-chunk-size > 0: chunked_decode under the decode leg, one HTTP POST and vLLM request per chunk
    (pkg/sidecar/proxy/decode.go:63-98)."""
    h = Harness()
    spans = nixl_request(1)
    writer = RecordWriter(1, 36)  # chunked_decode under the decode leg, and the second chunk's POST to the pod's vLLM
    sidecar = Sidecar(writer)
    chunks = sidecar.chunked_decode(34, T0 + 160 * MS, T0 + 1160 * MS, chunk_size=101, chunks=2, total_tokens=151)
    sidecar.post(chunks, T0 + 2200 * MS, T0 + 3201 * MS, target=LOCAL_VLLM, path="/v1/chat/completions")
    [chunked, second_post] = writer.spans
    second = vllm033(
        1, 42, 37, pod_name="decode-0", request_id="chatcmpl-pd", start_ms=2200, ttft=0.01, e2e=1.0, tokens=50
    )
    h.feed(*spans[:-1], chunked, second_post, second, spans[-1])
    [request] = h.emitted
    assert (request.pod, request.prefill_pod, request.completion_tokens) == ("decode-0", "prefill-0", 151)
    assert request.ttft_seconds == pytest.approx(0.161 + 0.02, abs=1e-12)  # the first chunk's first token
    assert request.e2e_seconds == pytest.approx(2.2 + 1.0 - 0.161, abs=1e-9)


def test_a_request_waits_for_the_span_with_its_slo_headers() -> None:
    """The EPP's gateway.request ends before Envoy's span and the client's (they hold the headers): a request
    whose headers have not come waits for its chain to the root, or for the join window."""
    h = Harness()
    client = span(1, 5, "POST", {"http.request.header.x-llm-d-slo-ttft-ms": ["250"]}, parent=0)
    h.feed(*epp_call(1, 10, request_id="w", parent=5), vllm033(1, 19, 10, pod_name="vllm-a", request_id="chatcmpl-w"))
    assert h.emitted == []
    h.feed(client)
    assert [(r.slo_ttft_ms, r.outcome) for r in h.emitted] == [(250.0, c.OUTCOME_JOINED)]


def test_a_passthrough_request_is_no_llm_call() -> None:
    """The EPP schedules a POST no parser claims (/tokenize) with a request id and no model."""
    h = Harness(failure_window_seconds=1.0, trace_ttl_seconds=5.0)
    h.feed(*epp_call(1, 10, request_id="t", parent=0, model=""))
    h.advance(5.0)
    assert (h.emitted, h.outcomes[c.OUTCOME_NO_ANCHOR]) == ([], 1)


# ---- engine requests that are parts of one call ---------------------------------------------------------------------


def test_a_responses_api_calls_turns_are_one_request_in_turn_order_not_choices() -> None:
    """vLLM's Responses API runs a call whose model uses built-in tools as one engine request per turn, ids
    ``<id>_<n>`` one after another (``_generate_with_builtin_tools``, vllm/entrypoints/openai/responses/serving.py,
    0.33 and 0.34). The client's first token is the first turn's; it waits for every turn and the tools between."""
    h = Harness()
    turns = [
        vllm033(1, 20 + n, 10, pod_name="vllm-a", request_id=f"resp_abc_{n}", start_ms=5 + 1200 * n, ttft=0.1)
        for n in range(3)
    ]
    h.feed(*epp_call(1, 10, request_id="r", parent=0), turns[2], turns[0], turns[1])
    [request] = h.emitted
    assert (request.choices, request.completion_tokens, request.ttft_source) == (1, 33.0, c.TTFT_GATEWAY_ARRIVAL)
    assert request.ttft_seconds == pytest.approx(0.005 + 0.1)  # from the gateway span's start
    assert request.e2e_seconds == pytest.approx((2405 + 1000 - 5) / 1000)
    assert (request.start_ns, request.end_ns, request.span_id) == (T0 + 5 * MS, T0 + 3405 * MS, f"{20:016x}")
    # ids that are no turns of one call (two calls' ids, or a turn twice) stay choices
    h.feed(
        *epp_call(2, 10, request_id="s", parent=0),
        vllm033(2, 20, 10, pod_name="vllm-a", request_id="resp_abc_0", start_ms=5),
        vllm033(2, 21, 10, pod_name="vllm-a", request_id="resp_abd_1", start_ms=5),
    )
    assert h.emitted[1].choices == 2


def test_the_sidecars_encoder_requests_are_parts_of_the_call_and_alone_are_a_leg() -> None:
    """llm-d's routing sidecar sends each multimodal item to an encoder pod as ``<id>-enc-<n>`` before the call's own
    request (ebab6879 ``pkg/sidecar/proxy/connector_ec_common.go:212``): neither a choice nor the call's first token.
    Without a traceparent (the sidecar's tracing off) an encoder request is a trace of its own: a leg, no call."""
    h = Harness()
    encoders = [
        vllm033(1, 20 + n, 10, pod_name="encoder-0", request_id=f"chatcmpl-r-enc-{n}", ttft=0.02, e2e=0.03, tokens=1)
        for n in range(2)
    ]
    answer = vllm033(1, 29, 10, pod_name="vllm-a", request_id="chatcmpl-r", start_ms=40, ttft=0.1)
    h.feed(*epp_call(1, 10, request_id="r", parent=0), *encoders, answer)
    [request] = h.emitted
    assert (request.pod, request.choices, request.completion_tokens, request.phase) == ("vllm-a", 1, 11.0, None)
    assert request.ttft_seconds == pytest.approx(0.040 + 0.1)
    h.feed(vllm033(2, 20, 0, pod_name="encoder-0", request_id="chatcmpl-q-enc-0", tokens=1))
    h.advance(5.0)
    assert [(r.phase, r.pod, r.outcome) for r in h.emitted[1:]] == [
        (c.PHASE_ENCODE, "encoder-0", c.OUTCOME_ENCODER_PART)
    ]
    assert (h.outcomes[c.OUTCOME_ENCODER_PART], h.outcomes[c.OUTCOME_ANCHOR_ONLY]) == (1, 0)
