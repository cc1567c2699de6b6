"""Credentials written into configured URLs never reach /metrics or the log of a real ``sloscope serve``.

Every kind of configured address carries ``user:password@`` here: a static target's address, the
training and prediction URLs, the EPP's URL. The servers behind them refuse connections (or, for the
pod page, ignore the basic authentication httpx makes of the userinfo), so every call fails and is
logged at DEBUG with its URL. A predictor with a ``name`` is labelled by the name, the others by the URL
with its userinfo masked; a target address used as the pod name loses its userinfo.
"""

from __future__ import annotations

import base64
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sloscope import conventions as c
from sloscope.demo.ports import free_port as refused_port
from sloscope.testing import export_request, gateway_attributes, span, vllm_attributes
from tests.integration.conftest import Server, wait_until
from tests.support.page_server import PageServer, vllm_page

pytestmark = pytest.mark.integration

SECRET = "s3cret-Pa55"
USERINFO = f"sloscope:{SECRET}@"


def send_one(server: Server, pod: str) -> None:
    now = time.time_ns()
    spans = [
        span(1, 1, "gateway.request", gateway_attributes(model="llama"), start_ns=now - 600_000_000),
        span(
            1,
            2,
            "llm_request",
            vllm_attributes(model="llama"),
            parent=1,
            resource={"service.name": "vllm", "k8s.pod.name": pod},
            start_ns=now - 599_000_000,
            end_ns=now - 99_000_000,
        ),
    ]
    body = export_request(spans).SerializeToString()
    request = urllib.request.Request(server.otlp_http, body, {"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_userinfo_in_configured_urls_never_appears_in_metrics_or_the_log(
    serve: Callable[..., Server], tmp_path: Path, shared: Path
) -> None:
    training, prediction, epp, named_prediction = (refused_port() for _ in range(4))
    (tmp_path / "slo.yaml").write_text(yaml.safe_dump({"version": "sloscope/v1", "classes": []}))
    with PageServer(vllm_page(shared)) as page:
        server = serve(
            log_level="DEBUG",
            slo_spec=str(tmp_path / "slo.yaml"),
            join={"window_seconds": 0.2, "trace_ttl_seconds": 5.0},
            scrape={"interval_seconds": 0.3, "timeout_seconds": 1.0, "stale_after_seconds": 60},
            predictions={"batch_wait_seconds": 0.1, "health_interval_seconds": 0.3, "breaker_failures": 1},
            pools=[
                {
                    "name": "masked",
                    "targets": {"static": [{"address": USERINFO + page.address}]},
                    "predictor": {
                        "training_url": f"http://{USERINFO}127.0.0.1:{training}",
                        "prediction_urls": [f"http://{USERINFO}127.0.0.1:{prediction}/"],
                    },
                    "epp": {"metrics_url": f"http://{USERINFO}127.0.0.1:{epp}/metrics"},
                },
                {
                    "name": "named",
                    "predictor": {
                        "name": "llama-predictor",
                        "training_url": f"https://{USERINFO}127.0.0.1:{training}",
                        "prediction_urls": [f"http://{USERINFO}127.0.0.1:{named_prediction}"],
                    },
                    "epp": {"name": "llama-epp", "metrics_url": f"http://{USERINFO}127.0.0.1:{epp}/metrics"},
                },
            ],
        )
        # The pod is named by its address without the userinfo, which is also the address spans name.
        wait_until(lambda: server.value("sloscope_pod_up", pool="masked", pod=page.address) == 1.0, what="pod up")
        scraped = page.requests
        wait_until(lambda: page.requests >= scraped + 3, what="a pod sample older than the request")
        send_one(server, page.address)
        refused = {"purpose": c.PURPOSE_SHADOW, "result": c.RESULT_CONNECTION_ERROR}
        wait_until(
            lambda: server.value("sloscope_predictor_requests_total", pool="masked", **refused) >= 1,
            what="the prediction call refused",
        )
        for kind in (c.KIND_EPP, c.KIND_TRAINING_SERVER, c.KIND_PREDICTION_SERVER):
            wait_until(
                lambda kind=kind: (
                    server.value("sloscope_scrapes_total", kind=kind, result=c.RESULT_CONNECTION_ERROR)  # type: ignore[misc]
                    >= 2
                ),
                what=f"{kind} polls refused",
            )
        samples = server.samples()
        text = server.text()
        assert server.stop() == 0

    up = {
        (labels["pool"], labels["server"], labels["role"])
        for name, label_set in samples
        if name == "sloscope_predictor_up"
        for labels in [dict(label_set)]
    }
    assert up == {
        ("masked", f"http://xxxxx@127.0.0.1:{training}", c.ROLE_TRAINING),
        ("masked", f"http://xxxxx@127.0.0.1:{prediction}", c.ROLE_PREDICTION),
        ("named", "llama-predictor", c.ROLE_TRAINING),
        ("named", "llama-predictor-0", c.ROLE_PREDICTION),
    }
    log = "\n".join(server.log)
    encoded = base64.b64encode(USERINFO[:-1].encode()).decode()  # what basic authentication sends
    for where, content in (("/metrics", text), ("stderr", log)):
        assert SECRET not in content, f"the password reached {where}"
        assert encoded not in content, f"the basic-auth header reached {where}"
    assert "xxxxx@" in log  # the URLs were logged, masked
    assert "EPP of pool named at llama-epp" in log  # a named EPP is logged by its name
