"""The engines' own latency histograms, summed per pool, model, protocol and signal, as sloscope series.

Republishing every pod's histograms would cost pods x signals x buckets series; summing the pods'
cumulative counts at scrape time would go down whenever a pod leaves, which ``rate()`` reads as a
counter reset. So each pod's histograms are turned into increases between two of its scrapes and
those increases are added to one histogram per (pool, model, protocol, signal), which only ever grows
and outlives the pods. A pod's first scrape only sets its baseline (its earlier requests are not
counted); a pod whose counts went down restarted, and its new counts are all increases. The buckets
are the engine's own (the first pod's); a pod with other bounds (another engine version) is left out
of that histogram and logged once.

A new (pool, model, protocol, signal) passes through the family's series cap (``cap``), weighed as
its buckets, ``_sum`` and ``_count``; past it, its increases go to the series with pool and model
``__other__``.

Written by the scrape loop (event-loop thread), read by /metrics renders: one lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sloscope import conventions as c
from sloscope.columnar.cardinality import FamilyCap, LabelGuard
from sloscope.receivers.consumers import PodKey
from sloscope.receivers.engine_latency import EngineHistogram, HistogramKey

__all__ = ["EngineLatencyCollector"]

log = logging.getLogger(__name__)

EndpointKey = tuple[str, str, int]  # (pool, pod, data-parallel rank): each rank's page has its own baseline
SeriesKey = tuple[str, str, str, str]  # (pool, model, protocol, signal)


@dataclass
class _Accumulated:
    bounds: tuple[float, ...]
    counts: list[float]
    total: float


class EngineLatencyCollector(Collector):
    def __init__(self, guard: LabelGuard, cap: FamilyCap | None = None) -> None:
        self._guard = guard  # caps the model label, like the request series
        self._cap = cap
        self._baselines: dict[EndpointKey, dict[HistogramKey, EngineHistogram]] = {}
        self._series: dict[SeriesKey, _Accumulated] = {}
        self._mismatch_logged: set[tuple[SeriesKey, tuple[float, ...]]] = set()
        self._lock = threading.Lock()

    def observe(
        self,
        pod: PodKey,
        protocol: str,
        histograms: Mapping[HistogramKey, EngineHistogram],
        default_model: str | None,
        *,
        rank: int = 0,
    ) -> None:
        """One scrape of ``pod``'s endpoint of ``rank``: add each histogram's increase since its previous scrape."""
        endpoint = (*pod, rank)
        with self._lock:
            previous = self._baselines.get(endpoint)
            self._baselines[endpoint] = dict(histograms)
            if previous is None:
                return
            for (model, signal), now in histograms.items():
                before = previous.get((model, signal))
                if before is None:
                    continue  # new on the page: this scrape is its baseline
                increase = _increase(before, now)
                name = model or default_model or c.UNKNOWN
                self._add((pod[0], self._guard.admit(c.MODEL, name), protocol, signal), increase)

    def forget(self, pod: PodKey) -> None:
        """The pod was forgotten by discovery: its ranks' baselines go (their counts stay in the sums)."""
        with self._lock:
            for endpoint in [e for e in self._baselines if e[:2] == pod]:
                del self._baselines[endpoint]

    def _add(self, key: SeriesKey, increase: EngineHistogram) -> None:
        series = self._series.get(key)
        if series is None and self._cap is not None:
            key = self._cap.admit(key, weight=len(increase.bounds) + 2)  # type: ignore[assignment]  # same arity
            series = self._series.get(key)
        if series is None:
            self._series[key] = _Accumulated(increase.bounds, list(increase.counts), increase.total)
            return
        if series.bounds != increase.bounds:
            if (key, increase.bounds) not in self._mismatch_logged:
                self._mismatch_logged.add((key, increase.bounds))
                log.warning("engine histogram %s: a pod publishes other buckets; it is left out of the sum", key)
            return
        series.counts = [a + b for a, b in zip(series.counts, increase.counts, strict=True)]
        series.total += increase.total

    def describe(self) -> Iterator[Metric]:
        yield _family()

    def collect(self) -> Iterator[Metric]:
        family = _family()
        with self._lock:
            series = [(key, s.bounds, list(s.counts), s.total) for key, s in self._series.items()]
        for key, bounds, counts, total in sorted(series):
            family.add_metric(list(key), [(_le(b), n) for b, n in zip(bounds, counts, strict=True)], total)
        yield family


def _increase(before: EngineHistogram, now: EngineHistogram) -> EngineHistogram:
    """``now - before``, or ``now`` when the pod restarted (a count went down or the buckets changed)."""
    restarted = before.bounds != now.bounds or any(b > a for a, b in zip(now.counts, before.counts, strict=True))
    if restarted:
        return now
    counts = tuple(a - b for a, b in zip(now.counts, before.counts, strict=True))
    return EngineHistogram(now.bounds, counts, max(now.total - before.total, 0.0))


def _le(bound: float) -> str:
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]  # prometheus_client's own spelling


def _family() -> HistogramMetricFamily:
    definition = c.ENGINE_LATENCY_SECONDS
    return HistogramMetricFamily(definition.name, definition.help, labels=definition.labels)
