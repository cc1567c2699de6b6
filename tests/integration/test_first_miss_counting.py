"""The first misses of a label set are counted by ``increase()`` in a real Prometheus scraping ``sloscope serve``.

One interactive request that meets its SLOs creates the label set, and with it every sibling series at 0
(violations of every SLO, prediction coverage of both signals). Once the pinned Prometheus has scraped those
zeros, 120 requests follow, of which 3 miss their TTFT target. ``increase()`` then counts exactly 3 TTFT and 3
goodput violations and 120 covered predictions. Without the zero start, the violations series would be born at 3
and ``increase()`` would count none.

Exact, not approximately: ``increase(x[r])`` evaluated at the timestamp of x's newest sample, with ``r`` reaching
back past its oldest, is that difference with no extrapolation. Prometheus extrapolates a counter's increase to
the range's start at most to where the counter would have been 0 (zero here: the first sample is 0), and to the
range's end by the time from the newest sample to it (zero here): prometheus/prometheus v0.316.0 (the pinned
Prometheus), promql/functions.go:628 ``extrapolatedRate``, the zero point at :765-788, the end at :791-793.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from sloscope.demo.prometheus import PrometheusServer
from sloscope.generators.dashboards import dashboards, panel_queries
from sloscope.loading import default_spec
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.support.prometheus import run_beside

from .conftest import Server, wait_until
from .test_prometheus_e2e import prometheus_ready, query, substitute

pytestmark = pytest.mark.integration

POD = "vllm-0"
LABELS = 'slo_class="interactive", model="llama-3-8b"'
BATCH, MISSES = 120, 3
TOKENS, TPOT = 20, 0.02  # every request meets its 50 ms TPOT target
POD_VIOLATIONS_PANEL = "SLO violations per request by pod"


def requests_body(first_trace: int, requests: list[tuple[float, float]]) -> bytes:
    """Interactive requests (targets 500 ms TTFT, 50 ms TPOT), each (actual TTFT, predicted TTFT), in seconds."""
    spans = []
    now_ns = time.time_ns()
    for trace, (ttft, predicted) in enumerate(requests, start=first_trace):
        e2e = ttft + (TOKENS - 1) * TPOT
        start_ns = now_ns - int((e2e + 0.1) * 1e9)
        end_ns = start_ns + int((e2e + 0.05) * 1e9)
        gateway = gateway_attributes(
            slo_ttft_ms="500", slo_tpot_ms="50", request_id=f"r-{trace}", extra={"predicted_ttft_ms": predicted * 1000}
        )
        resource = {"service.name": "inference-gateway"}
        spans.append(span(trace, 1, "gateway.request", gateway, resource=resource, start_ns=start_ns))
        spans.append(
            span(
                trace,
                2,
                "llm_request",
                vllm_attributes(ttft=ttft, e2e=e2e, completion_tokens=TOKENS, request_id=f"cmpl-{trace}"),
                parent=1,
                resource={"service.name": "vllm", "k8s.pod.name": POD},
                start_ns=start_ns + 1_000_000,
                end_ns=end_ns,
            )
        )
    return to_otlp_json(export_request(spans))


async def post(http: httpx.AsyncClient, server: Server, body: bytes) -> None:
    response = await http.post(server.otlp_http, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text


async def scraped(http: httpx.AsyncClient, prometheus: str, expr: str, value: float) -> None:
    """Waits until Prometheus's newest sample of ``expr`` (one series) is ``value``: a scrape has seen it."""
    deadline = time.monotonic() + 60  # a bound on the wait, not a measure
    while time.monotonic() < deadline:
        result = (await query(http, prometheus, expr))["data"]["result"]
        if len(result) == 1 and float(result[0]["value"][1]) == value:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"Prometheus never scraped {expr} == {value}")


async def samples(http: httpx.AsyncClient, prometheus: str, selector: str) -> list[tuple[float, float]]:
    """Every stored sample (timestamp, value) of the one series ``selector`` names."""
    result = (await query(http, prometheus, f"{selector}[10m]"))["data"]["result"]
    assert len(result) == 1, f"{selector}: {result}"
    return [(float(t), float(v)) for t, v in result[0]["values"]]


async def exact_increase(http: httpx.AsyncClient, prometheus: str, selector: str) -> tuple[float, float]:
    """(first stored value, ``increase()`` over every sample at the newest one's timestamp) of one series."""
    stored = await samples(http, prometheus, selector)
    (first_at, first), (last_at, _) = stored[0], stored[-1]
    window = math.ceil(last_at - first_at) + 1
    response = await http.get(
        f"{prometheus}/api/v1/query", params={"query": f"increase({selector}[{window}s])", "time": f"{last_at:.3f}"}
    )
    result = response.json()["data"]["result"]
    assert len(result) == 1, f"{selector}: {result}"
    return first, float(result[0]["value"][1])


def pod_violations_panel() -> tuple[str, dict[str, Any]]:
    dashboard = dashboards(default_spec())["pod-headroom.json"]
    [expr] = [expr for title, expr in panel_queries(dashboard) if title == POD_VIOLATIONS_PANEL]
    return expr, dashboard


def requests_labels() -> dict[str, str]:
    return {"model": "llama-3-8b", "pool": "unknown", "slo_class": "interactive", "routing": "unknown"}


async def scenario(server: Server, prometheus: PrometheusServer, workdir: Path) -> dict[str, Any]:
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as http:
        await prometheus_ready(http, prometheus, workdir)
        url = prometheus.url
        await post(http, server, requests_body(1, [(0.1, 0.05)]))  # meets its SLOs; its prediction is uncovered
        wait_until(lambda: server.value("sloscope_requests_total", **requests_labels()) == 1, what="the first request")
        await scraped(http, url, f'sloscope_slo_violations_total{{{LABELS}, slo="ttft"}}', 0)
        await scraped(http, url, 'sloscope_prediction_covered_total{model="llama-3-8b", signal="ttft"}', 0)
        batch = [(2.0 if i < MISSES else 0.1, 3.0) for i in range(BATCH)]  # every prediction covers its actual
        await post(http, server, requests_body(2, batch))
        total = 1 + BATCH
        wait_until(lambda: server.value("sloscope_requests_total", **requests_labels()) == total, what="the batch")
        await scraped(http, url, f"sloscope_requests_total{{{LABELS}}}", total)
        out: dict[str, Any] = {}
        for slo in ("ttft", "tpot", "goodput"):
            selector = f'sloscope_slo_violations_total{{{LABELS}, slo="{slo}"}}'
            out[slo] = await exact_increase(http, url, selector)
        out["covered"] = await exact_increase(http, url, 'sloscope_prediction_covered_total{signal="ttft"}')
        out["pod"] = await exact_increase(http, url, f'sloscope_pod_slo_violations_total{{pod="{POD}", slo="ttft"}}')
        expr, dashboard = pod_violations_panel()
        out["panel"] = (await query(http, url, substitute(expr, dashboard, 60)))["data"]["result"]
        return out


def test_increase_counts_the_first_misses_of_a_label_set(
    serve: Callable[..., Server], prometheus_binary: Path, tmp_path: Path
) -> None:
    server = serve(predictions={"streaming_mode": True})  # the gateway's predicted TTFT is a TTFT
    prometheus = PrometheusServer(prometheus_binary, tmp_path, server.metrics_port, rule_files=[], interval="1s")

    out = run_beside(prometheus, lambda: scenario(server, prometheus, tmp_path))
    assert out["ttft"] == (0, MISSES)  # the series was scraped at 0, and its first 3 misses are counted
    assert out["goodput"] == (0, MISSES)
    assert out["tpot"] == (0, 0)
    assert out["pod"] == (0, MISSES)
    assert out["covered"] == (0, BATCH)  # the first request's prediction missed: coverage started at 0
    panel = out["panel"]
    assert {series["metric"].get("slo") for series in panel} == {"ttft", "tpot", "goodput"}  # no label-less line
    by_slo = {series["metric"]["slo"]: float(series["value"][1]) for series in panel}
    assert by_slo["ttft"] > 0 and by_slo["tpot"] == 0
