"""Sampled requests counted with their adjusted counts: exact samples from requests of known probabilities.

A trace kept with probability p stands for 1/p requests (OpenTelemetry's adjusted count). The request families
add it, the ``sloscope_sampled_*`` twins count each request once, and the histograms observe each value with it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sloscope import conventions as c
from sloscope.config import Limits
from sloscope.loading import default_spec
from sloscope.processors.trace_sampling import adjusted_count, adjusted_counts, probability_of
from sloscope.records import JoinedRequest
from tests.support.stage import stage

BASE = {"model": "m", "pool": "pool-a", "slo_class": "interactive", "routing": "unknown"}
HIST = {"model": "m", "pool": "pool-a", "slo_class": "interactive"}


def request(index: int, ttft: float, probability: float | None) -> JoinedRequest:
    """An interactive request on pool-a's pod-1 with a 250 ms TTFT SLO, kept with ``probability``."""
    return JoinedRequest(
        trace_id=f"{index:032x}",
        span_id=f"{index:016x}",
        outcome=c.OUTCOME_JOINED,
        target_model="m",
        pool="pool-a",
        pod="pod-1",
        slo_ttft_ms=250,
        ttft_seconds=ttft,
        e2e_seconds=0.8,
        completion_tokens=6,
        sampling_probability=probability,
    )


def quarter_for_pool_a(pool: str) -> float:
    return 0.25 if pool == "pool-a" else 1.0


MIXED = (
    request(1, 0.3, 0.5),  # missed, stands for 2
    request(2, 0.1, None),  # met; no probability recorded: pool-a's assumed 1 in 4, stands for 4
    request(3, 0.3, 0.1),  # missed, stands for 10
)


@pytest.mark.parametrize("batches", [[MIXED], [MIXED[:1], MIXED[1:]], [MIXED[:1], MIXED[1:2], MIXED[2:]]])
def test_mixed_probabilities_in_one_pool_are_weighted_exactly(batches: list[tuple[JoinedRequest, ...]]) -> None:
    s = stage(default_spec(), assumed_probability=quarter_for_pool_a)
    for batch in batches:
        s.publish(*batch)
    ttft = {**BASE, "slo": "ttft"}
    assert s.value("sloscope_requests_total", **BASE) == 16
    assert s.value("sloscope_sampled_requests_total", **BASE) == 3
    assert s.value("sloscope_slo_requests_total", **ttft) == 16
    assert s.value("sloscope_sampled_slo_requests_total", **ttft) == 3
    assert s.value("sloscope_slo_violations_total", **ttft) == 12
    assert s.value("sloscope_sampled_slo_violations_total", **ttft) == 2
    assert s.value("sloscope_pod_requests_total", pool="pool-a", pod="pod-1") == 16
    assert s.value("sloscope_pod_slo_violations_total", pool="pool-a", pod="pod-1", slo="ttft") == 12
    # TTFT 0.1 s stands for 4 requests in the 0.1 bucket, the two of 0.3 s for 12 more by 0.5 s
    assert s.value("sloscope_ttft_seconds_bucket", **HIST, le="0.1") == 4
    assert s.value("sloscope_ttft_seconds_bucket", **HIST, le="0.5") == 16
    assert s.value("sloscope_ttft_seconds_count", **HIST) == 16
    assert s.value("sloscope_ttft_seconds_sum", **HIST) == 2 * 0.3 + 4 * 0.1 + 10 * 0.3
    assert s.value("sloscope_completion_tokens_sum", **HIST) == 16 * 6


def test_the_sampled_twins_start_at_zero_with_their_label_sets() -> None:
    s = stage(default_spec())
    s.publish(request(1, 0.1, 0.5))  # met: no violation yet
    ttft, tpot = {**BASE, "slo": "ttft"}, {**BASE, "slo": "tpot"}
    assert s.value("sloscope_slo_violations_total", **ttft) == 0
    assert s.value("sloscope_sampled_slo_violations_total", **ttft) == 0
    assert s.value("sloscope_sampled_slo_requests_total", **tpot) == 0  # a sibling of the spec's class
    assert s.value("sloscope_sampled_requests_total", **BASE) == 1


def test_every_trace_kept_counts_as_before() -> None:
    """Probability 1 recorded (``th:0``) or assumed: whole counts, as without sampling."""
    s = stage(default_spec())
    s.publish(request(1, 0.3, 1.0), request(2, 0.1, None))
    assert s.value("sloscope_requests_total", **BASE) == s.value("sloscope_sampled_requests_total", **BASE) == 2
    assert s.value("sloscope_ttft_seconds_sum", **HIST) == 0.3 + 0.1


def test_adjusted_counts_take_the_recorded_probability_else_the_assumed_one() -> None:
    ten = probability_of("ot=th:e666666666666")  # OpenTelemetry's one in ten: a little above 0.1
    assert ten is not None
    assert adjusted_count(ten, 0.5) == 1 / ten == pytest.approx(10.0, rel=1e-13)
    assert adjusted_count(None, 0.5) == 2.0
    got = adjusted_counts(np.array([0.5, np.nan, 0.1]), np.array([1.0, 0.25, 1.0]))
    assert got.tolist() == [2.0, 4.0, 10.0]


def test_a_pool_past_the_label_cap_keeps_its_own_sampling_probability() -> None:
    """pool-b folds into __other__ (one pool label allowed), and its requests still count 1 / pool-b's 0.5."""
    limits = Limits(max_label_values={"pool": 1})
    s = stage(default_spec(), limits, assumed_probability=lambda pool: 0.5 if pool == "pool-b" else 1.0)
    s.publish(request(1, 0.1, None), dataclasses.replace(request(2, 0.1, None), pool="pool-b"))
    assert s.value("sloscope_requests_total", **BASE) == 1
    assert s.value("sloscope_requests_total", **{**BASE, "pool": c.OTHER}) == 2
    assert s.value("sloscope_sampled_requests_total", **{**BASE, "pool": c.OTHER}) == 1
