"""The EPP's SLO series, re-published as ``sloscope_epp_*`` with a ``pool`` label and their labels put right.

A custom Collector (client_python's way to proxy metrics from another system): at every scrape of
sloscope's /metrics it renders each pool's latest :class:`~sloscope.receivers.epp.EPPPage` as
histogram and counter families. Nothing is stored here but the label cap's admitted values; a pool
whose page is missing or stale simply has no series. Bucket boundaries are the EPP's own, written as
prometheus_client writes ``le`` (``floatToGoString``: ``0.2``, ``1.0``, ``3600.0``, ``+Inf``).

The scheduler-attempt counter names the pod the EPP picked; its ``pod`` label goes through the same
per-label cap as every other ``pod`` label (``limits.max_label_values``): past the cap, pods fold into
``__other__`` and their counts are added up; ``sloscope_label_values_folded_total{label="pod"}`` counts
each folded pod once (every render folds it again). The plugin labels need no cap: their values are the plugin
instances of the EPP's own configuration.

The llm-d EPP's in-flight gauges (the load its latency plugin routes on, read by
:mod:`sloscope.receivers.epp_inflight` for shadow predictions) are re-published per pod, summed over the
pod's data-parallel ranks as the pod gauges are, through the same ``pod`` cap.

With a series budget, every family's label sets also pass through its series cap (the label values come
from the EPP's page, and ``model``/``target_model`` from the requests it routed): admitted first come first
served and kept, a later one is added into the series whose ``pool``, ``model``, ``target_model`` and ``pod``
are ``__other__`` (histograms bucket by bucket). ``sloscope_series_folded_total{family}`` counts each label set
when it starts being folded (one render's folded sets are remembered; every render folds them again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from sloscope import conventions as c
from sloscope.columnar.cardinality import FamilyCap, LabelGuard, SeriesBudget
from sloscope.receivers.epp import EPPPage
from sloscope.receivers.epp_inflight import InflightPage
from sloscope.receivers.epp_page import (
    REPUBLISHED_COUNTERS,
    REPUBLISHED_GAUGES,
    REPUBLISHED_HISTOGRAMS,
    HistogramSeries,
    SeriesKey,
    add_histograms,
)

__all__ = ["EPP_COUNTERS", "EPP_GAUGES", "EPP_HISTOGRAMS", "EPPCollector"]

EPP_HISTOGRAMS: tuple[c.MetricDef, ...] = REPUBLISHED_HISTOGRAMS
"""The histogram families, in the order they are rendered; the counters follow them."""
EPP_COUNTERS: tuple[c.MetricDef, ...] = REPUBLISHED_COUNTERS
EPP_GAUGES: tuple[c.MetricDef, ...] = (*REPUBLISHED_GAUGES, c.EPP_INFLIGHT_REQUESTS, c.EPP_INFLIGHT_TOKENS)
"""The page's gauges (flow control), then the in-flight ones, which come from their own page reader."""


class EPPCollector:
    """Renders the pages ``pages()`` returns (one per pool; ``None`` for a pool without a current page).

    Wire it as ``EPPCollector(lambda: [scraper.latest for scraper in scrapers], limits, on_fold, inflight)``
    where ``inflight()`` gives each pool's newest in-flight page (None when stale or never scraped).
    ``collect()`` runs in the /metrics handler's threads; pages are immutable, and the label cap is
    taken under a lock.
    """

    def __init__(
        self,
        pages: Callable[[], Iterable[EPPPage | None]],
        max_label_values: Mapping[str, int] | None = None,
        on_fold: Callable[[str], None] | None = None,
        inflight: Callable[[], Iterable[tuple[str, InflightPage | None]]] | None = None,
        budget: SeriesBudget | None = None,
        *,
        up: Callable[[], Iterable[tuple[str, bool | None]]] | None = None,
    ) -> None:
        """``up()`` gives each pool's EPP and whether its last scrape succeeded (None: not scraped yet)."""
        self._pages = pages
        self._up = up or (lambda: ())
        self._inflight = inflight or (lambda: ())
        limits = {c.POD: max_label_values[c.POD]} if max_label_values and c.POD in max_label_values else {}
        self._guard = LabelGuard(limits, lambda label: None)
        self._on_fold = on_fold or (lambda label: None)
        self._folded: set[str] = set()  # counted once each: every render folds them again
        self._lock = threading.Lock()
        self._caps: dict[str, FamilyCap] = {}
        if budget is not None:
            for definition in (*EPP_HISTOGRAMS, *EPP_COUNTERS, *EPP_GAUGES):
                self._caps[definition.name] = budget.family(definition)
        self._folded_sets: dict[str, set[SeriesKey]] = {}  # the label sets each family folded at the last render

    def describe(self) -> Iterator[Metric]:
        """The families without samples, so the registry learns the names without calling ``collect()``."""
        yield from self._families([], [])
        yield GaugeMetricFamily(c.EPP_UP.name, c.EPP_UP.help, labels=c.EPP_UP.labels)

    def collect(self) -> Iterator[Metric]:
        yield from self._pages_collected()
        up = GaugeMetricFamily(c.EPP_UP.name, c.EPP_UP.help, labels=c.EPP_UP.labels)
        for pool, answered in sorted(self._up(), key=lambda item: item[0]):
            if answered is not None:
                up.add_metric([pool], 1.0 if answered else 0.0)
        yield up

    def _pages_collected(self) -> Iterator[Metric]:
        pages: dict[str, EPPPage] = {}
        for page in self._pages():
            if page is not None:
                pages.setdefault(page.pool, page)  # pool names are unique (Settings checks); first wins
        inflight = sorted((pool, page) for pool, page in self._inflight() if page is not None and page.llm_d)
        return self._families([pages[pool] for pool in sorted(pages)], inflight)

    def _families(self, pages: list[EPPPage], inflight: list[tuple[str, InflightPage]]) -> Iterator[Metric]:
        for definition in EPP_HISTOGRAMS:
            histogram = HistogramMetricFamily(definition.name, definition.help, labels=definition.labels)
            merged: dict[SeriesKey, HistogramSeries] = {}
            for page in pages:
                merged.update(page.histograms.get(definition.name, {}))  # pools differ: no key is on two pages
            for key, value in sorted(self._series_capped(definition, merged, _merge_histograms).items()):
                buckets = [(_le(le), count) for le, count in value.buckets]
                histogram.add_metric(list(key), buckets, value.sum)
            yield histogram
        for definition in (*EPP_COUNTERS, *REPUBLISHED_GAUGES):
            is_gauge = definition.type == "gauge"
            family = (GaugeMetricFamily if is_gauge else CounterMetricFamily)(
                definition.name, definition.help, labels=definition.labels
            )
            values: dict[SeriesKey, float] = {}
            for page in pages:
                of_page = page.gauges if is_gauge else page.counters
                values.update(self._capped(definition, of_page.get(definition.name, {})))
            for key, total in sorted(self._series_capped(definition, values, _add).items()):
                family.add_metric(list(key), total)
            yield family
        for definition in (c.EPP_INFLIGHT_REQUESTS, c.EPP_INFLIGHT_TOKENS):
            gauge = GaugeMetricFamily(definition.name, definition.help, labels=definition.labels)
            tokens = definition is c.EPP_INFLIGHT_TOKENS
            loads_of: dict[SeriesKey, float] = {}
            for pool, loads in inflight:
                per_pod: dict[SeriesKey, float] = {
                    (pool, pod): float(sum(load.tokens if tokens else load.requests for load in ranks.values()))
                    for pod, ranks in loads.pods.items()
                }
                loads_of.update(self._capped(definition, per_pod))
            for key, load in sorted(self._series_capped(definition, loads_of, _add).items()):
                gauge.add_metric(list(key), load)
            yield gauge

    def _capped(self, definition: c.MetricDef, values: Mapping[SeriesKey, float]) -> Mapping[SeriesKey, float]:
        """The series with their ``pod`` value through the cap, folded series added up."""
        if c.POD not in definition.labels:
            return values
        at = definition.labels.index(c.POD)
        out: dict[SeriesKey, float] = {}
        with self._lock:
            for key in sorted(values):  # sorted: which pods the cap admits first does not depend on dict order
                pod = self._guard.admit(c.POD, key[at]) if key[at] else ""
                if pod == c.OTHER and key[at] not in self._folded:
                    self._folded.add(key[at])
                    self._on_fold(c.POD)
                capped = (*key[:at], pod, *key[at + 1 :])
                out[capped] = out.get(capped, 0.0) + values[key]
        return out

    def _series_capped(
        self, definition: c.MetricDef, values: Mapping[SeriesKey, _V], add: Callable[[_V, _V], _V]
    ) -> dict[SeriesKey, _V]:
        """The series through the family's series cap, in sorted order (admission must not follow dict order);
        folded ones added up with ``add``."""
        cap = self._caps.get(definition.name)
        if cap is None:
            return dict(values)
        out: dict[SeriesKey, _V] = {}
        folded: set[SeriesKey] = set()
        with self._lock:
            for key in sorted(values):
                weight = len(value.buckets) + 2 if isinstance(value := values[key], HistogramSeries) else 1
                capped = cap.admit(key, observed=False, weight=weight)
                if capped != key:
                    folded.add(key)
                before = out.get(capped)
                out[capped] = value if before is None else add(before, value)
            previous = self._folded_sets.get(definition.name, set())
            cap.folded += len(folded - previous)
            self._folded_sets[definition.name] = folded
        return out


_V = TypeVar("_V", float, HistogramSeries)


def _add(a: float, b: float) -> float:
    return a + b


def _merge_histograms(a: HistogramSeries, b: HistogramSeries) -> HistogramSeries:
    """Two folded histograms bucket by bucket; one with other boundaries (another EPP version) is left out."""
    merged, _ = add_histograms(a, b)
    return merged if merged is not None else a


def _le(bound: float) -> str:
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]  # prometheus_client's own spelling
