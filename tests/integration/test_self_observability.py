"""sloscope observes itself: HTTP server metrics on /metrics, and its own API traced with
opentelemetry-instrumentation-fastapi and exported over OTLP (here into a second sloscope)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from sloscope.receivers.otlp_http import PROTOBUF
from sloscope.testing import export_request, span, vllm_attributes

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration


def post(server: Server, body: bytes) -> None:
    request = urllib.request.Request(server.otlp_http, body, {"Content-Type": PROTOBUF})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@pytest.mark.parametrize("traced", [True, False], ids=["self-traced", "untraced"])
def test_http_server_metrics_use_route_templates(serve: Callable[..., Server], traced: bool) -> None:
    """Untraced, an export goes straight to the OTLP receiver; traced, through FastAPI: the same series."""
    server = serve(self_tracing={"enabled": traced})
    post(server, export_request([span(1, 1, "llm_request", vllm_attributes())]).SerializeToString())
    for path in ("/healthz", "/readyz", "/metrics"):
        urllib.request.urlopen(server.url(path), timeout=5).read()
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(server.url("/no/such/path"), timeout=5)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.otlp_http, timeout=5)  # a GET
    assert refused.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as unknown:
        urllib.request.urlopen(urllib.request.Request(server.otlp_http + "/x", b"", method="POST"), timeout=5)
    assert unknown.value.code == 404
    samples = server.samples()

    def requests(handler: str, method: str, status: str) -> float:
        key = frozenset({"handler": handler, "method": method, "status": status}.items())
        return samples.get(("http_requests_total", key), 0.0)

    assert requests("/v1/traces", "POST", "200") == 1
    assert requests("/v1/traces", "GET", "405") == 1
    assert requests("none", "POST", "404") == 1
    assert requests("/healthz", "GET", "200") == 1
    assert requests("/readyz", "GET", "200") == 1
    assert requests("none", "GET", "404") == 1  # unmatched paths share one series
    duration = frozenset({"handler": "/v1/traces", "method": "POST"}.items())
    assert samples[("http_request_duration_seconds_count", duration)] == 1


@pytest.mark.parametrize("http_server", ["native", "uvicorn"])
def test_own_api_spans_are_exported_over_otlp(serve: Callable[..., Server], http_server: str) -> None:
    collector = serve()  # a second sloscope stands in for the tracing backend
    tracing = {"enabled": True, "otlp_endpoint": collector.otlp_grpc}
    server = serve(self_tracing=tracing, listeners={"otlp_http_server": http_server})
    post(server, export_request([span(2, 1, "llm_request", vllm_attributes())]).SerializeToString())
    # The BatchSpanProcessor exports within its schedule delay (5 s by default) or at shutdown.
    assert server.stop() == 0
    # The export's server span: no other request reached a traced listener (scrapes and probes are not traced).
    wait_until(lambda: collector.value("sloscope_spans_received_total", transport="grpc") >= 1, what="own spans")
    assert collector.value("sloscope_spans_received_total", transport="grpc") == 1
    assert collector.value("sloscope_traces_pending") >= 1  # sloscope's spans are no requests: they wait, unjoined
