"""Bytes of OTLP requests held at once across both receivers, and giving their memory back afterwards.

A request's bytes are held from the moment it is admitted until its decoding is over (the decoded
spans are bounded separately, in spans, by the queue). Over ``limits.max_bytes_in_flight`` a new
request is refused with 429 / RESOURCE_EXHAUSTED and a retry delay; one request is always admitted
when nothing else is held, so a request up to ``limits.max_request_bytes`` can never starve.

Freed bodies do not shrink the process by themselves: glibc keeps freed blocks in per-thread
arenas, and gRPC core receives a message as many slices allocated on its own threads. Measured
with 8 senders of refused 32 MiB messages, RSS stayed about 4 times the starting size after they
were all freed (and still grew slowly with more); ``malloc_trim`` brings it back to the start. So
after a large body is released a trim runs in a thread, at most once per ``_TRIM_INTERVAL_SECONDS``;
elsewhere than glibc it is skipped. A body let go while a trim waits or runs asks for one more after it:
"let go" is said before the memory is freed (gRPC frees a message once its handler has returned), so a trim
that ran before the last bodies of a burst were freed would otherwise be the last, and their memory stayed
(a CI run: RSS not back within 64 MiB 30 s after 100 refused 32 MiB messages). Event-loop thread only: the
native fronts, which let bodies go on their own threads, hand ``freed`` to the loop (``freed_from_threads``).

Ordinary bodies (a few hundred kB) leave slack too: the decoded batches, the queue and the join's buffers of a
burst are freed all over glibc's heap, which cannot shrink past the blocks still in use above them. After
``bench/memory.py``'s load (400,000 spans over OTLP/HTTP) 22 MB of the heap was free and resident, and
``malloc_trim(0)`` gave 20 MB of it back (VmRSS 206 to 186 MiB). So :class:`QuietTrim` asks for one trim when a
burst is over: once the intake has taken nothing and the join's pending traces have not changed for
``QUIET_SECONDS``. Pages given back are faulted in again by the next burst (11 ms of CPU for 20 MiB on the
development machine, against 1.2 to 1.6 ms for the trim), so the quiet time is long, a minute: bursts seconds or
tens of seconds apart, as under steady load or ``bench/compare.py``'s slices, never see a trim, and reuse the slack
instead.
An idle server is not woken: the watch is armed by the first request after a trim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from sloscope._native import ByteBudget
from sloscope.allocator import malloc_trim

log = logging.getLogger(__name__)

_TRIM_INTERVAL_SECONDS = 1.0
TRIM_FROM_BYTES = 1024 * 1024  # freeing a smaller body alone leaves nothing worth giving back
QUIET_SECONDS = 60.0  # how long the intake and the join stand still before a burst counts as over
QUIET_STEPS = 4  # looks at them per quiet time


class MemoryTrimmer:
    """Asks the allocator to return freed memory to the system, coalescing requests to one per interval, with one
    more after it when a request came while it waited or ran."""

    def __init__(self, interval: float = _TRIM_INTERVAL_SECONDS, trim: Callable[[int], int] | None = None) -> None:
        """``trim``: the allocator's call (glibc's ``malloc_trim`` when not given; none elsewhere than glibc)."""
        self._trim = trim if trim is not None else malloc_trim()
        self._interval = interval
        self._scheduled = False
        self._again = False
        self.trims = 0

    def request(self) -> None:
        if self._trim is None:
            return
        if self._scheduled:
            self._again = True
            return
        self._scheduled = True
        asyncio.get_running_loop().call_later(self._interval, self._run)

    def _run(self) -> None:
        trim = self._trim
        assert trim is not None
        work = asyncio.get_running_loop().run_in_executor(None, trim, 0)
        work.add_done_callback(self._done)

    def _done(self, work: asyncio.Future[int]) -> None:
        self._scheduled = False
        self.trims += 1
        if not work.cancelled() and work.exception() is not None:
            log.debug("malloc_trim failed: %s", work.exception())
        if self._again:
            self._again = False
            self.request()


class QuietTrim:
    """One trim after each burst of requests: :meth:`touched` (any thread, every request the intake takes) arms
    a watch on the event loop, which asks ``trimmer`` for a trim once neither the requests taken nor the join's
    pending traces (``holding``) changed over ``quiet`` seconds, then disarms until the next request.

    The watch looks every ``quiet / QUIET_STEPS`` seconds and trims after ``QUIET_STEPS`` looks in a row saw no
    change: between ``quiet`` and ``quiet * (1 + 1 / QUIET_STEPS)`` after the last change (looking once a ``quiet``
    made it up to twice as long)."""

    def __init__(self, trimmer: MemoryTrimmer, quiet: float = QUIET_SECONDS) -> None:
        self._trimmer = trimmer
        self._quiet = quiet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._holding: Callable[[], int] = lambda: 0
        self._armed = False
        self._touches = 0  # changes with every request; a lost increment between threads changes it still
        self._seen: tuple[int, int] | None = None
        self._still = 0  # looks in a row that saw no change
        self._timer: asyncio.TimerHandle | None = None

    def start(self, holding: Callable[[], int], loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Watch from now on, on ``loop`` (the running one unless told); ``holding``: the join's pending traces."""
        self._loop = loop or asyncio.get_running_loop()
        self._holding = holding

    def stop(self) -> None:
        self._loop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def touched(self) -> None:
        """A request was taken (or refused): safe from any thread, and cheap once armed."""
        self._touches += 1
        loop = self._loop
        if self._armed or loop is None:
            return
        self._armed = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            loop.call_soon_threadsafe(self._watch)

    def _state(self) -> tuple[int, int]:
        return self._touches, self._holding()

    def _watch(self) -> None:
        if self._loop is None:
            return
        self._seen, self._still = self._state(), 0
        self._timer = self._loop.call_later(self._quiet / QUIET_STEPS, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._loop is None:
            return
        now = self._state()
        self._still = self._still + 1 if now == self._seen else 0
        self._seen = now
        if self._still < QUIET_STEPS:
            self._timer = self._loop.call_later(self._quiet / QUIET_STEPS, self._check)
            return
        self._armed = False  # a request from here on arms the watch again
        self._trimmer.request()


class InFlightBytes:
    """The shared byte budget (``_native.ByteBudget``: the native fronts take from it on their own threads).
    ``set_gauge`` is called with the bytes held after every change made here."""

    def __init__(
        self, cap: int, set_gauge: Callable[[float], None] = lambda _: None, trimmer: MemoryTrimmer | None = None
    ) -> None:
        self.budget = ByteBudget(cap)
        self._set_gauge = set_gauge
        self.trimmer = trimmer if trimmer is not None else MemoryTrimmer()
        self.quiet = QuietTrim(self.trimmer)

    @property
    def held(self) -> int:
        return self.budget.held

    def reserve(self, size: int) -> bool:
        """Holds ``size`` more bytes, unless that would pass the cap while anything else is held."""
        if not self.budget.reserve(size):
            return False
        self._set_gauge(self.held)
        return True

    def release(self, size: int) -> None:
        self.budget.release(size)
        self._set_gauge(self.held)
        self.freed(size)

    def freed(self, size: int) -> None:
        """A body of ``size`` bytes is being let go (admitted or not): give large ones back to the system."""
        if size >= TRIM_FROM_BYTES:
            self.trimmer.request()

    def freed_from_threads(self) -> Callable[[int], None]:
        """:meth:`freed` for the native fronts' threads: handed to the running event loop (call it on the loop)."""
        loop = asyncio.get_running_loop()

        def freed(size: int) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
                loop.call_soon_threadsafe(self.freed, size)

        return freed


class Lease:
    """The bytes one request holds: taken as its body is read (compressed: and its inflated worst case);
    released once, whatever happens."""

    def __init__(self, budget: InFlightBytes) -> None:
        self._budget = budget
        self.size = 0

    def take(self, size: int) -> bool:
        if not self._budget.reserve(size):
            return False
        self.size += size
        return True

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self._budget.release(size)
