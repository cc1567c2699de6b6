"""Shadow predictions: ask the prediction server what the EPP would have predicted for a completed request.

No released EPP puts its predictions on spans, so sloscope rebuilds the EPP's routing-time call:
the features of the pod the request went to **as of the request's arrival** (the newest scraped
sample at or before it, from :class:`PodHistory`), and the request's own features, sent to the
pool's prediction server's ``/predict/bulk`` in batches of at most 100, as the EPP's client does.

Differences from the EPP's own prediction, which docs/predictions.md spells out: the pod state is a
scrape at most one interval older than what the EPP saw; ``input_token_length`` is the prompt's
token count times ``words_per_token`` (the EPP counts whitespace words, spans carry tokens); the
prefix-cache score is the span's when present, else a configured default; and the model may
have been retrained between routing and the shadow call.

Bounded and polite: a token bucket caps calls per second, each call has a timeout, each server a
circuit breaker (in the client), and every request that gets no prediction is counted by reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping

from sloscope import conventions as c
from sloscope.config import Predictions
from sloscope.predictor.client import PredictionClient
from sloscope.predictor.features import Features
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.predictions import Pending, PredictionTracker
from sloscope.receivers.protocols import PodState

__all__ = ["ShadowPredictor", "TokenBucket", "features_of"]

log = logging.getLogger(__name__)


def features_of(
    state: PodState, prompt_tokens: float, settings: Predictions, prefix_cache_score: float | None = None
) -> Features | None:
    """The features the EPP would send for a request of ``prompt_tokens`` tokens to a pod in ``state``.

    None when the pod's queue or batch size is unknown (the page lacked the series). A missing
    KV-cache utilization (TGI publishes none) is sent as 0, as the EPP does for a metric it lacks.
    """
    if state.waiting is None or state.running is None or prompt_tokens < 0:
        return None
    score = prefix_cache_score if prefix_cache_score is not None else settings.prefix_cache_score
    return Features(
        kv_cache_percentage=min(max(state.kv_cache_utilization or 0.0, 0.0), 1.0),
        input_token_length=round(prompt_tokens * settings.words_per_token),
        num_request_waiting=round(state.waiting),
        num_request_running=round(state.running),
        num_tokens_generated=settings.tokens_generated,
        prefix_cache_score=min(max(score, 0.0), 1.0),
    )


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._tokens, self._at = burst, clock()

    def take(self, wanted: int) -> int:
        """Takes up to ``wanted`` whole tokens; returns how many it got."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        got = min(wanted, int(self._tokens))
        self._tokens -= got
        return got


class ShadowPredictor:
    def __init__(
        self,
        tracker: PredictionTracker,
        history: PodHistory,
        clients: Mapping[str, PredictionClient],
        settings: Predictions,
        bucket: TokenBucket | None = None,
    ) -> None:
        self._tracker = tracker
        self._history = history
        self._clients = clients
        self._settings = settings
        self._bucket = bucket or TokenBucket(settings.max_per_second, max(settings.max_per_second, 1.0))

    async def run(self) -> None:
        """Drain the queue every ``batch_wait_seconds`` (sooner when a full batch waits), until cancelled."""
        settings = self._settings
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.drain_once()
            except Exception:  # keep shadowing alive; this round's requests are lost and logged
                log.exception("shadow predictions failed")
            if self._tracker.waiting() < settings.batch_size:
                await asyncio.sleep(max(settings.batch_wait_seconds - (loop.time() - started), 0.0))

    async def finish(self, timeout: float) -> int:
        """At shutdown: predict what is still queued within ``timeout``, record the rest without.

        Returns how many requests were given up (counted as ``shutdown``).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # No wait_for around a round: cancelling one mid-call would lose the requests it took. Each
        # round is bounded by the prediction timeout instead.
        while self._tracker.waiting() and loop.time() < deadline:
            try:
                await self.drain_once()
            except Exception:
                log.exception("shadow predictions failed during shutdown")
                break
        return self._tracker.abandon(c.SKIP_SHUTDOWN)

    async def drain_once(self) -> int:
        """Predict what is queued now (within the rate limit); returns how many requests got a prediction."""
        batch = self._tracker.take(self._settings.batch_size * max(len(self._clients), 1))
        if not batch:
            return 0
        allowed = self._bucket.take(len(batch))
        for pending in batch[allowed:]:
            self._tracker.unpredicted(pending, c.SKIP_RATE_LIMITED)
        by_pool: dict[str, list[tuple[Pending, Features]]] = defaultdict(list)
        for pending in batch[:allowed]:
            features = self._features(pending)
            if features is not None:
                by_pool[pending.pool].append((pending, features))
        results = await asyncio.gather(*(self._predict(pool, items) for pool, items in by_pool.items()))
        return sum(results)

    def _features(self, pending: Pending) -> Features | None:
        request = pending.request
        if request.prompt_tokens is None or pending.arrival <= 0:
            self._tracker.unpredicted(pending, c.SKIP_NO_FEATURES)
            return None
        sample = self._history.as_of(pending.key, pending.arrival) if pending.key is not None else None
        features = (
            features_of(sample.state, request.prompt_tokens, self._settings, request.prefix_cache_score)
            if sample is not None
            else None
        )
        if features is None:
            self._tracker.unpredicted(pending, c.SKIP_NO_POD_STATE)
        return features

    async def _predict(self, pool: str, items: list[tuple[Pending, Features]]) -> int:
        predictions = await self._clients[pool].predict([f for _, f in items], c.PURPOSE_SHADOW)
        done = 0
        for (pending, _), prediction in zip(items, predictions, strict=True):
            if prediction is None:
                self._tracker.unpredicted(pending, c.SKIP_FAILED)
                continue
            self._tracker.record(
                pending,
                source=c.SOURCE_SHADOW,
                predicted_ttft=prediction.ttft_ms / 1000.0,
                predicted_tpot=prediction.tpot_ms / 1000.0,
                quantile=prediction.quantile,
                objective=prediction.objective,
            )
            done += 1
        return done
