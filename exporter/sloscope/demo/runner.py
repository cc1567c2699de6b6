"""Runs the demo: starts the simulated fleet and a real ``sloscope serve``, drives traffic, shows, checks, stops.

Start order: the latency predictor (training and prediction servers), the pods and their /metrics
servers, sloscope (configured with the pods' addresses and the predictor's URLs), the span exporters, the
router. Then the clients send requests for ``duration`` seconds; each request is routed, served by its pod,
counted in the ground truth and exported as spans. At the end the demo drains: it waits for the requests
in flight, flushes the span exporters, and waits until sloscope has counted every request; then it stops
everything in reverse order (sloscope with SIGTERM, so it drains and flushes as in production).

The ``upstream`` option chooses what the clients, the gateway and the pods are:

* ``llm-d`` (the default): today's llm-d-router and vLLM 0.33. The clients are agents whose sessions hold a
  few sequential calls in one trace (:mod:`sloscope.demo.agents`); the calls run through
  :class:`~sloscope.demo.calls.CallRunner` (P/D, n > 1, failures) and are exported by
  :mod:`sloscope.demo.llmd_spans`. When the traffic ends, a session makes no further call.
* ``gie-2025``: the late-2025 gateway: independent requests and the spans of :mod:`sloscope.demo.spans`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from sloscope import conventions as c
from sloscope.demo import readout as readouts
from sloscope.demo.agents import AgentWorkload, Session
from sloscope.demo.calls import CallRunner, outcome
from sloscope.demo.compare import differences
from sloscope.demo.epp_metrics import EppMetrics
from sloscope.demo.llmd_spans import LlmdSpanEmitter
from sloscope.demo.pod import PodParams, SimPod
from sloscope.demo.pod_server import PageServer, PodServers, serve_page, serve_pods
from sloscope.demo.predictor_servers import PredictorFleet
from sloscope.demo.records import SimRequest, ns
from sloscope.demo.router import Router, RouterPod
from sloscope.demo.sloscope_process import SloscopeProcess, demo_settings
from sloscope.demo.spans import SpanEmitter
from sloscope.demo.truth import GroundTruth, Outcome
from sloscope.demo.view import Status
from sloscope.demo.workload import Load, Workload, demo_spec

__all__ = ["POD", "UPSTREAMS", "Demo", "DemoOptions"]

UPSTREAMS = ("llm-d", "gie-2025")

# An 8B model on one H100-class GPU: about 17k prefill tokens/s, an 8 ms decode pass at batch 1, 160k tokens
# of KV cache. At the default load the fleet runs at about half its capacity between bursts and past it during
# them (measured in virtual time with the least-loaded router: 99% of interactive TTFT and 75% of its TPOT met at
# 8 req/s base, nearly all at 6).
POD = PodParams(
    kv_capacity_tokens=160_000,
    max_running=64,
    prefill_base_s=0.010,
    prefill_per_token_s=0.00006,
    decode_base_s=0.008,
    decode_per_running_s=0.00025,
    decode_per_kv_s=0.010,
)
PREDICTOR_OBJECTIVE = {"llm-d": c.OBJECTIVE_MEAN}
"""The predictor's LATENCY_OBJECTIVE_TYPE per upstream: llm-d-router's chart runs it in mean mode; the late-2025
predictor is quantile-only and does not say so (no entry)."""
RETRAIN_SECONDS = 15.0  # the real training server retrains every 30 minutes; 15 s lets a 2-minute demo learn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoOptions:
    duration: float = 120.0
    pods: int = 4
    prediction_servers: int = 2
    seed: int = 1
    rate: float = 6.5
    burst_factor: float = 2.0
    default_share: float = 0.2
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    pool: str = "demo-pool"
    workdir: Path | None = None
    store: Path | None = None  # sloscope writes its record store here when set
    retrain_seconds: float = RETRAIN_SECONDS
    upstream: str = "llm-d"  # one of UPSTREAMS: what the gateway and the pods are (see the module docstring)

    def __post_init__(self) -> None:
        if self.upstream not in UPSTREAMS:
            raise ValueError(f"upstream must be one of {', '.join(UPSTREAMS)}, not {self.upstream!r}")


class Demo:
    def __init__(self, options: DemoOptions) -> None:
        self.options = options
        rng = random.Random(options.seed)
        self._seeds = [rng.randrange(2**32) for _ in range(options.pods + 3)]
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="sloscope-demo-"))
        self.truth = GroundTruth(default_class="batch")
        self.sloscope = SloscopeProcess(self.workdir)
        self.load = Load(rate=options.rate, burst_factor=options.burst_factor)
        self.pods = [
            SimPod(f"vllm-{i}", options.model, POD, random.Random(self._seeds[i])) for i in range(options.pods)
        ]
        self._pods_by_name = {pod.name: pod for pod in self.pods}
        self._workload = Workload(self.load, options.model, random.Random(self._seeds[-3]))
        self._agents = AgentWorkload(self.load, options.model, random.Random(self._seeds[-3]))
        self.sent = 0
        self.done = 0
        self.shapes: Counter[str] = Counter()  # llm-d: calls served, by CallRecord.shape
        self._http = httpx.AsyncClient(trust_env=False)
        self._predictor: PredictorFleet | None = None
        self._servers: PodServers | None = None
        self._epp_server: PageServer | None = None
        self.epp: EppMetrics | None = None  # the EPP's counts, served as its /metrics page (after start())
        self._spans: SpanEmitter | LlmdSpanEmitter | None = None
        self._calls: CallRunner | None = None
        self._closing = False  # the traffic ended: sessions make no further call
        self._router: Router | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight: set[asyncio.Task[None]] = set()
        self._started_at = 0.0

    @property
    def predictor(self) -> PredictorFleet:
        """The latency predictor's servers (after :meth:`start`)."""
        assert self._predictor is not None, "start() first"
        return self._predictor

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started_at if self._started_at else 0.0

    async def start(self) -> None:
        options = self.options
        self._predictor = PredictorFleet(
            seed=self._seeds[-1],
            retrain_seconds=options.retrain_seconds,
            objective=PREDICTOR_OBJECTIVE.get(options.upstream),
        )
        await self._predictor.start(options.prediction_servers)
        self._tasks += [asyncio.create_task(pod.run(), name=f"demo-{pod.name}") for pod in self.pods]
        self._servers = await serve_pods(self.pods)
        addresses = [(pod.name, self._servers.address_of(pod.name)) for pod in self.pods]
        self.epp = EppMetrics(options.upstream, options.pool, options.model, addresses)
        self._epp_server, epp_address = await serve_page(self.epp.page)
        settings = demo_settings(
            options.pool,
            addresses,
            self._predictor.training_url,
            self._predictor.prediction_urls,
            store=options.store,
            upstream=options.upstream,
            epp_metrics_url=f"http://{epp_address}/metrics",
        )
        await self.sloscope.start(settings, demo_spec(options.model))
        self._router = Router(
            [RouterPod(name, address) for name, address in addresses],
            self._predictor.prediction_urls,
            self._predictor.training_url,
            self._http,
            random.Random(self._seeds[-2]),
            default_share=options.default_share,
            epp=self.epp,
        )
        if options.upstream == "llm-d":
            endpoint = self.sloscope.otlp_grpc
            self._spans = LlmdSpanEmitter(
                [pod.name for pod in self.pods],
                lambda: BatchSpanProcessor(
                    OTLPSpanExporter(endpoint=endpoint, insecure=True),
                    schedule_delay_millis=500,
                    max_export_batch_size=512,
                ),
            )
            self._calls = CallRunner(self._router, lambda pod, request: self._pods_by_name[pod].submit(request))
        else:
            self._spans = SpanEmitter(self.sloscope.otlp_grpc, [pod.name for pod in self.pods])
        self._tasks.append(asyncio.create_task(self._router.run(), name="demo-router"))

    async def run_traffic(self, stop: asyncio.Event, duration: float | None = None) -> None:
        """Send the workload's requests at their times, until ``duration`` (the options') ends or ``stop`` is set.

        A second call goes on with the same seeded stream (new request ids) and a new load curve.
        """
        self._closing = False
        try:
            await self._arrive(stop, self.options.duration if duration is None else duration)
        finally:
            self._closing = True

    async def _arrive(self, stop: asyncio.Event, duration: float) -> None:
        loop = asyncio.get_running_loop()
        self._started_at = time.monotonic()
        start = loop.time()
        arrivals = (
            self._agents.arrivals(duration) if self.options.upstream == "llm-d" else self._workload.arrivals(duration)
        )
        for offset, item in arrivals:
            delay = start + offset - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                return
            if isinstance(item, Session):
                task = asyncio.create_task(self._session(item))
            else:
                item.arrival = time.time()
                self.sent += 1
                task = asyncio.create_task(self._serve(item))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        remaining = start + duration - loop.time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), remaining)

    async def _session(self, session: Session) -> None:
        """An agent's calls, one after the other, until the session or the traffic ends."""
        assert self._calls is not None and isinstance(self._spans, LlmdSpanEmitter)
        for call in session.calls:
            if call.think_seconds > 0:
                await asyncio.sleep(call.think_seconds)
            if self._closing:
                return
            call.request.arrival = time.time()
            self.sent += 1
            record = await self._calls.run(session, call)
            self.truth.add(outcome(record))
            self._spans.emit(record)
            self.shapes[record.shape] += 1
            self.done += 1

    async def _serve(self, request: SimRequest) -> None:
        assert self._router is not None and isinstance(self._spans, SpanEmitter) and self._servers is not None
        decision = await self._router.route(request)
        routed_at = time.time()
        completion = await self._pods_by_name[decision.pod].submit(request)
        self._router.finished(request, decision, completion)
        self.truth.add(
            Outcome(
                request,
                completion,
                decision.routing,
                decision.predicted_ttft_ms,
                decision.predicted_tpot_ms,
                routed_on=decision.features,
                arrival_ns=ns(request.arrival),  # gateway.request's start
                served_ns=ns(completion.arrived),
            )
        )
        self._spans.emit(
            request,
            completion,
            routing=decision.routing,
            endpoint=self._servers.address_of(decision.pod),
            routed_at=routed_at,
        )
        self.done += 1

    async def drain(self, timeout: float = 60.0) -> bool:
        """Wait for requests in flight, flush spans, and for sloscope to count every request; True if it did."""
        deadline = time.monotonic() + timeout
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=max(deadline - time.monotonic(), 0.1))
        if self._spans is not None:
            await asyncio.to_thread(self._spans.flush)
        if self._router is not None:
            await self._router.flush_training()
        while time.monotonic() < deadline:
            figures = await self.read()
            if figures is not None and figures.total >= self.truth.total:
                return await self._settled_equal(deadline)
            await asyncio.sleep(0.5)
        return False

    async def _settled_equal(self, deadline: float) -> bool:
        """Every request counted: whether every compared count is equal (read again, a scrape can race a record)."""
        for attempt in range(3):
            figures = await self.read()
            if figures is not None and not differences(self.truth, figures):
                return True
            if attempt < 2 and time.monotonic() < deadline:
                await asyncio.sleep(1.0)
        return False

    async def read(self) -> readouts.Readout | None:
        return await readouts.read(self._http, self.sloscope.metrics_url)

    def status(self, figures: readouts.Readout | None, prometheus_url: str | None = None) -> Status:
        return Status(
            elapsed=self.elapsed,
            duration=self.options.duration,
            sent=self.sent,
            done=self.done,
            rate=self.load.at(self.elapsed),
            metrics_url=self.sloscope.metrics_url,
            prometheus_url=prometheus_url,
            truth=self.truth,
            readout=figures,
        )

    async def stop(self) -> None:
        for task in self._inflight:
            task.cancel()
        await self.sloscope.stop()
        if self._spans is not None:
            await asyncio.to_thread(self._spans.shutdown)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._servers is not None:
            await self._servers.stop()
        if self._epp_server is not None:
            await self._epp_server.stop()
        if self._predictor is not None:
            await self._predictor.stop()
        await self._http.aclose()
