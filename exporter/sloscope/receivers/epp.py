"""Scrapes each pool's EPP ``/metrics`` and keeps the latest page, normalized by :mod:`sloscope.receivers.epp_page`.

What is read from the page, from which EPP generation, and how it is put right is said there. This
module is the scrape loop.

Staleness: a failed scrape keeps the last good page for ``stale_after`` seconds (the
``scrape.stale_after_seconds`` setting), then drops it. One missed scrape therefore does not make
every ``sloscope_epp_*`` series vanish and reappear (which breaks ``absent()`` alerts and panel
continuity), while an EPP that stays unreachable does not have its last counter values re-published
forever as if nothing were happening: after the period its series disappear, as a Prometheus target's
series go stale when the target is down. Values are re-published as the EPP wrote them, so an EPP
restart shows as a counter reset, which ``rate()`` handles.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

import httpx

from sloscope import conventions as c
from sloscope.receivers.consumers import InflightConsumer
from sloscope.receivers.epp_inflight import INFLIGHT_FAMILIES, InflightPage
from sloscope.receivers.epp_page import (
    DEFAULT_LATENCY_SCORERS,
    EPP_FAMILIES,
    DroppedSeries,
    EPPPage,
    HistogramSeries,
    normalize,
)
from sloscope.receivers.exposition import ExpositionError, ExpositionParser, Sample
from sloscope.receivers.http_fetch import fetch
from sloscope.receivers.off_loop import off_loop
from sloscope.redaction import redact_url
from sloscope.telemetry import Telemetry

__all__ = [
    "EPP_FAMILIES",
    "DroppedSeries",
    "EPPPage",
    "EPPScraper",
    "HistogramSeries",
    "normalize",
]

log = logging.getLogger(__name__)

_Labels = tuple[tuple[str, str], ...]


class EPPScraper:
    """Scrapes one pool's EPP every ``interval`` seconds and keeps the latest normalized page.

    ``latest`` is read from other threads (the /metrics handler); it is one attribute holding an
    immutable page and its time, replaced whole, so readers need no lock.
    """

    def __init__(  # noqa: PLR0917  # positional interval and timeout: the agreed signature the pool wiring calls
        self,
        pool: str,
        url: str,
        http: httpx.AsyncClient,
        telemetry: Telemetry,
        interval: float,
        timeout: float,
        *,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        inflight: InflightConsumer | None = None,
        name: str | None = None,
        latency_scorers: frozenset[str] = DEFAULT_LATENCY_SCORERS,
        on_routing: Callable[[str, str], None] | None = None,
        on_streaming: Callable[[str, bool | None], None] | None = None,
    ) -> None:
        """``inflight``: where each good page's in-flight counts go. ``name``: how the logs call the EPP (the
        ``epp.name`` setting); else its URL, userinfo masked. ``on_routing(pool, routing)``: told how the EPP
        routes whenever a page says it (GIE v1.5.0, :func:`~sloscope.receivers.epp_page.page_routing`), with the
        scorer types of ``latency_scorers`` counted as prediction-based. ``on_streaming(pool, streaming)``: told
        each good page's latency-plugin streaming mode (None: the page does not show it yet)."""
        if interval <= 0 or timeout <= 0 or stale_after <= 0:
            raise ValueError("interval, timeout and stale_after must be positive")
        self.pool = pool
        self.url = url
        self._shown = name or redact_url(url)
        self._http = http
        self._telemetry = telemetry
        self._interval = interval
        self._timeout = timeout
        self._stale_after = stale_after
        self._clock = clock
        self._parser = ExpositionParser(EPP_FAMILIES | INFLIGHT_FAMILIES)
        self._inflight = inflight
        self._latest: tuple[EPPPage, float] | None = None
        self._failing = False
        self._scraped = False
        self._warned: set[tuple[str, _Labels, str]] = set()
        self._fixes_logged = False
        self._sources: tuple[str, ...] = ()
        self._streaming_off: frozenset[tuple[str, str, str, str]] = frozenset()
        self._latency_scorers = latency_scorers
        self._on_routing = on_routing
        self._on_streaming = on_streaming
        self._routing: str | None = None

    @property
    def latest(self) -> EPPPage | None:
        """The last good page, unless it is older than ``stale_after`` seconds."""
        latest = self._latest
        if latest is None or self._clock() - latest[1] > self._stale_after:
            return None
        return latest[0]

    @property
    def up(self) -> bool | None:
        """Whether the last scrape succeeded (a good page); None before the first scrape ended."""
        return None if not self._scraped else not self._failing

    async def scrape_once(self) -> str:
        """Scrape the EPP now, keep the page if it is good, count the outcome; returns the result label."""
        fetched = await fetch(self._http, self.url, self._timeout)
        result, page, error = fetched.result, None, ""
        if fetched.ok:
            try:
                page, inflight = await off_loop(len(fetched.text), self._read_page, fetched.text, fetched.openmetrics)
            except ExpositionError as exc:
                result, error = c.RESULT_PARSE_ERROR, str(exc)
            else:
                if self._inflight is not None and inflight is not None:
                    self._inflight.keep(self.pool, inflight)
        else:
            error = f"{fetched.result}: {fetched.error}"
        now = self._clock()
        if page is not None:
            self._latest = (page, now)
            if self._failing:
                log.info("EPP of pool %s at %s answers again", self.pool, self._shown)
            self._failing = False
            self._report(page)
            self._tell_routing(page.routing)
            if self._on_streaming is not None:
                self._on_streaming(self.pool, page.streaming)
        else:
            latest = self._latest
            if latest is not None and now - latest[1] > self._stale_after:
                self._latest = None  # also hidden by ``latest`` already; this frees it
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "EPP of pool %s at %s: scrape failed (%s)", self.pool, self._shown, error)
            self._failing = True
        self._scraped = True
        self._telemetry.scrape(c.KIND_EPP, result)
        return result

    async def run(self) -> None:
        """Scrape every ``interval`` seconds (fixed rate) until cancelled; scrape trouble never ends the loop."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                await self.scrape_once()
            except Exception:  # a bug must cost this scrape, not the loop
                log.exception("EPP scrape of pool %s at %s failed unexpectedly", self.pool, self._shown)
            next_at += self._interval
            now = loop.time()
            if next_at < now:  # fell behind (a slow scrape or a pause): skip the missed ticks
                next_at += ((now - next_at) // self._interval + 1) * self._interval
            await asyncio.sleep(next_at - now)

    def _read_page(self, text: str, openmetrics: bool) -> tuple[EPPPage, InflightPage | None]:
        """All of a scrape's reading of one page (off the event loop for a large one): it touches no state.
        Raises :class:`ExpositionError`."""
        samples = self._parser.parse(text, openmetrics=openmetrics)
        page = self._read(samples)
        inflight = self._inflight.read(samples) if self._inflight is not None else None
        if inflight is not None and page.gie_v15:
            inflight = dataclasses.replace(inflight, gie_v15=True)
        return page, inflight

    def _read(self, samples: list[Sample]) -> EPPPage:
        """The samples of one good page (the families the parser was given): every reader of the page starts here."""
        return normalize(samples, self.pool, latency_scorers=self._latency_scorers)

    def _tell_routing(self, routing: str | None) -> None:
        """Pass on how the EPP routes when its page says so; logged when it changes. A page that no longer says
        (a stale or restarted EPP) leaves the last word in force: an EPP's profile changes only with its config."""
        if routing is None or routing == self._routing:
            return
        log.info("EPP of pool %s routes every request as %r (the scorers on its page)", self.pool, routing)
        self._routing = routing
        if self._on_routing is not None:
            self._on_routing(self.pool, routing)

    def _report(self, page: EPPPage) -> None:
        """Log each dropped series when it first appears (not on every scrape), and the label fixes once."""
        current = {(d.family, d.labels, d.reason) for d in page.dropped}
        for family, labels, reason in sorted(current - self._warned):
            shown = ",".join(f'{k}="{v}"' for k, v in labels)
            log.warning("EPP of pool %s: dropped %s{%s}: %s", self.pool, family, shown, reason)
        self._warned = current
        if page.sources != self._sources:
            self._sources = page.sources
            log.info("EPP of pool %s: reading %s", self.pool, ", ".join(page.sources) or "no SLO family yet")
        for model, target, plugin, _ in sorted(page.streaming_off - self._streaming_off):
            log.info(
                "EPP of pool %s: plugin %r (target model %s) runs with streamingMode off: its TTFT is end-to-end "
                "latency, re-published as %s",
                self.pool,
                plugin,
                target or model,
                c.EPP_PREDICTED_E2E_SECONDS.name if plugin else c.EPP_E2E_SECONDS.name,
            )
        self._streaming_off = page.streaming_off
        if not self._fixes_logged and (page.models_filled or page.labels_swapped):
            self._fixes_logged = True
            log.info(
                "EPP of pool %s: model filled from target_model on %d series, swapped model labels put right "
                "on %d (known EPP label defects)",
                self.pool,
                page.models_filled,
                page.labels_swapped,
            )
