"""One cap per label across the server: the engines' latency series and the request series admit models alike."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Settings
from sloscope.loading import default_spec
from sloscope.receivers.engine_latency import EngineHistogram
from sloscope.service.server import Service


def test_a_model_the_request_series_admitted_uses_the_cap_of_the_engine_series_too() -> None:
    registry = CollectorRegistry()
    settings = Settings(limits={"max_label_values": {c.MODEL: 1}})
    service = Service(settings, default_spec(), registry)
    guard = service.pipeline.evaluator.admission.guard
    assert guard.admit(c.MODEL, "llama") == "llama"  # a request's model: the one value the cap holds
    latency = service.pools.engine_latency
    bounds = (0.1, float("inf"))
    for counts in ((1.0, 1.0), (2.0, 3.0)):  # a baseline, then one request more under 0.1 s and one over
        latency.observe(("pool-a", "pod-0"), "vllm", {("qwen", "ttft"): EngineHistogram(bounds, counts, 0.5)}, None)
    labels = {"pool": "pool-a", "protocol": "vllm", "signal": "ttft"}
    count = "sloscope_engine_latency_seconds_count"
    assert registry.get_sample_value(count, {**labels, "model": c.OTHER}) == 2.0
    assert registry.get_sample_value(count, {**labels, "model": "qwen"}) is None
    assert registry.get_sample_value("sloscope_label_values_folded_total", {"label": c.MODEL}) == 1.0
