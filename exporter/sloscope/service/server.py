"""Runs sloscope: the pipeline, the OTLP/gRPC and OTLP/HTTP receivers and the metrics app.

The metrics app, and the Python receivers when chosen (grpcio, uvicorn), share one event loop; the native
receivers (the default with the native engine) serve on threads of their own and call into the intake.

The service is a graph of components declared as data (:class:`~sloscope.service.graph.Graph`, in
``Service.__init__``: the receivers feed the pipeline, the pipeline the pool monitor and the record sinks, all of
them /metrics). It starts downstream first (self-tracing, metrics, record sinks, pool monitor, pipeline, then the
receivers) and stops upstream first (receivers, then the pipeline drains and flushes, the pool monitor's loops
stop, the record sinks write, then metrics), so every stage can hand what it holds to the next before it goes.
One process: the join state lives in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import uvicorn
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from sloscope._native import GrpcFront, HttpFront
from sloscope.config import Settings
from sloscope.listeners.http_metrics import HttpMetrics
from sloscope.listeners.tracing import ServerSpans, tracer_provider
from sloscope.pipeline import Pipeline
from sloscope.publishers.sinks import RecordSink, RecordSinks, SinkMetrics
from sloscope.receivers import otlp_grpc_native, otlp_http_native
from sloscope.receivers.otlp_http_native import NativeHttpReceiver
from sloscope.service import descriptors
from sloscope.service.app import create_metrics_app, create_otlp_app
from sloscope.service.deadlines import within
from sloscope.service.graph import Component, Graph
from sloscope.service.listeners import ListenerSetup
from sloscope.service.pools import PoolMonitor, pod_history, pool_of_pod
from sloscope.slo.spec import SLOSpec

if TYPE_CHECKING:  # grpcio: imported only when listeners.grpc.server is grpcio
    import grpc

log = logging.getLogger(__name__)

_FLUSH_RESERVE_SECONDS = 2.0  # of shutdown_grace_seconds, kept for writing the records (a fifth at most)
_HTTP_STOP_SECONDS = 3.0  # uvicorn's graceful wait (timeout_graceful_shutdown=2) and a second to close
_STEP_SECONDS = 1.0
_DATE_HEADER_SECONDS = 1.0  # the Date header's resolution
_LISTENING = re.compile(r"sloscope listening: otlp_grpc=\S+:(\d+) otlp_http=\S+:(\d+) metrics=\S+:(\d+)")


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to :class:`Service` (two servers share one loop), and that
    wakes once a second rather than ten times.

    uvicorn's main loop sleeps 100 ms at a time to see whether it should exit, renewing the Date header every
    tenth wake-up. With two servers that woke an idle process 20 times a second, about 5 ms of CPU a second on a
    virtual machine (docs/performance.md). Here the loop waits for the exit flag itself, so a stop is seen at
    once, and otherwise wakes when the Date header (whole seconds) is due. The flag is set on the loop's thread."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit = asyncio.Event()
        super().__init__(config)

    @property  # uvicorn's is a plain attribute; setting it must wake the loop
    def should_exit(self) -> bool:
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()
        else:
            self._exit.clear()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        while not await self.on_tick(0):  # tick 0: renews the Date header, then asks whether to exit
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), _DATE_HEADER_SECONDS)


@dataclass(frozen=True)
class BoundPorts:
    otlp_grpc: int
    otlp_http: int
    metrics: int

    @classmethod
    def from_log(cls, line: str) -> BoundPorts | None:
        """The ports of a ``sloscope listening:`` start-up line, else None: how a parent that started ``serve``
        with port 0 (the kernel's choice, so no other process can take it first) learns them."""
        match = _LISTENING.search(line)
        return cls(*(int(g) for g in match.groups())) if match else None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


class Service:
    def __init__(self, settings: Settings, spec: SLOSpec, registry: CollectorRegistry | None = None) -> None:
        soft, _ = descriptors.raise_soft_limit()
        budget = descriptors.Budget(soft, descriptors.reserve(settings))
        settings = settings.model_copy(update={"listeners": descriptors.fitted(settings.listeners, budget)})
        self.settings = settings
        self.registry = registry if registry is not None else CollectorRegistry()
        if registry is None:  # the usual process_*, python_* series, as every Prometheus exporter has them
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        history = pod_history(settings)
        self.sinks = record_sinks(settings, self.registry)
        self.pipeline = Pipeline(
            settings, spec, self.registry, pool_of_pod=pool_of_pod(history) if settings.pools else None
        )
        self.pools = PoolMonitor(
            settings,
            spec,
            registry=self.registry,
            telemetry=self.pipeline.telemetry,
            history=history,
            labels=self.pipeline.evaluator.admission.guard,
            sink=self.sinks.emit if self.sinks else None,
            on_routing=self.pipeline.placement.set,
        )
        self.pipeline.evaluator.add(self.pools.contract_tap)
        self.pipeline.evaluator.add(self.pools.tracker)
        self._tracer = tracer_provider(settings.self_tracing)
        self._http_metrics = HttpMetrics(self.registry)
        self._listeners = ListenerSetup(settings.listeners, self.registry)
        self._grpc: grpc.aio.Server | None = None
        self._fronts: dict[str, GrpcFront | HttpFront] = {}  # the native fronts serving, by listener
        self._servers: dict[str, tuple[_Server, asyncio.Task[None]]] = {}
        self._bound: dict[str, int] = {}  # listener -> port
        self._ready = False
        self._drained = False
        self._skip_final_scrape = False
        self._final_scrape: asyncio.Event | None = None
        self.ports: BoundPorts | None = None
        self.unwritten_records = 0  # accepted by the record sinks and not written when stop() ended
        # The pipeline of the README, as data: each component with those it hands data to.
        self.graph = Graph(
            [
                Component("otlp_grpc", self._serve_grpc, self._stop_grpc, feeds=("pipeline", "self-tracing")),
                Component("otlp_http", self._serve_otlp_http, self._stop_otlp_http, feeds=("pipeline", "self-tracing")),
                Component(
                    "pipeline", self._start_pipeline, self._stop_pipeline, feeds=("pool monitor", "record sinks")
                ),
                Component("pool monitor", self.pools.start, self._stop_pools, feeds=("record sinks", "metrics")),
                Component("record sinks", self._start_sinks, self._stop_sinks, feeds=("metrics",)),
                Component("metrics", self._serve_metrics, self._stop_metrics, feeds=("self-tracing",)),
                Component("self-tracing", _nothing, self._stop_tracing),
            ],
            grace_seconds=settings.shutdown_grace_seconds,
        )

    @property
    def _flush_reserve(self) -> float:
        """Of shutdown_grace_seconds, what the steps before the record sinks leave them for writing."""
        return min(self.settings.shutdown_grace_seconds / 5, _FLUSH_RESERVE_SECONDS)

    async def start(self) -> BoundPorts:
        """Every component, downstream first (a failed start stops what started, and raises)."""
        await self.graph.start()
        listeners = self.settings.listeners
        bound = self._bound
        self.ports = BoundPorts(bound["otlp_grpc"], bound["otlp_http"], bound["metrics"])
        self._ready = True
        log.info(
            "sloscope listening: otlp_grpc=%s:%d otlp_http=%s:%d metrics=%s:%d",
            listeners.host,
            self.ports.otlp_grpc,
            listeners.host,
            self.ports.otlp_http,
            listeners.host,
            self.ports.metrics,
        )
        tls, auth = listeners.tls, listeners.auth
        log.info(
            "listener security: tls on %s, credentials required on %s (/healthz and /readyz stay open)",
            ", ".join(tls.listeners) if tls.enabled else "none",
            ", ".join(auth.listeners) if auth.enabled else "none",
        )
        return self.ports

    async def _start_pipeline(self) -> None:
        self.pipeline.start()
        self.pipeline.intake.in_flight.quiet.start(lambda: self.pipeline.pending)  # a trim after each burst

    async def _start_sinks(self) -> None:
        self.sinks.start()

    async def _serve_metrics(self) -> None:
        self._final_scrape = asyncio.Event()
        metrics_app = create_metrics_app(
            self.pipeline,
            self._http_metrics,
            self._tracer,
            is_ready=lambda: self._ready,
            is_drained=lambda: self._drained,
            on_final_scrape=self._final_scrape.set,
            sinks=tuple(sink.name for sink in self.sinks.sinks),
            sink_problems=self.sinks.problems,
            protect=self._listeners.protect("metrics"),
        )
        listeners = self.settings.listeners
        self._bound["metrics"] = await self._serve_http("metrics", metrics_app, listeners.host, listeners.metrics_port)

    async def _serve_grpc(self) -> None:
        self._bound["otlp_grpc"] = await self._grpc_listener()

    async def _grpc_listener(self) -> int:
        listeners = self.settings.listeners
        if listeners.grpc.server == "native":
            sock = _bind(listeners.host, listeners.otlp_grpc_port)
            port: int = sock.getsockname()[1]
            check, tls = self._listeners.grpc_check(), self._listeners.tls_files("otlp_grpc")
            self._fronts["otlp_grpc"] = otlp_grpc_native.start(sock, self.pipeline.intake, self.settings, check, tls)
            return port
        from sloscope.receivers.otlp_grpc import create_server as create_grpc_server

        self._grpc = create_grpc_server(
            self.pipeline.intake,
            self.settings.limits.max_request_bytes,
            options=self._listeners.grpc_options(),
            interceptors=self._listeners.grpc_interceptors(),
        )
        address = f"{_grpc_host(listeners.host)}:{listeners.otlp_grpc_port}"
        port = self._listeners.add_grpc_port(self._grpc, address)
        await self._grpc.start()
        return port

    async def _serve_otlp_http(self) -> None:
        self._bound["otlp_http"] = await self._otlp_http_listener()

    async def _otlp_http_listener(self) -> int:
        listeners, setup = self.settings.listeners, self._listeners
        if listeners.otlp_http_server == "native":
            sock = _bind(listeners.host, listeners.otlp_http_port)
            bound: int = sock.getsockname()[1]
            credentials = setup.credentials_of("otlp_http")
            intake = self.pipeline.intake
            refused = setup.connection_refused("otlp_http")
            freed = intake.in_flight.freed_from_threads()
            tls, authorize = setup.tls_files("otlp_http"), credentials is not None
            spans = None
            if self._tracer is not None:
                spans = ServerSpans(self._tracer, scheme="http" if tls is None else "https", port=bound)
            receiver = NativeHttpReceiver(
                intake, self.settings, self._http_metrics, refused, credentials=credentials, freed=freed, spans=spans
            )
            self._fronts["otlp_http"] = otlp_http_native.start(
                sock, intake, self.settings, receiver, tls, authorize=authorize
            )
            return bound
        otlp_app = create_otlp_app(self.pipeline, self._http_metrics, self._tracer, protect=setup.protect("otlp_http"))
        return await self._serve_http("otlp_http", otlp_app, listeners.host, listeners.otlp_http_port)

    async def _serve_http(self, name: str, app: Any, host: str, port: int) -> int:
        sock = _bind(host, port)
        config = uvicorn.Config(
            app,
            http=self._listeners.http_protocol(name),  # connection cap, header and idle timeouts, TLS
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            backlog=self.settings.listeners.backlog,  # asyncio accepts up to this many per wake-up
        )
        server = _Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name=f"sloscope-{name}")
        while not server.started:
            if task.done():
                task.result()  # re-raise why it could not start
                raise RuntimeError(f"{name} server stopped during start")
            await asyncio.sleep(0.01)
        self._servers[name] = (server, task)  # only a started server is stopped by stop()
        bound: int = sock.getsockname()[1]
        return bound

    async def stop(self) -> bool:
        """Every component, upstream first: the receivers, then the pipeline drains and flushes, the pool
        monitor's loops stop, the record sinks write, and /metrics waits for a final scrape. Safe twice.

        Returns False when the pipeline or the record sinks could not finish within ``shutdown_grace_seconds``.
        """
        self._ready = False  # /readyz turns 503 at once, so load balancers stop sending
        loop = asyncio.get_running_loop()
        return await self.graph.stop(loop.time() + self.settings.shutdown_grace_seconds)

    @property
    def _receiver_grace(self) -> float:
        return min(2.0, self.settings.shutdown_grace_seconds / 4)

    async def _stop_grpc(self, deadline: float) -> bool:
        del deadline  # a receiver's open calls get a fixed share of the grace
        stop_grpc = self._receiver_grace
        if self._grpc is not None:
            await within(stop_grpc + 1.0, "the OTLP/gRPC receiver", self._grpc.stop(stop_grpc))
            self._grpc = None
        await self._stop_front("otlp_grpc", stop_grpc)
        return True

    async def _stop_otlp_http(self, deadline: float) -> bool:
        del deadline
        await self._stop_front("otlp_http", _HTTP_STOP_SECONDS - 1.0)
        await self._stop_http("otlp_http")
        return True

    async def _stop_pipeline(self, deadline: float) -> bool:
        self.pipeline.intake.in_flight.quiet.stop()
        remaining = max(deadline - self._flush_reserve - asyncio.get_running_loop().time(), 0.1)
        drained = await asyncio.to_thread(self.pipeline.shutdown, remaining)
        if not drained:
            log.error("shutdown: the pipeline did not drain within shutdown_grace_seconds")
        return drained

    async def _stop_pools(self, deadline: float) -> bool:
        await self.pools.stop(timeout=max(deadline - self._flush_reserve - asyncio.get_running_loop().time(), 0.1))
        return True

    async def _stop_sinks(self, deadline: float) -> bool:
        reserve = self._flush_reserve
        timeout = max(deadline - asyncio.get_running_loop().time(), reserve, 1.0)
        flushed = await asyncio.to_thread(self.sinks.shutdown, timeout)
        unwritten = self.sinks.unwritten()
        self.unwritten_records = sum(unwritten.values())
        if unwritten:
            by_sink = ", ".join(f"{sink}: {n}" for sink, n in sorted(unwritten.items()))
            log.error("shutdown: %d acknowledged record(s) were not written (%s)", self.unwritten_records, by_sink)
        elif not flushed:
            log.error("shutdown: the record sinks did not flush within shutdown_grace_seconds")
        return flushed

    async def _stop_metrics(self, deadline: float) -> bool:
        del deadline  # the final scrape has a wait of its own (final_scrape_wait_seconds)
        await self._await_final_scrape()
        await self._stop_http("metrics")
        return True

    async def _stop_tracing(self, deadline: float) -> bool:
        del deadline
        if self._tracer is not None:
            self._tracer.shutdown()
            self._tracer = None
        return True

    async def _stop_front(self, name: str, grace: float) -> None:
        """Stop a native front: its open requests get ``grace`` seconds, and a second more to close."""
        front = self._fronts.pop(name, None)
        if front is not None:
            await within(grace + 1.0, f"the {name} listener", asyncio.to_thread(front.stop, grace))

    async def _await_final_scrape(self) -> None:
        """Keep /metrics up until one scrape has read what the drain flushed, or the wait runs out."""
        wait = self.settings.final_scrape_wait_seconds
        if "metrics" not in self._servers or self._final_scrape is None or wait <= 0 or self._skip_final_scrape:
            return
        self._drained = True
        log.info("waiting up to %.0fs for a final scrape of /metrics", wait)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._final_scrape.wait(), wait)

    async def _stop_http(self, name: str) -> None:
        """Stop one listener: uvicorn's graceful wait (2 s), then its task is cancelled if it lingers."""
        entry = self._servers.pop(name, None)
        if entry is not None:
            server, task = entry
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await within(_HTTP_STOP_SECONDS, f"the {name} listener", asyncio.shield(task))
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await within(_STEP_SECONDS, f"cancelling the {name} listener", task)

    async def run_until_signal(self) -> int:
        """Serve until SIGTERM or SIGINT, then stop; returns the exit status (:func:`exit_status`)."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            if sig == signal.SIGINT:  # Ctrl-C at a terminal: nobody scrapes a final time
                self._skip_final_scrape = True
                if self._final_scrape is not None and stop.is_set():
                    self._final_scrape.set()  # a second Ctrl-C ends the wait
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        await self.start()
        await stop.wait()
        log.info("sloscope shutting down: draining receivers and the pipeline")
        drained = await self.stop()
        log.info("sloscope stopped")
        return exit_status(drained, self.unwritten_records)


EXIT_OK = 0
EXIT_NOT_DRAINED = 1  # the pipeline or a sink did not finish within shutdown_grace_seconds
EXIT_UNWRITTEN = 3  # accepted records were not written by a record sink (store full or read-only, export down)


async def _nothing() -> None:
    """The start of a component made whole at construction."""


def exit_status(drained: bool, unwritten_records: int) -> int:
    """``serve``'s exit status after a stop; docs/operations.md lists them (2 is a configuration error)."""
    if unwritten_records:
        return EXIT_UNWRITTEN
    return EXIT_OK if drained else EXIT_NOT_DRAINED


def record_sinks(settings: Settings, registry: CollectorRegistry) -> RecordSinks:
    """The record store and the OTLP export, as the settings enable them."""
    metrics = SinkMetrics(registry)
    sinks: list[RecordSink] = []
    if settings.store.enabled:  # each sink imported only when on: with pyarrow and its Parquet writer, the store's
        from sloscope.publishers.record_store import RecordStore

        sinks.append(RecordStore(settings.store, metrics, registry))
    if settings.export.enabled:
        from sloscope.publishers.otlp_export import OTLPExport

        sinks.append(OTLPExport(settings.export, metrics))
    return RecordSinks(sinks)


def _grpc_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
