"""Trickling peers against a real ``sloscope serve``: every outbound call ends at its total deadline.

A trickling peer (tests/support/trickle_server.py) answers at once with headers and then one body byte
every 0.5 s, so a per-read timeout never fires. It stands in for a model-server page of pool A and for
pool A's whole latency predictor (training server, prediction server: health GETs and
``POST /predict/bulk/strict``). Pool B has a healthy page and prediction stand-in.

- Each such call is cut at its deadline and counted ``timeout`` (``sloscope_scrapes_total`` for the page
  and the health polls, ``sloscope_predictor_requests_total`` for the prediction call), while pool B's
  shadow predictions keep flowing during pool A's call. The EPP's own client bounds a prediction call the
  same way: ``http.Client{Timeout: config.HTTPTimeout}``, a total deadline body included
  (latencypredictorclient/latencypredictor_async.go:65 at llm-d-router ebab6879).
- SIGTERM while pool A's call trickles: the process exits within ``shutdown_grace_seconds`` and the
  record store holds every request, pool A's skipped ``shutdown``, pool B's with their prediction.

``REQUESTS_A`` / ``REQUESTS_B`` set the scale (the campaign that found the hang used 1,500 requests).
"""

from __future__ import annotations

import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from sloscope import conventions as c
from sloscope.store.files import list_files
from sloscope.testing import export_request, gateway_attributes, span, vllm_attributes
from tests.integration.conftest import Server, wait_until
from tests.support.page_server import PageServer, vllm_page
from tests.support.prediction_server import PredictionServer
from tests.support.trickle_server import TrickleServer

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
STRICT = "/predict/bulk/strict"
REQUESTS_A = 150  # more than one batch of 100: one call in flight, the rest queued behind it
REQUESTS_B = 50
GRACE_SECONDS = 4.0


def send(server: Server, pod: str, first: int, count: int) -> None:
    """``count`` joined requests to ``pod`` (a gateway span and vLLM's child span each), arrived just now."""
    now = time.time_ns()
    spans = []
    for n in range(first, first + count):
        trace = n + 1
        spans.append(
            span(
                trace,
                1,
                "gateway.request",
                gateway_attributes(model=MODEL, request_id=f"{pod}-{n}"),
                resource={"service.name": "gateway"},
                start_ns=now - 600_000_000,
            )
        )
        spans.append(
            span(
                trace,
                2,
                "llm_request",
                vllm_attributes(ttft=0.1, e2e=0.5, completion_tokens=11, prompt_tokens=400, model=MODEL),
                parent=1,
                resource={"service.name": "vllm", "k8s.pod.name": pod},
                start_ns=now - 599_000_000,
                end_ns=now - 99_000_000,
            )
        )
    request = urllib.request.Request(
        server.otlp_http,
        data=export_request(spans).SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def settings(
    tmp: Path, trickle: TrickleServer, page_a: PageServer, page_b: PageServer, predictor_b: str
) -> dict[str, Any]:
    (tmp / "slo.yaml").write_text(yaml.safe_dump({"version": "sloscope/v1", "classes": []}))  # no headroom calls
    return {
        "slo_spec": str(tmp / "slo.yaml"),
        "join": {"window_seconds": 0.3, "trace_ttl_seconds": 5.0},
        "scrape": {"interval_seconds": 0.5, "timeout_seconds": 1.0, "stale_after_seconds": 60},
        "predictions": {
            "streaming_mode": True,  # TTFT and TPOT predictions compared apart
            "batch_wait_seconds": 0.1,
            "health_interval_seconds": 0.5,
            "breaker_failures": 1000,  # pool A's server is called again and again, never skipped
            "max_per_second": 10_000,
        },
        "pools": [
            {
                "name": "pool-a",
                "model": MODEL,
                "targets": {
                    "static": [{"address": page_a.address, "pod": "a-0"}, {"address": trickle.address, "pod": "a-slow"}]
                },
                "predictor": {"training_url": trickle.url, "prediction_urls": [trickle.url]},
            },
            {
                "name": "pool-b",
                "model": MODEL,
                "targets": {"static": [{"address": page_b.address, "pod": "b-0"}]},
                "predictor": {"prediction_urls": [predictor_b]},
            },
        ],
    }


@pytest.fixture
def peers(shared: Path) -> Iterator[tuple[TrickleServer, PageServer, PageServer, PredictionServer]]:
    with (
        TrickleServer() as trickle,
        PageServer(vllm_page(shared)) as page_a,
        PageServer(vllm_page(shared)) as page_b,
        PredictionServer() as predictor_b,
    ):
        yield trickle, page_a, page_b, predictor_b


def start(serve: Callable[..., Server], tmp: Path, peers: Any, **overrides: Any) -> Server:
    trickle, page_a, page_b, predictor_b = peers
    config = settings(tmp, trickle, page_a, page_b, predictor_b.url)
    for section, values in overrides.items():
        config[section] = {**config.get(section, {}), **values} if isinstance(values, dict) else values
    server = serve(**config)
    wait_until(
        lambda: (
            server.value("sloscope_pod_up", pool="pool-a", pod="a-0") == 1.0
            and server.value("sloscope_pod_up", pool="pool-b", pod="b-0") == 1.0
        ),
        what="the healthy pods scraped",
    )
    # A few scrapes more: each healthy pod has a sample older than the requests' arrival (0.6 s ago).
    scraped = server.value("sloscope_scrapes_total", kind=c.KIND_MODEL_SERVER, result="success")
    wait_until(
        lambda: server.value("sloscope_scrapes_total", kind=c.KIND_MODEL_SERVER, result="success") >= scraped + 6,
        what="three more scrapes of each healthy pod",
    )
    return server


def shadow_predictions(server: Server, pool: str) -> float:
    return server.value("sloscope_predictions_total", model=MODEL, pool=pool, signal="ttft", source="shadow")


def test_trickling_peers_are_cut_at_the_deadline_and_another_pool_keeps_its_predictions(
    serve: Callable[..., Server], tmp_path: Path, peers: Any
) -> None:
    trickle = peers[0]
    # A prediction deadline long enough that pool B's whole round trip fits well inside pool A's call.
    server = start(serve, tmp_path, peers, predictions={"timeout_seconds": 8.0})

    send(server, "a-0", 0, REQUESTS_A)
    wait_until(lambda: trickle.trickling(STRICT), what="pool A's prediction call trickling")
    in_flight = trickle.trickling(STRICT)
    send(server, "b-0", 10_000, REQUESTS_B)
    wait_until(lambda: shadow_predictions(server, "pool-b") == REQUESTS_B, what="pool B's shadow predictions")
    assert in_flight <= trickle.trickling(STRICT), "pool B's predictions waited for pool A's call"
    assert server.value("sloscope_predictor_requests_total", pool="pool-b", purpose="shadow", result="success") >= 1

    # Every trickled call ends at its deadline, counted as a timeout.
    timeouts = {"pool": "pool-a", "purpose": "shadow", "result": "timeout"}
    wait_until(lambda: server.value("sloscope_predictor_requests_total", **timeouts) >= 1, what="a prediction timeout")
    for kind in (c.KIND_MODEL_SERVER, c.KIND_TRAINING_SERVER, c.KIND_PREDICTION_SERVER):
        wait_until(
            lambda kind=kind: server.value("sloscope_scrapes_total", kind=kind, result="timeout") >= 1,  # type: ignore[misc]
            what=f"a {kind} timeout",
        )
    assert in_flight.isdisjoint(trickle.trickling()), "a trickled call outlived its deadline"
    assert server.value("sloscope_pod_up", pool="pool-a", pod="a-slow") == 0.0
    assert server.value("sloscope_predictor_up", pool="pool-a", server=trickle.url, role="prediction") == 0.0
    wait_until(
        lambda: server.value("sloscope_shadow_skipped_total", pool="pool-a", reason="failed") == REQUESTS_A,
        what="pool A's requests counted failed",
    )
    assert shadow_predictions(server, "pool-a") == 0
    assert server.stop() == 0


def test_sigterm_during_a_trickling_call_exits_in_time_with_every_record_written(
    serve: Callable[..., Server], tmp_path: Path, peers: Any
) -> None:
    trickle = peers[0]
    store = tmp_path / "records"
    server = start(
        serve,
        tmp_path,
        peers,
        # A deadline beyond the grace: only shutdown can end pool A's call.
        predictions={"timeout_seconds": 60.0},
        store={"enabled": True, "directory": str(store), "flush_interval_seconds": 3600},
        shutdown_grace_seconds=GRACE_SECONDS,
    )
    send(server, "a-0", 0, REQUESTS_A)
    send(server, "b-0", 10_000, REQUESTS_B)
    wait_until(lambda: shadow_predictions(server, "pool-b") == REQUESTS_B, what="pool B's shadow predictions")
    wait_until(lambda: trickle.trickling(STRICT), what="pool A's prediction call trickling")
    assert server.total("sloscope_requests_total") == REQUESTS_A + REQUESTS_B
    assert list_files(store) == []

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    code = server.process.wait(GRACE_SECONDS + 10)
    elapsed = time.monotonic() - signalled
    assert code == 0
    assert elapsed <= GRACE_SECONDS + 2.0, f"exited {elapsed:.1f}s after SIGTERM, grace {GRACE_SECONDS}s"

    rows = [row for f in list_files(store) for row in pq.read_table(f.path).to_pylist()]
    assert len(rows) == REQUESTS_A + REQUESTS_B
    outcome = Counter((row["pool"], row["prediction_source"], row["prediction_skipped"]) for row in rows)
    assert outcome == {
        ("pool-a", c.SOURCE_NONE, c.SKIP_SHUTDOWN): REQUESTS_A,
        ("pool-b", c.SOURCE_SHADOW, None): REQUESTS_B,
    }
    assert any("recorded without their shadow prediction" in line for line in server.log)
