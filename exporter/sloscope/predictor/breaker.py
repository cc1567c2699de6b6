"""A circuit breaker for one prediction server: stop calling a server that keeps failing.

States: **closed** (calls go through; ``failures`` consecutive failed calls open it), **open** (calls
are refused until ``open_seconds`` have passed since it opened), **half-open** (exactly one trial
call is let through; its success closes the breaker, its failure opens it again for another
``open_seconds``). A call whose outcome says nothing about the server (a request the server rejected
as invalid, or one cancelled before it ended) is :meth:`CircuitBreaker.abandon`-ed: it neither counts
as a failure nor closes the breaker, and a half-open breaker lets the next trial through.

Pure: no I/O, no threads; time comes from the injected ``clock`` (seconds, monotonic). Meant for
one event loop: the methods are not guarded by a lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "BreakerState", "CircuitBreaker"]

BreakerState = Literal["closed", "open", "half_open"]
CLOSED: BreakerState = "closed"
OPEN: BreakerState = "open"
HALF_OPEN: BreakerState = "half_open"


class CircuitBreaker:
    """Closed → open after ``failures`` consecutive failures → half-open after ``open_seconds``."""

    __slots__ = ("_clock", "_failures", "_open_seconds", "_opened_at", "_state", "_trial_in_flight", "failures")

    def __init__(self, failures: int, open_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1:
            raise ValueError("failures must be at least 1")
        if open_seconds <= 0:
            raise ValueError("open_seconds must be positive")
        self.failures = failures
        self._open_seconds = open_seconds
        self._clock = clock
        self._state: BreakerState = CLOSED
        self._failures = 0  # consecutive failures while closed
        self._opened_at = 0.0
        self._trial_in_flight = False

    @property
    def state(self) -> BreakerState:
        """The state as of now: an open breaker whose time is up reads as half-open."""
        if self._state == OPEN and self._clock() - self._opened_at >= self._open_seconds:
            return HALF_OPEN
        return self._state

    def allow(self) -> bool:
        """Whether a call may go out now; True in half-open reserves the one trial call.

        Every True must be followed by exactly one of :meth:`success`, :meth:`failure` or :meth:`abandon`.
        """
        state = self.state
        if state == CLOSED:
            return True
        if state == OPEN:
            return False
        if self._trial_in_flight:
            return False
        self._state = HALF_OPEN
        self._trial_in_flight = True
        return True

    def success(self) -> None:
        """The call worked: close the breaker and forget earlier failures."""
        self._state = CLOSED
        self._failures = 0
        self._trial_in_flight = False

    def failure(self) -> None:
        """The call failed because of the server: count it, open the breaker at the limit or after a trial."""
        self._trial_in_flight = False
        if self._state == OPEN:
            return  # a call let through before the breaker opened: the open period is not extended
        if self._state == HALF_OPEN:
            self._open()
            return
        self._failures += 1
        if self._failures >= self.failures:
            self._open()

    def abandon(self) -> None:
        """The call ended without saying anything about the server: no failure counted, nothing closed."""
        self._trial_in_flight = False

    def _open(self) -> None:
        self._state = OPEN
        self._opened_at = self._clock()
        self._failures = 0
