"""Both EPP generations through real page servers and a real ``sloscope serve``, read off sloscope's /metrics.

Pool ``llmd`` serves the page constructed from llm-d/llm-d-router at ebab6879
(fixtures/llm-d-router/epp-metrics.prom); pool ``llmd-off`` the same page as a deployment with the plugin's
default streamingMode off and non-streaming clients writes it (predictedlatency/plugin.go:266,
requestcontrol_hooks.go:151-185, metrics/metrics.go:703-706 @ebab6879); pool ``gie`` the late-2025
gateway-api-inference-extension page (4d37fbca) with its scheduler-attempt counter. The pod cap is 1, so
the second pod the llm-d EPP picked folds into ``__other__``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import Server, start_server, wait_until
from tests.support.page_server import PageServer, llmd_epp_page, llmd_epp_page_streaming_off

QWEN = "Qwen/Qwen3-8B"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
PLUGIN = {"plugin_name": "predicted-latency-producer", "plugin_type": "predicted-latency-producer"}
SPEC = {
    "version": "sloscope/v1",
    "classes": [{"name": "interactive", "match": {"ttft_ms": {"max": 1000}}}],
}


@dataclass
class Env:
    server: Server


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("epp")
    (tmp / "slo.yaml").write_text(yaml.safe_dump(SPEC))
    gie = (shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_text()
    gie += (shared / "fixtures/epp/scheduler_attempts_total_metrics").read_text()
    with (
        PageServer(llmd_epp_page(shared)) as llmd,
        PageServer(llmd_epp_page_streaming_off(shared)) as llmd_off,
        PageServer(gie) as gie_epp,
    ):
        pools = [
            {"name": name, "epp": {"metrics_url": f"http://{page.address}/metrics"}}
            for name, page in (("llmd", llmd), ("llmd-off", llmd_off), ("gie", gie_epp))
        ]
        # pools without an EPP page: the setting, else the upstream default
        pools += [{"name": "set-on", "streaming_mode": True}, {"name": "unset"}]
        server = start_server(
            tmp,
            {
                "slo_spec": str(tmp / "slo.yaml"),
                "scrape": {"interval_seconds": 0.2, "timeout_seconds": 0.5, "stale_after_seconds": 60},
                "limits": {"max_label_values": {"pod": 1}},
                "pools": pools,
            },
        )
        try:
            wait_until(lambda: _every_pool_read(server), what="every EPP scraped")
            yield Env(server)
        finally:
            server.stop()


def _every_pool_read(server: Server) -> bool:
    pools = {dict(labels).get("pool") for name, labels in server.samples() if name.startswith("sloscope_epp_")}
    return {"llmd", "llmd-off", "gie"} <= pools


def test_llmd_twins_republished_once_with_plugin_labels(env: Env) -> None:
    server = env.server
    actual = {"pool": "llmd", "model": QWEN, "target_model": QWEN}
    plugin = {**actual, **PLUGIN}
    assert server.value("sloscope_epp_ttft_seconds_count", **actual) == 3
    assert server.value("sloscope_epp_ttft_seconds_sum", **actual) == 0.513
    assert server.value("sloscope_epp_ttft_seconds_bucket", le="120.0", **actual) == 3  # the core's buckets
    assert server.value("sloscope_epp_tpot_seconds_sum", **actual) == 0.05331991862261236
    assert server.value("sloscope_epp_predicted_ttft_seconds_count", **plugin) == 3  # not 6: one twin read
    assert server.value("sloscope_epp_predicted_ttft_seconds_sum", **plugin) == 0.475
    assert server.value("sloscope_epp_predicted_tpot_seconds_sum", **plugin) == 0.056
    # model labels swapped back (predictedlatency/training.go:254-255) and model filled (plugin.go:379)
    assert server.value("sloscope_epp_ttft_prediction_duration_seconds_count", **plugin) == 5
    assert server.value("sloscope_epp_tpot_prediction_duration_seconds_sum", **plugin) == 0.0148
    assert server.value("sloscope_epp_slo_violations_total", type="ttft", **plugin) == 1
    assert server.value("sloscope_epp_e2e_seconds_count", **actual) == 0


def test_llmd_scheduler_attempts_by_pod_under_the_cap(env: Env) -> None:
    server = env.server
    labels = {"pool": "llmd", "target_model": QWEN, "status": "success"}
    samples = server.samples()
    attempts = {
        dict(labels_)["pod"]: value
        for (name, labels_), value in samples.items()
        if name == "sloscope_epp_scheduler_attempts_total" and dict(labels_).get("pool") == "llmd"
    }
    assert attempts == {"llama-decode-0": 3.0, "__other__": 2.0}
    assert server.value("sloscope_epp_scheduler_attempts_total", pod="llama-decode-0", **labels) == 3
    # llama-decode-1 here, llama-prefill-0 in the in-flight gauges: each folded pod counted once
    assert server.value("sloscope_label_values_folded_total", label="pod") == 2


def test_llmd_in_flight_load_per_pod_under_the_cap(env: Env) -> None:
    """llm_d_epp_inflight_{requests,tokens} (inflightload/metrics.go:32-48 @ebab6879) per pod, ranks summed.

    The page has llama-decode-0 at 0/0, llama-decode-1 and llama-prefill-0 at 1 request / 2100 tokens each;
    with a pod cap of 1 (llama-decode-0 admitted first) the other two fold into ``__other__``, added up.
    """
    samples = env.server.samples()

    def per_pod(name: str, pool: str) -> dict[str, float]:
        return {
            dict(labels)["pod"]: value
            for (family, labels), value in samples.items()
            if family == name and dict(labels).get("pool") == pool
        }

    assert per_pod("sloscope_epp_inflight_requests", "llmd") == {"llama-decode-0": 0.0, "__other__": 2.0}
    assert per_pod("sloscope_epp_inflight_tokens", "llmd") == {"llama-decode-0": 0.0, "__other__": 4200.0}
    assert per_pod("sloscope_epp_inflight_requests", "gie") == {}  # the late-2025 EPP has no in-flight producer


def test_streaming_off_published_as_end_to_end(env: Env) -> None:
    server = env.server
    actual = {"pool": "llmd-off", "model": QWEN, "target_model": QWEN}
    plugin = {**actual, **PLUGIN}
    assert server.value("sloscope_epp_e2e_seconds_count", **actual) == 3
    assert server.value("sloscope_epp_e2e_seconds_sum", **actual) == 0.513
    assert server.value("sloscope_epp_predicted_e2e_seconds_sum", **plugin) == 0.475
    assert server.value("sloscope_epp_slo_violations_total", type="e2e", **plugin) == 1
    for name in ("sloscope_epp_ttft_seconds_count", "sloscope_epp_tpot_seconds_count"):
        assert server.value(name, **actual) == 0
    assert server.value("sloscope_epp_predicted_ttft_seconds_count", **plugin) == 0
    assert server.value("sloscope_epp_slo_violations_total", type="ttft", **plugin) == 0


def test_late_2025_page_still_read(env: Env) -> None:
    server = env.server
    actual = {"pool": "gie", "model": LLAMA, "target_model": LLAMA}
    assert server.value("sloscope_epp_ttft_seconds_sum", **actual) == 0.231
    no_plugin = {**actual, "plugin_name": "", "plugin_type": ""}
    assert server.value("sloscope_epp_slo_violations_total", type="ttft", **no_plugin) == 1
    attempts = {"pool": "gie", "target_model": "", "pod": ""}
    assert server.value("sloscope_epp_scheduler_attempts_total", status="failure", **attempts) == 5
    assert server.value("sloscope_epp_scheduler_attempts_total", status="success", **attempts) == 10


def test_each_pools_streaming_mode_from_its_page_else_its_setting_else_off(env: Env) -> None:
    """The llm-d pages show their plugin's mode (predicted TPOTs or none, predictedlatency/requestcontrol_hooks.go
    :151-185 @ebab6879), the late-2025 page predicted on a streamed chunk; a pool without a page takes its
    ``streaming_mode``, else off (predictedlatency/plugin.go:266)."""
    modes = {
        (dict(labels)["pool"], dict(labels)["basis"]): value
        for (name, labels), value in env.server.samples().items()
        if name == "sloscope_epp_streaming_mode"
    }
    assert modes == {
        ("llmd", "page"): 1.0,
        ("llmd-off", "page"): 0.0,
        ("gie", "page"): 1.0,
        ("set-on", "setting"): 1.0,
        ("unset", "default"): 0.0,
    }
