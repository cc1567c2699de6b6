"""The predictor health gauges rendered from snapshots at scrape time."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope import conventions as c
from sloscope.predictor.health import PredictorSnapshot, ServerStatus
from sloscope.processors.streaming_modes import StreamingModes
from sloscope.publishers.predictor_health import PredictorHealthCollector
from tests.support.series import Samples
from tests.support.series import samples as page_samples

TRAINING = "http://training:8000"
PREDICTION = "http://prediction:8001"


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def base_snapshot(**changes: object) -> PredictorSnapshot:
    fields: dict[str, object] = {
        "pool": "pool-a",
        "servers": (ServerStatus(TRAINING, c.ROLE_TRAINING, True), ServerStatus(PREDICTION, c.ROLE_PREDICTION, False)),
        "quantile": 0.9,
        "model_last_modified": {"ttft": 1000.0, "tpot": 1500.0},
        "coverage": {"ttft": 0.86909091, "tpot": 0.90526316},
        "polled_at": 1990.0,
        "training_samples": {"ttft": 2725.0, "tpot": 2715.0},
    }
    fields.update(changes)
    return PredictorSnapshot(**fields)  # type: ignore[arg-type]


def registry_with(snapshots: list[PredictorSnapshot | None], clock: FakeClock) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(PredictorHealthCollector(lambda: snapshots, StreamingModes({}, default=True).streaming, clock))
    return registry


def samples(registry: CollectorRegistry) -> Samples:
    return page_samples(generate_latest(registry).decode())


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (name, frozenset(labels.items()))


def test_every_series_with_its_labels() -> None:
    registry = registry_with([base_snapshot()], FakeClock(2000.0))
    assert samples(registry) == {
        key(c.PREDICTOR_UP.name, pool="pool-a", server=TRAINING, role="training"): 1.0,
        key(c.PREDICTOR_UP.name, pool="pool-a", server=PREDICTION, role="prediction"): 0.0,
        key(c.PREDICTOR_MODEL_AGE_SECONDS.name, pool="pool-a", signal="ttft"): 1000.0,
        key(c.PREDICTOR_MODEL_AGE_SECONDS.name, pool="pool-a", signal="tpot"): 500.0,
        key(c.PREDICTOR_COVERAGE_OFFLINE_RATIO.name, pool="pool-a", signal="ttft"): 0.86909091,
        key(c.PREDICTOR_COVERAGE_OFFLINE_RATIO.name, pool="pool-a", signal="tpot"): 0.90526316,
        key(c.PREDICTOR_QUANTILE.name, pool="pool-a"): 0.9,
        key(c.PREDICTOR_TRAINING_SAMPLES.name, pool="pool-a", signal="ttft"): 2725.0,
        key(c.PREDICTOR_TRAINING_SAMPLES.name, pool="pool-a", signal="tpot"): 2715.0,
    }


def test_the_model_age_grows_between_polls() -> None:
    clock = FakeClock(2000.0)
    registry = registry_with([base_snapshot()], clock)
    labels = {"pool": "pool-a", "signal": "ttft"}
    assert registry.get_sample_value(c.PREDICTOR_MODEL_AGE_SECONDS.name, labels) == 1000.0
    clock.now = 2015.0
    assert registry.get_sample_value(c.PREDICTOR_MODEL_AGE_SECONDS.name, labels) == 1015.0


@pytest.mark.parametrize(
    ("changes", "missing"),
    [
        pytest.param({"quantile": None}, c.PREDICTOR_QUANTILE.name, id="no quantile: no quantile series"),
        pytest.param({"model_last_modified": {}}, c.PREDICTOR_MODEL_AGE_SECONDS.name, id="no model: no age"),
        pytest.param({"coverage": {}}, c.PREDICTOR_COVERAGE_OFFLINE_RATIO.name, id="no evaluation: no coverage"),
        pytest.param({"servers": ()}, c.PREDICTOR_UP.name, id="no server: no up series"),
        pytest.param({"training_samples": {}}, c.PREDICTOR_TRAINING_SAMPLES.name, id="no page: no samples"),
    ],
)
def test_values_never_fetched_have_no_series(changes: dict[str, object], missing: str) -> None:
    names = {name for name, _ in samples(registry_with([base_snapshot(**changes)], FakeClock(2000.0)))}
    assert missing not in names
    assert len(names) == 4


def test_pools_not_polled_yet_have_no_series_and_pools_are_kept_apart() -> None:
    other = base_snapshot(
        pool="pool-b", quantile=0.95, servers=(), model_last_modified={}, coverage={}, training_samples={}
    )
    got = samples(registry_with([None, base_snapshot(), other], FakeClock(2000.0)))
    assert got[key(c.PREDICTOR_QUANTILE.name, pool="pool-b")] == 0.95
    assert got[key(c.PREDICTOR_QUANTILE.name, pool="pool-a")] == 0.9
    assert len(got) == 10


def test_describe_names_the_families_without_reading_snapshots() -> None:
    def never() -> list[PredictorSnapshot | None]:
        raise AssertionError("describe must not collect")

    collector = PredictorHealthCollector(never, StreamingModes({}, default=True).streaming)
    assert [m.name for m in collector.describe()] == [
        c.PREDICTOR_UP.name,
        c.PREDICTOR_MODEL_AGE_SECONDS.name,
        c.PREDICTOR_COVERAGE_OFFLINE_RATIO.name,
        c.PREDICTOR_QUANTILE.name,
        c.PREDICTOR_TRAINING_SAMPLES.name,
        c.PREDICTOR_OBJECTIVE.name,
        c.PREDICTOR_MAE_OFFLINE_SECONDS.name,
        c.PREDICTOR_RMSE_OFFLINE_SECONDS.name,
        c.PREDICTOR_TRAINED.name,
    ]
    CollectorRegistry().register(collector)  # registration uses describe()


def test_with_streaming_off_the_tpot_model_is_neither_stale_nor_untrained() -> None:
    """The EPP gives the TPOT model no sample with streaming off (predictedlatency/requestcontrol_hooks.go:151-185 of
    llm-d-router): its age grows and it keeps its default, which is no fault of the predictor's."""
    snapshot = base_snapshot(untrained={"ttft": (), "tpot": ("no training samples",)})
    registry = CollectorRegistry()
    registry.register(
        PredictorHealthCollector(lambda: [snapshot], StreamingModes({}, default=False).streaming, FakeClock(2000.0))
    )
    values = samples(registry)
    assert values[key(c.PREDICTOR_MODEL_AGE_SECONDS.name, pool="pool-a", signal="ttft")] == 1000.0
    assert values[key(c.PREDICTOR_TRAINED.name, pool="pool-a", signal="ttft")] == 1.0
    for definition in (c.PREDICTOR_MODEL_AGE_SECONDS, c.PREDICTOR_TRAINED):
        assert key(definition.name, pool="pool-a", signal="tpot") not in values, definition.name
    # what the training server holds is still said
    assert values[key(c.PREDICTOR_TRAINING_SAMPLES.name, pool="pool-a", signal="tpot")] == 2715.0
    streaming = registry_with([snapshot], FakeClock(2000.0))
    assert samples(streaming)[key(c.PREDICTOR_TRAINED.name, pool="pool-a", signal="tpot")] == 0.0


def test_a_mean_predictor_publishes_no_quantile() -> None:
    """The llm-d predictor in mean mode still writes quantile 0.9 in /status and model_quantile{} (captured at
    b5d19f1, fixtures/predictor/llm-d/mean/): it predicts no quantile, so sloscope_predictor_quantile is absent."""
    values = samples(registry_with([base_snapshot(objective=c.OBJECTIVE_MEAN)], FakeClock(2000.0)))
    assert key(c.PREDICTOR_QUANTILE.name, pool="pool-a") not in values
    assert values[key(c.PREDICTOR_OBJECTIVE.name, pool="pool-a", objective=c.OBJECTIVE_MEAN)] == 1.0
