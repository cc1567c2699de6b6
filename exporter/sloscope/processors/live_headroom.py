"""Live headroom of every pod: would each SLO class's reference request meet its SLO there, right now?

Every ``headroom.interval_seconds``, for each pool with a prediction server, one bulk prediction
covers every (pod, class) pair: the class's reference request (:class:`~sloscope.slo.spec.Reference`)
against the pod's latest fresh scraped state. Headroom follows the EPP
(:mod:`sloscope.slo.headroom`); the tightest TPOT SLO running on the pod is taken from the requests
that ended within ``running_slo_window_seconds``.

With streaming off in the pool's EPP (:mod:`sloscope.processors.streaming_modes`), the predicted "TTFT" is an
end-to-end latency: as the EPP does, it is held against the class's TTFT target and published as signal ``e2e``, and
no TPOT headroom is judged (the EPP leaves TPOT out of its tiers and admission). Nor is it on a prefill pod of a P/D
pool (its value of ``predictions.endpoint_role_label`` is ``prefill``): it generates no tokens, and the EPP neutralizes
its TPOT the same way (llm-d-router ebab6879 ``predictedlatency/prediction.go:106-115,181-188``).

A sleeping pod (vLLM's sleep mode) is left out: its empty queue and cache would predict ideal headroom
on a pod that cannot serve until it is woken, and count it among the pool's pods with headroom.

When a pool's predictor cannot answer, its headroom series disappear rather than keep stale values:
an old "positive" would tell an operator there is room when nobody knows.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sloscope import conventions as c
from sloscope.config import Headroom, Predictions
from sloscope.predictor.client import PredictionClient
from sloscope.predictor.features import Features
from sloscope.processors.pod_history import PodHistory, PodKey
from sloscope.processors.running_slos import RunningSLOs
from sloscope.processors.shadow import RoutingFeatures
from sloscope.processors.streaming_modes import first_signal
from sloscope.slo.headroom import is_positive, tpot_headroom, ttft_headroom
from sloscope.slo.spec import SLOClass, SLOSpec

__all__ = ["LiveHeadroom", "PodHeadroom"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodHeadroom:
    """One pod's headroom for one class's reference request; None for a signal the class sets no target for."""

    pod: str
    slo_class: str
    ttft: float | None  # seconds; with streaming off, the TTFT target minus the predicted end-to-end latency
    tpot: float | None
    streaming: bool = True  # False: ``ttft`` is published as signal e2e, ``tpot`` is None

    @property
    def positive(self) -> bool:
        return is_positive((self.ttft, self.tpot))


class LiveHeadroom(Collector):
    def __init__(
        self,
        *,
        spec: SLOSpec,
        history: PodHistory,
        running: RunningSLOs,
        clients: Mapping[str, PredictionClient],
        settings: Headroom,
        predictions: Predictions,
        streaming_of: Callable[[str], bool],
        features: RoutingFeatures | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``streaming_of(pool)``: whether the pool's EPP streams (off: the first signal is end-to-end latency)."""
        self._streaming_of = streaming_of
        self._classes = [cls for cls in spec.classes if any(t is not None for t in cls.reference_targets())]
        self._history = history
        self._running = running
        self._clients = clients
        self._settings = settings
        self._predictions = predictions
        self._features = features or RoutingFeatures(predictions, history, clients=clients)
        self._clock = clock
        self._latest: dict[str, list[PodHeadroom]] = {}
        self._lock = threading.Lock()

    async def run(self) -> None:
        while True:
            await self.update_once()
            await asyncio.sleep(self._settings.interval_seconds)

    async def update_once(self) -> None:
        """Predict every pool's headroom now, all pools at once (a slow predictor delays only its own pool's),
        and replace what is published, each pool as soon as its answer is in."""
        await asyncio.gather(*(self._update_pool(pool) for pool in self._clients))

    async def _update_pool(self, pool: str) -> None:
        try:
            result = await self._pool(pool)
        except Exception:  # one pool's trouble must not stop the others
            log.exception("live headroom of pool %s failed", pool)
            result = None
        with self._lock:
            if result is None:
                self._latest.pop(pool, None)
            else:
                self._latest[pool] = result

    async def _pool(self, pool: str) -> list[PodHeadroom] | None:
        now = self._clock()
        rows: list[tuple[PodKey, SLOClass, Features]] = []
        for key, sample in self._history.fresh(pool, now):
            if sample.state.sleeping:
                continue
            for cls in self._classes:
                ref = cls.reference
                features = self._features(key, sample.state, now, ref.prompt_tokens, ref.prefix_cache_score)
                if features is not None:
                    rows.append((key, cls, features))
        if not rows:
            return []
        predictions = await self._clients[pool].predict([f for _, _, f in rows], c.PURPOSE_HEADROOM)
        if all(p is None for p in predictions):
            return None
        out = []
        buffer, window = self._settings.slo_buffer_factor, self._settings.running_slo_window_seconds
        streaming = self._streaming_of(pool)
        for (key, cls, _), prediction in zip(rows, predictions, strict=True):
            if prediction is None:
                continue
            ttft_ms, tpot_ms = cls.reference_targets()
            tightest = self._running.tightest_recent(key, now, window)
            judges_tpot = bool(tpot_ms) and streaming and not self._features.is_prefill(key)
            out.append(
                PodHeadroom(
                    pod=key[1],
                    slo_class=cls.name,
                    ttft=ttft_headroom(ttft_ms / 1000.0, prediction.ttft_ms / 1000.0) if ttft_ms else None,
                    tpot=tpot_headroom(tpot_ms / 1000.0, prediction.tpot_ms / 1000.0, buffer, tightest)
                    if tpot_ms and judges_tpot
                    else None,
                    streaming=streaming,
                )
            )
        return out

    def describe(self) -> Iterator[Metric]:
        yield _gauge(c.POD_HEADROOM_SECONDS)
        yield _gauge(c.POOL_PODS_WITH_HEADROOM)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest = dict(self._latest)
        pods, positive = _gauge(c.POD_HEADROOM_SECONDS), _gauge(c.POOL_PODS_WITH_HEADROOM)
        for pool, rows in latest.items():
            for cls in self._classes:
                count = sum(1 for row in rows if row.slo_class == cls.name and row.positive)
                positive.add_metric([pool, cls.name], float(count))
            for row in rows:
                first = first_signal(row.streaming)
                for signal, value in ((first, row.ttft), (c.SIGNAL_TPOT, row.tpot)):
                    if value is not None:
                        pods.add_metric([pool, row.pod, signal, row.slo_class], value)
        yield pods
        yield positive


def _gauge(definition: c.MetricDef) -> GaugeMetricFamily:
    return GaugeMetricFamily(definition.name, definition.help, labels=definition.labels)
