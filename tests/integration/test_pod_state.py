"""Pods, predictor and predictions end to end: real pages over HTTP, a prediction-server stand-in, sloscope serve.

Pod A serves the recorded vLLM 0.33 page (its queue length changed during the test), pod B the same
page with the pre-0.10 KV-cache name, pod C an SGLang page in a second pool. The prediction stand-in
answers with a formula of the features (tests/support/prediction_server.py), so every shadow
prediction, coverage count and headroom value below is computed by hand from the pages.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.integration.conftest import Server, start_server, wait_until
from tests.support.page_server import PageServer, sglang_page, vllm_page
from tests.support.prediction_server import PredictionServer, TrainingServer, predicted_tpot_ms, predicted_ttft_ms

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "pool-a"
# The recorded vLLM page: 3 waiting, 27 running, KV cache 0.5873.
KV = 0.5873
SPEC = {
    "version": "sloscope/v1",
    "classes": [
        {
            "name": "interactive",
            "match": {"ttft_ms": {"max": 1000}},
            # 800 tokens = 600 words: the stand-in's records tell headroom calls from shadow ones (300 words)
            "reference": {"prompt_tokens": 800, "ttft_ms": 500, "tpot_ms": 50},
        }
    ],
}


@dataclass
class Env:
    server: Server
    pod_a: PageServer
    pod_b: PageServer
    pod_c: PageServer
    predictor: PredictionServer
    training: TrainingServer


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("pods")
    (tmp / "slo.yaml").write_text(yaml.safe_dump(SPEC))
    with (
        PageServer(vllm_page(shared)) as pod_a,
        PageServer(vllm_page(shared, old_kv_name=True)) as pod_b,
        PageServer(sglang_page(MODEL, queued=4, running=12, token_usage=0.42)) as pod_c,
        PredictionServer() as predictor,
        TrainingServer(shared) as training,
        PageServer((shared / "fixtures" / "epp" / "slo-metrics-constructed-from-code.prom").read_text()) as epp,
    ):
        server = start_server(
            tmp,
            {
                "slo_spec": str(tmp / "slo.yaml"),
                "join": {"window_seconds": 0.3, "trace_ttl_seconds": 5.0},
                "scrape": {"interval_seconds": 0.2, "timeout_seconds": 0.5, "stale_after_seconds": 60},
                "predictions": {
                    "batch_wait_seconds": 0.1,
                    "timeout_seconds": 0.5,
                    "health_interval_seconds": 0.2,
                    "breaker_failures": 2,
                    "breaker_open_seconds": 0.5,
                },
                "headroom": {"interval_seconds": 0.2},
                "pools": [
                    {
                        "name": POOL,
                        "targets": {
                            "static": [
                                {"address": pod_a.address, "pod": "vllm-a"},
                                {"address": pod_b.address, "pod": "vllm-b"},
                            ]
                        },
                        "predictor": {"training_url": training.url, "prediction_urls": [predictor.url]},
                        "epp": {"metrics_url": f"http://{epp.address}/metrics"},
                        # the late-2025 EPP's page streams: said before its first scrape too
                        "streaming_mode": True,
                    },
                    {
                        "name": "pool-s",
                        "protocol": "sglang",
                        "targets": {"static": [{"address": pod_c.address, "pod": "sglang-c"}]},
                    },
                ],
            },
        )
        try:
            yield Env(server, pod_a, pod_b, pod_c, predictor, training)
        finally:
            server.stop()


def send(server: Server, *requests: dict[str, object]) -> None:
    """Each request: a gateway span and vLLM's llm_request span in one trace, on pod ``pod``."""
    spans = []
    for r in requests:
        arrival_ns = int(float(r["arrival"]) * 1e9)  # type: ignore[arg-type]
        ttft, tpot, tokens = float(r["ttft"]), float(r["tpot"]), 11  # type: ignore[arg-type]
        e2e = ttft + (tokens - 1) * tpot
        trace = int(r["trace"])  # type: ignore[call-overload]
        extra = dict(r.get("gateway", {}))  # type: ignore[call-overload]
        spans.append(
            span(
                trace,
                1,
                "gateway.request",
                gateway_attributes(model=MODEL, slo_ttft_ms=r.get("slo_ttft_ms"), extra=extra),  # type: ignore[arg-type]
                resource={"service.name": "gateway"},
                start_ns=arrival_ns,
            )
        )
        spans.append(
            span(
                trace,
                2,
                "llm_request",
                vllm_attributes(ttft=ttft, e2e=e2e, completion_tokens=tokens, prompt_tokens=400, model=MODEL),
                parent=1,
                resource={"service.name": "vllm", "k8s.pod.name": str(r["pod"])},
                start_ns=arrival_ns,  # scheduled at once: the TTFT from the gateway's arrival is ``ttft``
                end_ns=arrival_ns + int(e2e * 1e9),
            )
        )
    body = to_otlp_json(export_request(spans))
    request = urllib.request.Request(server.otlp_http, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def features(waiting: int) -> dict[str, float]:
    """What the EPP would send for a 400-token prompt to pod A: 300 words (0.75 per token), 1 token generated."""
    return {
        "kv_cache_percentage": KV,
        "input_token_length": 300,
        "num_request_waiting": waiting,
        "num_request_running": 27,
        "num_tokens_generated": 1,
        "prefix_cache_score": 0.0,
    }


def pod_value(server: Server, name: str, pod: str, pool: str = POOL) -> float | None:
    return server.samples().get((name, frozenset({("pool", pool), ("pod", pod)})))


def test_pod_gauges_from_vllm_old_kv_name_and_sglang_pages(env: Env) -> None:
    server = env.server
    wait_until(lambda: pod_value(server, "sloscope_pod_up", "sglang-c", "pool-s") == 1.0, what="all pods scraped")
    wait_until(lambda: pod_value(server, "sloscope_pod_up", "vllm-b") == 1.0, what="pod B scraped")
    assert pod_value(server, "sloscope_pod_kv_cache_utilization", "vllm-b") == KV  # read under the old name
    assert pod_value(server, "sloscope_pod_requests_waiting", "vllm-b") == 3.0
    assert pod_value(server, "sloscope_pod_requests_running", "vllm-b") == 27.0
    assert pod_value(server, "sloscope_pod_requests_waiting", "sglang-c", "pool-s") == 4.0
    assert pod_value(server, "sloscope_pod_requests_running", "sglang-c", "pool-s") == 12.0
    assert pod_value(server, "sloscope_pod_kv_cache_utilization", "sglang-c", "pool-s") == 0.42
    assert server.value("sloscope_pool_pods", pool="pool-s") == 1.0
    assert server.value("sloscope_scrapes_total", kind="model_server", result="success") >= 3
    # the predictor's health, from the recorded training-server answers
    wait_until(lambda: server.value("sloscope_predictor_quantile", pool=POOL) == 0.9, what="predictor health")
    assert server.value("sloscope_predictor_up", pool=POOL, server=env.predictor.url, role="prediction") == 1.0
    assert server.value("sloscope_predictor_up", pool=POOL, server=env.training.url, role="training") == 1.0
    assert server.value("sloscope_predictor_coverage_offline_ratio", pool=POOL, signal="ttft") == pytest.approx(
        0.86909091
    )


def test_epp_series_are_republished_with_their_labels_put_right(env: Env) -> None:
    server = env.server
    labels = {"pool": POOL, "model": MODEL, "target_model": MODEL}  # the EPP wrote model_name=""
    wait_until(lambda: server.value("sloscope_epp_ttft_seconds_count", **labels) == 1, what="EPP page scraped")
    assert server.value("sloscope_epp_ttft_seconds_sum", **labels) == 0.231
    violations = {**labels, "plugin_name": "", "plugin_type": "", "type": "ttft"}  # this EPP names no plugin
    assert server.value("sloscope_epp_slo_violations_total", **violations) == 1
    assert server.value("sloscope_scrapes_total", kind="epp", result="success") >= 1


def shadow_rows(predictor: PredictionServer) -> list[dict[str, float]]:
    """Every request object the stand-in received for a shadow prediction (300 words; headroom sends 600)."""
    return [row for batch in predictor.behaviour.bulk_requests for row in batch if row["input_token_length"] == 300]


def test_as_of_join_coverage_and_headroom_at_routing(env: Env, shared: Path) -> None:
    server, pod_a = env.server, env.pod_a
    wait_until(lambda: pod_value(server, "sloscope_pod_requests_waiting", "vllm-a") == 3.0, what="pod A at 3")
    t1 = time.time()  # every sample of pod A taken up to now says 3 waiting
    pod_a.page = vllm_page(shared, waiting=9)
    wait_until(lambda: pod_value(server, "sloscope_pod_requests_waiting", "vllm-a") == 9.0, what="pod A at 9")
    t2 = time.time()  # the newest sample before now says 9

    # TTFT predictions: 138.73 ms at 3 waiting, 198.73 ms at 9; TPOT 24.373 ms (27 running) for all.
    p3, p9 = predicted_ttft_ms(features(3)) / 1000, predicted_ttft_ms(features(9)) / 1000
    tpot = predicted_tpot_ms(features(3)) / 1000
    assert (p3, p9, tpot) == (pytest.approx(0.13873), pytest.approx(0.19873), pytest.approx(0.024373))
    requests = [
        # R1 arrived at t1 (3 waiting): TTFT 100 ms covered, TPOT 20 ms covered; its TTFT SLO is 200 ms.
        {"trace": 101, "pod": "vllm-a", "arrival": t1, "ttft": 0.100, "tpot": 0.020, "slo_ttft_ms": "200"},
        # R2 arrived at t2 (9 waiting): TTFT 250 ms missed (> 198.73), TPOT 30 ms missed.
        {"trace": 102, "pod": "vllm-a", "arrival": t2, "ttft": 0.250, "tpot": 0.030},
        # R3 arrived at t1 but is sent after the page changed: it must be judged on 3 waiting (138.73 ms),
        # so its 139 ms TTFT is a miss; the later 9-waiting sample would have called it covered.
        {"trace": 103, "pod": "vllm-a", "arrival": t1, "ttft": 0.139, "tpot": 0.024},
        # R4 carries the EPP's own TTFT prediction (200 ms) on its gateway span: no shadow call.
        {
            "trace": 104,
            "pod": "vllm-a",
            "arrival": t2,
            "ttft": 0.150,
            "tpot": 0.020,
            "gateway": {"predicted_ttft_ms": 200.0},
        },
    ]
    send(server, *requests)

    shadow = {"model": MODEL, "pool": POOL, "source": "shadow"}
    wait_until(
        lambda: server.value("sloscope_predictions_total", signal="tpot", **shadow) == 3, what="3 shadow predictions"
    )
    assert sorted(row["num_request_waiting"] for row in shadow_rows(env.predictor)) == [3, 3, 9]
    assert shadow_rows(env.predictor)[0] == features(shadow_rows(env.predictor)[0]["num_request_waiting"])  # type: ignore[arg-type]
    assert server.value("sloscope_predictions_total", signal="ttft", **shadow) == 3
    assert server.value("sloscope_prediction_covered_total", signal="ttft", **shadow) == 1  # R1
    assert server.value("sloscope_prediction_covered_total", signal="tpot", **shadow) == 2  # R1, R3
    ttft_loss = 0.1 * (p3 - 0.100) + 0.9 * (0.250 - p9) + 0.9 * (0.139 - p3)  # pinball loss at q = 0.9
    assert server.value("sloscope_prediction_pinball_loss_seconds_total", signal="ttft", **shadow) == pytest.approx(
        ttft_loss
    )
    # the ratio histogram: le=1 counts the covered requests
    assert server.value("sloscope_prediction_ratio_bucket", signal="ttft", le="1.0", **shadow) == 1
    assert server.value("sloscope_prediction_ratio_count", signal="ttft", **shadow) == 3

    span_source = {"model": MODEL, "pool": POOL, "source": "span"}
    assert server.value("sloscope_predictions_total", signal="ttft", **span_source) == 1
    assert server.value("sloscope_prediction_covered_total", signal="ttft", **span_source) == 1  # 150 <= 200 ms
    assert server.value("sloscope_predictions_total", signal="tpot", **span_source) == 0  # no TPOT prediction carried

    # headroom at routing: only R1 carries a TTFT SLO: 200 ms - 138.73 ms = 61.27 ms, in the (0.05, 0.1] bucket.
    # A histogram with negative buckets has no _sum or _count (its sum could go down); +Inf is the count.
    routed = {"model": MODEL, "pool": POOL, "signal": "ttft"}
    assert server.value("sloscope_headroom_seconds_bucket", le="+Inf", **routed) == 1
    assert server.value("sloscope_headroom_seconds_bucket", le="0.0", **routed) == 0  # it had room
    assert server.value("sloscope_headroom_seconds_bucket", le="0.05", **routed) == 0
    assert server.value("sloscope_headroom_seconds_bucket", le="0.1", **routed) == 1
    # the request series name the pool discovery found the pod in (the spans name none)
    assert server.total("sloscope_requests_total", pool=POOL, model=MODEL) == 4


def test_live_headroom_per_pod(env: Env) -> None:
    server = env.server
    # pod B never changes: 3 waiting, 27 running, KV 0.5873; the reference request is 600 words.
    reference = {**features(3), "input_token_length": 600}
    ttft, tpot = predicted_ttft_ms(reference) / 1000, predicted_tpot_ms(reference) / 1000
    labels = {"pool": POOL, "pod": "vllm-b", "slo_class": "interactive"}
    wait_until(
        lambda: server.value("sloscope_pod_headroom_seconds", signal="ttft", **labels) != 0, what="live headroom"
    )
    assert server.value("sloscope_pod_headroom_seconds", signal="ttft", **labels) == pytest.approx(0.5 - ttft)
    assert server.value("sloscope_pod_headroom_seconds", signal="tpot", **labels) == pytest.approx(0.05 - tpot)
    assert server.value("sloscope_pool_pods_with_headroom", pool=POOL, slo_class="interactive") == 2
    assert server.value("sloscope_pool_pods", pool=POOL) == 2
    # a pool without a predictor has no headroom series
    assert server.total("sloscope_pod_headroom_seconds", pool="pool-s") == 0


def test_predictor_outage_is_counted_and_slo_series_keep_flowing(env: Env) -> None:
    server, predictor, training = env.server, env.predictor, env.training
    up = {"pool": POOL, "role": "prediction", "server": predictor.url}
    wait_until(lambda: server.value("sloscope_predictor_up", **up) == 1.0, what="predictor up")
    requests_before = server.total("sloscope_requests_total", pool=POOL)
    failed_before = server.value("sloscope_shadow_skipped_total", pool=POOL, reason="failed")
    predictor.behaviour.fail = True
    training.behaviour.ready = False
    try:
        wait_until(lambda: server.value("sloscope_predictor_up", **up) == 0.0, what="prediction server down")
        wait_until(
            lambda: server.value("sloscope_predictor_up", pool=POOL, role="training", server=training.url) == 0.0,
            what="training server not ready",
        )
        wait_until(
            lambda: server.total("sloscope_pod_headroom_seconds", pool=POOL) == 0, what="headroom series removed"
        )
        send(server, {"trace": 201, "pod": "vllm-b", "arrival": time.time(), "ttft": 0.1, "tpot": 0.02})
        wait_until(lambda: server.total("sloscope_requests_total", pool=POOL) == requests_before + 1, what="R5")
        wait_until(
            lambda: server.value("sloscope_shadow_skipped_total", pool=POOL, reason="failed") == failed_before + 1,
            what="R5's shadow prediction counted as failed",
        )
        calls = server.samples()
        errors = sum(
            v
            for (name, labels), v in calls.items()
            if name == "sloscope_predictor_requests_total"
            and ("pool", POOL) in labels
            and {("result", "http_error"), ("result", "circuit_open")} & labels
        )
        assert errors >= 2  # at least the headroom rounds and R5's call, refused or failed

        # slow: answers after the 0.5 s timeout
        predictor.behaviour.fail = False
        predictor.behaviour.delay_seconds = 2.0
        send(server, {"trace": 202, "pod": "vllm-b", "arrival": time.time(), "ttft": 0.1, "tpot": 0.02})
        wait_until(lambda: server.total("sloscope_requests_total", pool=POOL) == requests_before + 2, what="R6")
        wait_until(
            lambda: server.total("sloscope_predictor_requests_total", pool=POOL, result="timeout") >= 1,
            what="a timed-out prediction call",
        )
        wait_until(
            lambda: server.value("sloscope_shadow_skipped_total", pool=POOL, reason="failed") == failed_before + 2,
            what="R6's shadow prediction counted as failed",
        )
    finally:
        predictor.behaviour.fail = False
        predictor.behaviour.delay_seconds = 0.0
        training.behaviour.ready = True
