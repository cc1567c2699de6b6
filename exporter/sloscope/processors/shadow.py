"""Shadow predictions: ask the prediction server what the EPP would have predicted for a completed request.

No released EPP puts its predictions on spans, so sloscope rebuilds the EPP's routing-time call:
the features of the pod the request went to **as of the request's arrival** (the newest scraped
sample at or before it, from :class:`PodHistory`; for the llm-d EPP also its in-flight counts of
that moment, from :class:`InflightHistory`), and the request's own features, sent to the pool's
prediction server's ``/predict/bulk/strict`` in batches of at most 100, as the EPP's client does.
What each EPP generation sends is in :mod:`sloscope.predictor.generation`; :class:`RoutingFeatures`
picks the pool's generation and builds its request objects, for shadow and live headroom alike.

Differences from the EPP's own prediction, which docs/predictions.md spells out: the pod state and
in-flight counts are scrapes at most one interval older than what the EPP saw; for the late-2025
EPP ``input_token_length`` is the prompt's token count times ``words_per_token`` (it counted
whitespace words, spans carry tokens); the prefix-cache score is the span's when present, else a
configured default; and the model may have been retrained between routing and the shadow call.

Bounded and polite: a token bucket caps calls per second, each call has a total deadline, each server a
circuit breaker (in the client), and every request that gets no prediction is counted by reason and
recorded. Each pool has its own queue and its own loop, so a slow, trickling or dead predictor of one
pool never delays another pool's predictions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sloscope import conventions as c
from sloscope.config import Predictions
from sloscope.predictor.client import PredictionClient, Result
from sloscope.predictor.features import Features
from sloscope.predictor.generation import GIE_2025, GIE_V15, LLM_D, Generation, resolve
from sloscope.processors.inflight_history import InflightHistory
from sloscope.processors.pod_history import PodHistory, PodKey
from sloscope.processors.predictions import Pending, PredictionTracker
from sloscope.receivers.epp_inflight import EndpointLoad
from sloscope.receivers.protocols import PodState

__all__ = ["RoutingFeatures", "ShadowPredictor", "TokenBucket", "features_of"]

log = logging.getLogger(__name__)


def _as_the_epp_reads(state: PodState) -> PodState:
    """The series of a pod the EPP's features come from.

    A data-parallel pod's gauges are summed over its engines, but the EPP routes on the first series
    that matches (:attr:`PodState.routing`): the prediction must be asked with what the EPP saw.
    """
    return state.routing or state


def features_of(
    state: PodState,
    prompt_tokens: float,
    settings: Predictions,
    prefix_cache_score: float | None = None,
    *,
    generation: Generation = GIE_2025,
    load: EndpointLoad | None = None,
    pod_type: str = "",
) -> Features | None:
    """The features ``generation``'s EPP would send for a request of ``prompt_tokens`` tokens to a pod in ``state``.

    ``load`` is the EPP's in-flight count for the pod's endpoint (llm-d only): None when there is no
    EPP page to read it from, in which case the llm-d EPP's own fallback applies (the pod's running
    count, 0 tokens in flight). None when the pod's queue or batch size is unknown (the page lacked
    the series). A missing KV-cache utilization (TGI publishes none) is sent as 0, as the EPP does for
    a metric it lacks.
    """
    engine = _as_the_epp_reads(state)
    if engine.waiting is None or engine.running is None or prompt_tokens < 0:
        return None
    score = prefix_cache_score if prefix_cache_score is not None else settings.prefix_cache_score
    kv = min(max(engine.kv_cache_utilization or 0.0, 0.0), 1.0)
    score = min(max(score, 0.0), 1.0)
    if generation != LLM_D:  # words and the pod's counts; GIE v1.5.0 adds the pod's role and in-flight tokens
        v15 = generation == GIE_V15
        return Features(
            kv_cache_percentage=kv,
            input_token_length=round(prompt_tokens * settings.words_per_token),
            num_request_waiting=round(engine.waiting),
            num_request_running=round(engine.running),
            num_tokens_generated=settings.tokens_generated,
            prefix_cache_score=score,
            pod_type=pod_type if v15 else "",
            prefill_tokens_in_flight=0 if v15 else None,  # GIE v1.5.0: the plugin's own counter, on no page
            encoder=not v15,  # (late 2025: no in-flight counts, so no encoder sizes either)
        )
    return Features(
        kv_cache_percentage=kv,
        input_token_length=round(prompt_tokens),
        num_request_waiting=round(engine.waiting),
        num_request_running=load.requests if load is not None else round(engine.running),
        num_tokens_generated=settings.tokens_generated,
        prefix_cache_score=score,
        pod_type=pod_type,
        prefill_tokens_in_flight=load.tokens if load is not None else 0,
    )


class RoutingFeatures:
    """The request objects a pool's EPP would send: its generation, its in-flight counts, the pod's role.

    Reads the pod's labels from :class:`PodHistory` (discovery's targets), the in-flight counts from
    ``inflight`` (None: no EPP page is read) and the prediction servers' answers from ``clients``.
    """

    def __init__(
        self,
        settings: Predictions,
        history: PodHistory,
        inflight: InflightHistory | None = None,
        clients: Mapping[str, PredictionClient] | None = None,
        status_speaks_objective: Callable[[str], bool | None] | None = None,
    ) -> None:
        """``status_speaks_objective(pool)``: whether the pool's prediction servers' ``/status`` (the health poll's)
        states ``objective_type``, so the first calls after start-up already ask as the right generation; the
        prediction answers, once there are any, say it too."""
        self._settings = settings
        self._history = history
        self._inflight = inflight
        self._clients = clients or {}
        self._status_speaks = status_speaks_objective or (lambda pool: None)
        self._told: dict[str, Generation] = {}

    def generation(self, pool: str) -> Generation:
        """The pool's EPP generation now (the setting, or what ``auto`` sees); logged when it changes."""
        client = self._clients.get(pool)
        answered = client.speaks_objective if client is not None else None
        generation = resolve(
            self._settings.epp_generation,
            self._inflight.generation(pool) if self._inflight is not None else None,
            answered if answered is not None else self._status_speaks(pool),
        )
        if self._told.get(pool) != generation:
            self._told[pool] = generation
            log.info("pool %s: shadow predictions ask as the %s EPP does", pool, generation)
        return generation

    def __call__(
        self,
        key: PodKey,
        state: PodState,
        at: float,
        prompt_tokens: float,
        prefix_cache_score: float | None,
        *,
        rank: int | None = None,
    ) -> Features | None:
        """The features for a request of ``prompt_tokens`` routed to pod ``key`` (in ``state``) at ``at``: to the
        endpoint of data-parallel ``rank`` of a multi-port pod (None: its first), whose own page and in-flight
        counts the EPP read."""
        pool, pod = key
        state = state.rank(rank)
        generation = self.generation(pool)
        if generation == GIE_2025:
            return features_of(state, prompt_tokens, self._settings, prefix_cache_score)
        if generation == GIE_V15:
            return features_of(
                state,
                prompt_tokens,
                self._settings,
                prefix_cache_score,
                generation=GIE_V15,
                pod_type=self._pod_type(key),
            )
        page = self._inflight.as_of(pool, at) if self._inflight is not None else None
        return features_of(
            state,
            prompt_tokens,
            self._settings,
            prefix_cache_score,
            generation=LLM_D,
            load=page.load(pod, rank) if page is not None and page.llm_d else None,
            pod_type=self._pod_type(key),
        )

    def is_prefill(self, key: PodKey) -> bool:
        """A P/D prefill pod, as the EPP's ``hasPrefillRole`` tells one: its role label value is ``prefill``."""
        return self._pod_type(key) == "prefill"

    def _pod_type(self, key: PodKey) -> str:
        """The pod's value of the EPP's role label, "" without one (as the EPP's ``buildPredictionRequest``)."""
        label = self._settings.endpoint_role_label
        target = self._history.target(key) if label else None
        return (target.label(label) or "") if target is not None else ""


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
        *,
        features: RoutingFeatures | None = None,
    ) -> None:
        self._tracker = tracker
        self._history = history
        self._clients = clients
        self._settings = settings
        self._routing = features or RoutingFeatures(settings, history, clients=clients)
        self._bucket = bucket or TokenBucket(settings.max_per_second, max(settings.max_per_second, 1.0))
        self._given_up = 0  # requests whose call was cancelled by shutdown (recorded skipped "shutdown")

    async def run(self) -> None:
        """One loop per pool, until cancelled: a slow or trickling predictor holds up its own pool's rounds only."""
        async with asyncio.TaskGroup() as loops:
            for pool in self._clients:
                loops.create_task(self._run_pool(pool), name=f"sloscope-shadow-{pool}")

    async def _run_pool(self, pool: str) -> None:
        """Drain ``pool``'s queue every ``batch_wait_seconds`` (sooner when a full batch waits)."""
        settings = self._settings
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.drain_once(pool)
            except Exception:  # keep shadowing alive; this round's requests are lost and logged
                log.exception("shadow predictions of pool %s failed", pool)
            if self._tracker.waiting(pool) < settings.batch_size:
                await asyncio.sleep(max(settings.batch_wait_seconds - (loop.time() - started), 0.0))

    async def finish(self, timeout: float) -> int:
        """At shutdown: predict what is still queued within ``timeout``, record the rest without.

        Every pool drains at once; at the deadline the calls still unanswered are cancelled and their
        requests, like those still queued, are recorded skipped ``shutdown`` (never dropped). Returns how
        many requests were given up.
        """
        given_up = self._given_up
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(self._finish_pool(pool) for pool in self._clients))
        return self._tracker.abandon(c.SKIP_SHUTDOWN) + self._given_up - given_up

    async def _finish_pool(self, pool: str) -> None:
        while self._tracker.waiting(pool):
            try:
                await self.drain_once(pool)
            except Exception:
                log.exception("shadow predictions of pool %s failed during shutdown", pool)
                return

    async def drain_once(self, pool: str) -> int:
        """Predict what ``pool`` has queued now (within the rate limit); returns how many requests got a prediction."""
        client = self._clients[pool]
        batch = self._tracker.take(self._settings.batch_size * client.server_count, pool)
        if not batch:
            return 0
        allowed = self._bucket.take(len(batch))
        with self._tracker.settling():  # the records of those skipped here, as one table
            for pending in batch[allowed:]:
                self._tracker.unpredicted(pending, c.SKIP_RATE_LIMITED)
            items = [(p, asked) for p in batch[:allowed] if (asked := self._features(p)) is not None]
        return await self._predict(pool, items) if items else 0

    def _features(self, pending: Pending) -> _Asked | None:
        """What the EPP asked for the request: its pod's features, and for a P/D request its prefill pod's too (the
        EPP predicts, and trains, the TTFT on the prefill endpoint with that pod's state and ``pod_type``, and the
        TPOT on the decode endpoint: llm-d-router ebab6879 ``predictedlatency/requestcontrol_hooks.go:83-97,
        228-241,261-281``)."""
        request = pending.request
        if request.prompt_tokens is None or pending.arrival <= 0:
            self._tracker.unpredicted(pending, c.SKIP_NO_FEATURES)
            return None
        features = self._features_on(pending, pending.key, request.endpoint)
        prefill: Features | None = None
        if features is not None and request.prefill_pod is not None and pending.key is not None:
            prefill_key = self._history.resolve(pending.key[0], request.prefill_pod)
            prefill = self._features_on(pending, prefill_key, None)
            if prefill is None:
                features = None
        if features is None:
            self._tracker.unpredicted(pending, c.SKIP_NO_POD_STATE)
            return None
        return _Asked(features, prefill)

    def _features_on(self, pending: Pending, key: PodKey | None, endpoint: str | None) -> Features | None:
        """The features on pod ``key`` at the request's arrival; ``endpoint`` (host:port) names its rank, if any."""
        sample = self._history.as_of(key, pending.arrival) if key is not None else None
        if sample is None or key is None:
            return None
        request = pending.request
        assert request.prompt_tokens is not None
        target = self._history.target(key)
        rank = target.rank_of(endpoint) if target is not None else None
        return self._routing(
            key, sample.state, pending.arrival, request.prompt_tokens, request.prefix_cache_score, rank=rank
        )

    async def _predict(self, pool: str, items: list[tuple[Pending, _Asked]]) -> int:
        asked = [features for _, a in items for features in a.all()]
        try:
            answers = await self._clients[pool].predict(asked, c.PURPOSE_SHADOW)
        except asyncio.CancelledError:  # shutdown: the requests taken are recorded, never lost with the call
            with self._tracker.settling():
                for pending, _ in items:
                    self._tracker.unpredicted(pending, c.SKIP_SHUTDOWN)
            self._given_up += len(items)
            raise
        with self._tracker.settling():  # the call's records, as one table
            return self._settle(items, answers)

    def _settle(self, items: list[tuple[Pending, _Asked]], answers: Result) -> int:
        """Each request of a call compared with its answer, or skipped ``failed``; returns how many were compared."""
        done, at = 0, 0
        for pending, a in items:
            decode = answers[at]
            prefill = answers[at + 1] if a.prefill is not None else decode
            at += len(a.all())
            if decode is None or prefill is None:
                self._tracker.unpredicted(pending, c.SKIP_FAILED)
                continue
            self._tracker.record(
                pending,
                source=c.SOURCE_SHADOW,
                predicted_ttft=prefill.ttft_ms / 1000.0,
                predicted_tpot=decode.tpot_ms / 1000.0,
                quantile=decode.quantile,
                objective=decode.objective,
            )
            done += 1
        return done


@dataclass(frozen=True, slots=True)
class _Asked:
    """The features sent for one request: its (decode) pod's, and its prefill pod's for a P/D request."""

    features: Features
    prefill: Features | None = None

    def all(self) -> tuple[Features, ...]:
        return (self.features,) if self.prefill is None else (self.features, self.prefill)
