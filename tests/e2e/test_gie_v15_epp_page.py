"""The real GIE v1.5.0 EPP's ``/metrics`` read by sloscope, with the latency producer's streaming mode off and on.

gateway-api-inference-extension v1.5.0's ``predicted-latency-producer`` has ``streamingMode``, off by default
(``pkg/epp/framework/plugins/requestcontrol/requestdataproducer/predictedlatency/plugin.go:129-136``). Off, the
"TTFT" it records in ``inference_objective_request_ttft_seconds`` is taken at the end of the response, the whole
request's duration, and no TPOT is recorded; on, TTFT is taken at the first streamed chunk and TPOT is recorded.
sloscope reads the page through the API server's authentication (the EPP's ``--metrics-endpoint-auth``) and must
republish the first as ``sloscope_epp_e2e_seconds`` and the second as ``sloscope_epp_ttft_seconds`` and
``sloscope_epp_tpot_seconds``: exactly the EPP's observations, one per request the client sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import wait_until
from tests.support.fleet.client import Call, send_all
from tests.support.fleet.fleet import MODEL, POOL, Fleet, FleetSpec, PodSpec, running_fleet
from tests.support.fleet.series import Samples, samples, total

pytestmark = pytest.mark.timeout(600)

PODS = (PodSpec(30, 5), PodSpec(60, 8))
REQUESTS = 12
EPP_TTFT = "inference_objective_request_ttft_seconds"
EPP_TPOT = "inference_objective_request_tpot_seconds"


@pytest.fixture(scope="module", params=[None, True], ids=["streaming-default-off", "streaming-on"])
def fleet(
    request: pytest.FixtureRequest, fleet_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    spec = FleetSpec(pods=PODS, streaming_mode=request.param, gateway_traces=False)
    with running_fleet(fleet_tools, tmp_path_factory.mktemp("fleet"), spec) as running:
        yield running


def republished(fleet: Fleet, name: str) -> tuple[float, float]:
    values = samples(fleet.sloscope_text())
    labels = {"pool": POOL, "model": MODEL, "target_model": MODEL}
    return total(values, f"{name}_sum", **labels), total(values, f"{name}_count", **labels)


def on_page(page: Samples, family: str) -> tuple[float, float]:
    labels = {"target_model_name": MODEL}
    return total(page, f"{family}_sum", **labels), total(page, f"{family}_count", **labels)


def test_the_epps_latencies_are_republished_as_what_they_measure(fleet: Fleet) -> None:
    seen = send_all(fleet.gateway_url, [Call(slo_ttft_ms=2000, max_tokens=8) for _ in range(REQUESTS)], 4)
    assert [s.status for s in seen] == [200] * REQUESTS, [s.body for s in seen if s.status != 200]
    page = samples(fleet.epp_text())
    assert on_page(page, EPP_TTFT)[1] == REQUESTS  # one observation a request, in either mode
    streaming = fleet.spec.streaming_mode is True
    if streaming:
        assert on_page(page, EPP_TPOT)[1] == REQUESTS
        wanted = {"sloscope_epp_ttft_seconds": EPP_TTFT, "sloscope_epp_tpot_seconds": EPP_TPOT}
        absent = "sloscope_epp_e2e_seconds"
    else:
        assert on_page(page, EPP_TPOT) == (0, 0)  # no TPOT without streaming mode
        # its "TTFT" is the whole request: longer than every streamed first token the client saw
        assert on_page(page, EPP_TTFT)[0] > sum(s.ttft or 0 for s in seen)
        wanted = {"sloscope_epp_e2e_seconds": EPP_TTFT}
        absent = "sloscope_epp_ttft_seconds"
    for name, family in wanted.items():
        wait_until(lambda n=name: republished(fleet, n)[1] == REQUESTS, timeout=20, what=f"{name} republished")
        assert republished(fleet, name) == on_page(page, family), name
    assert republished(fleet, absent) == (0, 0)
