"""Which protocol reads a pod of a mixed pool: its engine label, as the EPP's model-server extractor picks.

llm-d-router ebab6879, pkg/epp/framework/plugins/datalayer/extractor/metrics/: the label key is the
extractor's ``engineLabelKey`` parameter, ``llm-d.ai/engine-type`` when empty (extractor.go:65-78,
mapping_registry.go:29); a pod without it is read by the legacy GAIE key (extractor.go:229-245,
mapping_registry.go:34); a value naming no engine, or no label at all, gets the default engine.
"""

from __future__ import annotations

from sloscope.config import Pool, Scrape
from sloscope.receivers.discovery import Target, sorted_labels
from sloscope.receivers.pod_scraper import PoolScrapeConfig


def _pod(**labels: str) -> Target:
    return Target("mixed", "pod-0", "10.0.0.1:8000", labels=sorted_labels(labels))


def test_the_default_engine_label_then_the_legacy_one_then_the_pools_protocol() -> None:
    config = PoolScrapeConfig.of(Pool(name="mixed", protocol="vllm"), Scrape())
    assert config.engine_of(_pod(**{"llm-d.ai/engine-type": "sglang"})).protocol.name == "sglang"
    assert config.engine_of(_pod(**{"inference.networking.k8s.io/engine-type": "tgi"})).protocol.name == "tgi"
    both = {"llm-d.ai/engine-type": "sglang", "inference.networking.k8s.io/engine-type": "tgi"}
    assert config.engine_of(_pod(**both)).protocol.name == "sglang"
    assert config.engine_of(_pod(**{"llm-d.ai/engine-type": "mystery"})).protocol.name == "vllm"
    assert config.engine_of(_pod()).protocol.name == "vllm"
    assert config.engine_of(_pod(**{"llm-d.ai/engine-type": "trtllm-serve"})).path == "/prometheus/metrics"


def test_a_configured_engine_label_replaces_the_default_key() -> None:
    config = PoolScrapeConfig.of(Pool(name="mixed", protocol="sglang", engine_label="example.com/engine"), Scrape())
    assert config.engine_of(_pod(**{"example.com/engine": "vllm"})).protocol.name == "vllm"
    assert config.engine_of(_pod(**{"llm-d.ai/engine-type": "vllm"})).protocol.name == "sglang"  # not the key now
    assert config.engine_of(_pod(**{"inference.networking.k8s.io/engine-type": "tgi"})).protocol.name == "tgi"
