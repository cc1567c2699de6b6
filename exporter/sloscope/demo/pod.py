"""A simulated model-server pod: vLLM-style continuous batching, in real time or in a test's virtual time.

The demo needs pods whose latencies react to load the way a real pool's do, so that what sloscope
joins and what the latency predictor learns have a cause: TTFT grows with the queue and with the
prompts prefilled alongside, inter-token latency with the batch and the KV cache in use, and a full
KV cache preempts. The model is vLLM's scheduler reduced to token counts.

State: a FIFO waiting queue and a running list in admission order. A running request holds
``prompt + generated`` tokens of KV cache; ``used`` is their sum over the running requests,
``C = kv_capacity_tokens`` and the KV-cache utilization is ``used / C`` (vLLM counts 16-token blocks,
which this model leaves out).

One engine step, starting at time ``t0``:

0. Drop abandoned requests: one whose future was cancelled (its client gave up) leaves the queue or
   the batch and frees its KV, as vLLM aborts a request whose client disconnected.
1. Reserve decode space. Every running request decodes this step and needs one more token of KV.
   While ``used + n_decode > C``, the most recently admitted running request is preempted (recompute,
   as vLLM does): its KV is freed, it goes back to the head of the waiting queue, keeping its
   generated-token count and its first-token time, and the pod's preemption count grows by one.
2. Admit, only in a step without preemption (vLLM's scheduler does the same, so that a request just
   preempted is not readmitted into the space it was evicted for). In FIFO order, while
   ``running < max_running`` and the head's ``prompt + generated + 1`` tokens (its prefill, recomputed
   tokens included, and the token the prefill yields) fit in ``C - used - n_decode``; the first
   request that does not fit stops admission (head-of-line blocking, like vLLM's FCFS policy). A
   request's ``scheduled`` time is ``t0`` of the step that first admits it. There is no chunked
   prefill: a prompt is prefilled in one step.
3. The step's duration, with ``u = used / C`` after admission (the KV resident during the step)::

       decode  = decode_base_s + decode_per_running_s * n_decode + decode_per_kv_s * u   if n_decode > 0, else 0
       prefill = prefill_base_s + prefill_per_token_s * P                                 if any admitted, else 0
       step    = (decode + prefill) * exp(N(0, noise_sigma))

   where ``n_decode`` counts the running requests that were already running before the step and
   ``P`` the tokens prefilled this step (each admitted request's ``prompt + generated``).
4. At the step's end ``t1``, every request in the step gains one token: an admitted request its first
   (``first_token = t1``) or, after a preemption, its next one; a decoding request its next one. A
   request that has generated its ``output_tokens`` finishes at ``t1`` and its future gets the
   :class:`~sloscope.demo.records.Completion`.

So on an idle pod a request of ``p`` prompt tokens and ``n`` output tokens has, without noise,
``TTFT = prefill_base_s + prefill_per_token_s * p`` and ``e2e = TTFT + sum_{k=1}^{n-1} (decode_base_s +
decode_per_running_s + decode_per_kv_s * (p + k) / C)``. Step 1 never preempts a request running alone,
because :meth:`SimPod.submit` refuses requests whose ``prompt + output`` tokens exceed ``C``; so the
oldest running request always progresses, and every request finishes.

Time comes from ``clock`` (unix seconds) and passes in ``sleep``; ``t1`` is read from the clock after
the sleep, so in real time a step lasts as long as it really took. The pod never lets its time go
back (it keeps the latest clock reading), so a completion's times satisfy ``arrived <= scheduled <=
first_token <= finished`` even if the wall clock is stepped back.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sloscope.demo.pod_metrics import PodMetrics
from sloscope.demo.records import Completion, PodSnapshot, SimRequest

__all__ = ["PodParams", "SimPod"]


@dataclass(frozen=True)
class PodParams:
    """A pod's capacity and step costs; the defaults are plausible for an 8B model on one data-centre GPU.

    With the defaults, on an idle pod a 1000-token prompt has a TTFT of 132 ms and then one token about
    every 13 ms; 48 running requests with a full KV cache decode one token every 56 ms.
    """

    kv_capacity_tokens: int = 40_000
    """KV-cache size in tokens. An 8B Llama needs 128 KiB per token (32 layers x 8 KV heads x 128 x K and V
    x 2 bytes), so this is about 5 GB: what a 24 GB card keeps beside 16 GB of weights, and small on
    purpose for a larger one, so that a demo's load reaches KV pressure and preemption."""
    max_running: int = 48
    """Batch limit (vLLM's ``--max-num-seqs``); the KV cache binds first once contexts average over 830 tokens."""
    prefill_base_s: float = 0.012
    """Fixed cost of a step that prefills: one pass over the weights and the kernel launches."""
    prefill_per_token_s: float = 0.00012
    """Prefill cost per token, about 8,000 tokens/s: compute-bound, 16 GFLOP per token for 8B parameters."""
    decode_base_s: float = 0.012
    """Fixed cost of a decode pass: reading 16 GB of weights once (memory-bound)."""
    decode_per_running_s: float = 0.0005
    """Extra decode cost per request decoding in the step (per-sequence attention, sampling)."""
    decode_per_kv_s: float = 0.02
    """Extra decode cost at a full KV cache, scaled by its utilization: attention reads every resident token."""
    noise_sigma: float = 0.05
    """Sigma of the lognormal jitter on each step's duration (5 % by default); 0 makes step durations exact."""

    def __post_init__(self) -> None:
        if self.kv_capacity_tokens < 2:
            raise ValueError("kv_capacity_tokens must be at least 2 (one prompt token and one output token)")
        if self.max_running < 1:
            raise ValueError("max_running must be at least 1")
        costs = (
            self.prefill_base_s,
            self.prefill_per_token_s,
            self.decode_base_s,
            self.decode_per_running_s,
            self.decode_per_kv_s,
            self.noise_sigma,
        )
        if not all(math.isfinite(c) and c >= 0 for c in costs):
            raise ValueError("step costs and noise_sigma must be finite and not negative")


class _Running:
    """A request's progress on the pod."""

    __slots__ = ("arrived", "first_token", "future", "generated", "last_token", "preemptions", "request", "scheduled")

    def __init__(self, request: SimRequest, arrived: float, future: asyncio.Future[Completion]) -> None:
        self.request = request
        self.arrived = arrived
        self.future = future
        self.scheduled: float | None = None
        self.first_token: float | None = None
        self.last_token = 0.0
        self.generated = 0
        self.preemptions = 0

    @property
    def kv_tokens(self) -> int:
        return self.request.prompt_tokens + self.generated


class SimPod:
    """One model-server pod: :meth:`submit` requests, :meth:`run` the engine, read :meth:`metrics_text`.

    Everything runs in one event loop; ``submit`` must be called from a coroutine of that loop.
    """

    def __init__(
        self,
        name: str,
        model: str,
        params: PodParams,
        rng: random.Random,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.name = name
        self.model = model
        self.params = params
        self._rng = rng
        self._clock = clock
        self._sleep = sleep
        self._waiting: deque[_Running] = deque()
        self._running: list[_Running] = []
        self._kv_used = 0
        self._preemptions = 0
        self._latest = -math.inf  # the latest time read from the clock: the pod's time never goes back
        self._work = asyncio.Event()
        self._started = False
        self._metrics = PodMetrics(model, self.snapshot)

    @property
    def preemptions(self) -> int:
        """How many times a running request was preempted since the pod was made."""
        return self._preemptions

    def submit(self, request: SimRequest) -> asyncio.Future[Completion]:
        """Queues ``request``, arriving now; the future resolves when it has generated all its tokens.

        Raises ``ValueError`` for a request that could never run: fewer than one prompt or output
        token, or more tokens than the KV cache holds (vLLM refuses prompts beyond its model length).
        """
        if request.prompt_tokens < 1 or request.output_tokens < 1:
            raise ValueError(f"request {request.request_id}: prompt_tokens and output_tokens must be at least 1")
        if request.prompt_tokens + request.output_tokens > self.params.kv_capacity_tokens:
            raise ValueError(
                f"request {request.request_id}: {request.prompt_tokens} + {request.output_tokens} tokens exceed "
                f"the KV cache of {self.params.kv_capacity_tokens}"
            )
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Running(request, self._now(), future))
        self._work.set()
        return future

    def snapshot(self) -> PodSnapshot:
        return PodSnapshot(
            waiting=len(self._waiting),
            running=len(self._running),
            kv_cache_utilization=self._kv_used / self.params.kv_capacity_tokens,
        )

    def metrics_text(self) -> str:
        """The pod's /metrics page now, in the Prometheus text format 0.0.4 (as vLLM serves it)."""
        return self._metrics.text()

    async def run(self) -> None:
        """Runs engine steps until cancelled, waiting on an event while there is nothing to do.

        Cancelling ends the pod's work: requests still queued or running are dropped and their futures
        cancelled, so that no client waits forever on a stopped pod. One ``run`` per pod.
        """
        if self._started:
            raise RuntimeError(f"pod {self.name} is already running")
        self._started = True
        try:
            while True:
                if not self._waiting and not self._running:
                    self._work.clear()
                    await self._work.wait()
                    continue
                await self._step()
        finally:
            for entry in (*self._running, *self._waiting):
                entry.future.cancel()
            self._running.clear()
            self._waiting.clear()
            self._kv_used = 0

    async def _step(self) -> None:
        """One engine step; the module docstring gives the rules and the formulas."""
        params = self.params
        start = self._now()
        self._drop_abandoned()
        preempted = self._reserve_decode()
        decoding = list(self._running)
        admitted = [] if preempted else self._admit(start, len(decoding))
        prefill_tokens = sum(entry.kv_tokens for entry in admitted)
        self._kv_used += prefill_tokens
        duration = 0.0
        if decoding:
            utilization = self._kv_used / params.kv_capacity_tokens
            duration += (
                params.decode_base_s
                + params.decode_per_running_s * len(decoding)
                + params.decode_per_kv_s * utilization
            )
        if admitted:
            duration += params.prefill_base_s + params.prefill_per_token_s * prefill_tokens
        elif not decoding:
            return  # every request was abandoned
        duration *= math.exp(self._rng.gauss(0.0, params.noise_sigma))
        await self._sleep(duration)
        self._finish_step(self._now(), admitted, decoding)

    def _now(self) -> float:
        self._latest = max(self._latest, self._clock())
        return self._latest

    def _drop_abandoned(self) -> None:
        """Drops requests whose future was cancelled (the client gave up), as vLLM aborts them.

        Only ``request_success_total{finished_reason="abort"}`` counts them; vLLM's request histograms
        describe completed requests.
        """
        if any(entry.future.done() for entry in self._waiting):
            kept = [entry for entry in self._waiting if not entry.future.done()]
            for _ in range(len(self._waiting) - len(kept)):
                self._metrics.record_aborted()
            self._waiting = deque(kept)
        if any(entry.future.done() for entry in self._running):
            kept = []
            for entry in self._running:
                if entry.future.done():
                    self._kv_used -= entry.kv_tokens
                    self._metrics.record_aborted()
                else:
                    kept.append(entry)
            self._running = kept

    def _reserve_decode(self) -> bool:
        """Preempts the newest running requests until every running one has room for its next token."""
        preempted = False
        capacity = self.params.kv_capacity_tokens
        while self._running and self._kv_used + len(self._running) > capacity:
            victim = self._running.pop()
            self._kv_used -= victim.kv_tokens
            victim.preemptions += 1
            self._waiting.appendleft(victim)  # earlier victims were admitted later: they stay behind it
            self._preemptions += 1
            self._metrics.record_preemption()
            preempted = True
        return preempted

    def _admit(self, now: float, decoding: int) -> list[_Running]:
        """Moves waiting requests to running, in order, while the batch and the KV cache have room."""
        admitted: list[_Running] = []
        free = self.params.kv_capacity_tokens - self._kv_used - decoding
        while self._waiting and len(self._running) < self.params.max_running:
            head = self._waiting[0]
            need = head.kv_tokens + 1
            if need > free:
                break
            self._waiting.popleft()
            free -= need
            if head.scheduled is None:
                head.scheduled = max(now, head.arrived)
            self._running.append(head)
            admitted.append(head)
        return admitted

    def _finish_step(self, end: float, admitted: list[_Running], decoding: list[_Running]) -> None:
        """Gives every request in the step its token at ``end`` and hands out the finished ones."""
        for entry in admitted:
            if entry.first_token is None:
                entry.first_token = end
                self._metrics.record_first_token(end - entry.arrived, entry.request.prompt_tokens)
            else:  # recomputed after a preemption: the prefill yields its next token
                self._metrics.record_next_token(end - entry.last_token)
        for entry in decoding:
            self._metrics.record_next_token(end - entry.last_token)
        for entry in (*admitted, *decoding):
            entry.generated += 1
            entry.last_token = end
        self._kv_used += len(admitted) + len(decoding)
        still_running: list[_Running] = []
        for entry in self._running:
            if entry.generated < entry.request.output_tokens:
                still_running.append(entry)
                continue
            self._kv_used -= entry.kv_tokens
            completion = self._completion(entry, end)
            self._metrics.record_finished(completion, entry.preemptions)
            if not entry.future.done():  # cancelled during this step: it finished anyway
                entry.future.set_result(completion)
        self._running = still_running

    def _completion(self, entry: _Running, end: float) -> Completion:
        assert entry.scheduled is not None and entry.first_token is not None  # set on admission and first token
        return Completion(
            pod=self.name,
            arrived=entry.arrived,
            scheduled=entry.scheduled,
            first_token=entry.first_token,
            finished=end,
            prompt_tokens=entry.request.prompt_tokens,
            completion_tokens=entry.generated,
        )
