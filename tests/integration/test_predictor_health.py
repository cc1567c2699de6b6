"""PredictorHealth against stand-in training and prediction servers serving the recorded bodies."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sloscope import conventions as c
from sloscope.config import PredictorServers
from sloscope.predictor.health import PredictorHealth, PredictorSnapshot, ServerStatus
from sloscope.processors.streaming_modes import StreamingModes
from sloscope.publishers.predictor_health import PredictorHealthCollector
from sloscope.telemetry import Telemetry
from tests.support.prediction_server import PredictionBehaviour, PredictionServer
from tests.support.serving import RunningServer
from tests.support.training_server import TrainingBehaviour, TrainingServer

pytestmark = pytest.mark.integration

# The recorded /models/list: ttft written 10:22:08.208881, tpot 10:22:08.407796 (UTC).
TTFT_WRITTEN = datetime(2026, 11, 30, 10, 22, 8, 208881, tzinfo=UTC).timestamp()
TPOT_WRITTEN = datetime(2026, 11, 30, 10, 22, 8, 407796, tzinfo=UTC).timestamp()
NOW = datetime(2026, 11, 30, 10, 32, 8, 208881, tzinfo=UTC).timestamp()  # ten minutes after the ttft write
RECORDED_COVERAGE = {"ttft": 86.909091 / 100, "tpot": 90.526316 / 100}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def training(shared: Path, start: Callable[[RunningServer], RunningServer]) -> TrainingServer:
    server = TrainingServer(shared, TrainingBehaviour())
    start(server)
    return server


@pytest.fixture
def prediction(start: Callable[[RunningServer], RunningServer]) -> PredictionServer:
    server = PredictionServer(PredictionBehaviour())
    start(server)
    return server


class Poller:
    """One PredictorHealth with its own registry, polled on the event loop of ``runner``."""

    def __init__(
        self, runner: asyncio.Runner, servers: PredictorServers, clock: Clock | None = None, timeout: float = 5.0
    ) -> None:
        self.registry = CollectorRegistry()
        self.telemetry = Telemetry(self.registry)
        self.runner = runner
        self.http = httpx.AsyncClient()
        self.health = PredictorHealth("pool-a", servers, self.http, self.telemetry, timeout, clock=clock or Clock(NOW))

    def poll(self) -> PredictorSnapshot:
        return self.runner.run(self.health.poll_once())

    def close(self) -> None:
        self.runner.run(self.http.aclose())

    def scrapes(self, kind: str, result: str) -> float:
        value = self.registry.get_sample_value(c.SCRAPES.exposed_name, {"kind": kind, "result": result})
        assert value is not None
        return value


@pytest.fixture
def make_poller() -> Iterator[Callable[..., Poller]]:
    """Makes pollers sharing one event loop, which outlives the polls of a test."""
    made: list[Poller] = []
    with asyncio.Runner() as runner:

        def make(servers: PredictorServers, clock: Clock | None = None, timeout: float = 5.0) -> Poller:
            made.append(Poller(runner, servers, clock, timeout))
            return made[-1]

        yield make
        for each in made:
            each.close()


def test_a_healthy_predictor(
    make_poller: Callable[..., Poller], training: TrainingServer, prediction: PredictionServer
) -> None:
    poller = make_poller(PredictorServers(training_url=training.url, prediction_urls=[prediction.url]))
    snapshot = poller.poll()
    assert snapshot == PredictorSnapshot(
        pool="pool-a",
        servers=(
            ServerStatus(training.url, c.ROLE_TRAINING, True),
            ServerStatus(prediction.url, c.ROLE_PREDICTION, True),
        ),
        quantile=0.9,
        model_last_modified={"ttft": TTFT_WRITTEN, "tpot": TPOT_WRITTEN},
        coverage=RECORDED_COVERAGE,
        polled_at=snapshot.polled_at,
        training_samples={"ttft": 64.0},  # the recorded page keeps 6 of its 800 bucket lines
        objective=c.OBJECTIVE_QUANTILE,  # the late-2025 predictor states none
        untrained={"ttft": (), "tpot": ()},  # the probe got two different predictions
        speaks_objective=False,  # the late-2025 predictor's /status states no objective_type
    )
    assert snapshot.coverage == {"ttft": 0.86909091, "tpot": 0.90526316}
    assert snapshot.model_age_seconds(NOW) == {"ttft": 600.0, "tpot": NOW - TPOT_WRITTEN}
    assert snapshot.model_age_seconds(NOW)["tpot"] == pytest.approx(599.801085, abs=1e-6)
    assert sorted(training.behaviour.calls) == ["/metrics", "/models/list", "/readyz"]
    assert sorted(prediction.behaviour.calls) == ["/predict", "/predict", "/readyz", "/status"]
    assert poller.scrapes(c.KIND_TRAINING_SERVER, c.RESULT_SUCCESS) == 3
    assert poller.scrapes(c.KIND_PREDICTION_SERVER, c.RESULT_SUCCESS) == 4


def test_the_snapshot_is_none_before_the_first_poll_then_the_latest(
    make_poller: Callable[..., Poller], training: TrainingServer
) -> None:
    clock = Clock(NOW)
    poller = make_poller(PredictorServers(training_url=training.url), clock)
    before = poller.health.snapshot
    assert before is None
    first = poller.poll()
    assert poller.health.snapshot is first
    assert first.polled_at == NOW
    clock.now += 15
    second = poller.poll()
    assert poller.health.snapshot is second
    assert second.polled_at == NOW + 15


def test_servers_not_ready_are_down_and_still_give_what_they_know(
    make_poller: Callable[..., Poller], training: TrainingServer, prediction: PredictionServer
) -> None:
    training.behaviour.ready = False
    prediction.behaviour.ready = False
    poller = make_poller(PredictorServers(training_url=training.url, prediction_urls=[prediction.url]))
    snapshot = poller.poll()
    assert [s.up for s in snapshot.servers] == [False, False]
    assert snapshot.quantile == 0.9  # /status tells its quantile even when not ready
    assert snapshot.model_last_modified == {"ttft": TTFT_WRITTEN, "tpot": TPOT_WRITTEN}
    assert snapshot.coverage == RECORDED_COVERAGE
    assert poller.scrapes(c.KIND_TRAINING_SERVER, c.RESULT_HTTP_ERROR) == 1  # the 503 of /readyz
    assert poller.scrapes(c.KIND_PREDICTION_SERVER, c.RESULT_HTTP_ERROR) == 1
    assert poller.scrapes(c.KIND_PREDICTION_SERVER, c.RESULT_SUCCESS) == 1


def test_a_server_that_goes_down_keeps_the_values_it_gave(
    make_poller: Callable[..., Poller], training: TrainingServer, prediction: PredictionServer
) -> None:
    poller = make_poller(PredictorServers(training_url=training.url, prediction_urls=[prediction.url]))
    first = poller.poll()
    training.stop()
    prediction.behaviour.fail = True
    second = poller.poll()
    assert [s.up for s in second.servers] == [False, False]
    assert (second.quantile, second.model_last_modified, second.coverage) == (
        first.quantile,
        first.model_last_modified,
        first.coverage,
    )
    assert poller.scrapes(c.KIND_TRAINING_SERVER, c.RESULT_CONNECTION_ERROR) == 3
    assert poller.scrapes(c.KIND_PREDICTION_SERVER, c.RESULT_HTTP_ERROR) == 2


def test_values_never_fetched_stay_absent(make_poller: Callable[..., Poller], prediction: PredictionServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: the training server refuses connections
        gone = f"http://127.0.0.1:{sock.getsockname()[1]}"
        snapshot = make_poller(PredictorServers(training_url=gone, prediction_urls=[prediction.url])).poll()
    assert snapshot.servers == (
        ServerStatus(gone, c.ROLE_TRAINING, False),
        ServerStatus(prediction.url, c.ROLE_PREDICTION, True),
    )
    assert snapshot.quantile == 0.9
    assert snapshot.model_last_modified == {}
    assert snapshot.coverage == {}


def test_the_quantile_falls_back_to_the_training_server(
    make_poller: Callable[..., Poller], training: TrainingServer
) -> None:
    training.behaviour.metrics = "model_quantile{} 0.95\n"
    snapshot = make_poller(PredictorServers(training_url=training.url)).poll()
    assert snapshot.quantile == 0.95
    assert snapshot.coverage == {}  # a page without rings: no evaluation yet


def test_a_prediction_server_that_loses_its_models_goes_down(
    make_poller: Callable[..., Poller],
    start: Callable[[RunningServer], RunningServer],
) -> None:
    server = PredictionServer(PredictionBehaviour())
    start(server)
    poller = make_poller(PredictorServers(prediction_urls=[server.url]))
    assert poller.poll().servers == (ServerStatus(server.url, c.ROLE_PREDICTION, True),)
    server.behaviour.ready = False
    assert poller.poll().servers == (ServerStatus(server.url, c.ROLE_PREDICTION, False),)


def test_the_newest_evaluation_of_a_full_ring_is_published(
    make_poller: Callable[..., Poller], training: TrainingServer
) -> None:
    # Six evaluations into a ring of five: the oldest was dropped and the rest moved down, so idx 4 is newest.
    training.behaviour.metrics = "".join(
        f'{signal}_coverage_percent{{idx="{idx}"}} {value:.6f}\n'
        for signal in ("ttft", "tpot")
        for idx, value in enumerate([81.0, 82.0, 83.0, 84.0, 85.5])
    )
    assert make_poller(PredictorServers(training_url=training.url)).poll().coverage == {"ttft": 0.855, "tpot": 0.855}


@pytest.mark.parametrize(
    ("change", "endpoint"),
    [
        pytest.param({"metrics": 'ttft_coverage_percent{idx="0"} lots\n'}, "/metrics", id="a broken metrics line"),
        pytest.param({"models_list": "[]"}, "/models/list", id="a models list that is not an object"),
        pytest.param({"models_list": "{"}, "/models/list", id="a models list that is not JSON"),
    ],
)
def test_an_unreadable_body_is_a_parse_error_and_keeps_the_earlier_values(
    make_poller: Callable[..., Poller], training: TrainingServer, change: dict[str, str], endpoint: str
) -> None:
    poller = make_poller(PredictorServers(training_url=training.url))
    first = poller.poll()
    for name, value in change.items():
        setattr(training.behaviour, name, value)
    second = poller.poll()
    assert second.servers == first.servers
    assert (second.model_last_modified, second.coverage) == (first.model_last_modified, first.coverage)
    assert training.behaviour.calls.count(endpoint) == 2
    assert poller.scrapes(c.KIND_TRAINING_SERVER, c.RESULT_PARSE_ERROR) == 1
    assert poller.scrapes(c.KIND_TRAINING_SERVER, c.RESULT_SUCCESS) == 5


def test_a_slow_server_is_a_timeout_and_down(make_poller: Callable[..., Poller], prediction: PredictionServer) -> None:
    prediction.behaviour.delay_seconds = 60.0  # released when the fixture stops the server
    poller = make_poller(PredictorServers(prediction_urls=[prediction.url]), timeout=0.2)
    assert poller.poll().servers == (ServerStatus(prediction.url, c.ROLE_PREDICTION, False),)
    assert poller.scrapes(c.KIND_PREDICTION_SERVER, c.RESULT_TIMEOUT) == 2


def test_the_published_series(
    make_poller: Callable[..., Poller], training: TrainingServer, prediction: PredictionServer
) -> None:
    poller = make_poller(PredictorServers(training_url=training.url, prediction_urls=[prediction.url]))
    poller.poll()
    health = poller.health
    clock = Clock(NOW)
    registry = CollectorRegistry()
    registry.register(
        PredictorHealthCollector(lambda: [health.snapshot], StreamingModes({}, default=True).streaming, clock)
    )
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert got == {
        (c.PREDICTOR_UP.name, (("pool", "pool-a"), ("role", "training"), ("server", training.url))): 1.0,
        (c.PREDICTOR_UP.name, (("pool", "pool-a"), ("role", "prediction"), ("server", prediction.url))): 1.0,
        (c.PREDICTOR_MODEL_AGE_SECONDS.name, (("pool", "pool-a"), ("signal", "ttft"))): 600.0,
        (c.PREDICTOR_MODEL_AGE_SECONDS.name, (("pool", "pool-a"), ("signal", "tpot"))): NOW - TPOT_WRITTEN,
        (c.PREDICTOR_COVERAGE_OFFLINE_RATIO.name, (("pool", "pool-a"), ("signal", "ttft"))): 0.86909091,
        (c.PREDICTOR_COVERAGE_OFFLINE_RATIO.name, (("pool", "pool-a"), ("signal", "tpot"))): 0.90526316,
        (c.PREDICTOR_QUANTILE.name, (("pool", "pool-a"),)): 0.9,
        (c.PREDICTOR_TRAINING_SAMPLES.name, (("pool", "pool-a"), ("signal", "ttft"))): 64.0,
        (c.PREDICTOR_OBJECTIVE.name, (("objective", "mean"), ("pool", "pool-a"))): 0.0,
        (c.PREDICTOR_OBJECTIVE.name, (("objective", "quantile"), ("pool", "pool-a"))): 1.0,
        (c.PREDICTOR_TRAINED.name, (("pool", "pool-a"), ("signal", "tpot"))): 1.0,
        (c.PREDICTOR_TRAINED.name, (("pool", "pool-a"), ("signal", "ttft"))): 1.0,
    }
    clock.now += 60
    age = registry.get_sample_value(c.PREDICTOR_MODEL_AGE_SECONDS.name, {"pool": "pool-a", "signal": "ttft"})
    assert age == 660.0
