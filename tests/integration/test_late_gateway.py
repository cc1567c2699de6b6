"""The EPP's spans sent a second after the model server's: every request keeps its routing, no span is late.

With the caller's ``traceparent`` winning at the gateway, the llm-d-router EPP's ``gateway.request`` is a sibling
of vLLM's ``llm_request`` under the caller's span, and the EPP's Go batch processor sends its spans 0.5-0.8 s after
vLLM's (measured against a running llm-d-router v0.10.0; the span tree is the one of
``shared/fixtures/llm-d-router/captured-v0.10.0/spans-*.otlp.jsonl``: gateway.request >
gateway.request_orchestration > run_scheduler_profile > scoring > scorer, pick, as ``sloscope.testing.epp_spans``
builds it). Here a real ``sloscope serve`` receives over OTLP/HTTP the client's span and vLLM's first and the EPP's
a second later, on both joins; ``join.wait_for_gateway: never`` shows what the wait prevents.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import pytest

from sloscope import conventions as c
from sloscope.records import Span
from sloscope.testing import epp_spans, export_request, span, vllm_033_attributes

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

CALLS = 12
CLIENT, EPP, VLLM = 1, 10, 20  # span ids within each call's trace
HELD_BACK_SECONDS = 1.0


def call(trace: int, now_ns: int) -> tuple[list[Span], list[Span]]:
    """(The client's and vLLM's spans, the EPP's) of one call in trace ``trace``."""
    ms = 1_000_000
    rid = f"call-{trace}"
    headers = {"http.request.header.x-request-id": [rid], "http.request.header.x-llm-d-slo-ttft-ms": ["500"]}
    client = span(
        trace, CLIENT, "POST /v1/chat/completions", headers, resource={"service.name": "client"}, start_ns=now_ns
    )
    vllm = span(
        trace,
        VLLM,
        "llm_request",
        vllm_033_attributes(request_id=f"chatcmpl-{rid}", ttft=0.1, e2e=0.4, completion_tokens=20),
        parent=CLIENT,
        resource={"service.name": "vllm", "k8s.pod.name": "vllm-0"},
        start_ns=now_ns + 30 * ms,
        end_ns=now_ns + 430 * ms,
    )
    return [client, vllm], epp_spans(trace, EPP, request_id=rid, parent=CLIENT, start_ns=now_ns + ms)


def post(server: Server, spans: list[Span]) -> None:
    body = export_request(spans).SerializeToString()
    request = urllib.request.Request(server.otlp_http, body, {"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize(("wait", "kept"), [("auto", CALLS), ("never", 0)], ids=["auto", "never"])
def test_epp_spans_a_second_after_vllms_keep_every_request_routed(
    serve: Callable[..., Server], engine: str, wait: str, kept: int
) -> None:
    server = serve(join={"engine": engine, "wait_for_gateway": wait, "window_seconds": 5.0})
    now = time.time_ns() - 2_000_000_000
    first, first_epp = call(1, now)
    post(server, first_epp + first)  # a call in the usual order: the EPP's spans tell that the gateway traces
    wait_until(lambda: server.total(c.REQUESTS.exposed_name, routing=c.ROUTING_PREDICTED) == 1, what="the first call")
    calls = [call(trace, now) for trace in range(2, 2 + CALLS)]
    post(server, [s for client_and_vllm, _ in calls for s in client_and_vllm])
    time.sleep(HELD_BACK_SECONDS)
    post(server, [s for _, epp in calls for s in epp])
    sent = (1 + CALLS) * (2 + len(first_epp))
    wait_until(lambda: server.total(c.SPANS_RECEIVED.exposed_name) == sent, what="every span received")
    wait_until(lambda: server.total(c.REQUESTS.exposed_name) == 1 + CALLS, timeout=15, what="every call counted")
    # auto: a call is counted once its EPP spans joined it; never: each gateway.request is dropped on arrival
    wait_until(
        lambda: server.total(c.SPANS_DROPPED.exposed_name, reason=c.DROP_LATE) == CALLS - kept, what="late spans"
    )
    assert server.total(c.REQUESTS.exposed_name, routing=c.ROUTING_PREDICTED) == 1 + kept
    assert server.total(c.REQUESTS.exposed_name, routing=c.ROUTING_UNKNOWN) == CALLS - kept
    assert server.total(c.SPANS_DROPPED.exposed_name, reason=c.DROP_LATE) == CALLS - kept  # each one's gateway.request
    assert server.total(c.REQUESTS_FAILED.exposed_name) == 0
    assert server.stop() == 0
