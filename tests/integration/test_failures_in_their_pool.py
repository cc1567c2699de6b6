"""Failures before any pod burn their real pool's budget in a real Prometheus, and no phantom pool exists.

``sloscope serve`` watches two pools. Pool ``pool-a``'s EPP answers 40 requests that meet every SLO, then sheds 8
requests (from a restarted replica of the same Deployment) and loses 2 to client aborts; a gateway sloscope has
never seen sheds 3 requests of a model no pool serves. The EPP's spans carry only their process's resource
attributes (``service.name``, ``k8s.pod.name`` as the EPP charts set them: llm-d-router
``config/charts/routerlib/templates/_deployment.yaml:193-194`` at ebab6879), and a shed request has only the EPP's
``gateway.request`` with status ERROR (``captured-v0.10.0/spans-k8s-with-shed.otlp.jsonl``).

The pinned Prometheus, scraping sloscope every second with the generated rules, must then hold pool-a's 10
failures as bad events of pool-a (10 of 50 eligible requests for TTFT and goodput, the 8 shed ones of 48 for TPOT:
the aborted requests' clients waited a second, past their 500 ms TTFT target, and an abort's TPOT is never known;
its burn above 0 where the answered requests alone would leave it at 0), the stranger's 3 in
``sloscope_requests_without_pool_total`` only, and no SLO series of any other pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from sloscope import conventions as c
from sloscope.demo.prometheus import PrometheusServer
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.support.prometheus import prometheus_ready, query, rules_every_second, run_beside

from .conftest import Server, wait_until
from .test_first_miss_counting import post

pytestmark = pytest.mark.integration

ANSWERED, SHED, ABORTED, STRANGER = 40, 8, 2, 3
REPLICA, RESTARTED = "pool-a-epp-5d9c7b8f4-x7k2p", "pool-a-epp-5d9c7b8f4-q9w8e"  # one Deployment's pods
EPP = {"service.name": "llm-d-epp", "service.version": "v0.10.0", "k8s.namespace.name": "team-a"}
SATURATED = "inference error: ResourceExhausted - system saturated, sheddable request dropped"


def body(
    first_trace: int,
    count: int,
    *,
    epp_pod: str,
    model: str = "llama-3-8b",
    status: str | None = None,
    answered: bool = False,
) -> bytes:
    spans = []
    now_ns = time.time_ns()
    for trace in range(first_trace, first_trace + count):
        start_ns = now_ns - 2_000_000_000
        attributes = gateway_attributes(slo_ttft_ms="500", slo_tpot_ms="50", model=model, request_id=f"r-{trace}")
        resource = {**EPP, "k8s.pod.name": epp_pod}
        state = (2, status) if status else (0, "")
        spans.append(span(trace, 1, "gateway.request", attributes, resource=resource, start_ns=start_ns, status=state))
        if answered:
            spans.append(
                span(
                    trace,
                    2,
                    "llm_request",
                    vllm_attributes(ttft=0.1, e2e=0.48, completion_tokens=20, request_id=f"cmpl-{trace}"),
                    parent=1,
                    resource={"service.name": "vllm", "k8s.pod.name": "vllm-0"},
                    start_ns=start_ns + 1_000_000,
                    end_ns=start_ns + 600_000_000,
                )
            )
    return to_otlp_json(export_request(spans))


def settings() -> dict[str, Any]:
    def pool(name: str, model: str, pod: str, port: int) -> dict[str, Any]:
        return {"name": name, "model": model, "targets": {"static": [{"address": f"127.0.0.1:{port}", "pod": pod}]}}

    return {
        "pools": [pool("pool-a", "llama-3-8b", "vllm-0", 9), pool("pool-b", "qwen-2", "vllm-1", 10)],
        "join": {"window_seconds": 0.2, "failure_window_seconds": 1.0},
        "predictions": {"shadow": False},
    }


async def vector(http: httpx.AsyncClient, prometheus: str, expr: str) -> dict[str, float]:
    result = (await query(http, prometheus, expr))["data"]["result"]
    return {",".join(f"{k}={v}" for k, v in sorted(s["metric"].items())): float(s["value"][1]) for s in result}


async def settled(http: httpx.AsyncClient, prometheus: str, expr: str, expected: dict[str, float]) -> None:
    """Waits until Prometheus answers ``expected`` for ``expr`` (scrapes and rule evaluations catch up)."""
    deadline = time.monotonic() + 60  # a bound on the wait, not a measure
    got: dict[str, float] = {}
    while time.monotonic() < deadline:
        got = await vector(http, prometheus, expr)
        if got == expected:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{expr}: expected {expected}, Prometheus answers {got}")


async def scenario(server: Server, prometheus: PrometheusServer, workdir: Path) -> dict[str, Any]:
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as http:
        await prometheus_ready(http, prometheus, workdir)
        url = prometheus.url
        # Two waves: the first creates every label set, which Prometheus scrapes, so that the second is an increase
        # a rate sees (a series is born at its first count, which no rate holds).
        for wave, (answered, shed, aborted, stranger) in enumerate(((1, 1, 1, 1), (ANSWERED, SHED, ABORTED, STRANGER))):
            first, before = 1 + 1000 * wave, (0, 0, 0, 0) if wave == 0 else (1, 1, 1, 1)
            await post(http, server, body(first, answered - before[0], epp_pod=REPLICA, answered=True))
            wait_until(
                lambda n=answered + before[1] + before[2]: server.total("sloscope_requests_total", pool="pool-a") == n,
                what="the answered requests",
            )
            await post(http, server, body(first + 100, shed - before[1], epp_pod=RESTARTED, status=SATURATED))
            await post(http, server, body(first + 200, aborted - before[2], epp_pod=REPLICA))
            stray = body(first + 300, stranger - before[3], epp_pod="stranger", model="mistral", status=SATURATED)
            await post(http, server, stray)
            wait_until(
                lambda s=stranger, f=shed + aborted: (
                    server.total(c.REQUESTS_WITHOUT_POOL.exposed_name) == s
                    and server.total("sloscope_requests_failed_total", pool="pool-a") == f
                ),
                what="the failures",
            )
            counted = {"pool=pool-a": answered + shed + aborted}
            await settled(http, url, "sum by (pool) (sloscope_requests_total)", counted)
        total = ANSWERED + SHED + ABORTED
        eligible = "sum by (pool, slo) (sloscope_slo_requests_total)"
        # An aborted request's TPOT is never known: eligible for TTFT and goodput only (its client waited a second,
        # past the 500 ms TTFT target: a miss of both).
        counted = {f"pool=pool-a,slo={slo}": total - (ABORTED if slo == c.SLO_TPOT else 0) for slo in c.SLOS}
        await settled(http, url, eligible, counted)
        out = {
            "violations": await vector(http, url, "sum by (pool, slo) (sloscope_slo_violations_total)"),
            "failed": await vector(http, url, "sum by (pool, reason) (sloscope_requests_failed_total) > 0"),
            "without_pool": await vector(http, url, f"{c.REQUESTS_WITHOUT_POOL.exposed_name} > 0"),
            "pools": await vector(http, url, "count by (pool) (sloscope_requests_total)"),
        }
        ratio = f'{c.slo_error_ratio_rule("5m")}{{pool="pool-a", slo="ttft"}}'
        burn = await vector(http, url, ratio)
        deadline = time.monotonic() + 30  # the recording rule catches up within a few evaluations
        while time.monotonic() < deadline and not any(value > 0 for value in burn.values()):
            await asyncio.sleep(0.5)
            burn = await vector(http, url, ratio)
        out["burn"] = burn
        return out


def test_failures_before_any_pod_burn_their_pools_budget_and_no_phantom_pool_exists(
    serve: Callable[..., Server], prometheus_binary: Path, tmp_path: Path
) -> None:
    server = serve(**settings())
    prometheus = PrometheusServer(
        prometheus_binary,
        tmp_path,
        server.metrics_port,
        rule_files=[rules_every_second(tmp_path / "rules.yaml")],
        interval="1s",
    )

    out = run_beside(prometheus, lambda: scenario(server, prometheus, tmp_path))
    assert out["violations"] == {
        f"pool=pool-a,slo={slo}": SHED + (0 if slo == c.SLO_TPOT else ABORTED) for slo in c.SLOS
    }
    assert out["failed"] == {"pool=pool-a,reason=shed": SHED, "pool=pool-a,reason=aborted": ABORTED}
    assert list(out["without_pool"].values()) == [STRANGER]
    assert "reason=shed" in next(iter(out["without_pool"]))
    assert set(out["pools"]) == {"pool=pool-a"}  # no pool="unknown", no series for the stranger
    [burn] = out["burn"].values()
    assert burn > 0  # the answered requests met every SLO: the failures alone burn pool-a's budget
