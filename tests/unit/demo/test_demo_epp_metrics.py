"""The demo EPP's /metrics page: each generation's families and label sets, read back by sloscope's own readers.

The label sets are pinned against the constructed pages of ``fixtures/llm-d-router/epp-metrics.prom``
(llm-d-router ebab6879: ``metrics/llm_d_router_metrics.go:40,143,156,262``, ``predictedlatency/metrics.go``,
``inflightload/metrics.go:32-48``) and ``fixtures/epp/slo-metrics-constructed-from-code.prom``
(gateway-api-inference-extension 4d37fbca), read with prometheus_client's parser.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sloscope import conventions as c
from sloscope.demo.epp_metrics import EppMetrics
from sloscope.receivers.epp_inflight import INFLIGHT_FAMILIES, EndpointLoad, parse_inflight
from sloscope.receivers.epp_page import EPP_FAMILIES, normalize
from sloscope.receivers.exposition import ExpositionParser

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PODS = [("vllm-0", "127.0.0.1:8001"), ("vllm-1", "127.0.0.1:8002")]


def label_sets(text: str) -> dict[str, set[frozenset[str]]]:
    """Family -> the label-name sets of its samples (``le`` left out)."""
    out: dict[str, set[frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(family.name, set()).add(frozenset(sample.labels) - {"le"})
    return out


def traffic(epp: EppMetrics) -> None:
    """Two requests on vllm-0 (one routed on a prediction, missing its TTFT SLO), a P/D one still in flight."""
    epp.scheduled("a", "vllm-0", 100)
    epp.predicted(0.003)
    epp.scheduled("b", "vllm-0", 40)
    epp.scheduled("pd", "vllm-1", 500)
    epp.scheduled("pd", "vllm-0", 500, primary=False)  # the prefill profile's pick: in flight, no attempt
    epp.ended("a", ttft=0.25, tpot=0.02, predicted_ttft=0.2, predicted_tpot=0.03, slo_ttft=0.2, slo_tpot=0.05)
    epp.ended("b", ttft=0.1, tpot=None)  # one token, default profile: the core's TTFT only


@pytest.mark.parametrize(
    ("generation", "fixture"),
    [("llm-d", "llm-d-router/epp-metrics.prom"), ("gie-2025", "epp/slo-metrics-constructed-from-code.prom")],
)
def test_every_family_has_the_label_set_of_its_generations_page(shared: Path, generation: str, fixture: str) -> None:
    epp = EppMetrics(generation, "demo-pool", MODEL, PODS)
    traffic(epp)
    ours = label_sets(epp.page())
    theirs = label_sets((shared / "fixtures" / fixture).read_text())
    if generation == "gie-2025":  # the late-2025 page of the fixture shows no scheduler attempts nor requests:
        for snippet in ("scheduler_attempts_total_metrics", "request_total_metric"):  # the EPP's testdata do
            theirs |= label_sets((shared / "fixtures" / "epp" / snippet).read_text())
    for family, sets in ours.items():
        # the late-2025 fixture writes out the TTFT families and says the TPOT ones are "analogous"
        expected = theirs.get(family) or theirs.get(family.replace("tpot", "ttft"))
        assert expected is not None, family
        assert sets <= expected, family
    if generation == "gie-2025":
        assert not [f for f in ours if f.startswith("llm_d_epp_")]


def test_sloscope_reads_the_llm_d_page_with_its_defects_repaired() -> None:
    epp = EppMetrics("llm-d", "demo-pool", MODEL, PODS)
    traffic(epp)
    samples = ExpositionParser(EPP_FAMILIES | INFLIGHT_FAMILIES).parse(epp.page())
    page = normalize(samples, "demo-pool")
    assert not page.dropped
    assert page.streaming_off == frozenset()
    plugin = ("demo-pool", MODEL, MODEL, "predicted-latency-producer", "predicted-latency-producer")
    assert page.counters[c.EPP_SCHEDULER_ATTEMPTS.name] == {
        ("demo-pool", MODEL, "vllm-0", "success"): 2.0,
        ("demo-pool", MODEL, "vllm-1", "success"): 1.0,
    }
    assert page.violations == {(*plugin, "ttft"): 1.0}
    ttft = page.histograms[c.EPP_TTFT_SECONDS.name][("demo-pool", MODEL, MODEL)]
    assert (ttft.count, ttft.sum) == (2, pytest.approx(0.35))
    assert page.histograms[c.EPP_TPOT_SECONDS.name][("demo-pool", MODEL, MODEL)].count == 1
    assert page.histograms[c.EPP_PREDICTED_TTFT_SECONDS.name][plugin].sum == pytest.approx(0.2)
    assert page.histograms[c.EPP_TTFT_PREDICTION_DURATION_SECONDS.name][plugin].sum == pytest.approx(0.003)
    assert page.labels_swapped == 2  # both prediction durations came with their model labels swapped
    assert epp.attempts == 3


def test_in_flight_gauges_rise_and_fall_with_the_requests() -> None:
    epp = EppMetrics("llm-d", "demo-pool", MODEL, PODS)
    parser = ExpositionParser(INFLIGHT_FAMILIES)

    def loads() -> dict[str, EndpointLoad]:
        page = parse_inflight(parser.parse(epp.page()))
        assert page.llm_d
        return {pod: page.load(pod) for pod in ("vllm-0", "vllm-1")}

    assert loads() == {"vllm-0": EndpointLoad(0, 0), "vllm-1": EndpointLoad(0, 0)}
    traffic(epp)
    assert loads() == {"vllm-0": EndpointLoad(1, 500), "vllm-1": EndpointLoad(1, 500)}
    assert epp.inflight("vllm-0") == (1, 500)
    epp.ended("pd")  # released without completing (as an aborted request): the load goes, nothing is observed
    assert loads() == {"vllm-0": EndpointLoad(0, 0), "vllm-1": EndpointLoad(0, 0)}
    assert "llm_d_epp_inflight_requests{" in epp.page()  # the series stay, at 0


def test_the_late_2025_page_reads_as_that_epp_and_keeps_its_defects() -> None:
    epp = EppMetrics("gie-2025", "demo-pool", MODEL, PODS)
    traffic(epp)
    text = epp.page()
    assert 'inference_objective_request_ttft_seconds_count{model_name="",target_model_name="' + MODEL + '"} 1.0' in text
    assert (
        'inference_objective_request_ttft_prediction_duration_seconds_count{model_name="'
        + MODEL
        + '",target_model_name=""}'
    ) in text
    page = normalize(ExpositionParser(EPP_FAMILIES).parse(text), "demo-pool")
    assert page.counters[c.EPP_SCHEDULER_ATTEMPTS.name] == {("demo-pool", "", "", "success"): 3.0}
    assert page.histograms[c.EPP_TTFT_SECONDS.name][("demo-pool", MODEL, MODEL)].count == 1  # the plugin's only
    assert parse_inflight(ExpositionParser(INFLIGHT_FAMILIES).parse(text)).llm_d is False


def test_an_unknown_generation_is_refused() -> None:
    with pytest.raises(ValueError, match="generation"):
        EppMetrics("gie-2024", "demo-pool", MODEL, PODS)
