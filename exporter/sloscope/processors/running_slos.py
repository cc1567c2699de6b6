"""The TPOT SLOs of requests on each pod, with when they ran: "the tightest TPOT SLO running there".

The EPP lowers a pod's TPOT budget to the tightest TPOT SLO among the requests already running on
it. sloscope learns of a request only when it ends (its spans are exported then), so this is known
after the fact: for a past instant (a request's arrival) it is exact once the overlapping requests
have ended; for "now" it is approximated by the requests that ended within a recent window.

Each pod's requests are kept sorted by end, so a lookup bisects to the requests that ended after
the instant asked about and checks only those (about request rate x latency of them), not the
whole history: this runs once per request on the pipeline worker.

Bounded: ``per_pod`` requests per pod (the one that ended first is dropped) and ``max_pods`` pods
(least recently updated dropped). Written by the pipeline worker, read by the event loop: one lock.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from itertools import islice
from typing import NamedTuple

__all__ = ["RunningSLOs"]

PodKey = tuple[str, str]


class _Run(NamedTuple):
    start: float
    end: float
    tpot_slo: float  # seconds


class _Runs:
    """One pod's requests, sorted by end (``ends`` mirrors ``runs`` for bisecting)."""

    __slots__ = ("ends", "runs")

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.runs: list[_Run] = []

    def after(self, instant: float) -> islice[_Run]:
        """The requests that ended after ``instant``."""
        return islice(self.runs, bisect.bisect_right(self.ends, instant), None)


class RunningSLOs:
    def __init__(self, per_pod: int = 512, max_pods: int = 10_000) -> None:
        self._per_pod = per_pod
        self._max_pods = max_pods
        self._pods: OrderedDict[PodKey, _Runs] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, key: PodKey, start: float, end: float, tpot_slo: float) -> None:
        with self._lock:
            pod = self._pods.get(key)
            if pod is None:
                pod = self._pods[key] = _Runs()
                if len(self._pods) > self._max_pods:
                    self._pods.popitem(last=False)
            else:
                self._pods.move_to_end(key)
            at = bisect.bisect_right(pod.ends, end)  # requests arrive nearly in end order: at is near the tail
            pod.ends.insert(at, end)
            pod.runs.insert(at, _Run(start, end, tpot_slo))
            if len(pod.runs) > self._per_pod:
                del pod.ends[0], pod.runs[0]

    def tightest_at(self, key: PodKey, at: float) -> float | None:
        """Tightest TPOT SLO among the requests that were running on the pod at ``at`` (start <= at < end)."""
        with self._lock:
            pod = self._pods.get(key)
            if pod is None:
                return None
            return min((r.tpot_slo for r in pod.after(at) if r.start <= at), default=None)

    def tightest_recent(self, key: PodKey, now: float, window: float) -> float | None:
        """Tightest TPOT SLO among the requests that were still running within ``window`` seconds of ``now``."""
        with self._lock:
            pod = self._pods.get(key)
            if pod is None:
                return None
            # end >= now - window: bisect_left keeps the requests that ended exactly at the window's edge
            recent = islice(pod.runs, bisect.bisect_left(pod.ends, now - window), None)
            return min((r.tpot_slo for r in recent if r.start <= now), default=None)
