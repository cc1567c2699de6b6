"""The TPOT SLOs of requests on each pod, with when they ran: "the tightest TPOT SLO running there".

The EPP lowers a pod's TPOT budget to the tightest TPOT SLO among the requests already running on
it. sloscope learns of a request only when it ends (its spans are exported then), so this is known
after the fact: for a past instant (a request's arrival) it is exact once the overlapping requests
have ended; for "now" it is approximated by the requests that ended within a recent window.

Bounded: ``per_pod`` requests per pod (oldest dropped) and ``max_pods`` pods (least recently
updated dropped). Written by the pipeline worker, read by the event loop: one lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import NamedTuple

__all__ = ["RunningSLOs"]

PodKey = tuple[str, str]


class _Run(NamedTuple):
    start: float
    end: float
    tpot_slo: float  # seconds


class RunningSLOs:
    def __init__(self, per_pod: int = 512, max_pods: int = 10_000) -> None:
        self._per_pod = per_pod
        self._max_pods = max_pods
        self._pods: OrderedDict[PodKey, deque[_Run]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, key: PodKey, start: float, end: float, tpot_slo: float) -> None:
        with self._lock:
            runs = self._pods.get(key)
            if runs is None:
                runs = self._pods[key] = deque(maxlen=self._per_pod)
                if len(self._pods) > self._max_pods:
                    self._pods.popitem(last=False)
            else:
                self._pods.move_to_end(key)
            runs.append(_Run(start, end, tpot_slo))

    def tightest_at(self, key: PodKey, at: float) -> float | None:
        """Tightest TPOT SLO among the requests that were running on the pod at ``at`` (start <= at < end)."""
        with self._lock:
            return min((r.tpot_slo for r in self._pods.get(key, ()) if r.start <= at < r.end), default=None)

    def tightest_recent(self, key: PodKey, now: float, window: float) -> float | None:
        """Tightest TPOT SLO among the requests that were still running within ``window`` seconds of ``now``."""
        with self._lock:
            runs = self._pods.get(key, ())
            return min((r.tpot_slo for r in runs if r.end >= now - window and r.start <= now), default=None)
