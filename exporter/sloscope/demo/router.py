"""An EPP-like router: it scrapes the pods, asks the latency predictor about every candidate and routes by headroom.

It follows the endpoint picker's prediction-based profile (the predicted-latency scorer, late 2025):

1. Pod state comes from the router's own frequent scrape of each pod's /metrics (``refresh_seconds``),
   read with vLLM's names, as the EPP reads them: the state it routes on is a little old, like the EPP's.
2. For each request it sends one ``/predict/bulk/strict`` call with a row per candidate pod, the row its EPP
   generation sends (:mod:`sloscope.predictor.generation`): the pod's KV-cache utilization and queue,
   ``num_tokens_generated`` 1 and a prefix-cache score of 0 (the demo has no prefix cache); for ``gie-2025``
   the prompt's word count (tokens x 0.75: that EPP counts whitespace words) and the pod's scraped batch
   size; for ``llm-d`` the prompt's tokens and, as ``num_request_running`` and ``prefill_tokens_in_flight``,
   the requests and prompt tokens the router itself has in flight on the pod (its in-flight load producer's
   counts, ``predictedlatency/plugin.go`` ``readInFlightLoad`` at llm-d-router ebab6879), ``pod_type`` "".
3. Headroom per pod, as the EPP computes it: TTFT SLO - predicted TTFT; min(TPOT SLO, tightest TPOT SLO of
   the requests it has running on the pod) x buffer - predicted TPOT. Pods with both headrooms positive form
   the positive tier; among them the ``least`` strategy picks the pod with the least headroom (packing
   requests tightly, keeping roomy pods for later), scoring 0.8 x TTFT + 0.2 x TPOT headroom normalized over
   the tier. With no positive pod it picks, from the negative tier, the pod closest to meeting the SLOs.
   Requests without SLOs go to the pod with the lowest predicted TTFT, as the EPP does (it treats them as
   SLO 0).
4. When the predictor cannot answer (not trained yet, down), it falls back to the default profile.

A share of requests (``default_share``) carries ``x-prediction-based-scheduling: false`` and takes the
default profile: the least loaded pod (queue, then batch, then KV), so attainment under both profiles can be
compared (the ``routing`` label).

For a P/D request (the llm-d demo), the decode pod is picked as above and the prefill pod is the least
loaded of the others (:meth:`Router.pick_prefill`).

The router keeps the EPP's own counts (:class:`~sloscope.demo.epp_metrics.EppMetrics`: scheduling attempts,
in-flight load, prediction durations, the plugin's latencies and violations), which the demo serves as the
EPP's /metrics page.

After each request, the router sends the EPP's training samples to the training server
(``/add_training_data_bulk``, batched every ``train_flush_seconds``): a TTFT sample with
``num_tokens_generated`` 0 and a TPOT sample with 1, both with the features it routed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import httpx

from sloscope.demo.epp_metrics import EppMetrics
from sloscope.demo.records import Completion, PodSnapshot, SimRequest
from sloscope.predictor.features import Features
from sloscope.receivers.exposition import ExpositionError, ExpositionParser
from sloscope.receivers.protocols import VLLM
from sloscope.slo.headroom import tpot_headroom, ttft_headroom

__all__ = ["Decision", "Router", "RouterPod"]

log = logging.getLogger(__name__)

WORDS_PER_TOKEN = 0.75
REFRESH_SECONDS = 0.1  # how often the router scrapes each pod (and the demo's sloscope scrapes them too)
TTFT_WEIGHT, TPOT_WEIGHT = 0.8, 0.2


@dataclass(frozen=True)
class RouterPod:
    name: str
    address: str  # host:port of its /metrics (and of its API, in a real pool)


@dataclass(frozen=True)
class Decision:
    pod: str
    routing: str  # "predicted" or "default"
    features: Features  # what the router knew of the chosen pod, as sent to the predictor
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    candidates: tuple[tuple[str, PodSnapshot], ...] = ()  # every pod considered, with the state routed on
    latency_scores: tuple[float, ...] = ()  # prediction-based: each candidate's score (0..1, higher is better)
    ttft_by_pod: tuple[tuple[str, float], ...] = ()  # prediction-based: every candidate's predicted TTFT (ms)

    def with_prefill(self, prefill: Decision) -> Decision:
        """A P/D call's predictions as the llm-d EPP keeps them: the TTFT predicted, at routing, for the prefill pod
        (``predictionsForScheduling[prefill target]``), the TPOT for the decode pod (llm-d-router ebab6879
        ``predictedlatency/requestcontrol_hooks.go:228-241``)."""
        ttft = dict(self.ttft_by_pod).get(prefill.pod)
        return self if ttft is None else replace(self, predicted_ttft_ms=ttft)


class Router:
    def __init__(
        self,
        pods: Sequence[RouterPod],
        prediction_urls: Sequence[str],
        training_url: str,
        http: httpx.AsyncClient,
        rng: random.Random,
        *,
        default_share: float = 0.2,
        slo_buffer: float = 1.0,
        refresh_seconds: float = REFRESH_SECONDS,
        train_flush_seconds: float = 1.0,
        epp: EppMetrics | None = None,
    ) -> None:
        """``epp``: the EPP counts to keep, of its generation (a late-2025 EPP's for an unnamed pool if None)."""
        self._pods = list(pods)
        self._prediction_urls = list(prediction_urls)
        self._training_url = training_url
        self._http = http
        self._rng = rng
        self._default_share = default_share
        self._buffer = slo_buffer
        self._refresh = refresh_seconds
        self._flush = train_flush_seconds
        self._parser = ExpositionParser(VLLM.families)
        self._state: dict[str, PodSnapshot] = {p.name: PodSnapshot(0, 0, 0.0) for p in pods}
        self._running_tpot_slos: dict[str, dict[str, float]] = {p.name: {} for p in pods}
        self._training: list[dict[str, Any]] = []
        self._turn = 0
        self.epp = epp or EppMetrics("gie-2025", "pool", "", [(p.name, p.address) for p in pods])

    async def run(self) -> None:
        """Refresh pod state and flush training samples until cancelled."""
        tasks = [asyncio.create_task(self._refresh_loop()), asyncio.create_task(self._train_loop())]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def route(self, request: SimRequest) -> Decision:
        use_default = self._rng.random() < self._default_share
        if not use_default:
            decision = await self._predicted(request)
            if decision is not None:
                self._started(request, decision.pod)
                return decision
        decision = self._least_loaded(request, "default" if use_default else "predicted")
        self._started(request, decision.pod)
        return decision

    def finished(self, request: SimRequest, decision: Decision, completion: Completion) -> None:
        """The request ended: forget its TPOT SLO on the pod and queue the EPP's training samples."""
        self._running_tpot_slos[decision.pod].pop(request.request_id, None)
        tokens = completion.completion_tokens
        self.epp.ended(
            request.request_id,
            ttft=completion.ttft,
            tpot=(completion.e2e - completion.ttft) / (tokens - 1) if tokens >= 2 else None,
            predicted_ttft=_seconds(decision.predicted_ttft_ms),
            predicted_tpot=_seconds(decision.predicted_tpot_ms),
            slo_ttft=_seconds(request.slo_ttft_ms),
            slo_tpot=_seconds(request.slo_tpot_ms),
        )
        stamp = datetime.fromtimestamp(completion.finished, UTC).isoformat().replace("+00:00", "Z")
        base = decision.features.to_json()
        self._training.append(
            {
                **base,
                "num_tokens_generated": 0,
                "actual_ttft_ms": completion.ttft * 1000,
                "actual_tpot_ms": 0,
                "timestamp": stamp,
            }
        )
        if tokens >= 2:
            tpot_ms = (completion.e2e - completion.ttft) / (tokens - 1) * 1000
            self._training.append(
                {**base, "num_tokens_generated": 1, "actual_ttft_ms": 0, "actual_tpot_ms": tpot_ms, "timestamp": stamp}
            )

    def _started(self, request: SimRequest, pod: str) -> None:
        self.epp.scheduled(request.request_id, pod, request.prompt_tokens)
        if request.slo_tpot_ms is not None:
            self._running_tpot_slos[pod][request.request_id] = request.slo_tpot_ms

    def _features(self, pod: str, request: SimRequest) -> Features:
        state = self._state[pod]
        if self.epp.generation == "llm-d":
            requests, tokens = self.epp.inflight(pod)
            return Features(
                kv_cache_percentage=min(max(state.kv_cache_utilization, 0.0), 1.0),
                input_token_length=request.prompt_tokens,
                num_request_waiting=state.waiting,
                num_request_running=requests,
                num_tokens_generated=1,
                prefix_cache_score=0.0,
                prefill_tokens_in_flight=tokens,
            )
        return Features(
            kv_cache_percentage=min(max(state.kv_cache_utilization, 0.0), 1.0),
            input_token_length=round(request.prompt_tokens * WORDS_PER_TOKEN),
            num_request_waiting=state.waiting,
            num_request_running=state.running,
            num_tokens_generated=1,
            prefix_cache_score=0.0,
        )

    async def _predicted(self, request: SimRequest) -> Decision | None:
        rows = [self._features(p.name, request) for p in self._pods]
        started = time.perf_counter()
        predictions = await self._predict(rows)
        if predictions is None:
            return None
        self.epp.predicted(time.perf_counter() - started)
        scored = []
        for pod, row, (ttft, tpot) in zip(self._pods, rows, predictions, strict=True):
            running = [slo for slo in self._running_tpot_slos[pod.name].values() if slo > 0]
            ttft_room = ttft_headroom(request.slo_ttft_ms or 0.0, ttft)  # no SLO counts as 0, as in the EPP
            tpot_room = tpot_headroom(request.slo_tpot_ms or 0.0, tpot, self._buffer, min(running, default=None))
            scored.append((pod, row, ttft, tpot, ttft_room, tpot_room))
        candidates = self._candidates(self._pods)
        ttft_by_pod = tuple((s[0].name, s[2]) for s in scored)
        if request.slo_ttft_ms is None and request.slo_tpot_ms is None:
            pod, row, ttft, tpot, _, _ = min(scored, key=lambda s: s[2])
            scores = tuple(1.0 - v for v in _normalized([s[2] for s in scored]))
            return Decision(pod.name, "predicted", row, ttft, tpot, candidates, scores, ttft_by_pod)
        positive = [s for s in scored if s[4] > 0 and s[5] > 0]
        tier, pick_least = (positive, True) if positive else (scored, False)
        ttft_n, tpot_n = _normalized([s[4] for s in tier]), _normalized([s[5] for s in tier])
        combined = [TTFT_WEIGHT * a + TPOT_WEIGHT * b for a, b in zip(ttft_n, tpot_n, strict=True)]
        index = combined.index(min(combined) if pick_least else max(combined))
        pod, row, ttft, tpot, _, _ = tier[index]
        in_tier = {s[0].name: 1.0 - v if pick_least else v for s, v in zip(tier, combined, strict=True)}
        scores = tuple(in_tier.get(s[0].name, 0.0) for s in scored)
        return Decision(pod.name, "predicted", row, ttft, tpot, candidates, scores, ttft_by_pod)

    async def _predict(self, rows: list[Features]) -> list[tuple[float, float]] | None:
        url = self._prediction_urls[self._turn % len(self._prediction_urls)]
        self._turn += 1
        try:
            response = await self._http.post(
                f"{url}/predict/bulk/strict", json={"requests": [r.to_json() for r in rows]}, timeout=1.0
            )
            if response.status_code != 200:
                return None
            return [(float(p["ttft_ms"]), float(p["tpot_ms"])) for p in response.json()["predictions"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None  # not ready or failing: route by load, as the EPP falls back

    def pick_prefill(self, request: SimRequest, decode: Decision) -> Decision:
        """P/D: the prefill stage's pod, the least loaded of the others (the demo's prefill profile)."""
        others = [p for p in self._pods if p.name != decode.pod]
        prefill = self._least_loaded(request, decode.routing, others or self._pods)
        self.epp.scheduled(request.request_id, prefill.pod, request.prompt_tokens, primary=False)
        return prefill

    def released(self, request: SimRequest, decision: Decision) -> None:
        """The request left its pod without completing (failed, aborted): forget it there, learn nothing."""
        self._running_tpot_slos[decision.pod].pop(request.request_id, None)
        self.epp.ended(request.request_id)

    def _candidates(self, pods: Sequence[RouterPod]) -> tuple[tuple[str, PodSnapshot], ...]:
        return tuple((p.name, self._state[p.name]) for p in pods)

    def _least_loaded(self, request: SimRequest, routing: str, pods: Sequence[RouterPod] | None = None) -> Decision:
        pods = self._pods if pods is None else pods
        pod = min(
            pods,
            key=lambda p: (
                self._state[p.name].waiting,
                self._state[p.name].running,
                self._state[p.name].kv_cache_utilization,
                self._rng.random(),
            ),
        )
        return Decision(pod.name, routing, self._features(pod.name, request), candidates=self._candidates(pods))

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.gather(*(self._refresh_pod(pod) for pod in self._pods))
            await asyncio.sleep(self._refresh)

    async def _refresh_pod(self, pod: RouterPod) -> None:
        try:
            response = await self._http.get(f"http://{pod.address}/metrics", timeout=1.0)
            state = VLLM.pod_state(self._parser.parse(response.text))
        except (httpx.HTTPError, ExpositionError) as exc:
            log.debug("router: scrape of %s failed: %s", pod.name, exc)
            return
        self._state[pod.name] = PodSnapshot(
            waiting=round(state.waiting or 0),
            running=round(state.running or 0),
            kv_cache_utilization=state.kv_cache_utilization or 0.0,
        )

    async def _train_loop(self) -> None:
        while True:
            await asyncio.sleep(self._flush)
            await self.flush_training()

    async def flush_training(self) -> None:
        entries, self._training = self._training, []
        if not entries:
            return
        try:
            await self._http.post(
                f"{self._training_url}/add_training_data_bulk", json={"entries": entries}, timeout=2.0
            )
        except httpx.HTTPError as exc:
            log.debug("router: training samples lost: %s", exc)


def _seconds(milliseconds: float | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1000.0


def _normalized(values: list[float]) -> list[float]:
    """Min-max scaled to 0..1 (all 0 when the values are equal)."""
    low, high = min(values), max(values)
    return [0.0 if high == low else (v - low) / (high - low) for v in values]
