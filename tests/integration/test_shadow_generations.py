"""Shadow predictions ask what each EPP generation asked: real pages, real prediction stand-ins, sloscope serve.

The request objects are asserted on what the prediction stand-ins received, for a known pod page
(the recorded vLLM 0.33 page: 3 waiting, 27 running, KV cache 0.5873) and a known EPP page.

llm-d (auto-detected from the constructed llm-d-router EPP page, fixtures/llm-d-router/epp-metrics.prom):
what ``bulkPredictWithMetrics`` sends (llm-d-router ebab6879,
pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/training.go:33-59 and 208-237,
prediction.go:60-88): ``input_token_length`` = prompt tokens (plugin.go:417-423, TokenizedRequest's
count), ``num_request_running`` / ``prefill_tokens_in_flight`` = the in-flight producer's requests and
tokens for the endpoint (plugin.go:222-227), published as llm_d_epp_inflight_{requests,tokens}
(inflightload/metrics.go:32-48, summed over fairness_id/priority: producer.go:436-441) for endpoint
``<pod>-rank-0`` (datastore/datastore.go:521-526), read as of the request's arrival;
``pod_type`` = the pod's value of the plugin's endpointRoleLabel (training.go:43-46, `omitempty`:
latencypredictorclient/types.go:200), ``decode_tokens_in_flight`` 0, the encoder sizes 0;
``/predict/bulk/strict`` (latencypredictorclient/coalescer.go:199). Two prediction servers, the first
failing: the batch is retried once on the second (counted), as a failed batch must be.

gie-2025 (auto-detected from the late-2025 EPP page, fixtures/epp/slo-metrics-constructed-from-code.prom):
gateway-api-inference-extension 0f0dff68,
pkg/epp/scheduling/framework/plugins/multi/slo_aware_router/latencypredictor_helper.go:334-348: the
six fields only, ``input_token_length`` = whitespace words (``len(strings.Fields(prompt))``; sloscope:
tokens x words_per_token), ``num_request_running`` = the pod's scraped running count, and also
``/predict/bulk/strict`` (sidecars/latencypredictorasync/prediction.go:154-155).
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.integration.conftest import Server, start_server, wait_until
from tests.support.page_server import PageServer, vllm_page
from tests.support.prediction_server import PredictionBehaviour, PredictionServer

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "llama-pd-pool"
KV = 0.5873  # the recorded vLLM page
PROMPT_TOKENS = 400
STRICT = "/predict/bulk/strict"
ROLE = "llm-d.ai/role"


def epp_page(shared: Path, *, requests: int, tokens: int) -> str:
    """The constructed llm-d EPP page with llama-decode-1's in-flight values (1 and 2100 as recorded) changed.

    A second flow's series for the same endpoint is added, so the per-endpoint value is a sum (the
    producer's tracker counts per endpoint, the gauges split it by fairness_id and priority).
    """
    page = (shared / "fixtures" / "llm-d-router" / "epp-metrics.prom").read_text()
    for family, value in (("requests", requests), ("tokens", tokens)):
        line = re.compile(
            rf'^(llm_d_epp_inflight_{family}\{{endpoint_name="llama-decode-1-rank-0",[^}}]*\}}) \S+$', re.M
        )
        match = line.search(page)
        assert match is not None, "the fixture's in-flight lines changed shape"
        other_flow = match[1].replace('fairness_id="default-flow"', 'fairness_id="batch-flow"')
        page = line.sub(f"{match[1]} {value - 1}\n{other_flow} 1", page, count=1)
    return page


def send(server: Server, *requests: dict[str, Any]) -> None:
    """Each request: a gateway span and vLLM's llm_request span (400 prompt tokens) in one trace."""
    spans = []
    for r in requests:
        arrival_ns = int(r["arrival"] * 1e9)
        trace, e2e = int(r["trace"]), 0.5
        spans.append(
            span(
                trace,
                1,
                "gateway.request",
                gateway_attributes(model=MODEL),
                resource={"service.name": "gateway"},
                start_ns=arrival_ns,
            )
        )
        attributes = vllm_attributes(ttft=0.1, e2e=e2e, completion_tokens=11, prompt_tokens=PROMPT_TOKENS, model=MODEL)
        spans.append(
            span(
                trace,
                2,
                "llm_request",
                attributes,
                parent=1,
                resource={"service.name": "vllm", "k8s.pod.name": r["pod"]},
                start_ns=arrival_ns + 1_000_000,
                end_ns=arrival_ns + 1_000_000 + int(e2e * 1e9),
            )
        )
    body = to_otlp_json(export_request(spans))
    request = urllib.request.Request(server.otlp_http, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def settings(
    tmp: Path, pods: list[dict[str, Any]], epp: PageServer, predictors: list[PredictionServer]
) -> dict[str, Any]:
    (tmp / "slo.yaml").write_text(yaml.safe_dump({"version": "sloscope/v1", "classes": []}))  # no headroom calls
    return {
        "slo_spec": str(tmp / "slo.yaml"),
        "join": {"window_seconds": 0.3, "trace_ttl_seconds": 5.0},
        "scrape": {"interval_seconds": 0.2, "timeout_seconds": 0.5, "stale_after_seconds": 60},
        "predictions": {
            "batch_wait_seconds": 0.1,
            "timeout_seconds": 2.0,
            "health_interval_seconds": 0.2,
            "breaker_failures": 1,
            "breaker_open_seconds": 600,
            "endpoint_role_label": ROLE,
        },
        "pools": [
            {
                "name": POOL,
                "model": MODEL,
                "targets": {"static": pods},
                "predictor": {"training_url": "http://127.0.0.1:9", "prediction_urls": [p.url for p in predictors]},
                "epp": {"metrics_url": f"http://{epp.address}/metrics"},
                "streaming_mode": True,  # TTFT and TPOT compared apart, as with streaming on
            }
        ],
    }


def epp_scrapes(server: Server) -> float:
    return server.value("sloscope_scrapes_total", kind="epp", result="success") or 0.0


def scraped_again(server: Server) -> None:
    """Waits until two more EPP scrapes completed: at least one fetched the page as it is now."""
    start = epp_scrapes(server)
    wait_until(lambda: epp_scrapes(server) >= start + 2, what="two more EPP scrapes")


def rows(predictor: PredictionServer) -> list[dict[str, Any]]:
    """Every request object in the bodies the stand-in received, in arrival order."""
    return [row for path, body in predictor.behaviour.received if path == STRICT for row in body["requests"]]


@dataclass
class LlmdEnv:
    server: Server
    epp: PageServer
    failing: PredictionServer
    healthy: PredictionServer


@pytest.fixture(scope="module")
def llm_d(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[LlmdEnv]:
    tmp = tmp_path_factory.mktemp("llm-d")
    with (
        PageServer(vllm_page(shared)) as decode_1,
        PageServer(vllm_page(shared)) as decode_0,
        PageServer(epp_page(shared, requests=1, tokens=2100)) as epp,
        PredictionServer(PredictionBehaviour(fail=True)) as failing,
        PredictionServer() as healthy,
    ):
        pods = [
            {"address": decode_1.address, "pod": "llama-decode-1", "labels": {ROLE: "decode"}},
            {"address": decode_0.address, "pod": "llama-decode-0"},  # no role label: monolithic, no pod_type
        ]
        server = start_server(tmp, settings(tmp, pods, epp, [failing, healthy]))
        try:
            yield LlmdEnv(server, epp, failing, healthy)
        finally:
            server.stop()


def llm_d_features(*, running: int, tokens: int, pod_type: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kv_cache_percentage": KV,
        "input_token_length": PROMPT_TOKENS,  # tokens, not words
        "num_request_waiting": 3,  # the pod's page, as the EPP reads it
        "num_request_running": running,  # the EPP's in-flight requests, not vLLM's 27
        "num_tokens_generated": 1,
        "prefix_cache_score": 0.0,
        "encoder_input_size": 0,
        "encoder_matched_size": 0,
    }
    if pod_type is not None:
        body["pod_type"] = pod_type
    return {**body, "prefill_tokens_in_flight": tokens, "decode_tokens_in_flight": 0}


def test_llm_d_features_come_from_the_epps_in_flight_page_as_of_arrival(llm_d: LlmdEnv, shared: Path) -> None:
    server = llm_d.server
    wait_until(
        lambda: (
            server.value("sloscope_pod_up", pool=POOL, pod="llama-decode-1") == 1.0
            and server.value("sloscope_pod_up", pool=POOL, pod="llama-decode-0") == 1.0
        ),
        what="pods scraped",
    )
    scraped_again(server)
    t1 = time.time()  # every EPP page scraped up to now: llama-decode-1 has 1 request, 2100 tokens in flight
    llm_d.epp.page = epp_page(shared, requests=3, tokens=4500)
    scraped_again(server)
    t2 = time.time()  # the newest page before now: 3 requests, 4500 tokens

    send(
        server,
        {"trace": 201, "pod": "llama-decode-1", "arrival": t1},
        {"trace": 202, "pod": "llama-decode-1", "arrival": t2},
        # arrived at t1, sent after the page changed: judged on the page of its arrival
        {"trace": 203, "pod": "llama-decode-1", "arrival": t1},
        # a pod the EPP has nothing in flight for (its series at 0), without a role label
        {"trace": 204, "pod": "llama-decode-0", "arrival": t2},
    )
    shadow = {"model": MODEL, "pool": POOL, "source": "shadow"}
    wait_until(lambda: server.value("sloscope_predictions_total", signal="ttft", **shadow) == 4, what="4 shadow")

    at_t1 = llm_d_features(running=1, tokens=2100, pod_type="decode")
    at_t2 = llm_d_features(running=3, tokens=4500, pod_type="decode")
    idle = llm_d_features(running=0, tokens=0, pod_type=None)
    key = lambda row: (row["num_request_running"], row.get("pod_type", ""))  # noqa: E731
    assert sorted(rows(llm_d.healthy), key=key) == sorted([at_t1, at_t1, at_t2, idle], key=key)
    # the shadow calls are strict; /predict is the health poll's probe of a constant (reset) model
    assert set(llm_d.healthy.behaviour.calls) <= {STRICT, "/predict", "/status", "/healthz", "/readyz"}
    assert STRICT in llm_d.healthy.behaviour.calls

    # The first batch went to the failing replica first, then once to the healthy one: counted.
    assert llm_d.failing.behaviour.received[0] == next(
        (path, body) for path, body in llm_d.healthy.behaviour.received if path == STRICT
    )
    assert [path for path, _ in llm_d.failing.behaviour.received] == [STRICT]
    assert server.value("sloscope_predictor_retries_total", pool=POOL, purpose="shadow") == 1
    assert server.value("sloscope_predictor_retries_total", pool=POOL, purpose="headroom") == 0
    calls = {"pool": POOL, "purpose": "shadow"}
    assert server.value("sloscope_predictor_requests_total", result="http_error", **calls) == 1
    assert server.value("sloscope_shadow_skipped_total", pool=POOL, reason="failed") == 0


@pytest.fixture(scope="module")
def gie(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[tuple[Server, PredictionServer]]:
    tmp = tmp_path_factory.mktemp("gie")
    old_epp = (shared / "fixtures" / "epp" / "slo-metrics-constructed-from-code.prom").read_text()
    with PageServer(vllm_page(shared)) as pod, PageServer(old_epp) as epp, PredictionServer() as predictor:
        pods = [{"address": pod.address, "pod": "vllm-a", "labels": {ROLE: "decode"}}]
        server = start_server(tmp, settings(tmp, pods, epp, [predictor]))
        try:
            yield server, predictor
        finally:
            server.stop()


def test_gie_2025_features_are_the_six_with_words_and_the_pods_running_count(
    gie: tuple[Server, PredictionServer],
) -> None:
    server, predictor = gie
    wait_until(lambda: server.value("sloscope_pod_up", pool=POOL, pod="vllm-a") == 1.0, what="pod scraped")
    scraped_again(server)
    send(server, {"trace": 301, "pod": "vllm-a", "arrival": time.time()})
    shadow = {"model": MODEL, "pool": POOL, "source": "shadow"}
    wait_until(lambda: server.value("sloscope_predictions_total", signal="ttft", **shadow) == 1, what="1 shadow")
    assert rows(predictor) == [
        {
            "kv_cache_percentage": KV,
            "input_token_length": 300,  # 400 tokens x 0.75 words per token
            "num_request_waiting": 3,
            "num_request_running": 27,  # the pod's scraped running count
            "num_tokens_generated": 1,
            "prefix_cache_score": 0.0,
        }
    ]
    assert server.value("sloscope_predictor_retries_total", pool=POOL, purpose="shadow") == 0
