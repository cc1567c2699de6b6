"""The upstream-contract watchdog against real parts: each check broken by its own upstream, seen by serve and
alerted by a real Prometheus loaded with the generated rules.

One ``sloscope serve`` (``predictions.epp_generation: llm-d``) watches pools, each with the upstream of one check
broken, beside a healthy one. On loopback: the EPP pages captured from a running llm-d-router v0.10.0
(``fixtures/llm-d-router/captured-v0.10.0/epp-metrics-k8s.prom``; its latency plugin ran with streamingMode on), the
late-2025 GIE page constructed from its code (``fixtures/epp/slo-metrics-constructed-from-code.prom``), that llm-d
page with its families renamed, and prediction-server stand-ins answering the recorded llm-d ``/status``
(``fixtures/predictor/llm-d/mean/prediction-server-status.json``, llm-d-latency-predictor
``prediction/prediction_server.py:966-995`` at b5d19f1), that body without ``objective_type``, or a body of another
shape. Spans go to serve over OTLP/HTTP.

 pool        broken upstream                                   check read 0
 healthy     none (llm-d page, streaming setting on as its page, 25 full requests)     -
 unstated    /status without objective_type, the EPP llm-d's   predictor_objective
 unreadable  /status without is_ready                          predictor_answers
 streaming   streaming_mode: false, the page shows it on       streaming_mode
 old-epp     the late-2025 EPP's page, llm-d named             epp_generation
 renamed     the page's families renamed, 25 requests served   epp_families
 noid        25 requests without any request id                span_request_id
 notokens    25 answered requests without completion tokens    span_token_counts

``gateway_slo_headers`` needs ten minutes of spans without headers after some with: it is broken on a clock in
``tests/unit/processors/test_contracts.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sloscope import conventions as c
from sloscope.demo.prometheus import PrometheusServer
from sloscope.generators.rules import CONTRACT_ALERTS, AlertThresholds, rule_file
from sloscope.loading import default_spec
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.integration.conftest import Server, start_server, wait_until
from tests.support.page_server import PageServer, vllm_page
from tests.support.prediction_server import PredictionBehaviour, PredictionServer
from tests.support.prometheus import instant, prometheus_ready

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REQUESTS = 25  # above contracts.MIN_SAMPLES (20)
RENAMES = {"llm_d_epp_": "llm_d_router_epp_", "inference_objective_": "inference_model_", "inference_extension_": "x_"}

C = c  # the checks, read as C.CHECK_* in the table below
EXPECTED: dict[str, dict[str, float]] = {
    "healthy": {
        C.CHECK_PREDICTOR_OBJECTIVE: 1,
        C.CHECK_PREDICTOR_ANSWERS: 1,
        C.CHECK_STREAMING_MODE: 1,
        C.CHECK_EPP_GENERATION: 1,
        C.CHECK_EPP_FAMILIES: 1,
        C.CHECK_SPAN_REQUEST_ID: 1,
        C.CHECK_SPAN_TOKEN_COUNTS: 1,
        C.CHECK_GATEWAY_SLO_HEADERS: 1,
    },
    "unstated": {C.CHECK_PREDICTOR_OBJECTIVE: 0, C.CHECK_PREDICTOR_ANSWERS: 1, C.CHECK_EPP_GENERATION: 1},
    "unreadable": {C.CHECK_PREDICTOR_ANSWERS: 0, C.CHECK_EPP_GENERATION: 1},
    "streaming": {C.CHECK_STREAMING_MODE: 0, C.CHECK_EPP_GENERATION: 1},
    "old-epp": {C.CHECK_EPP_GENERATION: 0},
    "renamed": {  # its generation unknown (it shows no family): epp_generation has nothing to judge by
        C.CHECK_EPP_FAMILIES: 0,
        C.CHECK_SPAN_REQUEST_ID: 1,
        C.CHECK_SPAN_TOKEN_COUNTS: 1,
        C.CHECK_GATEWAY_SLO_HEADERS: 1,
    },
    "noid": {C.CHECK_SPAN_REQUEST_ID: 0, C.CHECK_SPAN_TOKEN_COUNTS: 1, C.CHECK_GATEWAY_SLO_HEADERS: 1},
    "notokens": {C.CHECK_SPAN_REQUEST_ID: 1, C.CHECK_SPAN_TOKEN_COUNTS: 0, C.CHECK_GATEWAY_SLO_HEADERS: 1},
}


def status_body(shared: Path, **changes: Any) -> str:
    """The recorded llm-d /status with fields removed (value None) or set."""
    document = json.loads((shared / "fixtures/predictor/llm-d/mean/prediction-server-status.json").read_text())
    for name, value in changes.items():
        if value is None:
            document.pop(name)
        else:
            document[name] = value
    return json.dumps(document)


def renamed(page: str) -> str:
    for old, new in RENAMES.items():
        page = page.replace(old, new)
    return page


def send(server: Server, pool: str, first_trace: int, *, request_id: bool = True, tokens: bool = True) -> None:
    """``REQUESTS`` requests of ``pool``: a gateway span with an SLO header under which vLLM's llm_request ran."""
    now, spans = time.time_ns(), []
    for n in range(REQUESTS):
        trace = first_trace + n
        rid = f"{pool}-{n}"
        gateway = gateway_attributes(
            slo_ttft_ms="500",
            model=MODEL,
            request_id=rid if request_id else None,
            extra={"inference_pool": pool},
        )
        vllm = vllm_attributes(ttft=0.1, e2e=0.5, request_id=f"chatcmpl-{rid}")
        if not request_id:
            del vllm["gen_ai.request.id"]
        if not tokens:
            del vllm["gen_ai.usage.completion_tokens"]
        resource = {"service.name": "vllm", "k8s.pod.name": f"{pool}-pod"}
        spans += [
            span(trace, 1, "gateway.request", gateway, resource={"service.name": "epp"}, start_ns=now),
            span(trace, 2, "llm_request", vllm, parent=1, resource=resource, start_ns=now, end_ns=now + 500_000_000),
        ]
    request = urllib.request.Request(
        server.otlp_http, to_otlp_json(export_request(spans)), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def contracts(server: Server) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (name, labels), value in server.samples().items():
        if name == c.UPSTREAM_CONTRACT.name:
            label = dict(labels)
            out.setdefault(label[c.POOL], {})[label[c.CHECK]] = value
    return out


@pytest.fixture
def watched(tmp_path: Path, shared: Path) -> Iterator[Server]:
    captured = (shared / "fixtures/llm-d-router/captured-v0.10.0/epp-metrics-k8s.prom").read_text()
    late_2025 = (shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_text()
    with ExitStack() as stack:
        pod = stack.enter_context(PageServer(vllm_page(shared)))

        def epp(page: str) -> dict[str, str]:
            return {"metrics_url": f"http://{stack.enter_context(PageServer(page)).address}/metrics"}

        def predictor(body: str) -> dict[str, list[str]]:
            server = stack.enter_context(PredictionServer(PredictionBehaviour(objective="mean", status_body=body)))
            return {"prediction_urls": [server.url]}

        def pool(name: str, **fields: Any) -> dict[str, Any]:
            targets = {"static": [{"address": pod.address, "pod": f"{name}-pod"}]}
            return {"name": name, "model": MODEL, "targets": targets, **fields}

        pools = [
            pool("healthy", epp=epp(captured), predictor=predictor(status_body(shared)), streaming_mode=True),
            pool("unstated", epp=epp(captured), predictor=predictor(status_body(shared, objective_type=None))),
            pool("unreadable", epp=epp(captured), predictor=predictor(status_body(shared, is_ready=None))),
            pool("streaming", epp=epp(captured), streaming_mode=False),
            pool("old-epp", epp=epp(late_2025)),
            pool("renamed", epp=epp(renamed(captured))),
        ]
        (tmp_path / "slo.yaml").write_text(yaml.safe_dump({"version": "sloscope/v1", "classes": []}))
        settings = {
            "slo_spec": str(tmp_path / "slo.yaml"),
            "join": {"window_seconds": 0.3, "trace_ttl_seconds": 5.0},
            "scrape": {"interval_seconds": 0.2, "timeout_seconds": 1.0, "stale_after_seconds": 60},
            "predictions": {
                "epp_generation": "llm-d",
                "health_interval_seconds": 0.2,
                "reset_probe": False,
                "shadow": False,
            },
            "pools": pools,
        }
        server = start_server(tmp_path, settings)
        try:
            yield server
        finally:
            server.stop()


def test_each_broken_upstream_reads_0_on_its_own_check_and_fires_its_alert(
    watched: Server, prometheus_binary: Path, tmp_path: Path
) -> None:
    send(watched, "healthy", 1000)
    send(watched, "renamed", 2000)
    send(watched, "noid", 3000, request_id=False)
    send(watched, "notokens", 4000, tokens=False)
    wait_until(lambda: contracts(watched) == EXPECTED, what=f"the checks; last read {contracts(watched)}")

    rules = rule_file(default_spec(), thresholds=AlertThresholds(contract_broken_for="2s"))
    for group in rules["groups"]:
        group["interval"] = "1s"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    broken = {
        (CONTRACT_ALERTS[check], pool) for pool, checks in EXPECTED.items() for check, v in checks.items() if not v
    }

    async def firing() -> set[tuple[str, str]]:
        prometheus = PrometheusServer(
            prometheus_binary, tmp_path, watched.metrics_port, rule_files=[tmp_path / "rules.yaml"], interval="1s"
        )
        await prometheus.start()
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                await prometheus_ready(http, prometheus, tmp_path)
                names = "|".join(CONTRACT_ALERTS.values())
                seen: set[tuple[str, str]] = set()
                deadline = time.monotonic() + 30
                while seen != broken and time.monotonic() < deadline:
                    await asyncio.sleep(1.0)
                    result = await instant(http, prometheus, f'ALERTS{{alertstate="firing",alertname=~"{names}"}}')
                    seen = {(r["metric"]["alertname"], r["metric"][c.POOL]) for r in result}
                return seen
        finally:
            await prometheus.stop()

    assert asyncio.run(firing()) == broken
    assert len(broken) == 7 and {alert for alert, _ in broken} == set(CONTRACT_ALERTS.values()) - {
        CONTRACT_ALERTS[c.CHECK_GATEWAY_SLO_HEADERS]
    }
