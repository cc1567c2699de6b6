"""The scrape loop of model-server pods: each target's /metrics on its own schedule, into a pod-state consumer.

The consumer (:class:`~sloscope.receivers.consumers.PodStateConsumer`) is the processors' pod history.

One asyncio task per target. Each target scrapes at a fixed offset within its interval, derived
from a hash of its pool, pod and address (as Prometheus spreads its targets), so a pool of a
thousand pods is polled evenly rather than in bursts, and the offset stays the same across restarts.
A semaphore bounds the scrapes in flight, each until its page is read (off the event loop when it is
large: :mod:`sloscope.receivers.off_loop`); the schedule is fixed-rate (a slow scrape delays its
own next one, never shifts the others). Discovery changes start and cancel tasks; a pod that leaves
discovery is marked vanished and forgotten by the consumer's ``expire`` after the grace period.

A scrape never raises into the loop: network and HTTP failures, pages that do not parse, all end
as one ``sloscope_scrapes_total{kind="model_server",result=...}`` increment and a down pod.

A pool may mix engines. As the EPP does, each pod's protocol is named by its ``llm-d.ai/engine-type``
label (``pools[].engine_label``, the EPP's ``engineLabelKey``), else the legacy
``inference.networking.k8s.io/engine-type`` one; a pod without either, or
with a value that names no built-in protocol, uses the pool's ``protocol`` (the EPP's default engine;
llm-d-router ebab6879 extractor.go:229-245, mapping_registry.go:24-35,77-96). The pool's series
overrides apply to its own protocol only, as the EPP's flags configure one engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx

from sloscope import conventions as c
from sloscope.config import Pool, Scrape
from sloscope.receivers.consumers import EngineLatencyConsumer, PodStateConsumer
from sloscope.receivers.discovery import Target
from sloscope.receivers.engine_latency import EngineHistogram, HistogramKey, engine_histograms
from sloscope.receivers.exposition import ExpositionError, ExpositionParser
from sloscope.receivers.http_fetch import fetch
from sloscope.receivers.off_loop import off_loop
from sloscope.receivers.pod_roles import ROLE_LABEL, latency_signals
from sloscope.receivers.protocols import BUILTIN, PodState, Protocol, canonical, merge_ranks, with_overrides
from sloscope.telemetry import Telemetry

__all__ = [
    "ENGINE_TYPE_LABEL",
    "LEGACY_ENGINE_TYPE_LABEL",
    "PodScraper",
    "PoolScrapeConfig",
    "engine_type",
    "protocol_of",
    "scrape_offset",
]

log = logging.getLogger(__name__)

ENGINE_TYPE_LABEL = "llm-d.ai/engine-type"  # the EPP's DefaultEngineTypeLabelKey
LEGACY_ENGINE_TYPE_LABEL = "inference.networking.k8s.io/engine-type"  # the EPP's deprecated GAIE key


def protocol_of(pool: Pool) -> Protocol:
    """The pool's protocol with its per-pool series overrides applied."""
    overrides = pool.metrics
    return with_overrides(
        BUILTIN[canonical(pool.protocol)],
        waiting=overrides.waiting,
        running=overrides.running,
        kv_cache=overrides.kv_cache,
        lora=overrides.lora,
    )


def engine_type(target: Target, key: str = ENGINE_TYPE_LABEL) -> str | None:
    """The engine a pod's labels name, as the EPP reads them: the configured key, else the legacy one."""
    return target.label(key) or target.label(LEGACY_ENGINE_TYPE_LABEL) or None


@dataclass(frozen=True)
class _Engine:
    """One protocol as a pool scrapes it: the protocol, its page parser and its path."""

    protocol: Protocol
    parser: ExpositionParser
    path: str


def scrape_offset(target: Target, interval: float) -> float:
    """A stable offset in [0, interval) from the target's identity."""
    digest = hashlib.blake2b(f"{target.pool}/{target.pod}/{target.address}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * interval


@dataclass(frozen=True)
class PoolScrapeConfig:
    """What scraping one pool's pods needs, built once per pool."""

    pool: Pool
    protocol: Protocol  # the pool's own, for pods whose labels name no other
    parser: ExpositionParser
    path: str
    interval: float
    timeout: float
    engines: Mapping[str, _Engine]  # by protocol name; the pool's own with its overrides

    @classmethod
    def of(cls, pool: Pool, scrape: Scrape) -> PoolScrapeConfig:
        own = protocol_of(pool)
        engines = {
            protocol.name: _Engine(
                protocol, ExpositionParser(protocol.families), pool.metrics_path or protocol.metrics_path
            )
            for protocol in (own if name == own.name else BUILTIN[name] for name in BUILTIN)
        }
        default = engines[own.name]
        return cls(
            pool=pool,
            protocol=own,
            parser=default.parser,
            path=default.path,
            interval=pool.scrape_interval_seconds or scrape.interval_seconds,
            timeout=pool.scrape_timeout_seconds or scrape.timeout_seconds,
            engines=engines,
        )

    def engine_of(self, target: Target) -> _Engine:
        """The pod's protocol: the one its engine-type label names, else the pool's."""
        return self.engines.get(engine_type(target, self.pool.engine_label) or "", self.engines[self.protocol.name])


def _read_page(
    engine: _Engine, text: str, openmetrics: bool, model: str | None, *, histograms: bool
) -> tuple[PodState, dict[HistogramKey, EngineHistogram] | None]:
    """The pod's state and (when wanted) its latency histograms from one page: all of a scrape's reading,
    run off the event loop for a large page. Raises :class:`ExpositionError`."""
    samples = engine.parser.parse(text, openmetrics=openmetrics)
    state = engine.protocol.pod_state(samples, model)
    return state, engine_histograms(engine.protocol, samples, model) if histograms else None


class PodScraper:
    def __init__(
        self,
        *,
        pools: Sequence[Pool],
        settings: Scrape,
        history: PodStateConsumer,
        telemetry: Telemetry,
        http: httpx.AsyncClient,
        latency: EngineLatencyConsumer | None = None,
        pool_clients: Mapping[str, httpx.AsyncClient] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``pool_clients``: the client of each pool whose pods have credentials or TLS; others use ``http``."""
        self._configs = {pool.name: PoolScrapeConfig.of(pool, settings) for pool in pools}
        self._history = history
        self._latency = latency
        self._telemetry = telemetry
        self._http = http
        self._pool_clients = dict(pool_clients or {})
        self._clock = clock
        self._semaphore = asyncio.Semaphore(settings.max_concurrency)
        self._tasks: dict[tuple[str, str], tuple[Target, asyncio.Task[None]]] = {}

    def on_targets(self, targets: Mapping[tuple[str, str], Target]) -> None:
        """Discovery's current targets: start new ones, restart changed ones, retire the gone ones."""
        now = self._clock()
        for key, (target, task) in list(self._tasks.items()):
            if targets.get(key) != target:
                task.cancel()
                del self._tasks[key]
                if key not in targets:
                    self._history.vanish(key, now)
                    log.info("pod %s/%s left discovery; its series go in the grace period", *key)
        for key, target in targets.items():
            if key in self._tasks or target.pool not in self._configs:
                continue
            self._history.track(target)
            task = asyncio.create_task(self._run(target), name=f"sloscope-scrape-{target.pool}-{target.pod}")
            self._tasks[key] = (target, task)

    def url_of(self, target: Target, address: str | None = None) -> str:
        """The metrics URL of the target's endpoint at ``address`` (its own address when None)."""
        config = self._configs[target.pool]
        return f"{config.pool.scheme}://{address or target.address}{config.engine_of(target).path}"

    async def scrape_once(self, target: Target) -> str:
        """Scrape one target now (every data-parallel rank's page at once) and record the outcome; returns the
        result label, the first failure's when a rank failed: a pod's state is whole or absent, never a part
        summed as the whole."""
        endpoints = target.endpoints()
        async with self._semaphore:  # held until the pages are read: pages waiting for a thread stay bounded
            if len(endpoints) == 1:  # the usual pod: no task per scrape
                pages = [await self._scrape_endpoint(target, *endpoints[0])]
            else:
                pages = await asyncio.gather(*(self._scrape_endpoint(target, r, a) for r, a in endpoints))
        failed = next((result for result, _ in pages if result != c.RESULT_SUCCESS), None)
        state: PodState | None = None
        if failed is None:
            states = [(rank, page) for (rank, _), (_, page) in zip(endpoints, pages, strict=True) if page is not None]
            state = merge_ranks(states) if target.ranks else states[0][1]
        self._history.record(target.key, self._clock(), state)
        return failed or c.RESULT_SUCCESS

    async def _scrape_endpoint(self, target: Target, rank: int, address: str) -> tuple[str, PodState | None]:
        """One endpoint's page: (result, its state); its latency histograms go to the engine-latency collector."""
        config = self._configs[target.pool]
        engine, model = config.engine_of(target), config.pool.model
        timeout = target.timeout_seconds or config.timeout
        url = self.url_of(target, address)
        result, state = c.RESULT_SUCCESS, None
        fetched = await fetch(self._pool_clients.get(target.pool, self._http), url, timeout)
        if fetched.ok:
            try:
                state, histograms = await off_loop(
                    len(fetched.text),
                    _read_page,
                    engine,
                    fetched.text,
                    fetched.openmetrics,
                    model,
                    histograms=self._latency is not None,
                )
            except ExpositionError as exc:
                result = c.RESULT_PARSE_ERROR
                log.warning("scrape of %s: unreadable page: %s", url, exc)
            else:
                if self._latency is not None and histograms is not None:
                    counted = latency_signals(target.label(ROLE_LABEL))  # P/D: each phase from its own pods
                    own = {key: h for key, h in histograms.items() if key[1] in counted}
                    self._latency.observe(target.key, engine.protocol.name, own, model, rank=rank)
        else:
            result = fetched.result
            log.debug("scrape of %s failed: %s %s", url, fetched.result, fetched.error)
        self._telemetry.scrape(c.KIND_MODEL_SERVER, result)
        return result, state

    async def _run(self, target: Target) -> None:
        interval = target.interval_seconds or self._configs[target.pool].interval
        loop = asyncio.get_running_loop()
        next_at = loop.time() + scrape_offset(target, interval)
        while True:
            await asyncio.sleep(max(next_at - loop.time(), 0.0))
            try:
                await self.scrape_once(target)
            except Exception:  # a bug must cost this scrape, not the target's task
                log.exception("scrape of %s failed unexpectedly", self.url_of(target))
            next_at += interval
            if next_at < loop.time():  # fell behind (a long pause): skip the missed ticks
                next_at += (loop.time() - next_at) // interval * interval + interval

    def expire(self) -> None:
        """Forget pods past their grace period (called periodically by the owner)."""
        for key in self._history.expire(self._clock()):
            if self._latency is not None:
                self._latency.forget(key)
            log.info("pod %s/%s forgotten after the vanished grace period", *key)

    async def stop(self) -> None:
        tasks = [task for _, task in self._tasks.values()]
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
