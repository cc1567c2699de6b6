"""The latency-slo-admitter of a real GIE v1.5.0 EPP refusing sheddable requests, counted by sloscope.

Upstream (gateway-api-inference-extension v1.5.0, df9f8909fe06), the facts this test stands on:

- ``latency-slo-admitter`` (``pkg/epp/framework/plugins/requestcontrol/admitter/latencyslo/plugin.go:94-150``) refuses
  a request only when all of these hold: its InferenceObjective's priority is negative, it carries an SLO header,
  the predicted-latency producer stored a prediction for the endpoints, no endpoint's prediction is within the SLO
  (``LatencyPredictionInfo.IsValid``; with streaming off, the default, only TTFT is judged: ``prediction.go:126-154``),
  every endpoint is running a request (``RunningRequestsSize > 0``) and none is cold (KV-cache usage >= 2 %);
- the director answers the refusal ``errcommon.Internal`` "request cannot be admitted"
  (``pkg/epp/requestcontrol/director.go:188-191``), which ``BuildErrResponse`` turns into HTTP **500** with that text
  as the body (``pkg/common/error/error.go:62-100``), not the 429 of a saturation refusal; the EPP counts it in
  ``inference_objective_request_error_total{error_code="Internal"}`` (``pkg/epp/handlers/server.go:175-180``);
- neither of the EPP's spans (``gateway.request``, ``gateway.request_orchestration``) records a status or an error
  (no ``SetStatus`` or ``RecordError`` anywhere in ``pkg/epp``), and Envoy does not trace a response body.

So nothing a trace carries tells this refusal from any other HTTP 500 answered before a model server: sloscope counts
it as a failed request of reason ``error`` (docs/sending-traces.md says so, with these files), a bad event of every SLO
it carried. The pods run llm-d-inference-sim v0.10.2 with its KV cache on, so a running request's prompt blocks make
``vllm:kv_cache_usage_perc`` what the admitter reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sloscope.conventions import FAILURE_REASONS
from tests.integration.conftest import wait_until
from tests.support.fleet.client import Call, Seen, send_all
from tests.support.fleet.fleet import Fleet, FleetSpec, PodSpec, running_fleet
from tests.support.series import page, samples, total

pytestmark = pytest.mark.timeout(600)

# Two requests at a time a pod, each long enough (1 s to the first token, then 600 x 15 ms) to keep it busy while the
# refused ones are sent, inside the simulator's 1024-token context. 256 blocks of 16 tokens: a 300-word prompt holds 19
# of them, 7 % of the cache.
PODS = tuple(PodSpec(ttft_ms=1000, itl_ms=15, max_num_seqs=2, kv_cache_blocks=256) for _ in range(4))
REFUSED = 5


def busy_calls(n: int) -> list[Call]:
    return [Call(slo_ttft_ms=60000, objective="critical", max_tokens=600, prompt_words=300) for _ in range(n)]


@pytest.fixture(scope="module")
def fleet(fleet_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    settings = {"join": {"gateway_span_names": ["ingress"]}}
    spec = FleetSpec(pods=PODS, sloscope_settings=settings)
    with running_fleet(fleet_tools, tmp_path_factory.mktemp("fleet"), spec) as running:
        yield running


def pod_gauges(fleet: Fleet) -> list[tuple[float, float]]:
    """(running requests, KV-cache usage) of each pod, from its own page: what the EPP scrapes every 50 ms."""
    out = []
    for pod in fleet.pods:
        values = samples(page(f"http://{pod.address}:{fleet.pod_port}/metrics"))
        out.append((total(values, "vllm:num_requests_running"), total(values, "vllm:kv_cache_usage_perc")))
    return out


def every_pod_busy_and_warm(fleet: Fleet) -> bool:
    return all(running > 0 and usage >= 0.02 for running, usage in pod_gauges(fleet))


def test_sheddable_requests_no_pod_can_serve_within_their_slo_are_refused_and_counted_bad(fleet: Fleet) -> None:
    # Two long requests sent to each pod itself, past the EPP: what the EPP reads of the pods (running requests, KV
    # cache) is their own pages, and no placement of the EPP's can leave a pod idle. (Through the gateway the EPP
    # kept one pod idle for four rounds in one run.)
    busy: list[Seen] = []
    senders = [
        threading.Thread(target=lambda url: busy.extend(send_all(url, busy_calls(2), 2)), args=(pod_url,))
        for pod_url in (f"http://{pod.address}:{fleet.pod_port}" for pod in fleet.pods)
    ]
    for sender in senders:
        sender.start()
    wait_until(lambda: every_pod_busy_and_warm(fleet), timeout=20, what="every pod running a request")

    # a 1 ms TTFT target: no prediction is within it, and no pod is idle or cold
    tight = [Call(slo_ttft_ms=1, objective="sheddable", max_tokens=4) for _ in range(REFUSED)]
    refused = send_all(fleet.gateway_url, tight, 1)
    assert every_pod_busy_and_warm(fleet), f"a pod went idle while the refused requests were sent: {pod_gauges(fleet)}"
    for sender in senders:
        sender.join(120)
    assert [s.status for s in refused] == [500] * REFUSED, [(s.status, s.body) for s in refused]
    assert all("request cannot be admitted" in s.body for s in refused), refused[0].body
    assert [s.status for s in busy] == [200] * 2 * len(fleet.pods), [(s.status, s.body) for s in busy]
    served = len(busy)

    # the EPP's own account of the same refusals
    epp = samples(fleet.epp_text())
    assert total(epp, "inference_objective_request_error_total", error_code="Internal") == REFUSED

    wait_until(
        lambda: total(samples(fleet.sloscope_text()), "sloscope_requests_total") >= served + REFUSED,
        timeout=40,
        what="every request evaluated",
    )
    values = samples(fleet.sloscope_text())
    failed = {reason: total(values, "sloscope_requests_failed_total", reason=reason) for reason in FAILURE_REASONS}
    assert total(values, "sloscope_requests_total") == served + REFUSED, failed
    # an HTTP 500 answered before any model server, with no span saying why: an error, not "shed"
    assert total(values, "sloscope_requests_failed_total", reason="error") == REFUSED
    assert total(values, "sloscope_requests_failed_total") == REFUSED
    # a 1 ms target is the interactive class (TTFT targets up to 1 s); the busy requests passed no gateway, so no
    # SLO header reached sloscope: no class ("none")
    assert total(values, "sloscope_slo_requests_total", slo_class="interactive", slo="ttft") == REFUSED
    assert total(values, "sloscope_slo_violations_total", slo_class="interactive", slo="ttft") == REFUSED
    assert total(values, "sloscope_requests_total", slo_class="none") == served
