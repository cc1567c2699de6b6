"""The circuit breaker of one prediction server, driven by a fake clock."""

from __future__ import annotations

import pytest

from sloscope.predictor.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: FakeClock, failures: int = 3, open_seconds: float = 30.0) -> CircuitBreaker:
    return CircuitBreaker(failures, open_seconds, clock)


def fail(b: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        assert b.allow()
        b.failure()


def test_closed_lets_calls_through_and_opens_at_the_nth_consecutive_failure() -> None:
    b = breaker(FakeClock())
    fail(b, 2)
    assert b.state == CLOSED
    fail(b, 1)
    assert b.state == OPEN
    assert not b.allow()


def test_a_success_resets_the_consecutive_failures() -> None:
    b = breaker(FakeClock())
    fail(b, 2)
    assert b.allow()
    b.success()
    fail(b, 2)
    assert b.state == CLOSED


def test_an_abandoned_call_neither_counts_nor_resets() -> None:
    b = breaker(FakeClock())
    fail(b, 2)
    for _ in range(5):
        assert b.allow()
        b.abandon()
    assert b.state == CLOSED
    fail(b, 1)
    assert b.state == OPEN


def test_open_refuses_until_open_seconds_passed_then_allows_exactly_one_trial() -> None:
    clock = FakeClock()
    b = breaker(clock)
    fail(b, 3)
    clock.now += 29.999
    assert b.state == OPEN
    assert not b.allow()
    clock.now += 0.001
    assert b.state == HALF_OPEN
    assert b.allow()
    assert not b.allow()  # the trial is in flight
    assert b.state == HALF_OPEN


@pytest.mark.parametrize(
    ("outcome", "state_after"),
    [
        pytest.param("success", CLOSED, id="a successful trial closes the breaker"),
        pytest.param("failure", OPEN, id="a failed trial opens it again"),
        pytest.param("abandon", HALF_OPEN, id="an abandoned trial lets the next one through"),
    ],
)
def test_the_trial_call_decides(outcome: str, state_after: str) -> None:
    clock = FakeClock()
    b = breaker(clock)
    fail(b, 3)
    clock.now += 30
    assert b.allow()
    getattr(b, outcome)()
    assert b.state == state_after
    assert b.allow() == (state_after != OPEN)


def test_a_failed_trial_opens_for_another_full_period() -> None:
    clock = FakeClock()
    b = breaker(clock)
    fail(b, 3)
    clock.now += 100
    assert b.allow()
    b.failure()
    clock.now += 29
    assert not b.allow()
    clock.now += 1
    assert b.allow()
    b.success()
    assert b.state == CLOSED
    fail(b, 2)  # the count started again from zero
    assert b.state == CLOSED


def test_a_late_failure_of_a_call_let_through_earlier_does_not_extend_the_open_period() -> None:
    clock = FakeClock()
    b = breaker(clock, failures=1)
    assert b.allow()
    assert b.allow()  # two calls in flight while closed
    b.failure()
    assert b.state == OPEN
    clock.now += 20
    b.failure()  # the second one fails later
    clock.now += 10
    assert b.state == HALF_OPEN


def test_one_failure_limit_opens_at_once() -> None:
    b = breaker(FakeClock(), failures=1)
    fail(b, 1)
    assert b.state == OPEN


@pytest.mark.parametrize(
    ("failures", "open_seconds"),
    [pytest.param(0, 1.0, id="no failures"), pytest.param(1, 0.0, id="no open period")],
)
def test_rejects_settings_that_cannot_work(failures: int, open_seconds: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(failures, open_seconds)
