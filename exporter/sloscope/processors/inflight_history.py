"""Each pool's EPP in-flight counts over time, for as-of lookups, like :class:`PodHistory` for pod pages.

The llm-d EPP predicts with its own in-flight counts of the moment it routes a request, before the
request itself is counted. A shadow prediction therefore takes the newest EPP page scraped **at or
before** the request's arrival, never a later one, and none older than ``stale_after`` (an EPP that
stopped answering must not lend an old count to a new request).

A page is stamped with the wall-clock time its scrape completed (``clock``, unix seconds, the clock
of request arrivals). Memory is bounded: ``max_samples`` pages per pool in a ring, each page bounded
by :func:`parse_inflight`. Written by the EPP scrape loop, read by the shadow and headroom loops: one
lock, held only for list operations.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence

from sloscope.predictor.generation import GIE_2025, GIE_V15, LLM_D, Generation
from sloscope.receivers.epp_inflight import DEFAULT_PRODUCER, InflightPage, parse_inflight
from sloscope.receivers.exposition import Sample

__all__ = ["InflightHistory"]


class InflightHistory:
    def __init__(
        self,
        max_samples: int,
        stale_after: float,
        *,
        producer: str = DEFAULT_PRODUCER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_samples < 1:
            raise ValueError("max_samples must be at least 1")
        self._max = max_samples
        self._stale_after = stale_after
        self._producer = producer
        self._clock = clock
        self._pools: dict[str, tuple[list[float], list[InflightPage]]] = {}
        self._lock = threading.Lock()

    def record(self, pool: str, samples: Sequence[Sample]) -> None:
        """One good scrape of the pool's EPP: its samples (of any families), stamped now."""
        self.keep(pool, self.read(samples))

    def read(self, samples: Sequence[Sample]) -> InflightPage:
        """The in-flight page of one scrape's samples, for :meth:`keep` (no state: any thread may read)."""
        return parse_inflight(samples, self._producer)

    def keep(self, pool: str, page: InflightPage) -> None:
        """One good scrape's page, read by :meth:`read`, stamped now."""
        at = self._clock()
        with self._lock:
            times, pages = self._pools.setdefault(pool, ([], []))
            if times and at < times[-1]:
                return  # out of order: the ring stays sorted
            times.append(at)
            pages.append(page)
            if len(pages) > self._max:
                del times[0], pages[0]

    def as_of(self, pool: str, at: float) -> InflightPage | None:
        """The newest page scraped at or before ``at`` and no older than ``stale_after``."""
        with self._lock:
            entry = self._pools.get(pool)
            if entry is None:
                return None
            times, pages = entry
            index = bisect.bisect_right(times, at) - 1
            if index < 0 or at - times[index] > self._stale_after:
                return None
            return pages[index]

    def latest(self, pool: str) -> InflightPage | None:
        """The newest page of the pool, unless it is older than ``stale_after``."""
        return self.as_of(pool, self._clock())

    def generation(self, pool: str) -> Generation | None:
        """Which EPP the pool's newest page (however old) is: llm-d, GIE v1.5.0, else the late-2025 one; None before
        any page."""
        with self._lock:
            entry = self._pools.get(pool)
            page = entry[1][-1] if entry and entry[1] else None
        if page is None:
            return None
        return LLM_D if page.llm_d else GIE_V15 if page.gie_v15 else GIE_2025
