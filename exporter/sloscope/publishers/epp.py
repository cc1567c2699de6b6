"""The EPP's SLO series, re-published as ``sloscope_epp_*`` with a ``pool`` label and their labels put right.

A custom Collector (client_python's way to proxy metrics from another system): at every scrape of
sloscope's /metrics it renders each pool's latest :class:`~sloscope.receivers.epp.EPPPage` as
histogram and counter families. Nothing is stored here; a pool whose page is missing or stale
simply has no series. Bucket boundaries are the EPP's own, written as prometheus_client writes
``le`` (``floatToGoString``: ``0.2``, ``1.0``, ``3600.0``, ``+Inf``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from sloscope import conventions as c
from sloscope.receivers.epp import EPPPage

__all__ = ["EPP_HISTOGRAMS", "EPPCollector"]

EPP_HISTOGRAMS: tuple[c.MetricDef, ...] = (
    c.EPP_TTFT_SECONDS,
    c.EPP_PREDICTED_TTFT_SECONDS,
    c.EPP_TPOT_SECONDS,
    c.EPP_PREDICTED_TPOT_SECONDS,
    c.EPP_TTFT_PREDICTION_DURATION_SECONDS,
    c.EPP_TPOT_PREDICTION_DURATION_SECONDS,
)
"""The histogram families, in the order they are rendered; the counter follows them."""


class EPPCollector:
    """Renders the pages ``pages()`` returns (one per pool; ``None`` for a pool without a current page).

    Wire it as ``EPPCollector(lambda: [scraper.latest for scraper in scrapers])``. ``collect()``
    runs in the /metrics handler's thread; pages are immutable, so it reads them without a lock.
    """

    def __init__(self, pages: Callable[[], Iterable[EPPPage | None]]) -> None:
        self._pages = pages

    def describe(self) -> Iterator[Metric]:
        """The families without samples, so the registry learns the names without calling ``collect()``."""
        return _families([])

    def collect(self) -> Iterator[Metric]:
        pages: dict[str, EPPPage] = {}
        for page in self._pages():
            if page is not None:
                pages.setdefault(page.pool, page)  # pool names are unique (Settings checks); first wins
        return _families([pages[pool] for pool in sorted(pages)])


def _families(pages: list[EPPPage]) -> Iterator[Metric]:
    for definition in EPP_HISTOGRAMS:
        histogram = HistogramMetricFamily(definition.name, definition.help, labels=definition.labels)
        for page in pages:
            series = page.histograms.get(definition.name, {})
            for key in sorted(series):
                value = series[key]
                buckets = [(_le(le), count) for le, count in value.buckets]
                histogram.add_metric(_values(definition, key), buckets, value.sum)
        yield histogram
    d = c.EPP_SLO_VIOLATIONS
    counter = CounterMetricFamily(d.name, d.help, labels=d.labels)
    for page in pages:
        for vkey in sorted(page.violations):
            counter.add_metric(_values(d, vkey), page.violations[vkey])
    yield counter


def _values(definition: c.MetricDef, key: tuple[str, ...]) -> list[str]:
    """Label values in the definition's label order (keys are (pool, model, target_model[, type]))."""
    by_name = dict(zip((c.POOL, c.MODEL, c.TARGET_MODEL, c.TYPE), key, strict=False))
    return [by_name[label] for label in definition.labels]


def _le(bound: float) -> str:
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]  # prometheus_client's own spelling
