"""The engines' latency histograms: summed per model and signal on a page, accumulated from increases per pod."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry

from sloscope.columnar.cardinality import LabelGuard
from sloscope.publishers.engine_latency import EngineLatencyCollector
from sloscope.receivers.engine_latency import EngineHistogram, engine_histograms
from sloscope.receivers.exposition import ExpositionParser
from sloscope.receivers.protocols import SGLANG, Protocol

# SGLang labels its TTFT histogram with model_name, engine_type and is_streaming
# (sglang 0.5.23 srt/observability/metrics_collector.py:1807-1822, 2040-2047): both streaming values sum.
SGLANG_TTFT = """\
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="0.1",model_name="m"} 4.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="+Inf",model_name="m"} 5.0
sglang:time_to_first_token_seconds_sum{engine_type="unified",is_streaming="true",model_name="m"} 0.7
sglang:time_to_first_token_seconds_count{engine_type="unified",is_streaming="true",model_name="m"} 5.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="false",le="0.1",model_name="m"} 1.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="false",le="+Inf",model_name="m"} 3.0
sglang:time_to_first_token_seconds_sum{engine_type="unified",is_streaming="false",model_name="m"} 0.9
sglang:time_to_first_token_seconds_count{engine_type="unified",is_streaming="false",model_name="m"} 3.0
"""


def histograms(protocol: Protocol, page: str, model: str | None = None) -> dict[tuple[str, str], EngineHistogram]:
    return engine_histograms(protocol, ExpositionParser(protocol.families).parse(page), model)


def test_a_page_sums_everything_but_the_model() -> None:
    assert histograms(SGLANG, SGLANG_TTFT) == {("m", "ttft"): EngineHistogram((0.1, math.inf), (5.0, 8.0), 1.6)}
    assert histograms(SGLANG, SGLANG_TTFT, model="other") == {}


def test_a_histogram_whose_buckets_go_down_is_left_out() -> None:
    broken = SGLANG_TTFT.replace('le="0.1",model_name="m"} 4.0', 'le="0.1",model_name="m"} 9.0')
    assert histograms(SGLANG, broken) == {}


def test_increases_per_pod_and_a_restarted_pod() -> None:
    registry = CollectorRegistry()
    collector = EngineLatencyCollector(LabelGuard({"model": 50}, lambda label: None))
    registry.register(collector)
    bounds = (0.1, math.inf)
    labels = {"pool": "p", "model": "m", "protocol": "sglang", "signal": "ttft"}

    def seen(pod: str, counts: tuple[float, float], total: float) -> None:
        collector.observe(("p", pod), "sglang", {("m", "ttft"): EngineHistogram(bounds, counts, total)}, None)

    def count() -> float | None:
        return registry.get_sample_value("sloscope_engine_latency_seconds_count", labels)

    seen("a", (5.0, 8.0), 1.6)  # a baseline only
    assert count() is None
    seen("a", (6.0, 10.0), 2.0)  # 2 more requests, one under 0.1 s
    assert count() == 2.0
    assert registry.get_sample_value("sloscope_engine_latency_seconds_bucket", {**labels, "le": "0.1"}) == 1.0
    seen("a", (1.0, 1.0), 0.05)  # counts went down: the pod restarted and served 1 request since
    assert count() == 3.0
    collector.forget(("p", "a"))  # a pod that left: its counts stay, its next scrape is a baseline again
    seen("a", (9.0, 9.0), 0.5)
    assert count() == 3.0
    assert registry.get_sample_value("sloscope_engine_latency_seconds_sum", labels) == pytest.approx(0.45)
