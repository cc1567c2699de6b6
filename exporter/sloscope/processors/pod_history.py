"""Each pod's scraped state over time, for as-of lookups: what did the pod look like when a request arrived?

A shadow prediction must use the state the endpoint picker could have seen when it routed the
request, never a later one: a sample scraped after the arrival already contains the request's own
effect on the queue. So :meth:`PodHistory.as_of` returns the newest sample taken **at or before**
the given time, and none when that sample is older than ``stale_after`` (a pod that stopped
answering must not lend an old state to a new request).

A sample is stamped with the time its scrape completed: that is when its values became known to a
scraper, as the EPP's own polled metrics do. Memory is bounded: ``max_samples`` per pod in a ring,
and pods that left discovery are forgotten after ``vanished_grace``.

Written by the scrape loop (event-loop thread), read by the pipeline worker and by /metrics
renders: one lock guards it, held only for dict and list operations.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from sloscope.columnar.columns import Codes, Floats
from sloscope.receivers.consumers import PodKey
from sloscope.receivers.discovery import Target
from sloscope.receivers.protocols import PodState
from sloscope.redaction import without_userinfo

__all__ = ["PodHistory", "PodKey", "PodRecord", "PodSample"]


@dataclass(frozen=True, slots=True)
class PodSample:
    at: float  # unix seconds the scrape completed
    state: PodState


@dataclass(slots=True)
class PodRecord:
    """One pod: its ring of samples (oldest first), whether its last scrape worked, when it vanished."""

    target: Target
    times: list[float]
    samples: list[PodSample]
    up: bool = False
    last_attempt: float | None = None
    vanished_at: float | None = None

    @property
    def latest(self) -> PodSample | None:
        return self.samples[-1] if self.samples else None


class PodHistory:
    def __init__(self, max_samples: int, stale_after: float, vanished_grace: float) -> None:
        if max_samples < 1:
            raise ValueError("max_samples must be at least 1")
        self._max = max_samples
        self._stale_after = stale_after
        self._grace = vanished_grace
        self._pods: dict[PodKey, PodRecord] = {}
        self._by_address: dict[str, PodKey] = {}  # host:port -> key (a pod's address is unique in a cluster)
        self._by_pod: dict[str, PodKey] = {}  # pod name alone, for requests whose pool is unknown
        self._lock = threading.Lock()

    def track(self, target: Target) -> None:
        """A target discovery reports: known from now on (again, if it had vanished)."""
        with self._lock:
            record = self._pods.get(target.key)
            if record is None:
                record = self._pods[target.key] = PodRecord(target, [], [])
            else:
                record.target, record.vanished_at = target, None
            for _, address in target.endpoints():
                self._by_address[without_userinfo(address)] = target.key
            self._by_address[without_userinfo(target.address)] = target.key
            self._by_pod[target.pod] = target.key

    def vanish(self, key: PodKey, now: float) -> None:
        """Discovery no longer reports the pod; it is removed ``vanished_grace`` later."""
        with self._lock:
            record = self._pods.get(key)
            if record is not None and record.vanished_at is None:
                record.vanished_at = now

    def record(self, key: PodKey, at: float, state: PodState | None) -> None:
        """A scrape's outcome: a state, or None for a failed scrape (the pod is down, its history kept)."""
        with self._lock:
            record = self._pods.get(key)
            if record is None:
                return  # vanished and forgotten while its scrape was in flight
            record.last_attempt = at
            record.up = state is not None
            if state is None:
                return
            if record.times and at < record.times[-1]:
                return  # out of order (a slow scrape finishing after a newer one): the ring stays sorted
            record.times.append(at)
            record.samples.append(PodSample(at, state))
            if len(record.samples) > self._max:
                del record.times[0], record.samples[0]

    def resolve(self, pool: str | None, pod: str | None, address: str | None = None) -> PodKey | None:
        """The key of a request's pod: by pod name in its pool, by name alone, or by the endpoint address."""
        with self._lock:
            if pod is not None:
                if pool is not None and (pool, pod) in self._pods:
                    return (pool, pod)
                if pod in self._by_pod:
                    return self._by_pod[pod]
            if address is not None:
                key = self._by_address.get(address)
                if key is not None and (pool is None or key[0] == pool):
                    return key
        return None

    def target(self, key: PodKey) -> Target | None:
        """The pod's target as discovery last reported it (its address and labels), None when unknown."""
        with self._lock:
            record = self._pods.get(key)
            return record.target if record is not None else None

    def as_of(self, key: PodKey, at: float) -> PodSample | None:
        """The newest sample taken at or before ``at`` and no older than ``stale_after``."""
        with self._lock:
            record = self._pods.get(key)
            if record is None:
                return None
            index = bisect.bisect_right(record.times, at) - 1
            if index < 0:
                return None
            sample = record.samples[index]
        return sample if at - sample.at <= self._stale_after else None

    def as_of_all(self, keys: Sequence[PodKey], key: Codes, at: Floats) -> tuple[Codes, list[PodSample]]:
        """:meth:`as_of` of many rows at once, under one lock: row ``r`` asks about pod ``keys[key[r]]`` (none
        where ``key[r]`` is -1) at ``at[r]``. Returns, per row, the index of its sample among the samples returned
        (-1 where there is none)."""
        samples: list[PodSample] = []
        found: list[int] = []
        with self._lock:
            rings: list[tuple[int, list[float]]] = []  # per key, where its samples start and its times
            for pod in keys:
                record = self._pods.get(pod)
                rings.append((len(samples), record.times if record is not None else []))
                if record is not None:
                    samples += record.samples
            for code, time in zip(key.tolist(), at.tolist(), strict=True):
                start, times = rings[code] if code >= 0 else (0, [])
                index = bisect.bisect_right(times, time) - 1
                found.append(start + index if index >= 0 and time - times[index] <= self._stale_after else -1)
        return np.array(found, dtype=np.intp), samples

    def expire(self, now: float) -> list[PodKey]:
        """Forget pods that vanished more than the grace period ago; returns their keys."""
        with self._lock:
            gone = [
                key
                for key, record in self._pods.items()
                if record.vanished_at is not None and now - record.vanished_at >= self._grace
            ]
            for key in gone:
                target = self._pods.pop(key).target
                for address in {without_userinfo(a) for _, a in target.endpoints()} | {
                    without_userinfo(target.address)
                }:
                    if self._by_address.get(address) == key:
                        del self._by_address[address]
                if self._by_pod.get(target.pod) == key:
                    del self._by_pod[target.pod]
        return gone

    def snapshot(self) -> list[PodRecord]:
        """Copies of every pod's record with only its latest sample, for rendering gauges."""
        with self._lock:
            return [
                PodRecord(r.target, r.times[-1:], r.samples[-1:], r.up, r.last_attempt, r.vanished_at)
                for r in self._pods.values()
            ]

    def is_fresh(self, record: PodRecord, now: float) -> bool:
        """Present, up, and with a sample no older than ``stale_after``."""
        latest = record.latest
        return record.vanished_at is None and record.up and latest is not None and now - latest.at <= self._stale_after

    def fresh(self, pool: str, now: float) -> Iterator[tuple[PodKey, PodSample]]:
        """The pool's fresh pods (see :meth:`is_fresh`) with their latest sample."""
        for record in self.snapshot():
            if record.target.pool == pool and self.is_fresh(record, now) and record.latest is not None:
                yield record.target.key, record.latest

    def __len__(self) -> int:
        return len(self._pods)
