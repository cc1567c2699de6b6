"""Everything that watches the pools, beside the trace pipeline: their pods, predictors and EPPs.

receivers:  discovery -> pod scrape loop -> PodHistory      EPP scrapes      predictor health polls
processors: PredictionTracker (on the pipeline worker) -> ShadowPredictor;  LiveHeadroom
publishers: pod gauges, prediction series, headroom gauges, predictor health, sloscope_epp_*

Everything is built (and its collectors registered) at construction; :meth:`PoolMonitor.start`
launches the tasks on the running loop and :meth:`PoolMonitor.stop` cancels them. With no pools
configured nothing runs and no pod series exist. Every loop here survives its own failures: a
dead predictor or an unreachable pod costs series and counted failures, never the SLO series.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.columnar.cardinality import LabelGuard
from sloscope.config import Settings
from sloscope.conventions import ENGINE_LATENCY_SECONDS, SKIP_SHUTDOWN
from sloscope.predictor.client import PredictionClient
from sloscope.predictor.generation import resolve
from sloscope.predictor.health import PredictorHealth, PredictorSnapshot, server_labels
from sloscope.processors import contracts
from sloscope.processors.inflight_history import InflightHistory
from sloscope.processors.live_headroom import LiveHeadroom
from sloscope.processors.placement import Placed
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.prediction_series import PredictionSeries
from sloscope.processors.predictions import PredictionTracker
from sloscope.processors.running_slos import RunningSLOs
from sloscope.processors.shadow import RoutingFeatures, ShadowPredictor
from sloscope.processors.streaming_modes import StreamingModes
from sloscope.publishers.engine_latency import EngineLatencyCollector
from sloscope.publishers.epp import EPPCollector
from sloscope.publishers.pod_state import PodStateCollector
from sloscope.publishers.predictor_health import PredictorHealthCollector
from sloscope.publishers.streaming_mode import StreamingModeCollector
from sloscope.publishers.upstream_contract import SpanContractTap, UpstreamContractCollector
from sloscope.receivers.discovery.manager import DiscoveryManager
from sloscope.receivers.epp import EPPScraper
from sloscope.receivers.http_auth import HTTPClients, epp_auth
from sloscope.receivers.pod_scraper import PodScraper
from sloscope.service.deadlines import within
from sloscope.slo.spec import SLOSpec
from sloscope.telemetry import Telemetry

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["PoolMonitor", "pod_history", "pool_of_pod"]

log = logging.getLogger(__name__)

_EXPIRE_EVERY_SECONDS = 1.0
_STEP_SECONDS = 1.0  # the longest a clean-up step of stop() may take (cancelled tasks end at once)


def pod_history(settings: Settings) -> PodHistory:
    scrape = settings.scrape
    return PodHistory(scrape.history_samples, scrape.stale_after_seconds, scrape.vanished_grace_seconds)


def pool_of_pod(history: PodHistory) -> Callable[[Placed], str | None]:
    """The pool discovery found a request's pod in (by pod name, else by the endpoint address)."""

    def pool_of(request: Placed) -> str | None:
        key = history.resolve(None, request.pod, request.endpoint)
        return key[0] if key is not None else None

    return pool_of


class PoolMonitor:
    def __init__(
        self,
        settings: Settings,
        spec: SLOSpec,
        *,
        registry: CollectorRegistry,
        telemetry: Telemetry,
        history: PodHistory,
        labels: LabelGuard,
        sink: Callable[[pa.RecordBatch], None] | None = None,
        on_routing: Callable[[str, str], None] | None = None,
    ) -> None:
        """``labels``: the evaluator's label caps (its admission's guard), which the engines' latency series share,
        so a model is admitted or folded alike in every family; ``on_routing(pool, routing)``: how a pool's EPP
        routes every request, when its page says so."""
        pools, scrape, predictions = settings.pools, settings.scrape, settings.predictions
        names = [pool.name for pool in pools]
        self.history = history
        self.running = RunningSLOs()
        self.streaming = StreamingModes({pool.name: pool.streaming_mode for pool in pools}, predictions.streaming_mode)
        # One client per credentials and TLS setting (TLS belongs to a connection pool); the unset share one.
        self._clients = HTTPClients(
            httpx.Limits(max_connections=scrape.max_concurrency + 16, max_keepalive_connections=None)
        )
        self.engine_latency = EngineLatencyCollector(labels, telemetry.series_budget.family(ENGINE_LATENCY_SECONDS))
        self._http = self._clients.get(None)
        epp_auth_of = {pool.name: epp_auth(pool.epp.auth) for pool in pools if pool.epp is not None}
        predictor_http = {
            pool.name: self._clients.get(pool.predictor.auth) for pool in pools if pool.predictor is not None
        }
        self.scraper = PodScraper(
            pools=pools,
            settings=scrape,
            history=self.history,
            telemetry=telemetry,
            http=self._http,
            latency=self.engine_latency,
            pool_clients={pool.name: self._clients.get(pool.auth) for pool in pools},
        )
        self.discovery = DiscoveryManager(pools)
        series = PredictionSeries(registry, names, telemetry.series_budget)
        self.clients = {
            pool.name: PredictionClient(
                pool.predictor.prediction_urls,
                predictions,
                predictor_http[pool.name],
                count=functools.partial(series.call, pool.name),
                retried=functools.partial(series.retried, pool.name),
                labels=server_labels(pool.predictor)[1],
            )
            for pool in pools
            if pool.predictor is not None and pool.predictor.prediction_urls
        }
        self.health = [
            PredictorHealth(
                pool.name,
                pool.predictor,
                predictor_http[pool.name],
                telemetry,
                scrape.timeout_seconds,
                probe=predictions.reset_probe,
            )
            for pool in pools
            if pool.predictor is not None
        ]
        self.tracker = PredictionTracker(
            # without pools there is no predictor to ask: only predictions carried on spans are compared
            settings=predictions if pools else predictions.model_copy(update={"shadow": False}),
            headroom=settings.headroom,
            history=self.history,
            running=self.running,
            series=series,
            predicted_pools=set(self.clients),
            quantile_of=self._quantile_of,
            objective_of=self._objective_of,
            sink=sink,
            streaming_of=self.streaming.streaming,
        )
        self.inflight = InflightHistory(
            scrape.history_samples, scrape.stale_after_seconds, producer=predictions.inflight_producer
        )
        routing = RoutingFeatures(predictions, self.history, self.inflight, self.clients, self._speaks_objective)
        self.shadow = ShadowPredictor(self.tracker, self.history, self.clients, predictions, features=routing)
        self.headroom = LiveHeadroom(
            spec=spec,
            history=self.history,
            running=self.running,
            clients=self.clients,
            settings=settings.headroom,
            predictions=predictions,
            features=routing,
            streaming_of=self.streaming.streaming,
        )
        self.epp = [
            EPPScraper(
                pool.name,
                pool.epp.metrics_url,
                self._clients.get(epp_auth_of[pool.name]),
                telemetry,
                pool.scrape_interval_seconds or scrape.interval_seconds,
                pool.scrape_timeout_seconds or scrape.timeout_seconds,
                stale_after=scrape.stale_after_seconds,
                inflight=self.inflight,
                name=pool.epp.name,
                latency_scorers=frozenset(settings.join.latency_scorer_types),
                on_routing=on_routing,
                on_streaming=self.streaming.tell,
            )
            for pool in pools
            if pool.epp is not None
        ]
        for pool, auth in epp_auth_of.items():
            token = auth.credentials_file if auth is not None else None
            how = f"with the bearer token in {token}" if token else "without a token"
            log.info("EPP of pool %s: scraped %s", pool, how)
        self._health_interval = predictions.health_interval_seconds
        registry.register(PodStateCollector(self.history, names))
        registry.register(StreamingModeCollector(self.streaming))
        registry.register(self.engine_latency)
        registry.register(PredictorHealthCollector(lambda: [h.snapshot for h in self.health], self.streaming.streaming))
        registry.register(self.headroom)
        registry.register(
            EPPCollector(
                lambda: [scraper.latest for scraper in self.epp],
                settings.limits.max_label_values,
                lambda label: telemetry.label_values_folded.labels(label).inc(),
                lambda: [(scraper.pool, self.inflight.latest(scraper.pool)) for scraper in self.epp],
                telemetry.series_budget,
                up=lambda: [(scraper.pool, scraper.up) for scraper in self.epp],
            )
        )
        self._generation_setting = predictions.epp_generation
        self.spans = contracts.SpanWindow()
        self.contract_tap = SpanContractTap(self.spans)
        registry.register(UpstreamContractCollector(self._judge_contracts))
        self._tasks: list[asyncio.Task[None]] = []
        self._enabled = bool(pools)

    def _snapshot_of(self, pool: str) -> PredictorSnapshot | None:
        for health in self.health:
            if health.pool == pool and health.snapshot is not None:
                return health.snapshot
        return None

    def _quantile_of(self, pool: str) -> float | None:
        snapshot = self._snapshot_of(pool)
        return snapshot.quantile if snapshot is not None else None

    def _speaks_objective(self, pool: str) -> bool | None:
        snapshot = self._snapshot_of(pool)
        return snapshot.speaks_objective if snapshot is not None else None

    def _objective_of(self, pool: str) -> str | None:
        """The objective the pool's predictor was last polled with: that of the EPP's predictions on spans."""
        snapshot = self._snapshot_of(pool)
        return snapshot.objective if snapshot is not None else None

    def _judge_contracts(self) -> dict[tuple[str, str], bool]:
        """Every upstream-contract check with something to judge by (:mod:`sloscope.processors.contracts`)."""
        judged: dict[tuple[str, str], bool | None] = {}
        for pool in self.spans.pools():
            for check, holds in contracts.span_checks(self.spans.totals(pool), self.spans.headers_seen(pool)).items():
                judged[pool, check] = holds
        for health in self.health:
            snapshot, pool = health.snapshot, health.pool
            if snapshot is None:
                continue
            generation = resolve(self._generation_setting, self.inflight.generation(pool), snapshot.speaks_objective)
            judged[pool, c.CHECK_PREDICTOR_OBJECTIVE] = contracts.predictor_objective(
                generation, snapshot.speaks_objective
            )
            judged[pool, c.CHECK_PREDICTOR_ANSWERS] = contracts.predictor_answers(snapshot.unreadable)
        for scraper in self.epp:
            pool, page = scraper.pool, scraper.latest
            judged[pool, c.CHECK_STREAMING_MODE] = contracts.streaming_mode(self.streaming.contradicted(pool))
            judged[pool, c.CHECK_EPP_GENERATION] = contracts.epp_generation(
                self._generation_setting, self.inflight.generation(pool), page is not None and bool(page.sources)
            )
            judged[pool, c.CHECK_EPP_FAMILIES] = contracts.epp_families(
                page.sources if page is not None else None, self.spans.totals(pool).gateway
            )
        return {key: holds for key, holds in judged.items() if holds is not None}

    async def start(self) -> None:
        if not self._enabled or self._tasks:
            return
        self.discovery.subscribe(self.scraper.on_targets)
        await self.discovery.start()
        jobs: list[tuple[str, Callable[[], Awaitable[Any]], float | None]] = [
            ("expire", self._expire, _EXPIRE_EVERY_SECONDS),
            *((f"health-{h.pool}", h.poll_once, self._health_interval) for h in self.health),
            *((f"epp-{e.pool}", e.run, None) for e in self.epp),
        ]
        if self.clients:
            jobs += [("shadow", self.shadow.run, None), ("headroom", self.headroom.run, None)]
        self._tasks = [
            asyncio.create_task(_keep(name, job, every), name=f"sloscope-{name}") for name, job, every in jobs
        ]

    async def _expire(self) -> None:
        self.scraper.expire()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stops every loop. Requests still waiting for a shadow prediction get one within ``timeout``
        if the predictor answers, and are recorded without one (skipped ``shutdown``) otherwise, the pipeline
        having drained. Each clean-up step after that has a deadline of its own (``_STEP_SECONDS``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await within(_STEP_SECONDS, "the pool loops", _await_cancelled(tasks))
        if self.clients:
            abandoned = await self.shadow.finish(max(deadline - loop.time(), 0.0))
        else:
            abandoned = self.tracker.abandon(SKIP_SHUTDOWN)
        if abandoned:
            log.warning("shutdown: %d request(s) recorded without their shadow prediction", abandoned)
        if self._enabled:
            await within(_STEP_SECONDS, "discovery", self.discovery.stop())
            await within(_STEP_SECONDS, "the pod scrapes", self.scraper.stop())
        await within(_STEP_SECONDS, "closing the scrape and prediction connections", self._clients.aclose())


async def _keep(name: str, job: Callable[[], Awaitable[Any]], every: float | None) -> None:
    """Run ``job`` every ``every`` seconds, or once if it loops itself; a crash is logged and retried."""
    while True:
        started = time.monotonic()
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; retrying", name)
            every = every or 5.0
        if every is None:
            return
        await asyncio.sleep(max(every - (time.monotonic() - started), 0.0))


async def _await_cancelled(tasks: Sequence[asyncio.Task[None]]) -> None:
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
