"""The llm-d EPP's in-flight gauges, its as-of history, and the features each EPP generation sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from sloscope.config import Predictions
from sloscope.predictor.features import Features
from sloscope.predictor.generation import GIE_2025, GIE_V15, LLM_D, Generation, resolve
from sloscope.processors.inflight_history import InflightHistory
from sloscope.processors.shadow import features_of
from sloscope.receivers.epp_inflight import INFLIGHT_FAMILIES, EndpointLoad, parse_inflight
from sloscope.receivers.exposition import ExpositionParser, Sample
from sloscope.receivers.protocols import PodState


def fixture_samples(shared: Path) -> list[Sample]:
    page = (shared / "fixtures" / "llm-d-router" / "epp-metrics.prom").read_text()
    return ExpositionParser(INFLIGHT_FAMILIES).parse(page)


def gauge(family: str, endpoint: str, value: float, **labels: str) -> Sample:
    base = {"endpoint_name": endpoint, "namespace": "llm-d", "producer_name": "inflight-load-producer"}
    return Sample(family, family, {**base, **labels}, value, None)


def test_the_constructed_page_gives_each_endpoints_load(shared: Path) -> None:
    """epp-metrics.prom lines 592-603 (inflightload/metrics.go:32-48 at llm-d-router ebab6879)."""
    page = parse_inflight(fixture_samples(shared))
    assert page.llm_d
    assert page.load("llama-decode-1") == EndpointLoad(1, 2100)
    assert page.load("llama-prefill-0") == EndpointLoad(1, 2100)
    assert page.load("llama-decode-0") == EndpointLoad(0, 0)
    assert page.load("not-on-the-page") == EndpointLoad(0, 0)  # the tracker's answer for an unseen endpoint


def test_flows_are_summed_ranks_kept_apart_and_the_first_rank_read() -> None:
    requests, tokens = "llm_d_epp_inflight_requests", "llm_d_epp_inflight_tokens"
    page = parse_inflight(
        [
            gauge(requests, "pod-a-rank-0", 2, fairness_id="a"),
            gauge(requests, "pod-a-rank-0", 3, fairness_id="b"),
            gauge(tokens, "pod-a-rank-0", 700, fairness_id="a"),
            gauge(requests, "pod-a-rank-1", 9),
            gauge(tokens, "pod-a-rank-1", -5),  # decremented past zero: 0, the predictor refuses negatives
            gauge(requests, "no-rank-suffix", 4),
            gauge(requests, "pod-b-rank-0", float("nan")),
        ]
    )
    assert page.pods == {"pod-a": {0: EndpointLoad(5, 700), 1: EndpointLoad(9, 0)}}
    assert page.load("pod-a") == EndpointLoad(5, 700)
    # a multi-port pod's request is given its own rank's load; a rank the page does not list had nothing in flight
    assert [page.load("pod-a", rank) for rank in (None, 0, 1, 2)] == [
        EndpointLoad(5, 700),
        EndpointLoad(5, 700),
        EndpointLoad(9, 0),
        EndpointLoad(0, 0),
    ]


def test_the_configured_producer_is_read_else_the_first() -> None:
    requests = "llm_d_epp_inflight_requests"
    samples = [gauge(requests, "p-rank-0", 1, producer_name="zz"), gauge(requests, "p-rank-0", 7, producer_name="aa")]
    assert parse_inflight(samples, "zz").load("p") == EndpointLoad(1, 0)
    assert parse_inflight(samples, "missing").load("p") == EndpointLoad(7, 0)


def test_a_page_without_llm_d_families_is_not_an_llm_d_epps() -> None:
    assert not parse_inflight([Sample("x", "x", {}, 1.0, None)]).llm_d
    marker = Sample("llm_d_epp_ready_endpoints", "llm_d_epp_ready_endpoints", {"name": "p"}, 3.0, None)
    assert parse_inflight([marker]).llm_d


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_history_answers_as_of_arrival_and_not_when_stale() -> None:
    clock = Clock()
    history = InflightHistory(2, stale_after=10.0, clock=clock)
    requests = "llm_d_epp_inflight_requests"
    assert history.generation("p") is None
    history.record("p", [gauge(requests, "a-rank-0", 1)])
    assert history.generation("p") == LLM_D
    clock.now = 1005.0
    history.record("p", [gauge(requests, "a-rank-0", 4)])
    assert history.as_of("p", 999.0) is None  # before the first page
    assert history.as_of("p", 1004.9).load("a") == EndpointLoad(1, 0)  # type: ignore[union-attr]
    assert history.as_of("p", 1005.0).load("a") == EndpointLoad(4, 0)  # type: ignore[union-attr]
    assert history.as_of("p", 1015.1) is None  # older than stale_after
    clock.now = 1006.0
    history.record("p", [])  # a third page: the ring keeps two
    assert history.as_of("p", 1004.9) is None
    assert history.generation("p") == GIE_2025  # a page without an llm-d family
    assert history.latest("other") is None
    with pytest.raises(ValueError, match="max_samples"):
        InflightHistory(0, 1.0)


STATE = PodState(waiting=3, running=27, kv_cache_utilization=0.5, lora=None, models=frozenset())


def test_gie_2025_sends_words_and_the_pods_running_count() -> None:
    """latencypredictor_helper.go:334-345 at gateway-api-inference-extension 0f0dff68."""
    assert features_of(STATE, 400, Predictions()) == Features(0.5, 300, 3, 27, 1, 0.0)


def test_llm_d_sends_tokens_in_flight_counts_and_pod_type() -> None:
    """predictedlatency/training.go:33-59, 208-233 and plugin.go:222-227 at llm-d-router ebab6879."""
    load = EndpointLoad(4, 2500)
    features = features_of(STATE, 400, Predictions(), generation=LLM_D, load=load, pod_type="prefill")
    assert features == Features(0.5, 400, 3, 4, 1, 0.0, pod_type="prefill", prefill_tokens_in_flight=2500)
    # no EPP page to read: the plugin's own fallback, the pod's running count and 0 tokens
    fallback = features_of(STATE, 400, Predictions(), generation=LLM_D)
    assert fallback == Features(0.5, 400, 3, 27, 1, 0.0, prefill_tokens_in_flight=0)


def test_gie_v15_sends_words_the_pods_counts_pod_type_and_in_flight_tokens_without_encoder_sizes() -> None:
    """GIE v1.5.0 (df9f8909fe06): latencypredictor_helper.go:39-60 (words, the pod's scraped counts, pod_type from
    endpointRoleLabel), :393-395 (prefill_tokens_in_flight, a plugin counter no page shows: 0 here) and
    sidecars/latencypredictorasync/types.go:183-193 (the fields, in order, no encoder sizes)."""
    features = features_of(STATE, 400, Predictions(), generation=GIE_V15, pod_type="decode")
    assert features == Features(0.5, 300, 3, 27, 1, 0.0, pod_type="decode", prefill_tokens_in_flight=0, encoder=False)
    assert list(features.to_json().items()) == [
        ("kv_cache_percentage", 0.5),
        ("input_token_length", 300),
        ("num_request_waiting", 3),
        ("num_request_running", 27),
        ("num_tokens_generated", 1),
        ("prefix_cache_score", 0.0),
        ("pod_type", "decode"),
        ("prefill_tokens_in_flight", 0),
        ("decode_tokens_in_flight", 0),
    ]
    monolithic = features_of(STATE, 400, Predictions(), generation=GIE_V15)
    assert monolithic is not None and "pod_type" not in monolithic.to_json()  # omitempty


@pytest.mark.parametrize(
    ("setting", "epp", "predictor", "expected"),
    [
        ("gie-2025", LLM_D, True, GIE_2025),
        ("llm-d", GIE_2025, False, LLM_D),
        ("gie-v1.5", None, None, GIE_V15),
        ("auto", LLM_D, False, LLM_D),  # the EPP page decides first
        ("auto", GIE_2025, True, GIE_2025),
        ("auto", GIE_V15, True, GIE_V15),
        ("auto", None, True, LLM_D),  # no EPP page: the predictor's answers carry objective_type
        ("auto", None, False, GIE_2025),
        ("auto", None, None, GIE_2025),  # nothing known yet
    ],
)
def test_the_generation_is_the_setting_else_what_the_pool_shows(
    setting: str, epp: Generation | None, predictor: bool | None, expected: str
) -> None:
    assert resolve(setting, epp, predictor) == expected
