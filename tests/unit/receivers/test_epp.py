"""The EPP's SLO series: label defects put right per series, broken series dropped, rendered as sloscope_epp_*."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope import conventions as c
from sloscope.publishers.epp import EPP_HISTOGRAMS, EPPCollector
from sloscope.receivers.epp import EPP_FAMILIES, EPPPage, HistogramSeries, normalize
from sloscope.receivers.exposition import ExpositionParser

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "pool-a"
PARSER = ExpositionParser(EPP_FAMILIES)

# The EPP's bucket boundaries as its Go client writes them (pkg/epp/metrics/metrics.go at 4d37fbca).
# fmt: off
GENERAL = ("0.005", "0.025", "0.05", "0.1", "0.2", "0.4", "0.6", "0.8", "1", "1.25", "1.5", "2", "3", "4", "5", "6",
           "8", "10", "15", "20", "30", "45", "60", "120", "180", "240", "300", "360", "480", "600", "900", "1200",
           "1800", "2700", "3600")
TPOT = ("0.0005", "0.00205", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.125", "0.15", "0.2", "0.3",
        "0.4", "0.5", "0.6", "0.8", "1", "1.5", "2", "3", "4.5", "6", "12", "18", "24", "30", "36", "48", "60", "90",
        "120", "180", "270", "360")
PREDICTION = ("0.0001", "0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2",
              "5")
# fmt: on
FAMILIES = {  # EPP family -> (sloscope family, the EPP's buckets, one observation)
    "inference_objective_request_ttft_seconds": (c.EPP_TTFT_SECONDS.name, GENERAL, 0.231),
    "inference_objective_request_predicted_ttft_seconds": (c.EPP_PREDICTED_TTFT_SECONDS.name, GENERAL, 0.18),
    "inference_objective_request_tpot_seconds": (c.EPP_TPOT_SECONDS.name, TPOT, 0.018),
    "inference_objective_request_predicted_tpot_seconds": (c.EPP_PREDICTED_TPOT_SECONDS.name, TPOT, 0.021),
    "inference_objective_request_ttft_prediction_duration_seconds": (
        c.EPP_TTFT_PREDICTION_DURATION_SECONDS.name,
        PREDICTION,
        0.0031,
    ),
    "inference_objective_request_tpot_prediction_duration_seconds": (
        c.EPP_TPOT_PREDICTION_DURATION_SECONDS.name,
        PREDICTION,
        0.0024,
    ),
}
DURATIONS = {f for f in FAMILIES if "prediction_duration" in f}


def histogram_lines(family: str, labels: str, bounds: tuple[str, ...], value: float) -> list[str]:
    """One observation, written the way the EPP's Go client writes a histogram series."""
    lines = [f'{family}_bucket{{{labels},le="{le}"}} {1 if value <= float(le) else 0}' for le in (*bounds, "+Inf")]
    return [*lines, f"{family}_sum{{{labels}}} {value}", f"{family}_count{{{labels}}} 1"]


def epp_page(model_name: str = "", target_model_name: str = LLAMA, *, defective_durations: bool = True) -> str:
    """A complete page of the EPP's SLO families for one request, with the EPP's label defects by default."""
    lines: list[str] = []
    for family, (_, bounds, value) in FAMILIES.items():
        model, target = model_name, target_model_name
        if family in DURATIONS and defective_durations:
            model, target = target, model  # recorded as (TargetModel, incomingModelName)
        lines += [f"# HELP {family} From the EPP.", f"# TYPE {family} histogram"]
        lines += histogram_lines(family, f'model_name="{model}",target_model_name="{target}"', bounds, value)
    lines += [
        "# HELP inference_objective_request_slo_violation_total From the EPP.",
        "# TYPE inference_objective_request_slo_violation_total counter",
        f'inference_objective_request_slo_violation_total{{model_name="{model_name}",'
        f'target_model_name="{target_model_name}",type="ttft"}} 1',
    ]
    return "\n".join(lines) + "\n"


def key_of(name: str, model: str, target: str, plugin: tuple[str, str] = ("", "")) -> tuple[str, ...]:
    """The series key of a republished histogram: plugin labels on the plugin's families only."""
    definition = next(d for d in EPP_HISTOGRAMS if d.name == name)
    return (POOL, model, target, *plugin) if c.PLUGIN_NAME in definition.labels else (POOL, model, target)


def page_of(text: str, openmetrics: bool = False) -> EPPPage:
    return normalize(PARSER.parse(text, openmetrics=openmetrics), POOL)


def rendered(*pages: EPPPage | None) -> list[str]:
    registry = CollectorRegistry()
    registry.register(EPPCollector(lambda: pages))
    return generate_latest(registry).decode().splitlines()


# --- the shared fixture ---------------------------------------------------------------------------


@pytest.fixture
def fixture_text(shared: Path) -> str:
    return (shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_text()


def test_fixture_comments_and_abbreviations_are_not_samples(fixture_text: str) -> None:
    samples = PARSER.parse(fixture_text)
    # The header's "..." notes and the "(request_predicted_tpot_seconds ... analogous)" line are comments;
    # the consolidated gauge is another family. The plugin histogram's one sample is read for its plugin type
    # (the late-2025 predicted-latency-scorer, not GIE v1.5.0's predicted-latency-producer).
    assert len(samples) == 16
    assert {s.family for s in samples} == {
        "inference_objective_request_ttft_seconds",
        "inference_objective_request_predicted_ttft_seconds",
        "inference_objective_request_tpot_seconds",
        "inference_objective_request_ttft_prediction_duration_seconds",
        "inference_objective_request_slo_violation",
        "inference_extension_plugin_duration_seconds",
    }


def test_fixture_ttft_histogram_and_violation_exact(fixture_text: str) -> None:
    page = page_of(fixture_text)
    key = (POOL, LLAMA, LLAMA)
    assert page.histograms[c.EPP_TTFT_SECONDS.name] == {
        key: HistogramSeries(buckets=((0.2, 0.0), (0.4, 1.0), (math.inf, 1.0)), sum=0.231, count=1.0)
    }
    assert page.violations == {(POOL, LLAMA, LLAMA, "", "", "ttft"): 1.0}


def test_fixture_every_family_gets_model_and_target_model(fixture_text: str) -> None:
    page = page_of(fixture_text)
    keys = [k for series in page.histograms.values() for k in series]
    keys += [k[:3] for k in page.violations]
    keys += [d.key[:3] for d in page.dropped]
    assert len(keys) == 5  # ttft, the violation counter and the three abbreviated series below
    assert set(keys) == {(POOL, LLAMA, LLAMA)}


def test_fixture_abbreviated_series_are_dropped_not_completed(fixture_text: str) -> None:
    """The fixture leaves out buckets (its header says so); without +Inf nothing is invented."""
    page = page_of(fixture_text)
    assert {(d.family, d.reason) for d in page.dropped} == {
        ("inference_objective_request_predicted_ttft_seconds", "no +Inf bucket"),
        ("inference_objective_request_tpot_seconds", "no +Inf bucket"),
        ("inference_objective_request_ttft_prediction_duration_seconds", "no +Inf bucket"),
    }
    for name, series in page.histograms.items():
        assert bool(series) == (name == c.EPP_TTFT_SECONDS.name)


def test_fixture_duration_series_labels_put_right(fixture_text: str) -> None:
    page = page_of(fixture_text)
    (duration,) = [d for d in page.dropped if "prediction_duration" in d.family]
    assert duration.labels == (("model_name", LLAMA), ("target_model_name", ""))  # as the EPP wrote them
    assert duration.key == (POOL, LLAMA, LLAMA, "", "")


def test_fixture_rendered_exactly(fixture_text: str) -> None:
    lines = rendered(page_of(fixture_text))
    labels = f'model="{LLAMA}",pool="{POOL}",target_model="{LLAMA}"'
    assert [line for line in lines if not line.startswith("#")] == [
        f'sloscope_epp_ttft_seconds_bucket{{le="0.2",{labels}}} 0.0',
        f'sloscope_epp_ttft_seconds_bucket{{le="0.4",{labels}}} 1.0',
        f'sloscope_epp_ttft_seconds_bucket{{le="+Inf",{labels}}} 1.0',
        f"sloscope_epp_ttft_seconds_count{{{labels}}} 1.0",
        f"sloscope_epp_ttft_seconds_sum{{{labels}}} 0.231",
        f'sloscope_epp_slo_violations_total{{model="{LLAMA}",plugin_name="",plugin_type="",pool="{POOL}",'
        f'target_model="{LLAMA}",type="ttft"}} 1.0',
    ]
    d = c.EPP_SLO_VIOLATIONS
    assert f"# HELP {d.exposed_name} {d.help}" in lines
    assert f"# TYPE {d.exposed_name} counter" in lines
    for h in EPP_HISTOGRAMS:
        assert f"# TYPE {h.name} histogram" in lines


# --- complete pages -------------------------------------------------------------------------------


def test_defective_page_every_family_put_right() -> None:
    page = page_of(epp_page())
    assert page.dropped == ()
    assert (page.models_filled, page.labels_swapped) == (7, 2)
    for family, (name, bounds, value) in FAMILIES.items():
        (series,) = page.histograms[name].items()
        key, histogram = series
        assert key == key_of(name, LLAMA, LLAMA), family
        assert [le for le, _ in histogram.buckets] == [*map(float, bounds), math.inf]
        assert (histogram.sum, histogram.count) == (value, 1.0)
    assert page.violations == {(POOL, LLAMA, LLAMA, "", "", "ttft"): 1.0}


@pytest.mark.parametrize(
    ("model_name", "target_model_name", "defective_durations", "slo_labels", "duration_labels", "fixes"),
    [
        pytest.param(
            "llama", "llama-v2", False, ("llama", "llama-v2"), ("llama", "llama-v2"), (0, 0), id="fixed EPP: unchanged"
        ),
        pytest.param("", "", False, ("", ""), ("", ""), (0, 0), id="no model at all stays empty"),
        pytest.param("", LLAMA, False, (LLAMA, LLAMA), (LLAMA, LLAMA), (7, 0), id="swap fixed, incoming model unset"),
        pytest.param(
            "llama",
            "llama-v2",
            True,
            ("llama", "llama-v2"),
            ("llama-v2", "llama"),  # undetectable once both labels are set: published as written
            (0, 0),
            id="incoming model set, swap still there",
        ),
    ],
)
def test_labels_put_right_only_where_defective(
    model_name: str,
    target_model_name: str,
    defective_durations: bool,
    slo_labels: tuple[str, str],
    duration_labels: tuple[str, str],
    fixes: tuple[int, int],
) -> None:
    page = page_of(epp_page(model_name, target_model_name, defective_durations=defective_durations))
    assert page.dropped == ()
    assert (page.models_filled, page.labels_swapped) == fixes
    for family, (name, _, _) in FAMILIES.items():
        expected = duration_labels if family in DURATIONS else slo_labels
        assert list(page.histograms[name]) == [key_of(name, *expected)], family
    assert list(page.violations) == [(POOL, *slo_labels, "", "", "ttft")]


def test_fixed_page_buckets_pass_unchanged() -> None:
    """Values and boundaries are the EPP's own: what was written is what is kept."""
    text = epp_page("llama", "llama-v2", defective_durations=False)
    page = page_of(text)
    for family, (name, _, value) in FAMILIES.items():
        written = [s for s in PARSER.parse(text) if s.family == family and s.name.endswith("_bucket")]
        (histogram,) = page.histograms[name].values()
        assert histogram.buckets == tuple((float(s.labels["le"]), s.value) for s in written)
        assert histogram.sum == value


def test_openmetrics_page_reads_the_same() -> None:
    text = epp_page()
    om = text.replace(
        "# TYPE inference_objective_request_slo_violation_total counter",
        "# TYPE inference_objective_request_slo_violation counter",
    ).replace(
        "# HELP inference_objective_request_slo_violation_total", "# HELP inference_objective_request_slo_violation"
    )
    om += (
        'inference_objective_request_slo_violation_created{model_name="",'
        f'target_model_name="{LLAMA}",type="ttft"}} 1.7e9\n'
        'inference_objective_request_ttft_seconds_created{model_name="",'
        f'target_model_name="{LLAMA}"}} 1.7e9\n# EOF\n'
    )
    assert page_of(om, openmetrics=True) == page_of(text)


# --- broken series --------------------------------------------------------------------------------

TTFT = "inference_objective_request_ttft_seconds"
OK_LABELS = f'model_name="",target_model_name="{LLAMA}"'
BROKEN_LABELS = 'model_name="",target_model_name="other"'


def _broken_ttft(*lines: str) -> str:
    good = histogram_lines(TTFT, OK_LABELS, ("0.2", "0.4"), 0.231)
    return "\n".join([*good, *(line.replace("LABELS", BROKEN_LABELS) for line in lines)]) + "\n"


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        pytest.param(
            [f'{TTFT}_bucket{{LABELS,le="0.2"}} 1', f"{TTFT}_sum{{LABELS}} 0.1", f"{TTFT}_count{{LABELS}} 1"],
            "no +Inf bucket",
            id="no +Inf bucket",
        ),
        pytest.param(
            [
                f'{TTFT}_bucket{{LABELS,le="0.2"}} 2',
                f'{TTFT}_bucket{{LABELS,le="0.4"}} 1',
                f'{TTFT}_bucket{{LABELS,le="+Inf"}} 2',
                f"{TTFT}_sum{{LABELS}} 0.3",
                f"{TTFT}_count{{LABELS}} 2",
            ],
            "cumulative bucket counts decrease",
            id="non-monotonic cumulative counts",
        ),
        pytest.param(
            [f'{TTFT}_bucket{{LABELS,le="+Inf"}} 2', f"{TTFT}_sum{{LABELS}} 0.3", f"{TTFT}_count{{LABELS}} 3"],
            "_count 3.0 differs from the +Inf bucket 2.0",
            id="count is not the +Inf bucket",
        ),
        pytest.param(
            [f'{TTFT}_bucket{{LABELS,le="+Inf"}} 2', f"{TTFT}_count{{LABELS}} 2"],
            "not exactly one _sum and one _count",
            id="no _sum",
        ),
        pytest.param(
            [
                f'{TTFT}_bucket{{LABELS,le="fast"}} 1',
                f'{TTFT}_bucket{{LABELS,le="+Inf"}} 1',
                f"{TTFT}_sum{{LABELS}} 0.1",
                f"{TTFT}_count{{LABELS}} 1",
            ],
            "bucket boundary le='fast' is not a number",
            id="le not a number",
        ),
        pytest.param(
            [
                f'{TTFT}_bucket{{LABELS,le="0.2"}} 1',
                f'{TTFT}_bucket{{LABELS,le="0.20"}} 1',
                f'{TTFT}_bucket{{LABELS,le="+Inf"}} 1',
                f"{TTFT}_sum{{LABELS}} 0.1",
                f"{TTFT}_count{{LABELS}} 1",
            ],
            "bucket le='0.20' twice",
            id="the same boundary twice",
        ),
        pytest.param(
            [f'{TTFT}_bucket{{LABELS,le="+Inf"}} NaN', f"{TTFT}_sum{{LABELS}} 0.1", f"{TTFT}_count{{LABELS}} 1"],
            "bucket count nan is negative or not finite",
            id="NaN count",
        ),
        pytest.param(
            [f'{TTFT}_bucket{{LABELS,le="+Inf"}} 1', f"{TTFT}_sum{{LABELS}} +Inf", f"{TTFT}_count{{LABELS}} 1"],
            "_sum inf is not finite",
            id="infinite sum",
        ),
    ],
)
def test_broken_histogram_is_dropped(lines: list[str], reason: str) -> None:
    page = page_of(_broken_ttft(*lines))
    series = page.histograms[c.EPP_TTFT_SECONDS.name]
    assert list(series) == [(POOL, LLAMA, LLAMA)]  # the good series on the same page is kept
    (dropped,) = page.dropped
    assert (dropped.family, dropped.key, dropped.reason) == (TTFT, (POOL, "other", "other"), reason)
    assert not any('target_model="other"' in line for line in rendered(page))


@pytest.mark.parametrize("value", ["-1", "NaN", "+Inf"])
def test_broken_counter_is_dropped(value: str) -> None:
    name = "inference_objective_request_slo_violation_total"
    text = (
        f'{name}{{model_name="",target_model_name="{LLAMA}",type="ttft"}} 3\n'
        f'{name}{{model_name="",target_model_name="{LLAMA}",type="tpot"}} {value}\n'
    )
    page = page_of(text)
    assert page.violations == {(POOL, LLAMA, LLAMA, "", "", "ttft"): 3.0}
    (dropped,) = page.dropped
    assert dropped.key == (POOL, LLAMA, LLAMA, "", "", "tpot")
    assert "negative or not finite" in dropped.reason


def test_series_that_become_one_are_added_up() -> None:
    """A page mixing a defective and a fixed series of the same model: the same series, counted once each."""
    labels_fixed = f'model_name="{LLAMA}",target_model_name="{LLAMA}"'
    text = "\n".join(
        histogram_lines(TTFT, OK_LABELS, ("0.2", "0.4"), 0.231)
        + histogram_lines(TTFT, labels_fixed, ("0.2", "0.4"), 0.1)
    )
    page = page_of(text + "\n")
    assert page.histograms[c.EPP_TTFT_SECONDS.name] == {
        (POOL, LLAMA, LLAMA): HistogramSeries(((0.2, 1.0), (0.4, 2.0), (math.inf, 2.0)), 0.331, 2.0)
    }


# --- the collector --------------------------------------------------------------------------------


def test_le_written_as_prometheus_client_writes_it() -> None:
    lines = rendered(page_of(epp_page()))
    ttft = [line for line in lines if line.startswith("sloscope_epp_ttft_seconds_bucket")]
    tpot = [line for line in lines if line.startswith("sloscope_epp_tpot_seconds_bucket")]
    duration = [line for line in lines if line.startswith("sloscope_epp_ttft_prediction_duration_seconds_bucket")]
    assert [line.split('"')[1] for line in ttft][8:10] == ["1.0", "1.25"]
    assert [line.split('"')[1] for line in ttft][-2:] == ["3600.0", "+Inf"]
    assert [line.split('"')[1] for line in tpot][:2] == ["0.0005", "0.00205"]
    assert duration[0].split('"')[1] == "0.0001"
    assert len(ttft) == len(GENERAL) + 1


def test_pools_sorted_and_missing_pages_skipped() -> None:
    a = normalize(PARSER.parse(epp_page()), "b-pool")
    b = normalize(PARSER.parse(epp_page()), "a-pool")
    lines = [line for line in rendered(a, None, b) if line.startswith("sloscope_epp_slo_violations_total")]
    assert [line.split('pool="')[1].split('"')[0] for line in lines] == ["a-pool", "b-pool"]


def test_registry_learns_names_from_describe_without_collecting() -> None:
    def never() -> list[EPPPage]:
        raise AssertionError("collect() called at registration")

    registry = CollectorRegistry()
    registry.register(EPPCollector(never))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(EPPCollector(never))


def test_registry_sample_values() -> None:
    registry = CollectorRegistry()
    page = page_of(epp_page())
    registry.register(EPPCollector(lambda: [page]))
    labels = {"pool": POOL, "model": LLAMA, "target_model": LLAMA}
    plugin = {**labels, "plugin_name": "", "plugin_type": ""}
    assert registry.get_sample_value("sloscope_epp_slo_violations_total", {**plugin, "type": "ttft"}) == 1.0
    assert registry.get_sample_value("sloscope_epp_tpot_prediction_duration_seconds_sum", plugin) == 0.0024
    assert registry.get_sample_value("sloscope_epp_tpot_seconds_bucket", {**labels, "le": "0.02"}) == 1.0
    assert registry.get_sample_value("sloscope_epp_tpot_seconds_bucket", {**labels, "le": "0.01"}) == 0.0
