"""PredictionClient against stand-in prediction servers on loopback: real HTTP, the recorded API."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from sloscope import conventions as c
from sloscope.config import Predictions
from sloscope.predictor.client import PredictionClient
from sloscope.predictor.features import Features, Prediction
from sloscope.receivers.http_auth import BearerTokenFile
from tests.support.prediction_server import PredictionBehaviour, PredictionServer, expected_prediction

pytestmark = pytest.mark.integration

SHADOW = c.PURPOSE_SHADOW


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def servers() -> Iterator[Callable[..., PredictionServer]]:
    started: list[PredictionServer] = []

    def start(**behaviour: object) -> PredictionServer:
        server = PredictionServer(PredictionBehaviour(**behaviour))  # type: ignore[arg-type]
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()


class Counted:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.retries: list[str] = []

    def __call__(self, purpose: str, result: str) -> None:
        self.calls.append((purpose, result))

    def retried(self, purpose: str) -> None:
        self.retries.append(purpose)

    def results(self) -> list[str]:
        return [result for _, result in self.calls]


def features(count: int, **changes: float) -> list[Features]:
    """Distinct features per index, so a misplaced answer shows."""
    base: dict[str, float] = {
        "kv_cache_percentage": 0.25,
        "num_request_waiting": 2,
        "num_request_running": 7,
        "num_tokens_generated": 1,
        "prefix_cache_score": 0.5,
    }
    base.update(changes)
    return [
        Features(
            kv_cache_percentage=base["kv_cache_percentage"],
            input_token_length=100 + i,
            num_request_waiting=int(base["num_request_waiting"]) + i % 5,
            num_request_running=int(base["num_request_running"]) + i % 3,
            num_tokens_generated=int(base["num_tokens_generated"]),
            prefix_cache_score=base["prefix_cache_score"],
        )
        for i in range(count)
    ]


def predict_all(
    urls: list[str],
    batches: Sequence[Sequence[Features]],
    settings: Predictions | None = None,
    clock: FakeClock | None = None,
    between: Callable[[int, PredictionClient], None] | None = None,
) -> tuple[list[list[Prediction | None]], Counted, PredictionClient]:
    """Runs predict() once per entry of ``batches`` in order with one client; ``between(i, client)`` before each."""
    counted = Counted()
    settings = settings or Predictions()

    async def go() -> tuple[list[list[Prediction | None]], PredictionClient]:
        async with httpx.AsyncClient() as http:
            kwargs = {"clock": clock} if clock is not None else {}
            client = PredictionClient(urls, settings, http, counted, retried=counted.retried, **kwargs)
            out = []
            for i, batch in enumerate(batches):
                if between is not None:
                    between(i, client)
                out.append(await client.predict(batch, SHADOW))
            return out, client

    results, client = asyncio.run(go())
    return results, counted, client


def test_predictions_are_the_servers_exact_values_in_input_order(servers: Callable[..., PredictionServer]) -> None:
    server = servers()
    asked = features(3)
    (results,), counted, _ = predict_all([server.url], [asked])
    assert results == [expected_prediction(f) for f in asked]
    assert results[0] == Prediction(20 + 10 * 2 + 0.1 * 100 + 100 * 0.25, 5 + 0.5 * 7 + 10 * 0.25, 0.9, "xgboost")
    assert counted.calls == [(SHADOW, c.RESULT_SUCCESS)]
    assert server.behaviour.bulk_requests == [[f.to_json() for f in asked]]


def test_250_requests_go_out_as_batches_of_100_100_and_50(servers: Callable[..., PredictionServer]) -> None:
    server = servers()
    asked = features(250)
    (results,), counted, _ = predict_all([server.url], [asked])
    assert results == [expected_prediction(f) for f in asked]
    assert sorted(server.behaviour.bulk_sizes) == [50, 100, 100]
    assert sorted(r["input_token_length"] for batch in server.behaviour.bulk_requests for r in batch) == [
        100 + i for i in range(250)
    ]
    assert counted.results() == [c.RESULT_SUCCESS] * 3


def test_a_smaller_batch_size_is_respected(servers: Callable[..., PredictionServer]) -> None:
    server = servers()
    predict_all([server.url], [features(7)], Predictions(batch_size=3))
    assert sorted(server.behaviour.bulk_sizes) == [1, 3, 3]


def test_batches_take_turns_over_the_servers(servers: Callable[..., PredictionServer]) -> None:
    first, second = servers(), servers()
    asked = features(250)
    (results, *singles), counted, _ = predict_all([first.url, second.url], [asked, *([features(1)] * 4)])
    assert results == [expected_prediction(f) for f in asked]
    # Batches 1 and 3 of the 250 go to the first server, batch 2 to the second; then one each in turn.
    assert sorted(first.behaviour.bulk_sizes[:2]) == [50, 100]
    assert second.behaviour.bulk_sizes[:1] == [100]
    assert first.behaviour.bulk_sizes[2:] == [1, 1]
    assert second.behaviour.bulk_sizes[1:] == [1, 1]
    assert [r for single in singles for r in single] == [expected_prediction(features(1)[0])] * 4
    assert counted.results() == [c.RESULT_SUCCESS] * 7


def test_a_validation_error_is_rejected_for_the_whole_batch_and_leaves_the_breaker_alone(
    servers: Callable[..., PredictionServer],
) -> None:
    server = servers()
    bad = features(3)
    bad[1] = Features(1.3, 500, 2, 8, 1, 0.0)  # kv_cache_percentage above 1: the server answers 422
    settings = Predictions(breaker_failures=2)
    results, counted, client = predict_all([server.url], [bad, bad, bad, features(2)], settings)
    assert results[:3] == [[None, None, None]] * 3
    assert results[3] == [expected_prediction(f) for f in features(2)]
    assert counted.results() == [c.RESULT_REJECTED] * 3 + [c.RESULT_SUCCESS]
    assert server.behaviour.calls == ["/predict/bulk/strict"] * 4
    assert server.behaviour.bulk_requests == [[f.to_json() for f in features(2)]]  # the 422s never got in
    assert client.breaker_states() == {server.url: "closed"}


def test_a_slow_server_is_a_timeout(servers: Callable[..., PredictionServer]) -> None:
    server = servers(delay_seconds=60.0)  # released when the fixture stops the server
    (results,), counted, client = predict_all([server.url], [features(2)], Predictions(timeout_seconds=0.2))
    assert results == [None, None]
    assert counted.calls == [(SHADOW, c.RESULT_TIMEOUT)]
    assert client.breaker_states() == {server.url: "closed"}  # one failure of five


def test_a_refused_connection_is_a_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: connections are refused
        (results,), counted, _ = predict_all([url], [features(1)])
    assert results == [None]
    assert counted.calls == [(SHADOW, c.RESULT_CONNECTION_ERROR)]


def test_a_failing_server_opens_its_breaker_and_is_not_called_while_open(
    servers: Callable[..., PredictionServer],
) -> None:
    server = servers(fail=True)
    settings = Predictions(breaker_failures=3, breaker_open_seconds=30)
    results, counted, client = predict_all([server.url], [features(2)] * 5, settings, FakeClock())
    assert results == [[None, None]] * 5
    assert counted.results() == [c.RESULT_HTTP_ERROR] * 3 + [c.RESULT_CIRCUIT_OPEN] * 2
    assert server.behaviour.calls == ["/predict/bulk/strict"] * 3
    assert client.breaker_states() == {server.url: "open"}


def test_every_batch_finding_all_breakers_open_is_counted_without_a_call(
    servers: Callable[..., PredictionServer],
) -> None:
    server = servers(fail=True)
    settings = Predictions(breaker_failures=1)
    results, counted, _ = predict_all([server.url], [features(1), features(250)], settings, FakeClock())
    assert results == [[None], [None] * 250]
    assert counted.results() == [c.RESULT_HTTP_ERROR] + [c.RESULT_CIRCUIT_OPEN] * 3
    assert server.behaviour.calls == ["/predict/bulk/strict"]


def test_an_open_breaker_recovers_through_one_trial_call(servers: Callable[..., PredictionServer]) -> None:
    server = servers(fail=True)
    clock = FakeClock()
    settings = Predictions(breaker_failures=2, breaker_open_seconds=30)

    def between(i: int, client: PredictionClient) -> None:
        if i == 3:
            clock.now += 29.9  # still open
        if i == 4:
            clock.now += 0.1  # half-open: one trial, which fails again
        if i == 6:
            clock.now += 30  # half-open again; the server is back
            server.behaviour.fail = False

    results, counted, client = predict_all([server.url], [features(1)] * 8, settings, clock, between)
    assert counted.results() == [
        c.RESULT_HTTP_ERROR,
        c.RESULT_HTTP_ERROR,  # opens
        c.RESULT_CIRCUIT_OPEN,
        c.RESULT_CIRCUIT_OPEN,
        c.RESULT_HTTP_ERROR,  # the failed trial opens it again
        c.RESULT_CIRCUIT_OPEN,
        c.RESULT_SUCCESS,  # the trial that closes it
        c.RESULT_SUCCESS,
    ]
    assert results[6:] == [[expected_prediction(features(1)[0])]] * 2
    assert len(server.behaviour.calls) == 5
    assert client.breaker_states() == {server.url: "closed"}


def test_a_failed_batch_is_retried_once_on_another_healthy_replica(servers: Callable[..., PredictionServer]) -> None:
    """The first server fails the call; the same body goes to the second, whose answer is used; counted."""
    failing, healthy = servers(fail=True), servers()
    settings = Predictions(breaker_failures=1)
    results, counted, client = predict_all([failing.url, healthy.url], [features(1)] * 4, settings, FakeClock())
    assert results == [[expected_prediction(features(1)[0])]] * 4
    assert counted.results() == [c.RESULT_HTTP_ERROR] + [c.RESULT_SUCCESS] * 4
    assert counted.retries == [SHADOW]
    assert failing.behaviour.calls == ["/predict/bulk/strict"]
    assert healthy.behaviour.bulk_sizes == [1, 1, 1, 1]
    assert failing.behaviour.received == [healthy.behaviour.received[0]]  # the same request, sent twice
    assert client.breaker_states() == {failing.url: "open", healthy.url: "closed"}


def test_a_batch_failing_on_both_replicas_is_failed_after_one_retry(servers: Callable[..., PredictionServer]) -> None:
    first, second = servers(fail=True), servers(fail=True)
    (results,), counted, _ = predict_all([first.url, second.url], [features(2)])
    assert results == [None, None]
    assert counted.results() == [c.RESULT_HTTP_ERROR, c.RESULT_HTTP_ERROR]
    assert counted.retries == [SHADOW]
    assert len(first.behaviour.calls) == len(second.behaviour.calls) == 1


def test_prediction_calls_send_the_token_file_and_a_refusal_is_an_auth_error_retried_elsewhere(
    servers: Callable[..., PredictionServer], tmp_path: Path
) -> None:
    """The token comes from a file at each call; a 401 counts ``auth_error`` (as scrapes count it) and is retried."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    refusing, accepting = servers(require_token="other"), servers(require_token="s3cret")
    counted = Counted()

    async def go() -> list[Prediction | None]:
        async with httpx.AsyncClient(auth=BearerTokenFile(str(token))) as http:
            client = PredictionClient(
                [refusing.url, accepting.url], Predictions(), http, counted, retried=counted.retried
            )
            return await client.predict(features(1), SHADOW)

    assert asyncio.run(go()) == [expected_prediction(features(1)[0])]
    assert counted.results() == [c.RESULT_AUTH_ERROR, c.RESULT_SUCCESS]
    assert counted.retries == [SHADOW]
    assert accepting.behaviour.bulk_sizes == [1]


def test_an_unreadable_token_file_is_a_credentials_error_and_nothing_is_sent(
    servers: Callable[..., PredictionServer], tmp_path: Path
) -> None:
    server = servers(require_token="s3cret")
    counted = Counted()

    async def go() -> list[Prediction | None]:
        async with httpx.AsyncClient(auth=BearerTokenFile(str(tmp_path / "missing"))) as http:
            return await PredictionClient([server.url], Predictions(), http, counted).predict(features(1), SHADOW)

    assert asyncio.run(go()) == [None]
    assert counted.results() == [c.RESULT_CREDENTIALS_ERROR]
    assert server.behaviour.calls == []


def test_a_rejected_batch_is_not_retried(servers: Callable[..., PredictionServer]) -> None:
    first, second = servers(), servers()
    bad = features(1, kv_cache_percentage=1.3)
    (results,), counted, _ = predict_all([first.url, second.url], [bad])
    assert results == [None]
    assert counted.results() == [c.RESULT_REJECTED]
    assert counted.retries == []
    assert second.behaviour.calls == []


def test_a_server_without_models_answers_no_prediction_and_counts_as_failing(
    servers: Callable[..., PredictionServer],
) -> None:
    # The real /predict/bulk/strict answers 503 "Models not ready" when its models are not loaded.
    server = servers(ready=False)
    settings = Predictions(breaker_failures=2)
    results, counted, client = predict_all([server.url], [features(3)] * 3, settings, FakeClock())
    assert results == [[None] * 3] * 3
    assert counted.results() == [c.RESULT_HTTP_ERROR, c.RESULT_HTTP_ERROR, c.RESULT_CIRCUIT_OPEN]
    assert client.breaker_states() == {server.url: "open"}


def test_a_cancelled_trial_call_frees_the_trial_for_the_next_call(servers: Callable[..., PredictionServer]) -> None:
    server = servers(fail=True)
    clock = FakeClock()
    counted = Counted()

    async def go() -> tuple[list[str], list[Prediction | None]]:
        async with httpx.AsyncClient() as http:
            client = PredictionClient([server.url], Predictions(breaker_failures=1), http, counted, clock=clock)
            await client.predict(features(1), SHADOW)  # opens the breaker
            clock.now += 30
            server.behaviour.fail, server.behaviour.delay_seconds = False, 60.0
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.predict(features(1), SHADOW), 0.3)  # the trial, cancelled
            states: list[str] = list(client.breaker_states().values())
            server.behaviour.delay_seconds = 0.0
            return states, await client.predict(features(1), SHADOW)

    states, results = asyncio.run(go())
    assert states == ["half_open"]
    assert results == [expected_prediction(features(1)[0])]
    assert counted.results() == [c.RESULT_HTTP_ERROR, c.RESULT_SUCCESS]  # a cancelled call is not counted
