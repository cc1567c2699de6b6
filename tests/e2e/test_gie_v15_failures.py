"""Shed and abandoned requests through a real GIE v1.5.0 EPP, counted by sloscope with the client's reasons.

Shedding is the EPP's own (v1.5.0, flow control off, the default: ``cmd/epp/runner/runner.go`` logs "using legacy
admission control"): ``LegacyAdmissionController.Admit`` refuses a request whose InferenceObjective has a
negative priority while the pool is saturated (``pkg/epp/requestcontrol/admission.go:65-84``), answered with
HTTP 429 ``system saturated, sheddable request dropped`` (``pkg/common/error/error.go:74-75``). Saturation is the
mean over pods of max(waiting / 5, KV-cache usage / 0.8) (``saturationdetector/utilization/detector.go:110-135``,
``config.go:30-33``): here every pod runs one request at a time and critical requests are queued on each until
every queue holds at least five. A client that leaves mid-stream makes vLLM emit no span
(``output_processor.py:869-889`` of vLLM 0.33.0; the proxy does the same), and Envoy's span ends with the status it
had sent, 200.

sloscope sees Envoy's span (``ingress``, its gateway span here, as docs/sending-traces.md tells GIE v1.5 users) with
the SLO headers and the status: HTTP 429 is ``shed``; an answered span's call is counted as a request; a call whose
model server never answered and whose status says nothing is ``aborted``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import wait_until
from tests.support.fleet.client import Call, Seen, send_all
from tests.support.fleet.fleet import POOL, Fleet, FleetSpec, PodSpec, running_fleet
from tests.support.series import grown, samples, total

pytestmark = pytest.mark.timeout(600)

# One request at a time per pod, each taking 1.5 s to its first token: queues build at once, and drain slowly.
PODS = tuple(PodSpec(ttft_ms=1500, itl_ms=20, max_num_seqs=1) for _ in range(4))
QUEUED_PER_POD = 12  # saturated (mean queue >= 5) for (12 - 5) x 1.5 s = 10 s after the queues are full


@pytest.fixture(scope="module")
def fleet(fleet_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    settings = {"join": {"gateway_span_names": ["ingress"]}}
    spec = FleetSpec(pods=PODS, sloscope_settings=settings, latency_routing=False)
    with running_fleet(fleet_tools, tmp_path_factory.mktemp("fleet"), spec) as running:
        yield running


def waiting(fleet: Fleet) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in fleet.sloscope_text().splitlines()
        if line.startswith("sloscope_pod_requests_waiting{")
    )


def test_sheddable_requests_refused_under_saturation_are_shed_and_the_rest_are_served(fleet: Fleet) -> None:
    critical = [Call(slo_ttft_ms=60000, objective="critical", max_tokens=2) for _ in range(4 * (QUEUED_PER_POD + 1))]
    results: list[Seen] = []
    load = threading.Thread(target=lambda: results.extend(send_all(fleet.gateway_url, critical, len(critical))))
    load.start()
    # the pods' own pages say the queues are full (sloscope scrapes them each second; the EPP every 50 ms)
    wait_until(lambda: waiting(fleet) >= 4 * QUEUED_PER_POD - 2, timeout=30, what="queues on every pod")
    sheddable = [Call(slo_ttft_ms=60000, objective="sheddable", max_tokens=2) for _ in range(6)]
    refused = send_all(fleet.gateway_url, sheddable, 3)
    load.join(120)
    assert [s.status for s in refused] == [429] * 6, [(s.status, s.body) for s in refused]
    assert all("system saturated, sheddable request dropped" in s.body for s in refused)
    assert [s.status for s in results] == [200] * len(critical)

    served = len(critical)
    wait_until(
        lambda: total(samples(fleet.sloscope_text()), "sloscope_requests_total") >= served + len(refused),
        timeout=40,
        what="every request evaluated",
    )
    values = samples(fleet.sloscope_text())
    assert total(values, "sloscope_requests_failed_total", reason="shed") == len(refused)
    assert total(values, "sloscope_requests_failed_total") == len(refused)
    assert total(values, "sloscope_requests_total") == served + len(refused)
    # a failure reached no pod, and no span of the call names its pool: where it is counted is not asserted here
    assert total(values, "sloscope_requests_total", pool=POOL) >= served
    # a shed request is a bad event of the SLO it carried (standard class: a TTFT target above 1 s)
    assert total(values, "sloscope_slo_requests_total", slo_class="standard", slo="ttft") == served + len(refused)
    assert total(values, "sloscope_slo_violations_total", slo_class="standard", slo="ttft") == len(refused)


def test_a_client_that_leaves_mid_stream_is_an_aborted_request(fleet: Fleet) -> None:
    # Class interactive (a 1 s TTFT target), which no other test here uses: a call of an earlier test still in its
    # failure window cannot be counted among these. Every pod takes 1.5 s to a first token: all six miss it.
    before = samples(fleet.sloscope_text())
    leaving = [Call(slo_ttft_ms=1000, max_tokens=200, abort_after_chunks=2) for _ in range(3)]
    staying = [Call(slo_ttft_ms=1000, max_tokens=3) for _ in range(3)]
    seen = send_all(fleet.gateway_url, [*leaving, *staying], 6)
    assert [s.aborted for s in seen] == [True] * 3 + [False] * 3
    assert all(s.status == 200 for s in seen)
    time.sleep(1.0)  # nothing of the leavers must be counted as served, however long we wait
    wait_until(
        lambda: (
            total(samples(fleet.sloscope_text()), "sloscope_requests_total", slo_class="interactive")
            - total(before, "sloscope_requests_total", slo_class="interactive")
            >= 6
        ),
        timeout=60,
        what="the aborted requests",
    )
    after = samples(fleet.sloscope_text())

    def grew(name: str, **labels: str) -> float:
        return grown(after, before, name, **labels)

    mine = {"slo_class": "interactive"}
    assert grew("sloscope_requests_failed_total", reason="aborted", **mine) == 3
    assert grew("sloscope_requests_failed_total", **mine) == 3
    assert grew("sloscope_requests_total", **mine) == 6
    # the chart's profile without the latency predictor scores by queue, KV cache and prefix: routing "default"
    assert grew("sloscope_requests_total", pool=POOL, routing="default", **mine) == 3
    assert grew("sloscope_slo_requests_total", slo="ttft", **mine) == 6
    assert grew("sloscope_slo_violations_total", slo="ttft", **mine) == 6  # the leavers are bad events too
    assert all(s.ttft is not None and s.ttft > 1.25 for s in seen)  # the client saw every first token late
