"""The llm-d demo's span trees: what llm-d-router ebab6879 (EPP, routing sidecar), Envoy and vLLM 0.33 export for
one agent call, built from hand-made call records and captured in memory (fixtures/llm-d-router/spans.md)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from sloscope.demo.agents import Call
from sloscope.demo.calls import (
    MODEL_SERVER_ERROR,
    REFUSED_MESSAGE,
    SHED_MESSAGE,
    TIMEOUT_MESSAGE,
    CallRecord,
    Scheduling,
)
from sloscope.demo.llmd_spans import COMMIT
from sloscope.demo.records import ns
from tests.support.demo_calls import (
    RID,
    ROOT_SPAN_ID,
    T0,
    TRACE_ID,
    Captured,
    choices,
    decision,
    disaggregated,
    request,
    session,
    single,
)

Tree = tuple[str, str, tuple[Any, ...]]


def tree(spans: list[ReadableSpan]) -> tuple[Tree, ...]:
    """(name, kind, children) from the agent's root down, siblings by start time then name."""
    children: dict[int | None, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        children[span.parent.span_id if span.parent else None].append(span)

    def node(span: ReadableSpan) -> Tree:
        assert span.context is not None
        return span.name, span.kind.name, level(span.context.span_id)

    def level(parent: int | None) -> tuple[Tree, ...]:
        return tuple(node(s) for s in sorted(children[parent], key=lambda s: (s.start_time, s.name)))

    assert set(children) - {s.context.span_id for s in spans if s.context} == {ROOT_SPAN_ID}, "one root: the agent"
    return level(ROOT_SPAN_ID)


def leaf(name: str, kind: str = "INTERNAL") -> Tree:
    return name, kind, ()


def profile_run(*scorers: str) -> Tree:
    scoring = ("llm_d.epp.scoring", "INTERNAL", tuple(leaf(f"llm_d.epp.scorer.{s}") for s in scorers))
    return "run_scheduler_profile", "INTERNAL", (leaf("filter_endpoints"), scoring, leaf("pick_endpoints"))


LOAD_SCORERS = ("queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer")


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"{len(found)} spans {name}"
    return found[0]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, tuple | list) else v for k, v in (span.attributes or {}).items()}


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


def test_a_prediction_routed_chat_call() -> None:
    record = single(Call(request(), "chat"))
    spans = Captured().spans(record)
    assert tree(spans) == (
        (
            "gateway.request",
            "SERVER",
            (
                ("gateway.request_orchestration", "SERVER", (profile_run("latency-scorer"),)),
                leaf("llm_request", "SERVER"),
            ),
        ),
        leaf("ingress", "SERVER"),
    )
    assert {s.context.trace_id for s in spans if s.context} == {TRACE_ID}  # the agent's session trace
    gateway, ingress, llm = one(spans, "gateway.request"), one(spans, "ingress"), one(spans, "llm_request")
    assert parent_id(gateway) == parent_id(ingress) == ROOT_SPAN_ID  # siblings under the agent's invoke_agent span
    assert parent_id(llm) == span_id(gateway)  # through the traceparent the EPP injects
    # the EPP's spans
    assert gateway.attributes == {} and gateway.status.status_code is StatusCode.UNSET
    assert gateway.resource.attributes == {"service.name": "llm-d-epp", "service.version": "main"}
    assert gateway.resource.schema_url == "https://opentelemetry.io/schemas/1.37.0"
    assert gateway.instrumentation_scope is not None
    assert gateway.instrumentation_scope.name == "llm-d-router/pkg/epp/handlers"
    assert gateway.instrumentation_scope.attributes == {"commit-sha": COMMIT}
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert attributes(one(spans, "gateway.request_orchestration")) == {"target_model": model, "request_prio": 0}
    run = one(spans, "run_scheduler_profile")
    assert run.instrumentation_scope is not None and run.instrumentation_scope.name == "llm-d-router/pkg/epp/scheduling"
    assert attributes(run) == {"llm_d.epp.scheduling.profile.name": "predicted-latency"}
    ids = {"gen_ai.request.model": model, "gen_ai.request.id": RID}  # the raw x-request-id
    assert attributes(one(spans, "filter_endpoints")) == {
        "llm_d.epp.filter.candidate_endpoints": 3, **ids, "llm_d.epp.filter.filtered_endpoints": 3,
    }  # fmt: skip
    assert attributes(one(spans, "llm_d.epp.scoring")) == {
        "llm_d.epp.scorer.count": 1, "llm_d.epp.scoring.candidate_endpoints": 3, **ids,
    }  # fmt: skip
    assert attributes(one(spans, "llm_d.epp.scorer.latency-scorer")) == {
        "llm_d.epp.scorer.type": "latency-scorer",
        "llm_d.epp.scorer.name": "latency-scorer",
        "llm_d.epp.scorer.weight": 1.0,
        "llm_d.epp.scorer.candidate_endpoints": 3,
        "llm_d.epp.scorer.score.max": 1.0,
        "llm_d.epp.scorer.score.avg": 0.5,
        "llm_d.epp.scorer.endpoints_scored": 3,
    }
    assert attributes(one(spans, "pick_endpoints")) == {
        "llm_d.epp.picker.candidate_endpoints": 3,
        "llm_d.epp.picker.top_endpoints": ("demo/vllm-1-rank-0", "demo/vllm-2-rank-0", "demo/vllm-0-rank-0"),
        "llm_d.epp.picker.top_scores": (1.0, 0.5, 0.0),
        **ids,
    }
    # Envoy's span carries the headers the EPP's spans do not
    assert attributes(ingress) == {
        "http.request.method": "POST",
        "url.path": "/v1/chat/completions",
        "http.request.header.x-request-id": (RID,),
        "http.request.header.x-llm-d-slo-ttft-ms": ("500",),
        "http.request.header.x-llm-d-slo-tpot-ms": ("50",),
        "http.response.status_code": 200,
    }
    assert ingress.resource.attributes == {"service.name": "envoy-gateway"}
    # vLLM 0.33: no gen_ai.response.model, the chat id, the pod on the resource
    done = record.completions[0]
    assert attributes(llm) == {
        "gen_ai.latency.time_to_first_token": done.ttft,
        "gen_ai.latency.e2e": done.e2e,
        "gen_ai.latency.time_in_queue": done.queue_time,
        "gen_ai.usage.prompt_tokens": 600,
        "gen_ai.usage.completion_tokens": 100,
        "gen_ai.latency.time_in_model_prefill": done.prefill_time,
        "gen_ai.latency.time_in_model_decode": done.decode_time,
        "gen_ai.latency.time_in_model_inference": done.finished - done.scheduled,
        "gen_ai.request.id": f"chatcmpl-{RID}",
        "gen_ai.request.top_p": 0.95,
        "gen_ai.request.max_tokens": 100,
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.n": 1,
    }
    assert llm.instrumentation_scope is not None and llm.instrumentation_scope.name == "vllm.tracing.otel"
    assert llm.resource.attributes["k8s.pod.name"] == "vllm-1"
    assert llm.resource.attributes["vllm.instrumenting_module_name"] == "vllm.llm_engine"
    assert (llm.start_time, llm.end_time) == (ns(done.arrived), ns(done.finished))
    assert (gateway.start_time, gateway.end_time) == (ns(T0), ns(record.end))


def test_a_default_profile_completions_call_with_the_old_headers() -> None:
    call = Call(request(), "completions")
    record = replace(single(call, routing="default"), session=session(call, old_headers=True))
    spans = Captured().spans(record)
    orchestration = tree(spans)[0][2][0]
    assert orchestration == ("gateway.request_orchestration", "SERVER", (profile_run(*LOAD_SCORERS),))
    assert attributes(one(spans, "run_scheduler_profile")) == {"llm_d.epp.scheduling.profile.name": "default"}
    assert one(spans, "llm_request").attributes["gen_ai.request.id"] == f"cmpl-{RID}-0"  # type: ignore[index]
    queue = attributes(one(spans, "llm_d.epp.scorer.queue-scorer"))
    assert (queue["llm_d.epp.scorer.weight"], queue["llm_d.epp.scorer.score.max"]) == (2.0, 1.0)  # vllm-1 waits 0
    assert queue["llm_d.epp.scorer.score.avg"] == pytest.approx((0 + 1 + 0.5) / 3)
    ingress = attributes(one(spans, "ingress"))
    assert ingress["url.path"] == "/v1/completions"
    assert (ingress["http.request.header.x-slo-ttft-ms"], ingress["http.request.header.x-slo-tpot-ms"]) == (
        ("500",),
        ("50",),
    )
    assert not any("x-llm-d-slo" in key or "prediction-based" in key for key in ingress)


EPP_DISAGGREGATED = (
    leaf("pick_disagg_profile"),
    profile_run("latency-scorer"),
    leaf("pick_disagg_profile"),
    profile_run("latency-scorer"),
    leaf("pick_disagg_profile"),
    leaf("prepare_disaggregation"),
)


def test_p_d_through_the_nixl_sidecar() -> None:
    record = disaggregated("nixl")
    spans = Captured().spans(record)
    post = ("HTTP POST", "CLIENT", (leaf("llm_request", "SERVER"),))
    decode = ("decode", "INTERNAL", (post,))
    prefill = ("prefill", "INTERNAL", (post, decode))  # decode is the prefill span's child (ctx rebinding)
    sidecar = ("llm_d.pd_proxy.POST /v1/chat/completions", "SERVER", (("forward_request", "SERVER", (prefill,)),))
    gateway = ("gateway.request_orchestration", "SERVER", EPP_DISAGGREGATED)
    assert tree(spans) == (("gateway.request", "SERVER", (gateway, sidecar)), leaf("ingress", "SERVER"))
    picks = sorted((s for s in spans if s.name == "pick_disagg_profile"), key=lambda s: s.start_time)
    assert [s.attributes["llm_d.epp.profile_handler.decision"] for s in picks] == [  # type: ignore[index]
        "run_decode", "run_prefill", "complete_prefill-decode",
    ]  # fmt: skip
    runs = sorted((s for s in spans if s.name == "run_scheduler_profile"), key=lambda s: s.start_time)
    assert [s.attributes["llm_d.epp.scheduling.profile.name"] for s in runs] == ["decode", "prefill"]  # type: ignore[index]
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert attributes(one(spans, "prepare_disaggregation")) == {
        "gen_ai.request.model": model,
        "gen_ai.request.id": RID,
        "mm.modality": "none",
        "mm.hash_count": 0,
        "llm_d.epp.pd.disaggregation_used": True,
        "llm_d.epp.pd.prefill_pod_address": "10.0.0.12",
        "llm_d.epp.pd.prefill_pod_port": "8000",
        "llm_d.epp.encode.disaggregation_used": False,
        "llm_d.epp.encode.reason": "no_encode_profile_result",
    }
    forward = one(spans, "forward_request")
    assert forward.resource.attributes == {"service.name": "llm-d-disagg-sidecar", "service.version": ""}
    assert attributes(forward) == {
        "llm_d.pd_proxy.connector": "nixlv2",
        "llm_d.pd_proxy.kv_connector": "nixlv2",
        "llm_d.pd_proxy.ec_connector": "",
        "llm_d.pd_proxy.request_path": "/v1/chat/completions",
        "llm_d.openai.api": "chat_completions",
        "llm_d.pd_proxy.disaggregation_used": True,
        "llm_d.pd_proxy.prefill_target": "10.0.0.12:8000",
        "llm_d.pd_proxy.prefill_candidates": 1,
    }
    server = one(spans, "llm_d.pd_proxy.POST /v1/chat/completions")
    assert server.instrumentation_scope is not None
    assert (server.instrumentation_scope.name, server.instrumentation_scope.version) == (
        "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
        "0.68.0",
    )
    assert parent_id(server) == span_id(one(spans, "gateway.request"))
    decode_leg = attributes(one(spans, "decode"))
    assert decode_leg["llm_d.pd_proxy.true_ttft_ms"] == 81.0  # forward start to the decode dispatch: not a TTFT
    assert decode_leg["llm_d.pd_proxy.total_duration_ms"] == 2112.0
    assert decode_leg["llm_d.pd_proxy.coordinator_overhead_ms"] == 0.0
    assert attributes(one(spans, "prefill"))["llm_d.pd_proxy.prefill.duration_ms"] == 80.0
    by_pod = {s.resource.attributes["k8s.pod.name"]: attributes(s) for s in spans if s.name == "llm_request"}
    assert (by_pod["vllm-2"]["gen_ai.request.max_tokens"], by_pod["vllm-2"]["gen_ai.usage.completion_tokens"]) == (1, 1)
    assert by_pod["vllm-1"]["gen_ai.usage.completion_tokens"] == 100
    assert by_pod["vllm-1"]["gen_ai.request.id"] == by_pod["vllm-2"]["gen_ai.request.id"] == f"chatcmpl-{RID}"
    urls = {attributes(s)["url.full"] for s in spans if s.name == "HTTP POST"}
    assert urls == {"http://10.0.0.12:8000/v1/chat/completions", "http://localhost:8200/v1/chat/completions"}


def test_p_d_through_the_p2p_sidecar() -> None:
    spans = Captured().spans(disaggregated("p2p"))
    post = ("HTTP POST", "CLIENT", (leaf("llm_request", "SERVER"),))
    decode = ("llm_d.pd_proxy.decode", "INTERNAL", (post,))
    prefill = ("llm_d.pd_proxy.prefill", "INTERNAL", (decode,))
    # the prefill request is cloned from the handler's context before the prefill span starts
    forward = ("forward_request", "SERVER", (prefill, post))
    sidecar = ("llm_d.pd_proxy.POST /v1/chat/completions", "SERVER", (forward,))
    assert tree(spans)[0][2][1] == sidecar
    decode_leg = attributes(one(spans, "llm_d.pd_proxy.decode"))
    assert decode_leg["llm_d.pd_proxy.concurrent_pd"] is True
    assert decode_leg["llm_d.pd_proxy.true_ttft_ms"] == 0.0  # dispatched at once
    assert attributes(one(spans, "forward_request"))["llm_d.pd_proxy.connector"] == "offloading"


def test_p_d_with_sidecar_tracing_off_puts_both_stages_under_the_gateway() -> None:
    spans = Captured().spans(disaggregated("off"))
    gateway = tree(spans)[0]
    assert gateway[2][1:] == (leaf("llm_request", "SERVER"), leaf("llm_request", "SERVER"))
    assert not [s for s in spans if s.resource.attributes.get("service.name") == "llm-d-disagg-sidecar"]
    assert {one(spans, "prepare_disaggregation").attributes["llm_d.epp.pd.disaggregation_used"]} == {True}  # type: ignore[index]
    ids = {attributes(s)["gen_ai.request.id"] for s in spans if s.name == "llm_request"}
    assert ids == {f"chatcmpl-{RID}"}


def test_n_3_gives_three_spans_with_one_request_id() -> None:
    spans = Captured().spans(choices())
    llm = [s for s in spans if s.name == "llm_request"]
    gateway = one(spans, "gateway.request")
    assert len(llm) == 3 and {parent_id(s) for s in llm} == {span_id(gateway)}
    assert {(attributes(s)["gen_ai.request.id"], attributes(s)["gen_ai.request.n"]) for s in llm} == {
        (f"cmpl-{RID}-0", 1)
    }
    assert sorted(attributes(s)["gen_ai.usage.completion_tokens"] for s in llm) == [20, 50, 100]


def refused(failure: str, message: str, status: int) -> CallRecord:
    call = Call(request(), "chat", failure=failure)  # type: ignore[arg-type]
    return CallRecord(
        session(call), call, T0, T0 + 0.002, T0 + 0.001, http_status=status, error=message, orchestration_error=message
    )


@pytest.mark.parametrize(
    ("record", "status", "priority"),
    [
        pytest.param(refused("shed", SHED_MESSAGE, 429), 429, 0, id="shed by flow control"),
        pytest.param(refused("refused", REFUSED_MESSAGE, 500), 500, -1, id="refused by the latency-slo-admitter"),
        pytest.param(refused("timeout", TIMEOUT_MESSAGE, 429), 429, 0, id="timed out in the queue"),
    ],
)
def test_a_call_refused_before_scheduling(record: CallRecord, status: int, priority: int) -> None:
    spans = Captured().spans(record)
    assert tree(spans) == (
        ("gateway.request", "SERVER", (leaf("gateway.request_orchestration", "SERVER"),)),
        leaf("ingress", "SERVER"),
    )
    gateway, orchestration = one(spans, "gateway.request"), one(spans, "gateway.request_orchestration")
    for span in (gateway, orchestration):
        assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, record.error)
        assert [e.name for e in span.events] == ["exception"]
        assert span.events[0].attributes == {
            "exception.type": "github.com/llm-d/llm-d-router/pkg/common/error.Error",
            "exception.message": record.error,
        }
    assert orchestration.attributes["request_prio"] == priority  # type: ignore[index]
    assert one(spans, "ingress").attributes["http.response.status_code"] == status  # type: ignore[index]


def test_a_model_server_error_after_scheduling() -> None:
    call = Call(request(), "chat", failure="error")
    schedule = Scheduling("predicted-latency", T0, T0 + 0.004, decision())
    record = CallRecord(
        session(call), call, T0, T0 + 0.02, T0 + 0.004, (schedule,), http_status=500, error=MODEL_SERVER_ERROR
    )
    spans = Captured().spans(record)
    orchestration = ("gateway.request_orchestration", "SERVER", (profile_run("latency-scorer"),))
    assert tree(spans) == (("gateway.request", "SERVER", (orchestration,)), leaf("ingress", "SERVER"))
    gateway = one(spans, "gateway.request")
    assert (gateway.status.status_code, gateway.status.description, gateway.events) == (
        StatusCode.ERROR,
        "ModelServerError",
        (),
    )
    assert one(spans, "gateway.request_orchestration").status.status_code is StatusCode.UNSET
    assert one(spans, "ingress").attributes["http.response.status_code"] == 500  # type: ignore[index]


def test_a_client_disconnect_mid_stream_leaves_no_model_server_span_and_no_error() -> None:
    call = Call(request(), "chat", failure="aborted", abort_after=0.5)
    schedule = Scheduling("default", T0, T0 + 0.004, decision(routing="default"))
    record = CallRecord(session(call), call, T0, T0 + 0.504, T0 + 0.004, (schedule,), aborted=True)
    spans = Captured().spans(record)
    assert not [s for s in spans if s.name == "llm_request"]
    assert {s.status.status_code for s in spans} == {StatusCode.UNSET}
    assert one(spans, "ingress").attributes["http.response.status_code"] == 200  # type: ignore[index]


def test_every_call_of_a_session_is_a_child_of_the_same_unexported_agent_span() -> None:
    captured = Captured()
    first = single(Call(request(), "chat"))
    second = replace(first, call=replace(first.call, request=replace(first.call.request, request_id="second")))
    spans = captured.spans(first) + captured.spans(second)
    assert {s.context.trace_id for s in spans if s.context} == {TRACE_ID}
    assert ROOT_SPAN_ID not in {span_id(s) for s in spans}
    roots = [s for s in spans if parent_id(s) == ROOT_SPAN_ID]
    assert sorted(s.name for s in roots) == ["gateway.request", "gateway.request", "ingress", "ingress"]
    assert all(s.parent is not None and s.parent.is_remote for s in roots)
