"""Cardinality through a real ``sloscope serve``: HTTP methods a client invents create no series, and a flood of
label combinations made of admitted values is held to the series cap of every family, with its sums right and
its folds counted."""

from __future__ import annotations

import random
import socket
import string
import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sloscope import conventions as c
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration


def series_count(server: Server) -> int:
    """Samples on /metrics: every series Prometheus would store from one scrape."""
    return sum(len(family.samples) for family in text_string_to_metric_families(server.text()))


def raw_request(port: int, request: bytes) -> bytes:
    """A request as written (httpx upper-cases every method), the whole answer read."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def probe(http: httpx.Client, server: Server, method: str) -> None:
    """One request of ``method`` to a route of each listener and to a path no route matches."""
    for url in (server.url("/metrics"), server.url("/healthz"), server.url("/no-such-path"), server.otlp_http):
        http.request(method, url)


@pytest.mark.parametrize("methods", [60])
def test_random_http_methods_create_no_series(serve: Callable[..., Server], methods: int) -> None:
    """``methods`` random method tokens (letters, ``-``, ``_``, ``!``) and a lower-case ``get``: methods are
    case-sensitive, so it is not GET."""
    server = serve()
    rng = random.Random(15)
    with httpx.Client(timeout=10) as http:
        probe(http, server, "GET")
        probe(http, server, "BREW")  # the first unknown method creates the _OTHER series of each (handler, status)
        counted = 4 * 2  # a request is counted just after its response is sent: wait for the count
        wait_until(lambda: server.total("http_requests_total") >= counted, what="the probes counted")
        before = series_count(server)
        for _ in range(methods):
            probe(http, server, "".join(rng.choices(string.ascii_letters + "-_!", k=rng.randint(1, 12))))
    raw_request(server.metrics_port, b"get /healthz HTTP/1.1\r\nHost: sloscope\r\nConnection: close\r\n\r\n")
    others = 4 * (1 + methods) + 1
    wait_until(lambda: server.total("http_requests_total", method="_OTHER") == others, what="every probe counted")
    assert series_count(server) == before
    samples = server.samples()
    sent = {
        method
        for (name, labels) in samples
        if name == "http_requests_total"
        for label, method in labels
        if label == "method"
    }
    assert sent == {"GET", "_OTHER"}


def flood_body(models: int, pools: int, pods: int) -> tuple[bytes, int]:
    """One interactive request (SLO headers) per (model, pool, pod), each its own trace of a gateway and a vLLM span."""
    spans, trace, now_ns = [], 0, time.time_ns()
    for model in range(models):
        for pool in range(pools):
            for pod in range(pods):
                trace += 1
                name = f"model-{model}"
                gateway = gateway_attributes(slo_ttft_ms="500", model=name, extra={"inference_pool": f"pool-{pool}"})
                start_ns = now_ns - 2_000_000_000
                spans.append(span(trace, 1, "gateway.request", gateway, start_ns=start_ns))
                spans.append(
                    span(
                        trace,
                        2,
                        "llm_request",
                        vllm_attributes(ttft=0.2, e2e=0.6, model=name, request_id=f"chatcmpl-r-{trace}"),
                        parent=1,
                        resource={"service.name": "vllm", "k8s.pod.name": f"pod-{pool}-{pod}"},
                        start_ns=start_ns + 1_000_000,
                        end_ns=start_ns + 700_000_000,
                    )
                )
    return to_otlp_json(export_request(spans)), trace


def families(server: Server) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for (name, labels), value in server.samples().items():
        out.setdefault(name, {})[labels] = value
    return out


@pytest.mark.parametrize(("models", "pools", "pods", "cap"), [(10, 10, 5, 40)])
def test_a_label_combination_flood_is_capped(
    serve: Callable[..., Server], models: int, pools: int, pods: int, cap: int
) -> None:
    """Every value is admitted by the per-label caps (their defaults: 50 models, 50 pools, 2000 pods); their
    combinations are not: each family keeps at most ``cap`` series of its own, the rest are summed in its
    ``__other__`` series, and the fold counter of the family says how many observations went there."""
    server = serve(limits={"max_series_per_family": cap})
    body, sent = flood_body(models, pools, pods)
    response = httpx.post(server.otlp_http, content=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 200, response.text
    wait_until(lambda: server.total(c.REQUESTS.exposed_name) == sent, what="every request published")
    seen = families(server)
    for definition in (c.REQUESTS, c.SLO_REQUESTS, c.SLO_VIOLATIONS, c.REQUESTS_FAILED, c.POD_REQUESTS):
        series = seen[definition.exposed_name]
        own = [labels for labels in series if (c.POOL, c.OTHER) not in labels]
        assert 0 < len(own) <= cap, definition.name
    for definition in (c.TTFT_SECONDS, c.E2E_SECONDS):  # a label set is its buckets, _sum and _count
        own_samples = sum(
            1
            for name in (f"{definition.name}_bucket", f"{definition.name}_sum", f"{definition.name}_count")
            for labels in seen[name]
            if (c.POOL, c.OTHER) not in labels
        )
        assert own_samples <= cap, definition.name
        assert sum(seen[f"{definition.name}_count"].values()) == sent
    for definition in (c.REQUESTS, c.POD_REQUESTS):
        series = seen[definition.exposed_name]
        assert sum(series.values()) == sent
        other = sum(v for labels, v in series.items() if (c.POOL, c.OTHER) in labels)
        assert other > 0
        assert server.value(c.SERIES_FOLDED.exposed_name, family=definition.exposed_name) == other
    assert server.total(c.SLO_REQUESTS.exposed_name, slo=c.SLO_TTFT) == sent
    assert server.value(c.LABEL_VALUES_FOLDED.exposed_name, label=c.MODEL) == 0  # no value was past its cap
