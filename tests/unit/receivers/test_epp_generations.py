"""normalize on both EPP generations: llm-d-router's llm_d_epp_* twins, the late-2025 inference_objective_* page.

The llm-d page is fixtures/llm-d-router/epp-metrics.prom, constructed from llm-d/llm-d-router at
ebab687927f5331c1b39defcb579a07951bce56c (each family's `# src:` comment cites its file:line). Paths below
are relative to pkg/epp/ of that commit; predictedlatency/ = framework/plugins/requestcontrol/dataproducer/
predictedlatency/.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope import conventions as c
from sloscope.columnar.cardinality import SeriesBudget
from sloscope.publishers.epp import EPPCollector
from sloscope.receivers.epp import EPP_FAMILIES, EPPPage, normalize
from sloscope.receivers.exposition import ExpositionParser
from tests.support.page_server import llmd_epp_page, llmd_epp_page_streaming_off, without_families

QWEN = "Qwen/Qwen3-8B"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "llama-pd-pool"
PLUGIN = ("predicted-latency-producer", "predicted-latency-producer")  # (plugin_name, plugin_type) on the page
PARSER = ExpositionParser(EPP_FAMILIES)
ACTUAL = (POOL, QWEN, QWEN)
PLUGGED = (*ACTUAL, *PLUGIN)
LLMD_TWINS = (
    "llm_d_epp_request_predicted_ttft_seconds",
    "llm_d_epp_request_predicted_tpot_seconds",
    "llm_d_epp_request_ttft_prediction_duration_seconds",
    "llm_d_epp_request_tpot_prediction_duration_seconds",
    "llm_d_epp_request_slo_violation_total",
    "llm_d_epp_request_ttft_seconds",
    "llm_d_epp_request_streaming_tpot_seconds",
    "llm_d_epp_scheduler_attempts_total",
    "llm_d_epp_request_total",
)
FLOW_CONTROL_DISPATCHED = {(POOL, "Dispatched"): (0.01991, 5.0)}  # the scenario's five requests, on every llm-d page
LLMD_FLOW_CONTROL = (
    "llm_d_epp_flow_control_request_queue_duration_seconds",
    "llm_d_epp_flow_control_pool_saturation",
    "llm_d_epp_flow_control_queue_size",
)


def page_of(text: str) -> EPPPage:
    return normalize(PARSER.parse(text), POOL)


def summary(page: EPPPage) -> dict[str, dict[tuple[str, ...], tuple[float, float]]]:
    """(sum, count) of every republished histogram series, by family; empty families left out."""
    return {
        name: {key: (h.sum, h.count) for key, h in series.items()} for name, series in page.histograms.items() if series
    }


@pytest.fixture
def llmd(shared: Path) -> str:
    return llmd_epp_page(shared)


def test_llmd_page_every_family_exact(llmd: str) -> None:
    """Each republished family reads the llm_d_epp_* twin, once: counts are the scenario's, not doubled."""
    page = page_of(llmd)
    assert page.dropped == ()
    assert summary(page) == {
        # core TTFT, metrics/llm_d_router_metrics.go:143, streaming="true" (metrics.go:703-706)
        c.EPP_TTFT_SECONDS.name: {ACTUAL: (0.513, 3.0)},
        # core streaming TPOT, metrics/llm_d_router_metrics.go:156
        c.EPP_TPOT_SECONDS.name: {ACTUAL: (0.05331991862261236, 3.0)},
        # predictedlatency/metrics.go:105,155 (plugin labels), recorded at requestcontrol_hooks.go:168,182
        c.EPP_PREDICTED_TTFT_SECONDS.name: {PLUGGED: (0.475, 3.0)},
        c.EPP_PREDICTED_TPOT_SECONDS.name: {PLUGGED: (0.056, 3.0)},
        # predictedlatency/metrics.go:125,175: one bulk call per routed request, the same duration twice
        # (training.go:254-255)
        c.EPP_TTFT_PREDICTION_DURATION_SECONDS.name: {PLUGGED: (0.0148, 5.0)},
        c.EPP_TPOT_PREDICTION_DURATION_SECONDS.name: {PLUGGED: (0.0148, 5.0)},
        # metrics/llm_d_router_metrics.go:332, recorded at flowcontrol/controller/internal/item.go:162 (flow, priority
        # and model labels added up)
        c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS.name: FLOW_CONTROL_DISPATCHED,
    }
    # metrics/llm_d_router_metrics.go:386 (stages prefill, decode and effective = their max), :356 (by flow)
    assert page.gauges == {
        c.EPP_FLOW_CONTROL_SATURATION.name: {
            (POOL, "decode"): 0.62,
            (POOL, "effective"): 0.62,
            (POOL, "prefill"): 0.35,
        },
        c.EPP_FLOW_CONTROL_QUEUED_REQUESTS.name: {(POOL, "0"): 0.0},
    }
    assert page.counters == {
        c.EPP_SLO_VIOLATIONS.name: {(*PLUGGED, "ttft"): 1.0},  # predictedlatency/metrics.go:194
        # metrics/llm_d_router_metrics.go:262; endpoint_name = the pod picked (metrics.go:825-850)
        c.EPP_SCHEDULER_ATTEMPTS.name: {
            (POOL, QWEN, "llama-decode-0", "success"): 3.0,
            (POOL, QWEN, "llama-decode-1", "success"): 2.0,
        },
        # metrics/llm_d_router_metrics.go:40, recorded once a request is scheduled (handlers/server.go:515)
        c.EPP_REQUESTS.name: {ACTUAL: 5.0},
    }
    assert page.sources == tuple(sorted(f.removesuffix("_total") for f in LLMD_TWINS + LLMD_FLOW_CONTROL))
    assert page.streaming_off == frozenset()


def _gie_flow(family: str, flow: str, priority: str, *, outcome: str = "", le: str = "") -> str:
    """A GIE v1.5.0 flow-control series name and labels (metrics.go:390-455: flow, priority, pool, models)."""
    labels = f'fairness_id="{flow}",inference_pool="{POOL}",model_name="q",'
    labels += f'outcome="{outcome}",' if outcome else ""
    labels += f'priority="{priority}",target_model_name="q"'
    labels += f',le="{le}"' if le else ""
    return f"inference_extension_flow_control_{family}{{{labels}}}"


def _gie_queue_durations() -> str:
    """Three requests out of flow control: two dispatched (0.2 s, 2 s), one rejected for capacity after 5 s."""
    lines = ["# TYPE inference_extension_flow_control_request_queue_duration_seconds histogram"]
    for flow, outcome, observed in (("a", "Dispatched", 0.2), ("b", "Dispatched", 2.0), ("a", "RejectedCapacity", 5.0)):
        family = "request_queue_duration_seconds"
        lines += [
            f"{_gie_flow(family + '_bucket', flow, '0', outcome=outcome, le='1')} {int(observed <= 1)}",
            f"{_gie_flow(family + '_bucket', flow, '0', outcome=outcome, le='+Inf')} 1",
            f"{_gie_flow(family + '_sum', flow, '0', outcome=outcome)} {observed}",
            f"{_gie_flow(family + '_count', flow, '0', outcome=outcome)} 1",
        ]
    return "\n".join(lines) + "\n"


GIE_V15_FLOW_CONTROL = (
    "# TYPE inference_extension_flow_control_pool_saturation gauge\n"
    f'inference_extension_flow_control_pool_saturation{{inference_pool="{POOL}"}} 1.25\n'
    "# TYPE inference_extension_flow_control_queue_size gauge\n"
    + "".join(
        f"{_gie_flow('queue_size', f, band)} {n}\n" for f, band, n in (("a", "0", 3), ("b", "0", 2), ("a", "10", 1))
    )
    + _gie_queue_durations()
)


def rendered(page: EPPPage) -> str:
    registry = CollectorRegistry()
    registry.register(EPPCollector(lambda: [page]))
    return generate_latest(registry).decode()


def test_gie_v150_flow_control_families_by_outcome_priority_and_the_gating_saturation() -> None:
    """GIE v1.5.0 (df9f8909fe06, pkg/epp/metrics/metrics.go:390-455): inference_extension_flow_control_*, its pool
    saturation one series with no stage (the value that gates dispatch, processor.go:332), the queue size by flow,
    priority and models, the queue duration by the same and outcome (types/outcomes.go:74-89)."""
    page = page_of(GIE_V15_FLOW_CONTROL)
    assert page.dropped == ()
    assert page.gauges == {
        c.EPP_FLOW_CONTROL_SATURATION.name: {(POOL, c.FLOW_STAGE_EFFECTIVE): 1.25},
        c.EPP_FLOW_CONTROL_QUEUED_REQUESTS.name: {(POOL, "0"): 5.0, (POOL, "10"): 1.0},
    }
    durations = page.histograms[c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS.name]
    assert {key: (h.buckets, h.sum, h.count) for key, h in durations.items()} == {
        (POOL, "Dispatched"): (((1.0, 1.0), (math.inf, 2.0)), 2.2, 2.0),
        (POOL, "RejectedCapacity"): (((1.0, 0.0), (math.inf, 1.0)), 5.0, 1.0),
    }
    text = rendered(page)
    assert 'sloscope_epp_flow_control_saturation{pool="llama-pd-pool",stage="effective"} 1.25' in text
    assert 'sloscope_epp_flow_control_queued_requests{pool="llama-pd-pool",priority="10"} 1.0' in text
    assert (
        'sloscope_epp_flow_control_queue_duration_seconds_count{outcome="RejectedCapacity",pool="llama-pd-pool"} 1.0'
        in text
    )


def test_llmd_ttft_is_the_core_family_with_its_own_buckets(llmd: str) -> None:
    """The core TTFT's buckets end at 120 s (llm_d_router_metrics.go:147-150); the plugin's went to 3600 s."""
    (ttft,) = page_of(llmd).histograms[c.EPP_TTFT_SECONDS.name].values()
    assert [le for le, _ in ttft.buckets][-3:] == [60.0, 120.0, math.inf]
    assert ttft.buckets[:5] == ((0.005, 0.0), (0.025, 0.0), (0.05, 0.0), (0.1, 1.0), (0.2, 2.0))


def test_label_defects_still_present_upstream_are_put_right(llmd: str) -> None:
    """Both defects are still in llm-d-router at ebab6879, on both twins.

    - model_name="": predictedLatencyCtx.incomingModelName is declared (predictedlatency/plugin.go:379) and
      never assigned, yet passed as model_name (requestcontrol_hooks.go:167-184).
    - swapped: the prediction durations are recorded with (TargetModel, incomingModelName)
      (predictedlatency/training.go:254-255), so model_name holds the target model.
    """
    written = {(s.name, s.labels.get("model_name"), s.labels.get("target_model_name")) for s in PARSER.parse(llmd)}
    assert ("llm_d_epp_request_predicted_ttft_seconds_count", "", QWEN) in written
    assert ("llm_d_epp_request_ttft_prediction_duration_seconds_count", QWEN, "") in written
    page = page_of(llmd)
    # predicted ttft, predicted tpot, two durations (after the swap) and the violation counter
    assert (page.models_filled, page.labels_swapped) == (5, 2)
    assert set(page.histograms[c.EPP_TTFT_PREDICTION_DURATION_SECONDS.name]) == {PLUGGED}


def test_twin_absent_falls_back_to_inference_objective(llmd: str) -> None:
    """An EPP writing only the deprecated twins: the same values, without plugin labels, still once each."""
    page = page_of(without_families(llmd, *(f.removesuffix("_total") for f in LLMD_TWINS)))
    nameless = (*ACTUAL, "", "")
    assert summary(page) == {
        c.EPP_TTFT_SECONDS.name: {ACTUAL: (0.513, 3.0)},  # predictedlatency/metrics.go:85
        c.EPP_TPOT_SECONDS.name: {ACTUAL: (0.05331991862261236, 3.0)},  # predictedlatency/metrics.go:135
        c.EPP_PREDICTED_TTFT_SECONDS.name: {nameless: (0.475, 3.0)},
        c.EPP_PREDICTED_TPOT_SECONDS.name: {nameless: (0.056, 3.0)},
        c.EPP_TTFT_PREDICTION_DURATION_SECONDS.name: {nameless: (0.0148, 5.0)},
        c.EPP_TPOT_PREDICTION_DURATION_SECONDS.name: {nameless: (0.0148, 5.0)},
        c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS.name: FLOW_CONTROL_DISPATCHED,
    }
    assert page.counters[c.EPP_SLO_VIOLATIONS.name] == {(*nameless, "ttft"): 1.0}
    assert page.counters[c.EPP_REQUESTS.name] == {ACTUAL: 5.0}  # inference_objective_request_total, metrics.go:71
    # the page leaves out the inference_extension_* twins (its trailer), so no scheduler attempts remain
    assert page.counters[c.EPP_SCHEDULER_ATTEMPTS.name] == {}
    (ttft,) = page.histograms[c.EPP_TTFT_SECONDS.name].values()
    assert ttft.buckets[-2:] == ((3600.0, 3.0), (math.inf, 3.0))  # the plugin's generalLatencyBuckets


def test_streaming_off_is_not_republished_as_ttft(shared: Path) -> None:
    """streamingMode off (the default, predictedlatency/plugin.go:266): TTFT is e2e, no TPOT is recorded.

    The plugin records its "TTFT" at end of stream (requestcontrol_hooks.go:159-168: "In non-streaming mode,
    TTFT represents full e2e latency") and TPOT only when more than one chunk was seen after the first
    (:174-182), which needs streaming mode (:151-157). The core TTFT of a non-streamed response "equals total
    request duration" (metrics/llm_d_router_metrics.go:143).
    """
    page = page_of(llmd_epp_page_streaming_off(shared))
    assert page.dropped == ()
    assert summary(page) == {
        c.EPP_E2E_SECONDS.name: {ACTUAL: (0.513, 3.0)},
        c.EPP_PREDICTED_E2E_SECONDS.name: {PLUGGED: (0.475, 3.0)},
        c.EPP_TTFT_PREDICTION_DURATION_SECONDS.name: {PLUGGED: (0.0148, 5.0)},
        c.EPP_TPOT_PREDICTION_DURATION_SECONDS.name: {PLUGGED: (0.0148, 5.0)},
        c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS.name: FLOW_CONTROL_DISPATCHED,
    }
    assert page.counters[c.EPP_SLO_VIOLATIONS.name] == {(*PLUGGED, c.EPP_TYPE_E2E): 1.0}
    assert page.streaming_off == frozenset({(QWEN, QWEN, *PLUGIN)})


def test_streaming_off_plugin_fallback_without_core_ttft(shared: Path) -> None:
    """Without the core TTFT family the plugin's own TTFT is read; streaming off, it is e2e too."""
    text = without_families(llmd_epp_page_streaming_off(shared), "llm_d_epp_request_ttft_seconds")
    page = page_of(text)
    assert summary(page)[c.EPP_E2E_SECONDS.name] == {ACTUAL: (0.513, 3.0)}
    assert c.EPP_TTFT_SECONDS.name not in summary(page)
    assert (QWEN, QWEN, "", "") in page.streaming_off


def test_late_2025_page_is_read_as_streaming(shared: Path) -> None:
    """The late-2025 EPP records TTFT on a streamed chunk only (slo_aware_router/requestcontrol_hooks.go:187-200
    @4d37fbca): a page with TTFT and no TPOT is TTFT, not e2e."""
    text = (shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_text()
    page = page_of(without_families(text, "inference_objective_request_tpot_seconds"))
    assert summary(page) == {c.EPP_TTFT_SECONDS.name: {(POOL, LLAMA, LLAMA): (0.231, 1.0)}}
    assert page.streaming_off == frozenset()
    assert page.counters[c.EPP_SLO_VIOLATIONS.name] == {(POOL, LLAMA, LLAMA, "", "", "ttft"): 1.0}


GIE_V15_OFF = Path(__file__).resolve().parents[2] / "data/epp/gie-v1.5.0-streaming-off.prom"
SIM = "fleet/sim-model"


def test_gie_v150_page_streaming_off_is_read_as_e2e() -> None:
    """GIE v1.5.0 writes the late-2025 families only, but its plugin is the predicted-latency-producer with
    ``streamingMode`` off by default (predictedlatency/plugin.go:129-136 at df9f8909fe06): its "TTFT" is the
    request's duration and it records no TPOT. The page captured from the real EPP (tests/data/epp/README.md)
    names the plugin in ``inference_extension_plugin_duration_seconds``; it is read as streaming off."""
    page = page_of(GIE_V15_OFF.read_text())
    fleet = (POOL, SIM, SIM)
    assert page.dropped == ()
    assert summary(page) == {
        c.EPP_E2E_SECONDS.name: {fleet: (18.361999999999995, 30.0)},
        c.EPP_PREDICTED_E2E_SECONDS.name: {(*fleet, "", ""): (0.0, 30.0)},
    }
    assert c.EPP_TTFT_SECONDS.name not in summary(page)
    assert page.streaming_off == frozenset({(SIM, SIM, "", "")})


def test_gie_v150_page_says_how_every_request_is_routed() -> None:
    """The page times the scorers of the one profile every request runs: the latency scorer means ``predicted``
    (the captured EPP ran the chart's latency-predictor profile), other scorers only ``default``."""
    text = GIE_V15_OFF.read_text()
    assert page_of(text).routing == c.ROUTING_PREDICTED
    without_latency_scorer = "\n".join(line for line in text.splitlines() if 'plugin_type="latency-scorer"' not in line)
    assert 'extension_point="Scorer"' not in without_latency_scorer  # the profile had no other scorer
    assert page_of(without_latency_scorer).routing is None  # no scorer ran yet: nothing said
    queue_scored = without_latency_scorer + (
        '\ninference_extension_plugin_duration_seconds_count{extension_point="Scorer",plugin_name="queue-scorer",'
        'plugin_type="queue-scorer"} 30\n'
    )
    assert page_of(queue_scored).routing == c.ROUTING_DEFAULT
    custom = normalize(PARSER.parse(text), POOL, latency_scorers=frozenset({"my-scorer"}))
    assert custom.routing == c.ROUTING_DEFAULT  # join.latency_scorer_types decides what counts as predicted


def test_gie_v150_without_the_latency_predictor_is_known_by_its_attempts_pods() -> None:
    """Without the latency predictor there is no producer plugin on the page; the scheduler attempts, which name
    their pod (``pod_name``; the late-2025 EPP's named none), still tell v1.5.0 apart, and say which pod."""
    lines = GIE_V15_OFF.read_text().splitlines()
    no_predictor = [line for line in lines if "latency" not in line and "affinity" not in line]
    no_predictor.append(
        'inference_extension_plugin_duration_seconds_count{extension_point="Scorer",plugin_name="queue-scorer",'
        'plugin_type="queue-scorer"} 30'
    )
    page = page_of("\n".join(no_predictor) + "\n")
    assert page.routing == c.ROUTING_DEFAULT
    assert page.counters[c.EPP_SCHEDULER_ATTEMPTS.name] == {
        (POOL, SIM, "sim-2", "success"): 16.0,
        (POOL, SIM, "sim-3", "success"): 14.0,
    }


def test_only_gie_v150_pages_say_how_every_request_is_routed(llmd: str, shared: Path) -> None:
    """llm-d-router's spans say it per request, and the late-2025 EPP's headers did: their pages say nothing."""
    assert page_of(llmd).routing is None
    late = (shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_text()
    assert page_of(late).routing is None


def test_without_the_plugin_marker_the_same_page_reads_as_late_2025() -> None:
    """The marker, not the families, tells GIE v1.5.0 from the late-2025 EPP: without the plugin-duration family
    the same numbers are read as streamed TTFT, as the late-2025 EPP recorded them."""
    text = without_families(GIE_V15_OFF.read_text(), "inference_extension_plugin_duration_seconds")
    page = page_of(text)
    assert summary(page)[c.EPP_TTFT_SECONDS.name] == {(POOL, SIM, SIM): (18.361999999999995, 30.0)}
    assert page.streaming_off == frozenset()


def test_scheduler_attempts_twins_read_once() -> None:
    """llm-d-router writes both scheduler families from RecordSchedulerAttempt (metrics/metrics.go:825-850)."""
    labels = f'endpoint_name="pod-a",namespace="ns",port="8000",status="success",target_model_name="{QWEN}"'
    failure = f'endpoint_name="",namespace="",port="",status="failure",target_model_name="{QWEN}"'
    both = "".join(
        f"{family}{{{labels}}} 4\n{family}{{{failure}}} 1\n"
        for family in ("inference_extension_scheduler_attempts_total", "llm_d_epp_scheduler_attempts_total")
    )
    expected = {(POOL, QWEN, "pod-a", "success"): 4.0, (POOL, QWEN, "", "failure"): 1.0}
    assert page_of(both).counters[c.EPP_SCHEDULER_ATTEMPTS.name] == expected
    deprecated_only = without_families(both, "llm_d_epp_scheduler_attempts")
    assert page_of(deprecated_only).counters[c.EPP_SCHEDULER_ATTEMPTS.name] == expected


def test_late_2025_scheduler_attempts_have_no_pod(shared: Path) -> None:
    """pkg/epp/metrics/testdata/scheduler_attempts_total_metrics of gateway-api-inference-extension: status only."""
    page = page_of((shared / "fixtures/epp/scheduler_attempts_total_metrics").read_text())
    assert page.counters[c.EPP_SCHEDULER_ATTEMPTS.name] == {
        (POOL, "", "", "failure"): 5.0,
        (POOL, "", "", "success"): 10.0,
    }


def test_scheduler_attempt_pods_go_through_the_pod_cap(llmd: str) -> None:
    """Past the pod cap, pods fold into __other__ (their counts added) and each folded pod is counted once."""
    folds: list[str] = []
    page = page_of(llmd)
    registry = CollectorRegistry()
    registry.register(EPPCollector(lambda: [page], {"pod": 1, "model": 50}, folds.append))
    attempts = "sloscope_epp_scheduler_attempts_total"
    labels = {"pool": POOL, "target_model": QWEN, "status": "success"}
    for _ in range(2):  # a second render folds the same pod again, and does not count it again
        assert registry.get_sample_value(attempts, {**labels, "pod": "llama-decode-0"}) == 3.0
        assert registry.get_sample_value(attempts, {**labels, "pod": c.OTHER}) == 2.0
        assert registry.get_sample_value(attempts, {**labels, "pod": "llama-decode-1"}) is None
    assert folds == ["pod"]


def test_llmd_page_rendered_with_plugin_labels(llmd: str) -> None:
    registry = CollectorRegistry()
    page = page_of(llmd)
    registry.register(EPPCollector(lambda: [page]))
    plugin = {"pool": POOL, "model": QWEN, "target_model": QWEN, "plugin_name": PLUGIN[0], "plugin_type": PLUGIN[1]}
    assert registry.get_sample_value("sloscope_epp_predicted_ttft_seconds_count", plugin) == 3.0
    assert registry.get_sample_value("sloscope_epp_slo_violations_total", {**plugin, "type": "ttft"}) == 1.0
    actual = {"pool": POOL, "model": QWEN, "target_model": QWEN}
    assert registry.get_sample_value("sloscope_epp_ttft_seconds_bucket", {**actual, "le": "0.2"}) == 2.0
    assert registry.get_sample_value("sloscope_epp_ttft_seconds_bucket", {**actual, "le": "120.0"}) == 3.0


def test_epp_series_go_through_the_series_cap(llmd: str) -> None:
    """A family past its series cap adds its later label sets into the series whose pool, model, target_model and
    pod are __other__ (histograms bucket by bucket): the family's sums are unchanged, each folded label set is
    counted once, and a second render neither moves a series nor counts again."""
    page = page_of(llmd)
    plain, capped = CollectorRegistry(), CollectorRegistry()
    plain.register(EPPCollector(lambda: [page]))
    budget = SeriesBudget(per_family=1, total=1_000)
    capped.register(budget)
    capped.register(EPPCollector(lambda: [page], budget=budget))
    attempts = c.EPP_SCHEDULER_ATTEMPTS.exposed_name
    ttft_count = f"{c.EPP_TTFT_SECONDS.name}_count"

    def samples(registry: CollectorRegistry, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {frozenset(s.labels.items()): s.value for f in registry.collect() for s in f.samples if s.name == name}

    before = samples(plain, attempts)
    assert len(before) == 2
    for _ in range(2):
        after = samples(capped, attempts)
        assert sum(after.values()) == sum(before.values())
        own = [labels for labels in after if (c.POD, c.OTHER) not in labels]
        assert len(own) == 1
        folded = {"family": attempts}
        assert capped.get_sample_value("sloscope_series_folded_total", folded) == len(before) - 1
        assert sum(samples(capped, ttft_count).values()) == sum(samples(plain, ttft_count).values())
        assert all((c.MODEL, c.OTHER) in labels for labels in samples(capped, ttft_count))  # a label set weighs more


def test_the_latency_plugins_streaming_mode_is_read_once_it_predicted(llmd: str, shared: Path) -> None:
    """What a pool's predictions mean (docs/predictions.md): streaming off, the predictor's TTFT is end-to-end latency.

    - llm-d-router v0.10.0 run with ``streamingMode: true`` (captured-v0.10.0/epp-config.yaml): 515 predicted TTFTs
      and 506 predicted TPOTs on one plugin key (a response of one chunk has no TPOT): on;
    - streaming off, no predicted TPOT at all (predictedlatency/requestcontrol_hooks.go:151-185): off, on
      llm-d-router's page and on the real GIE v1.5.0 page (tests/data/epp);
    - the late-2025 EPP has no streamingMode and predicted on a streamed chunk: on;
    - no prediction recorded yet: the page does not say.
    """
    captured = (shared / "fixtures/llm-d-router/captured-v0.10.0/epp-metrics-k8s.prom").read_text()
    assert page_of(captured).streaming is True
    assert page_of(llmd).streaming is True
    assert page_of(llmd_epp_page_streaming_off(shared)).streaming is False
    assert page_of(GIE_V15_OFF.read_text()).streaming is False
    late = (shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_text()
    assert page_of(late).streaming is True
    predicted = ("llm_d_epp_request_predicted_ttft_seconds", "inference_objective_request_predicted_ttft_seconds")
    assert page_of(without_families(llmd, *predicted)).streaming is None
    unused = "\n".join(
        line.rsplit(" ", 1)[0] + " 0" if "predicted_" in line and not line.startswith("#") else line
        for line in llmd.splitlines()
    )
    assert page_of(unused + "\n").streaming is None  # the families are there, with no observation


def test_the_epps_request_counter_is_read_once_and_summed_over_priority_and_flow(shared: Path) -> None:
    """A running llm-d-router v0.10.0 writes ``llm_d_epp_request_total`` and its deprecated twin
    ``inference_objective_request_total`` from RecordRequestCounter (pkg/epp/metrics/metrics.go:590-600 at ebab6879),
    per priority and fairness flow: 102 + 228 + 259 requests of sim-model, counted once."""
    page = page_of((shared / "fixtures/llm-d-router/captured-v0.10.0/epp-metrics-k8s.prom").read_text())
    assert page.counters[c.EPP_REQUESTS.name] == {(POOL, "sim-model", "sim-model"): 589.0}
    only_deprecated = without_families(
        (shared / "fixtures/llm-d-router/captured-v0.10.0/epp-metrics-k8s.prom").read_text(), "llm_d_epp_request"
    )
    assert page_of(only_deprecated).counters[c.EPP_REQUESTS.name] == {(POOL, "sim-model", "sim-model"): 589.0}


def test_the_late_2025_request_counter_keeps_model_and_target(shared: Path) -> None:
    """gateway-api-inference-extension's pkg/epp/metrics/testdata/request_total_metric: per model and target."""
    page = page_of((shared / "fixtures/epp/request_total_metric").read_text())
    assert page.counters[c.EPP_REQUESTS.name] == {
        (POOL, "m10", "t10"): 2.0,
        (POOL, "m10", "t11"): 1.0,
        (POOL, "m20", "t20"): 1.0,
    }
