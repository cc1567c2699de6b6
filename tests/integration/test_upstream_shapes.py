"""Today's upstream span shapes, end to end through a real ``sloscope serve``.

Every simulated process (the EPP of each pool, the P/D routing sidecar, each vLLM pod, SGLang's
tokenizer and scheduler processes, an agent or chat front end, an Envoy-like gateway) has its own
TracerProvider with the resource its upstream code builds, and a BatchSpanProcessor feeding the real
OTLP exporter (gRPC, or HTTP/protobuf for some pods and the agent) pointed at sloscope's listeners.
The batch delay is longer than any test, so spans leave a process only when the test flushes it:
each test chooses the order in which the processes' batches arrive, as their exporters' timers would.
Trace context crosses process boundaries through the W3C propagator (``traceparent``), as upstream.

Span names, kinds, instrumentation scopes, parents, attribute keys and types, statuses and
resources are those of:

- llm-d-router at commit ebab687927f5331c1b39defcb579a07951bce56c (EPP and P/D sidecar), as
  written up in /work/shared/fixtures/llm-d-router/spans.md (file:line below are that repository's);
- vLLM 0.33.0 (the manylinux wheel, sha256 4b6bdec4ab26...), /work/shared/fixtures/vllm/
  llm_request-span-0.33.0.md (paths under ``vllm/``);
- SGLang 0.5.23 (the cp311 wheel, sha256 00b3cd5b265a...), /work/notes/engines.md (paths under ``srt/``).

Values (ids, times, pods, addresses) are invented; start and end times are explicit, so every TTFT
and TPOT below is exact. Each test starts its own ``sloscope serve`` (the ``serve`` fixture), so the
series without a pool label (traces joined, spans dropped) are exact per scenario too; short join,
failure and trace-TTL windows keep the whole file well under a minute, and every wait polls /metrics
until the assembler holds no trace and no span is queued (then nothing more can be emitted).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sloscope import upstream
from sloscope.store.read import read_records
from sloscope.store.schema import SCHEMA
from sloscope.testing import gateway_attributes, vllm_033_attributes, vllm_attributes
from sloscope.upstream import envoy, gie_2025, llmd_router, pd_sidecar, sglang, vllm
from sloscope.upstream.llmd_router import BUILD_REF, DEFAULT_SCORERS, SEMCONV_1_37

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

MODEL = "Qwen/Qwen3-8B"
# Instrumentation scopes (spans.md §0); the EPP's are the catalogue's (sloscope.upstream.llmd_router).

# pkg/common/error/error.go:72-74 formats every EPP error as "inference error: <Code> - <Msg>".
ADMISSION_DENIED = (
    "inference error: Internal - request cannot be admitted: no valid endpoint available to serve the request"
)
QUEUE_FULL = "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
QUEUE_TIMEOUT = (
    "inference error: ResourceExhausted - request timed out in queue: request evicted from queue: request TTL expired"
)
NO_MODEL = "inference error: BadRequest - model not found in request body"
ERROR_TYPE = "github.com/llm-d/llm-d-router/pkg/common/error.Error"  # what Go's RecordError puts in exception.type

# Scheduling profiles of the chart (config/charts/routerlib/templates/_config.yaml): without the latency
# predictor the "default" profile scores with the catalogue's DEFAULT_SCORERS; with it, latency-scorer
# (scorer/latency/plugin.go:38) behind its filters, and a weighted-random picker.
PREDICTED_SCORERS = ("latency-scorer",)

_PROPAGATOR = TraceContextTextMapPropagator()
_IDS = RandomIdGenerator()

Parent = trace.Span | Context | None
Labels = frozenset[tuple[str, str]]


def labelset(**labels: str) -> Labels:
    return frozenset(labels.items())


# ---- simulated processes -----------------------------------------------------------------------


class Scope:
    """A tracer of one process (one instrumentation scope)."""

    def __init__(self, process: Process, tracer: trace.Tracer) -> None:
        self.process = process
        self.tracer = tracer


class Process:
    """One simulated process: its TracerProvider, resource and sampler, exporting over OTLP to sloscope."""

    def __init__(self, resource: Resource, exporter: SpanExporter, sampler: Sampler) -> None:
        self.provider = TracerProvider(resource=resource, sampler=sampler)
        # Nothing leaves before flush(): the test decides the order in which the processes' batches arrive.
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
        self.ended = 0  # spans ended since the last flush: what the next flush must deliver

    def scope(self, name: str, version: str | None = None, attributes: dict[str, str] | None = None) -> Scope:
        return Scope(self, self.provider.get_tracer(name, version, attributes=attributes))

    def flush(self) -> int:
        assert self.provider.force_flush(10_000)
        sent, self.ended = self.ended, 0
        return sent


@contextmanager
def _otel_environment(resource_attributes: str) -> Iterator[None]:
    """The process environment of a pod whose operator set OTEL_RESOURCE_ATTRIBUTES (and no other OTEL_*)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with mock.patch.dict(os.environ, {**kept, "OTEL_RESOURCE_ATTRIBUTES": resource_attributes}, clear=True):
        yield


def epp_resource(pool: str) -> Resource:
    """telemetry.go:109-117: service.name (runner.go:241), service.version, OTEL_RESOURCE_ATTRIBUTES (the
    operator names the pool), schema URL of semconv v1.37.0; resource.Default deliberately not merged."""
    return Resource(
        {"service.name": "llm-d-epp", "service.version": BUILD_REF, "k8s.inferencepool.name": pool}, SEMCONV_1_37
    )


def sidecar_resource() -> Resource:
    """cmd/pd-sidecar/main.go:58; Dockerfile.sidecar:40 stamps another package, so the version is empty."""
    return Resource({"service.name": "llm-d-disagg-sidecar", "service.version": ""}, SEMCONV_1_37)


def vllm_resource(pod: str) -> Resource:
    """vllm/tracing/otel.py:76-81: Resource.create of vLLM's two attributes (SDK defaults and
    OTEL_RESOURCE_ATTRIBUTES merged in), the pod named through OTEL_RESOURCE_ATTRIBUTES as
    docs/sending-traces.md tells operators to."""
    with _otel_environment(f"k8s.pod.name={pod}"):
        return Resource.create({"vllm.instrumenting_module_name": "vllm.llm_engine", "vllm.process_id": "1"})


def sglang_resource(pod: str) -> Resource:
    """srt/observability/trace.py L237-241: service.name only (--otlp-service-name default), plus Resource.create's."""
    with _otel_environment(f"k8s.pod.name={pod}"):
        return Resource.create({"service.name": "sglang"})


def plain_resource(service: str) -> Resource:
    return Resource.create({"service.name": service})


# telemetry.go:66-86: ParentBased(TraceIDRatio(OTEL_TRACES_SAMPLER_ARG)); the arg is 1.0 here, as
# docs/sending-traces.md recommends (the default 0.1 records a tenth of the root requests).
ROUTER_SAMPLER: Sampler = ParentBased(TraceIdRatioBased(1.0))
SDK_DEFAULT_SAMPLER: Sampler = ParentBased(ALWAYS_ON)  # vLLM, SGLang and the clients: parentbased_always_on


def remote(span: trace.Span) -> Context:
    """The context the next process extracts from the ``traceparent`` header ``span`` injected."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span, Context()))
    return _PROPAGATOR.extract(carrier, context=Context())


def foreign_parent() -> Context:
    """A caller whose own spans go to another backend: only its sampled ``traceparent`` reaches our processes."""
    context = trace.SpanContext(
        trace_id=_IDS.generate_trace_id(),
        span_id=_IDS.generate_span_id(),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(context), Context())


def started_ns(span: trace.Span) -> int:
    assert isinstance(span, ReadableSpan) and span.start_time is not None
    return span.start_time


def hex_ids(span: trace.Span) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


class Fleet:
    """The processes of one test, all exporting to one sloscope; times are ms after a base a minute ago."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.base_ns = time.time_ns() - 60 * 10**9
        self.sent = 0
        self._processes: list[Process] = []

    def ns(self, ms: float) -> int:
        return self.base_ns + round(ms * 1_000_000)

    def ms(self, ns: int) -> float:
        return (ns - self.base_ns) / 1_000_000

    def process(self, resource: Resource, *, sampler: Sampler = SDK_DEFAULT_SAMPLER, http: bool = False) -> Process:
        exporter: SpanExporter = (
            HttpExporter(endpoint=self.server.otlp_http)
            if http
            else GrpcExporter(endpoint=self.server.otlp_grpc, insecure=True)
        )
        process = Process(resource, exporter, sampler)
        self._processes.append(process)
        return process

    def span(
        self,
        scope: Scope,
        name: str,
        parent: Parent,
        start_ms: float,
        end_ms: float,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
        status: str | None = None,
        error: str | None = None,
        links: Sequence[Link] = (),
        events: Sequence[tuple[str, float, dict[str, Any]]] = (),
    ) -> trace.Span:
        """One finished span. ``status``: SetStatus(Error, status); ``error``: RecordError + SetStatus(Error, error)."""
        if parent is None:
            context = Context()
        elif isinstance(parent, Context):
            context = parent
        else:
            context = trace.set_span_in_context(parent, Context())
        span = scope.tracer.start_span(
            name, context=context, kind=kind, attributes=attributes, links=links, start_time=self.ns(start_ms)
        )
        for event, at_ms, event_attributes in events:
            span.add_event(event, event_attributes, timestamp=self.ns(at_ms))
        if error is not None:
            attrs = {"exception.type": ERROR_TYPE, "exception.message": error}
            span.add_event("exception", attrs, timestamp=self.ns(end_ms))
            span.set_status(Status(StatusCode.ERROR, error))
        elif status is not None:
            span.set_status(Status(StatusCode.ERROR, status))
        span.end(end_time=self.ns(end_ms))
        scope.process.ended += 1
        return span

    def flush(self, *processes: Process) -> None:
        """Each process exports its batch, in this order; each batch is accepted before the next leaves."""
        for process in processes:
            self.sent += process.flush()
            wait_until(
                lambda: self.server.total("sloscope_spans_received_total") == self.sent,
                10,
                f"{self.sent} spans received",
            )

    def close(self) -> None:
        for process in self._processes:
            process.provider.shutdown()


@pytest.fixture
def fleet_of(serve: Callable[..., Server]) -> Iterator[Callable[..., tuple[Server, Fleet]]]:
    """A ``sloscope serve`` with short windows (override with keyword settings) and the fleet feeding it."""
    fleets: list[Fleet] = []

    def start(**settings: Any) -> tuple[Server, Fleet]:
        join = {"window_seconds": 1.0, "failure_window_seconds": 1.5, "trace_ttl_seconds": 2.0}
        server = serve(**{**settings, "join": {**join, **settings.get("join", {})}})
        fleet = Fleet(server)
        fleets.append(fleet)
        return server, fleet

    yield start
    for fleet in fleets:  # before the servers stop: nothing is left to export by then
        fleet.close()


def store_settings(tmp_path: Path) -> dict[str, Any]:
    return {"store": {"enabled": True, "directory": str(tmp_path / "records"), "flush_interval_seconds": 0.2}}


# ---- the llm-d-router EPP ------------------------------------------------------------------------


class FleetWriter:
    """The catalogue's spans (sloscope.upstream) written by one process of the fleet, a tracer per scope."""

    def __init__(self, fleet: Fleet, process: Process) -> None:
        self.fleet, self.process = fleet, process
        self._scopes: dict[str, Scope] = {}

    def span(self, process: upstream.Process, scope: upstream.Scope, drawn: upstream.Drawn[Parent]) -> trace.Span:
        del process  # the fleet's process carries the resource, made by the SDK as the upstream makes it
        tracer = self._scopes.get(scope.name)
        if tracer is None:
            tracer = self._scopes[scope.name] = self.process.scope(scope.name, scope.version, dict(scope.attributes))
        ms = self.fleet.ms
        return self.fleet.span(
            tracer, drawn.name, drawn.parent, ms(drawn.start_ns), ms(drawn.end_ns),
            kind=_KINDS[drawn.kind], attributes=dict(drawn.attributes) or None, status=drawn.status, error=drawn.error,
            links=[Link(_span_of(link).get_span_context()) for link in drawn.links],
            events=[(event.name, ms(event.at_ns), dict(event.attributes)) for event in drawn.events],
        )  # fmt: skip


def _span_of(handle: Parent) -> trace.Span:
    return trace.get_current_span(handle) if isinstance(handle, Context) or handle is None else handle


_KINDS = {"server": SpanKind.SERVER, "internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}


class Epp:
    """One pool's EPP process (cmd/epp), drawing its spans from the catalogue (sloscope.upstream.llmd_router);
    times in the fleet's ms."""

    def __init__(self, fleet: Fleet, pool: str) -> None:
        self.fleet = fleet
        self.pool = pool
        self.process = fleet.process(epp_resource(pool), sampler=ROUTER_SAMPLER)
        self.drawn = llmd_router.Epp(FleetWriter(fleet, self.process), llmd_router.epp_process(pool))

    def gateway(
        self, parent: Parent, start_ms: float, end_ms: float, *, status: str | None = None, error: str | None = None
    ) -> trace.Span:
        ns = self.fleet.ns
        return self.drawn.gateway(parent, ns(start_ms), ns(end_ms), status=status, error=error)

    def orchestration(
        self,
        gateway: trace.Span,
        start_ms: float,
        end_ms: float,
        *,
        model: str | None = MODEL,
        priority: int = 0,
        error: str | None = None,
    ) -> trace.Span:
        ns = self.fleet.ns
        return self.drawn.orchestration(gateway, ns(start_ms), ns(end_ms), model=model, priority=priority, error=error)

    def schedule(
        self,
        orchestration: trace.Span,
        start_ms: float,
        *,
        request_id: str,
        scorers: Sequence[str] = DEFAULT_SCORERS,
        unscored: Sequence[str] = (),
        model: str = MODEL,
    ) -> float:
        end = self.drawn.schedule(
            orchestration, self.fleet.ns(start_ms), request_id=request_id, model=model, scorers=scorers,
            unscored=unscored,
        )  # fmt: skip
        return self.fleet.ms(end)

    def disaggregate(
        self, orchestration: trace.Span, start_ms: float, *, request_id: str, prefill_address: str
    ) -> None:
        self.drawn.disaggregate(
            orchestration, self.fleet.ns(start_ms), request_id=request_id, model=MODEL, prefill_address=prefill_address
        )

    def call(
        self,
        parent: Parent,
        start_ms: float,
        end_ms: float,
        *,
        request_id: str,
        profile: str = "default",
        scorers: Sequence[str] = DEFAULT_SCORERS,
        status: str | None = None,
    ) -> trace.Span:
        """A request the EPP scheduled and forwarded: gateway.request, its orchestration, one profile run."""
        ns = self.fleet.ns
        return self.drawn.call(
            parent, ns(start_ms), ns(end_ms), request_id=request_id, model=MODEL, profile=profile, scorers=scorers,
            status=status,
        )  # fmt: skip


# ---- model servers, clients, gateways ---------------------------------------------------------------


class VllmPod:
    """One vLLM 0.33.0 API-server process (init_tracer("vllm.llm_engine", ...), async_llm.py:149-151)."""

    def __init__(self, fleet: Fleet, pod: str, *, http: bool = False) -> None:
        self.fleet = fleet
        self.pod = pod
        self.process = fleet.process(vllm_resource(pod), http=http)
        self.drawn = vllm.VllmPod(FleetWriter(fleet, self.process), pod)

    def llm_request(self, parent: Context, start_ms: float, **attributes: Any) -> trace.Span:
        """The catalogue's llm_request (output_processor.py:995-1001), under the extracted traceparent."""
        return self.drawn.llm_request(parent, self.fleet.ns(start_ms), vllm_033_attributes(**attributes))


class Envoy:
    """An Envoy gateway's ingress span (the catalogue's, sloscope.upstream.envoy) with its own tags and the
    operator's custom tags (written as strings)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.process = fleet.process(plain_resource("inference-gateway"))
        self.drawn = envoy.Envoy(FleetWriter(fleet, self.process), envoy.envoy_process("inference-gateway"))

    def ingress(
        self,
        parent: Parent,
        start_ms: float,
        end_ms: float,
        *,
        request_id: str,
        headers: dict[str, str],
        status_code: str = "200",
        response_flags: str = "-",
    ) -> trace.Span:
        attributes = envoy.envoy_tags(
            request_id=request_id, url="http://inference-gateway.llm-d.svc/v1/chat/completions", headers=headers,
            status_code=status_code, response_flags=response_flags,
        )  # fmt: skip
        return self.drawn.ingress(parent, self.fleet.ns(start_ms), self.fleet.ns(end_ms), attributes)


class Client:
    """An application calling the gateway: a GenAI client span per call (gen_ai.operation.name, its model), the
    request headers it sent captured as ``http.request.header.<name>`` string arrays (OpenTelemetry HTTP semconv)."""

    def __init__(self, fleet: Fleet, service: str, *, http: bool = True) -> None:
        self.fleet = fleet
        self.process = fleet.process(plain_resource(service), http=http)
        self.scope = self.process.scope(service)

    def chat(
        self,
        parent: Parent,
        start_ms: float,
        end_ms: float,
        *,
        headers: dict[str, str],
        model: str | None = MODEL,
        operation: str = "chat",
    ) -> trace.Span:
        attributes: dict[str, Any] = {"gen_ai.operation.name": operation, "gen_ai.provider.name": "openai"}
        if model is not None:
            attributes["gen_ai.request.model"] = model
        attributes.update({f"http.request.header.{name}": [value] for name, value in headers.items()})
        name = f"{operation} {model}" if model else operation
        return self.fleet.span(self.scope, name, parent, start_ms, end_ms, kind=SpanKind.CLIENT, attributes=attributes)


# ---- reading sloscope ---------------------------------------------------------------------------------


class Readout:
    """One scrape of /metrics."""

    def __init__(self, server: Server) -> None:
        self.samples = server.samples()

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def nonzero(self, name: str, **subset: str) -> dict[Labels, float]:
        """The non-zero series of ``name`` whose labels include ``subset``, keyed by their other labels."""
        wanted = set(subset.items())
        return {
            frozenset(set(labels) - wanted): value
            for (n, labels), value in self.samples.items()
            if n == name and wanted <= labels and value != 0
        }

    def slo(self, pool: str) -> dict[tuple[str, str, str, str], tuple[float, float]]:
        """(slo_class, routing, model, slo) -> (eligible, violated), for every SLO series of the pool that is not 0."""
        out: dict[tuple[str, str, str, str], tuple[float, float]] = {}
        for labels, eligible in self.nonzero("sloscope_slo_requests_total", pool=pool).items():
            d = dict(labels)
            violated = self.value("sloscope_slo_violations_total", pool=pool, **d)
            out[(d["slo_class"], d["routing"], d["model"], d["slo"])] = (eligible, violated)
        return out


def settle(server: Server, outcomes: int, timeout: float = 20.0) -> Readout:
    """Waits until sloscope counted ``outcomes`` join outcomes (at least) and holds no trace, no queued span and
    no request awaiting evaluation: from then on nothing more can be emitted or counted. Returns the scrape that
    showed it."""
    seen: list[Readout] = []

    def done() -> bool:
        readout = Readout(server)
        seen.append(readout)
        return (
            sum(readout.nonzero("sloscope_traces_joined_total").values()) >= outcomes
            and readout.value("sloscope_traces_pending") == 0
            and readout.value("sloscope_queue_spans") == 0
            and readout.value("sloscope_requests_awaiting_evaluation") == 0
        )

    try:
        wait_until(done, timeout, f"{outcomes} join outcome(s) and no pending trace")
    except AssertionError as exc:
        last = seen[-1] if seen else Readout(server)
        state = {
            "joined": last.nonzero("sloscope_traces_joined_total"),
            "pending": last.value("sloscope_traces_pending"),
            "requests": last.nonzero("sloscope_requests_total"),
        }
        raise AssertionError(f"{exc}; sloscope shows {state}") from None
    return seen[-1]


def ignored(m: Readout) -> dict[str, dict[Labels, float]]:
    """What sloscope made of traffic it should ignore: requests, failures, join outcomes, dropped spans."""
    return {
        "requests": m.nonzero("sloscope_requests_total"),
        "failed": m.nonzero("sloscope_requests_failed_total"),
        "outcomes": m.nonzero("sloscope_traces_joined_total"),
        "dropped": m.nonzero("sloscope_spans_dropped_total"),
    }


def store_rows(tmp_path: Path, count: int) -> list[dict[str, Any]]:
    """The record store's rows once it holds ``count`` (timestamps as ns since the epoch)."""
    root = tmp_path / "records"
    now = datetime.now(UTC)

    def rows() -> list[dict[str, Any]]:
        if not root.is_dir():
            return []
        table = read_records(root, now - timedelta(days=1), now + timedelta(days=1))
        out = table.to_pylist()
        for row, arrival in zip(out, table.column("arrival_time").cast("int64").to_pylist(), strict=True):
            row["arrival_ns"] = arrival
        return list(out)

    latest: list[dict[str, Any]] = []

    def ready() -> bool:
        latest[:] = rows()
        return len(latest) >= count

    wait_until(ready, 15, f"{count} stored records")
    assert len(latest) == count, latest
    return latest


def by_span(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["trace_id"], row["span_id"]): row for row in rows}


def has_column(name: str) -> bool:
    return name in SCHEMA.names


def request_id() -> str:
    return str(uuid.uuid4())  # x-request-id as Envoy or the EPP (server.go:442-449, uuid.NewString) makes it


# ---- 1. an agent's calls ----------------------------------------------------------------------------


def test_agent_trace_with_a_missing_root(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """Five LLM calls of one agent trace whose ``invoke_agent`` root span never arrives (the agent is still
    running): one request per call, on its pod, with its own SLO verdict and arrival.

    Upstream shapes (llm-d-router ebab6879, spans.md §1): each call is a gateway.request (SERVER, scope
    llm-d-router/pkg/epp/handlers, no attributes; pkg/epp/handlers/server.go:278,459-460) continuing the
    caller's traceparent (server.go:239-247), with gateway.request_orchestration (director.go:241-249,265-267)
    and the single profile's run_scheduler_profile/filter_endpoints/llm_d.epp.scoring/pick_endpoints spans
    (scheduler.go:153-156, scheduler_profile.go:158-382). The EPP injects its own traceparent
    (request.go:127-138), so vLLM 0.33.0's llm_request (SERVER, output_processor.py:995-1001) is a child of
    gateway.request; for call 4 the caller's re-forwarded traceparent won (request.go:140-151, spans.md §1.2),
    so its llm_request is a sibling of gateway.request under the client span. vLLM's gen_ai.request.id is
    ``chatcmpl-<x-request-id>`` (chat_completion/serving.py:320-322), the EPP spans carry the raw id
    (director.go:274). The SLO header ``x-llm-d-slo-ttft-ms`` is on an Envoy-like ``ingress`` span (sibling
    of gateway.request, its x-request-id tagged) for calls 1, 3, 5 and on the client's per-call span (the
    parent of gateway.request) for calls 2 and 4.

     call  pod  header on     TTFT    target  verdict   export order
     1     a    ingress       0.250   400 ms  met       envoy, vllm-a, epp
     2     b    client span   0.500   400 ms  MISS      agent, epp, vllm-b
     3     a    ingress       0.375   400 ms  met       envoy, epp, vllm-a
     4     c    client span   0.625   400 ms  MISS      agent, vllm-c, epp  (vLLM a sibling of the gateway)
     5     b    ingress       0.125   400 ms  met       envoy, vllm-b, epp
    """
    pool = "pool-agent"
    server, fleet = fleet_of(join={"trace_ttl_seconds": 3.0}, **store_settings(tmp_path))
    epp = Epp(fleet, pool)
    envoy = Envoy(fleet)
    agent = Client(fleet, "travel-agent")
    pods = {"a": VllmPod(fleet, "agent-vllm-a"), "b": VllmPod(fleet, "agent-vllm-b", http=True)}
    pods["c"] = VllmPod(fleet, "agent-vllm-c")
    agent_scope = agent.process.scope("travel-agent")
    # The agent's root span: started and never ended (the agent is still at work), so it is never exported.
    root = agent_scope.tracer.start_span(
        "invoke_agent travel-planner",
        context=Context(),
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel-planner"},
        start_time=fleet.ns(0),
    )
    header = {"http.request.header.x-llm-d-slo-ttft-ms": "400"}  # Envoy's custom tag, a string
    expected: list[tuple[trace.Span, trace.Span, str]] = []  # (gateway, llm_request, pod)

    def tool(start_ms: float) -> None:
        fleet.span(agent_scope, "execute_tool get_weather", root, start_ms, start_ms + 80)

    # call 1: headers on Envoy's span; vLLM's batch comes before the EPP's
    rid = request_id()
    envoy.ingress(root, 98, 1400, request_id=rid, headers=header)
    gateway = epp.call(remote(root), 100, 1390, request_id=rid)
    llm = pods["a"].llm_request(
        remote(gateway), 110, request_id=f"chatcmpl-{rid}", ttft=0.25, e2e=1.25, completion_tokens=41
    )
    expected.append((gateway, llm, "agent-vllm-a"))
    fleet.flush(envoy.process, pods["a"].process, epp.process)

    # call 2: headers on the client span, the gateway's parent
    tool(1420)
    rid = request_id()
    client = agent.chat(root, 1510, 2900, headers={"x-llm-d-slo-ttft-ms": "400"})
    gateway = epp.call(remote(client), 1515, 2890, request_id=rid)
    llm = pods["b"].llm_request(
        remote(gateway), 1525, request_id=f"chatcmpl-{rid}", ttft=0.5, e2e=1.3, completion_tokens=33
    )
    expected.append((gateway, llm, "agent-vllm-b"))
    fleet.flush(agent.process, epp.process, pods["b"].process)

    # call 3
    rid = request_id()
    envoy.ingress(root, 2998, 4200, request_id=rid, headers=header)
    gateway = epp.call(remote(root), 3000, 4190, request_id=rid)
    llm = pods["a"].llm_request(
        remote(gateway), 3010, request_id=f"chatcmpl-{rid}", ttft=0.375, e2e=1.1, completion_tokens=20
    )
    expected.append((gateway, llm, "agent-vllm-a"))
    fleet.flush(envoy.process, epp.process, pods["a"].process)

    # call 4: the caller's traceparent won at the gateway: vLLM's span is the client span's child
    tool(4210)
    rid = request_id()
    client = agent.chat(root, 4310, 5800, headers={"x-llm-d-slo-ttft-ms": "400"})
    gateway = epp.call(remote(client), 4315, 5790, request_id=rid)
    llm = pods["c"].llm_request(
        remote(client), 4325, request_id=f"chatcmpl-{rid}", ttft=0.625, e2e=1.4, completion_tokens=57
    )
    expected.append((gateway, llm, "agent-vllm-c"))
    fleet.flush(agent.process, pods["c"].process, epp.process)

    # call 5
    rid = request_id()
    envoy.ingress(root, 5898, 6900, request_id=rid, headers=header)
    gateway = epp.call(remote(root), 5900, 6890, request_id=rid)
    llm = pods["b"].llm_request(
        remote(gateway), 5910, request_id=f"chatcmpl-{rid}", ttft=0.125, e2e=0.9, completion_tokens=12
    )
    expected.append((gateway, llm, "agent-vllm-b"))
    fleet.flush(envoy.process, pods["b"].process, epp.process)

    m = settle(server, outcomes=5)
    assert m.nonzero("sloscope_requests_total", pool=pool) == {
        labelset(model=MODEL, slo_class="interactive", routing="default"): 5
    }
    assert m.nonzero("sloscope_requests_failed_total") == {}
    assert m.slo(pool) == {
        ("interactive", "default", MODEL, "ttft"): (5, 2),
        ("interactive", "default", MODEL, "goodput"): (5, 2),
    }
    assert m.nonzero("sloscope_pod_requests_total", pool=pool) == {
        labelset(pod="agent-vllm-a"): 2,
        labelset(pod="agent-vllm-b"): 2,
        labelset(pod="agent-vllm-c"): 1,
    }
    hist = {"model": MODEL, "pool": pool, "slo_class": "interactive"}
    assert m.value("sloscope_ttft_seconds_count", **hist) == 5
    # each call's TTFT from its gateway.request's start, 10 ms before its vLLM span's
    assert m.value("sloscope_ttft_seconds_sum", **hist) == pytest.approx(
        0.25 + 0.5 + 0.375 + 0.625 + 0.125 + 5 * 0.010, abs=1e-9
    )
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="joined"): 5}
    assert m.nonzero("sloscope_spans_dropped_total") == {}  # nothing late: the trace stays open for later calls

    rows = by_span(store_rows(tmp_path, 5))
    for gateway, llm, pod in expected:
        row = rows[hex_ids(llm)]
        assert row["arrival_ns"] == started_ns(gateway)
        assert (row["pod"], row["ttft_source"], row["ttft_target_seconds"]) == (pod, "gateway_arrival", 0.4)


# ---- 2. P/D ------------------------------------------------------------------------------------------


def _pd_front(fleet: Fleet, epp: Epp, *, rid: str, headers: dict[str, str]) -> tuple[Client, trace.Span]:
    """The chat front end's client span (its SLO headers) and the EPP's P/D scheduling under gateway.request."""
    client = Client(fleet, "chat-frontend")
    call = client.chat(None, 0, 3000, headers=headers)
    gateway = epp.gateway(remote(call), 10, 2900)
    orchestration = epp.orchestration(gateway, 11, 20)
    epp.disaggregate(orchestration, 11.5, request_id=rid, prefill_address="10.0.2.11")
    return client, gateway


class Sidecar:
    """The decode pod's routing sidecar (cmd/pd-sidecar with --tracing; telemetry.go, sampler as the EPP's),
    drawing its spans from the catalogue (sloscope.upstream.pd_sidecar); the prefill pod at 10.0.2.11:8000."""

    PEER = pd_sidecar.Peer(
        server_address="10.0.3.7", peer_address="10.0.0.5", peer_port=50412, user_agent="Envoy/1.36",
        client_address="10.0.0.5", request_body_size=1834, response_body_size=48211,
    )  # fmt: skip

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.process = fleet.process(sidecar_resource(), sampler=ROUTER_SAMPLER)
        self.drawn = pd_sidecar.Sidecar(FleetWriter(fleet, self.process))

    def server(self, gateway: trace.Span, start_ms: float, end_ms: float) -> trace.Span:
        ns = self.fleet.ns
        return self.drawn.server(remote(gateway), ns(start_ms), ns(end_ms), path=CHAT, peer=self.PEER)

    def forward_request(self, server: trace.Span, start_ms: float, end_ms: float, *, connector: str) -> trace.Span:
        ns = self.fleet.ns
        return self.drawn.forward_request(
            server, ns(start_ms), ns(end_ms), connector=connector, path=CHAT, prefill_target=PREFILL_TARGET
        )

    def legs(self, forward: trace.Span, connector: pd_sidecar.Connector, **ms: Any) -> tuple[trace.Span, trace.Span]:
        """The connector's legs, times in the fleet's ms (forward_start and a (start, end) per leg and POST);
        returns the prefill and the decode POST."""
        ns = self.fleet.ns
        times = {
            key: ns(value) if key == "forward_start" else (ns(value[0]), ns(value[1])) for key, value in ms.items()
        }
        legs = pd_sidecar.Legs(connector, str(uuid.uuid1()), **times)  # connector_nixlv2.go:65-72, a v1 UUID
        return self.drawn.legs(forward, legs, path=CHAT, prefill_target=PREFILL_TARGET)


CHAT = "/v1/chat/completions"
PREFILL_TARGET = "10.0.2.11:8000"


def _pd_assertions(
    server: Server,
    tmp_path: Path,
    *,
    pool: str,
    decode: trace.Span,
    decode_pod: str,
    prefill_pod: str,
    prefill_ttft: float,
    ttft: float,
    tpot: float,
    source: str,
) -> None:
    """One request, on the decode pod, its TTFT from the routing span (or gateway) to the decode pod's first
    token; the TTFT target missed, the TPOT target (50 ms) met."""
    m = settle(server, outcomes=1)
    assert m.nonzero("sloscope_requests_total", pool=pool) == {
        labelset(model=MODEL, slo_class="interactive", routing="default"): 1
    }
    assert m.nonzero("sloscope_pod_requests_total", pool=pool) == {labelset(pod=decode_pod): 1}  # the prefill pod: none
    hist = {"model": MODEL, "pool": pool, "slo_class": "interactive"}
    assert m.value("sloscope_ttft_seconds_count", **hist) == 1
    assert m.value("sloscope_ttft_seconds_sum", **hist) == pytest.approx(ttft, abs=1e-9)
    assert m.value("sloscope_tpot_seconds_count", **hist) == 1
    assert m.value("sloscope_tpot_seconds_sum", **hist) == pytest.approx(tpot, abs=1e-9)
    assert m.slo(pool) == {
        ("interactive", "default", MODEL, "ttft"): (1, 1),
        ("interactive", "default", MODEL, "tpot"): (1, 0),
        ("interactive", "default", MODEL, "goodput"): (1, 1),
    }
    assert m.nonzero("sloscope_requests_failed_total") == {}
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="joined"): 1}
    assert m.nonzero("sloscope_spans_dropped_total") == {}

    (row,) = store_rows(tmp_path, 1)
    assert (row["trace_id"], row["span_id"]) == hex_ids(decode)
    assert (row["pod"], row["ttft_source"]) == (decode_pod, source)
    assert row["ttft_seconds"] == pytest.approx(ttft, abs=1e-9)
    if has_column("prefill_pod"):
        assert row["prefill_pod"] == prefill_pod
    if has_column("prefill_queue_seconds"):
        assert row["prefill_queue_seconds"] == pytest.approx(0.004)
    if has_column("prefill_stage_seconds"):
        assert row["prefill_stage_seconds"] == pytest.approx(prefill_ttft - 0.004 - 0.002)  # vllm_033_attributes


def test_pd_nixl_connector(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """P/D through the routing sidecar's NIXL connector (--kv-connector nixlv2, the default), serial.

    Upstream (llm-d-router ebab6879, spans.md §1.3, §2, §2.1): the EPP's disagg-profile-handler spans
    (disagg_profile_handler.go:341-421, prepare_disaggregation :528-579 with llm_d.epp.pd.disaggregation_used
    true); on the decode pod the sidecar's otelhttp SERVER span ``llm_d.pd_proxy.POST /v1/chat/completions``
    (proxy_helpers.go:41-50) over forward_request (SERVER, chat_completions.go:65-84,110-114); ``prefill``
    (connector_nixlv2.go:87-94,244-248) with its HTTP POST CLIENT span (otelhttp v0.68.0 transport.go:80-81)
    over the prefill pod's llm_request; ``decode`` as a CHILD of prefill (ctx rebinding, :87 and :296-304)
    carrying the request summary (:429-467) incl. llm_d.pd_proxy.true_ttft_ms = handler start -> decode
    dispatch (249 ms here, not a TTFT); its HTTP POST over the decode pod's llm_request. Both vLLM spans
    (0.33.0, output_processor.py:957-1001) carry ``chatcmpl-<EPP x-request-id>`` (connector_nixlv2.go:100,310
    add a second X-Request-Id; vLLM reads the first); the prefill leg has max_tokens 1, 1 completion token.

    TTFT = (decode llm_request start 280 ms - gateway.request start 10 ms) + decode TTFT 0.125 s = 0.395 s:
    over the 300 ms target (the decode pod's own 0.125 s, or true_ttft_ms 249, would meet it).
    TPOT = (2.595 - 0.125) / 127. Export order: prefill pod, sidecar, decode pod, EPP (its span ends last).
    """
    pool = "pool-pd-nixl"
    server, fleet = fleet_of(**store_settings(tmp_path))
    epp = Epp(fleet, pool)
    rid = request_id()
    client, gateway = _pd_front(
        fleet, epp, rid=rid, headers={"x-llm-d-slo-ttft-ms": "300", "x-llm-d-slo-tpot-ms": "50"}
    )
    sidecar = Sidecar(fleet)
    prefill_pod, decode_pod = VllmPod(fleet, "pd-nixl-prefill-0"), VllmPod(fleet, "pd-nixl-decode-0", http=True)
    handler = sidecar.server(gateway, 25, 2880)
    forward = sidecar.forward_request(handler, 26, 2879, connector="nixlv2")
    # the legs' times give their *_ms: prefill 242, decode 2603, total 2852, true_ttft 249, coordinator overhead 5
    prefill_post, decode_post = sidecar.legs(
        forward, "nixlv2", forward_start=26, prefill=(27, 270), prefill_post=(28, 270), decode=(275, 2878),
        decode_post=(275, 2878),
    )  # fmt: skip
    prefill_pod.llm_request(
        remote(prefill_post), 30, request_id=f"chatcmpl-{rid}", ttft=0.2, e2e=0.235, completion_tokens=1, max_tokens=1
    )
    decode = decode_pod.llm_request(
        remote(decode_post), 280, request_id=f"chatcmpl-{rid}", ttft=0.125, e2e=2.595, completion_tokens=128
    )
    fleet.flush(client.process, prefill_pod.process, sidecar.process, decode_pod.process, epp.process)

    _pd_assertions(
        server,
        tmp_path,
        pool=pool,
        decode=decode,
        decode_pod="pd-nixl-decode-0",
        prefill_pod="pd-nixl-prefill-0",
        prefill_ttft=0.2,
        ttft=(280 - 10) / 1000 + 0.125,
        tpot=(2.595 - 0.125) / 127,
        source="pd_gateway",
    )


def test_pd_concurrent_p2p_connector(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """P/D through a concurrent connector: OffloadingConnector P2P (--kv-connector offloading).

    Upstream (llm-d-router ebab6879, spans.md §2.2): prefill and decode dispatched at once
    (connector_p2p.go:46-214). The prefill leg's HTTP POST is a child of forward_request (the request is
    cloned before the prefill span starts, :126-129); ``llm_d.pd_proxy.prefill`` (:134-141,154-172) and, as
    its CHILD, ``llm_d.pd_proxy.decode`` (:175-212) with the summary, where llm_d.pd_proxy.true_ttft_ms is
    about 1 ms (decode dispatched immediately: NOT a TTFT); the decode leg's HTTP POST (re-bound to the
    decode span, :186) over the decode pod's llm_request (vLLM 0.33.0). P2P leaves X-Request-Id untouched,
    so both vLLM spans carry ``chatcmpl-<EPP x-request-id>``.

    TTFT = (30 - 10) ms from gateway.request's start + decode TTFT 0.25 s = 0.27 s, over the 200 ms target
    (true_ttft_ms would meet it).
    TPOT = (2.575 - 0.25) / 99. Export order: EPP, front end, sidecar, prefill pod, decode pod.
    """
    pool = "pool-pd-p2p"
    server, fleet = fleet_of(**store_settings(tmp_path))
    epp = Epp(fleet, pool)
    rid = request_id()
    client, gateway = _pd_front(
        fleet, epp, rid=rid, headers={"x-llm-d-slo-ttft-ms": "200", "x-llm-d-slo-tpot-ms": "50"}
    )
    sidecar = Sidecar(fleet)
    prefill_pod, decode_pod = VllmPod(fleet, "pd-p2p-prefill-0", http=True), VllmPod(fleet, "pd-p2p-decode-0")
    handler = sidecar.server(gateway, 25, 2610)
    forward = sidecar.forward_request(handler, 26, 2609, connector="offloading")
    # the legs' times give their *_ms: prefill 149, decode 2580, total 2582, true_ttft 1
    prefill_post, decode_post = sidecar.legs(
        forward, "offloading", forward_start=26, prefill=(27, 176), prefill_post=(27, 176), decode=(27, 2608),
        decode_post=(27, 2607),
    )  # fmt: skip
    prefill_pod.llm_request(
        remote(prefill_post), 29, request_id=f"chatcmpl-{rid}", ttft=0.14, e2e=0.14, completion_tokens=1, max_tokens=1
    )
    decode = decode_pod.llm_request(
        remote(decode_post), 30, request_id=f"chatcmpl-{rid}", ttft=0.25, e2e=2.575, completion_tokens=100
    )
    fleet.flush(epp.process, client.process, sidecar.process, prefill_pod.process, decode_pod.process)

    _pd_assertions(
        server,
        tmp_path,
        pool=pool,
        decode=decode,
        decode_pod="pd-p2p-decode-0",
        prefill_pod="pd-p2p-prefill-0",
        prefill_ttft=0.14,
        ttft=(30 - 10) / 1000 + 0.25,
        tpot=(2.575 - 0.25) / 99,
        source="pd_gateway",
    )


def test_pd_with_sidecar_tracing_off(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """P/D with the routing sidecar's tracing off (its default, pkg/sidecar/proxy/options.go:227,284).

    Upstream (llm-d-router ebab6879, spans.md §2.3): the sidecar has the no-op propagator and forwards the
    EPP's traceparent unchanged, so both pods' vLLM 0.33.0 llm_request spans are direct children of
    gateway.request, both with ``chatcmpl-<EPP x-request-id>`` (connector_nixlv2.go:100,310); the EPP's
    prepare_disaggregation says llm_d.epp.pd.disaggregation_used true (disagg_profile_handler.go:528-579).
    The decode stage is the one that ended last.

    TTFT = (decode llm_request start 275 ms - gateway.request start 10 ms) + decode TTFT 0.125 s = 0.39 s,
    over the 350 ms target (the decode pod's own 0.125 s would meet it). TPOT = (2.6 - 0.125) / 127.
    Export order: front end, EPP, prefill pod, decode pod.
    """
    pool = "pool-pd-untraced-sidecar"
    server, fleet = fleet_of(**store_settings(tmp_path))
    epp = Epp(fleet, pool)
    rid = request_id()
    client, gateway = _pd_front(
        fleet, epp, rid=rid, headers={"x-llm-d-slo-ttft-ms": "350", "x-llm-d-slo-tpot-ms": "50"}
    )
    prefill_pod, decode_pod = VllmPod(fleet, "pd-off-prefill-0"), VllmPod(fleet, "pd-off-decode-0")
    prefill_pod.llm_request(
        remote(gateway), 30, request_id=f"chatcmpl-{rid}", ttft=0.2, e2e=0.235, completion_tokens=1, max_tokens=1
    )
    decode = decode_pod.llm_request(
        remote(gateway), 275, request_id=f"chatcmpl-{rid}", ttft=0.125, e2e=2.6, completion_tokens=128
    )
    fleet.flush(client.process, epp.process, prefill_pod.process, decode_pod.process)

    _pd_assertions(
        server,
        tmp_path,
        pool=pool,
        decode=decode,
        decode_pod="pd-off-decode-0",
        prefill_pod="pd-off-prefill-0",
        prefill_ttft=0.2,
        ttft=(275 - 10) / 1000 + 0.125,
        tpot=(2.6 - 0.125) / 127,
        source="pd_gateway",
    )


# ---- 3. failed requests ------------------------------------------------------------------------------


def test_failed_requests_of_each_reason(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """Requests no model server answered, one pool (one EPP) per reason, each carrying TTFT 500 ms and TPOT
    50 ms targets (interactive), none with an llm_request span.

    Upstream (llm-d-router ebab6879): an error from HandleRequest goes on gateway.request_orchestration
    (RecordError + Error status, director.go:243-249) and on gateway.request (server.go:377-380); a model
    server that answered != 200 leaves gateway.request with Error status ``ModelServerError`` only
    (server.go:381-382,541-542); a client disconnect ends the stream without an error (server.go:433), so the
    status stays unset; vLLM emits no llm_request for aborted or failed requests (output_processor.py:869-889).
    Messages are errcommon.Error's "inference error: <Code> - <Msg>" (pkg/common/error/error.go:72-74):

     pool                 what                                          message / status              routing
     pool-shed-admission  latency-slo-admitter denies (prio -1)         Internal - request cannot be  none
                          (director.go:331; latencyslo/plugin.go:111,161) admitted: no valid endpoint ...
     pool-shed-saturated  flow control queue full (admission.go:255-256;  ResourceExhausted - request   none
                          processor.go:347-348; types/errors.go:31,47)    rejected pre-queue: ...
     pool-error           scheduled, model server answered 500          ModelServerError              default
     pool-timeout         queue TTL (admission.go:268; processor.go:731)  ResourceExhausted - request   none
                                                                          timed out in queue: ...
     pool-aborted         scheduled, client disconnected mid-stream     unset                         default
     pool-invalid         body without a model (director.go:256,400,     BadRequest - model not found  none
                          before target_model is set at :265)           in request body

    Headers: on the client's span for the requests refused before scheduling (their EPP spans carry no request
    id to find an Envoy span by), on an Envoy-like ``ingress`` sibling for the scheduled ones. Each failure
    counts once in sloscope_requests_total and sloscope_requests_failed_total{reason}, and is eligible for and
    violates TTFT, TPOT and goodput; the invalid one (a client error) is eligible for none.
    """
    server, fleet = fleet_of(**store_settings(tmp_path))
    client = Client(fleet, "chat-frontend")
    envoy = Envoy(fleet)
    slo = {"x-llm-d-slo-ttft-ms": "500", "x-llm-d-slo-tpot-ms": "50"}
    epps = {
        name: Epp(fleet, f"pool-{name}")
        for name in ("shed-admission", "shed-saturated", "error", "timeout", "aborted", "invalid")
    }
    gateways: dict[str, trace.Span] = {}

    # refused by the latency-slo-admitter: sheddable (priority < 0), after the candidates were found
    epp = epps["shed-admission"]
    call = client.chat(None, 0, 20, headers=slo)
    gateways["shed-admission"] = epp.gateway(remote(call), 5, 15, error=ADMISSION_DENIED)
    epp.orchestration(gateways["shed-admission"], 6, 14, priority=-1, error=ADMISSION_DENIED)

    # refused by flow control: the queue is at capacity
    epp = epps["shed-saturated"]
    call = client.chat(None, 100, 120, headers=slo)
    gateways["shed-saturated"] = epp.gateway(remote(call), 105, 115, error=QUEUE_FULL)
    epp.orchestration(gateways["shed-saturated"], 106, 114, error=QUEUE_FULL)

    # scheduled and forwarded; the model server answered 500
    epp = epps["error"]
    rid = request_id()
    caller = foreign_parent()
    envoy.ingress(
        caller,
        198,
        400,
        request_id=rid,
        headers={f"http.request.header.{k}": v for k, v in slo.items()},
        status_code="500",
    )
    gateways["error"] = epp.call(caller, 200, 390, request_id=rid, status="ModelServerError")

    # waited in the flow-control queue until its TTL expired
    epp = epps["timeout"]
    call = client.chat(None, 300, 1320, headers=slo)
    gateways["timeout"] = epp.gateway(remote(call), 305, 1310, error=QUEUE_TIMEOUT)
    epp.orchestration(gateways["timeout"], 306, 1308, error=QUEUE_TIMEOUT)

    # scheduled and streaming; the client went away (Envoy: 200 already sent, response flag DC)
    epp = epps["aborted"]
    rid = request_id()
    caller = foreign_parent()
    envoy.ingress(
        caller,
        498,
        900,
        request_id=rid,
        headers={f"http.request.header.{k}": v for k, v in slo.items()},
        response_flags="DC",
    )
    gateways["aborted"] = epp.call(caller, 500, 890, request_id=rid)

    # the client's body names no model: BadRequest before target_model is set
    epp = epps["invalid"]
    call = client.chat(None, 600, 620, headers=slo, model=None)
    gateways["invalid"] = epp.gateway(remote(call), 605, 615, error=NO_MODEL)
    epp.orchestration(gateways["invalid"], 606, 614, model=None, error=NO_MODEL)

    fleet.flush(client.process, envoy.process, *(epp.process for epp in epps.values()))

    m = settle(server, outcomes=6)
    expected = {  # pool: (model, routing, reason)
        "shed-admission": (MODEL, "none", "shed"),
        "shed-saturated": (MODEL, "none", "shed"),
        "error": (MODEL, "default", "error"),
        "timeout": (MODEL, "none", "timeout"),
        "aborted": (MODEL, "default", "aborted"),
        "invalid": ("unknown", "none", "invalid"),
    }
    observed = {
        name: (
            m.nonzero("sloscope_requests_total", pool=f"pool-{name}"),
            m.nonzero("sloscope_requests_failed_total", pool=f"pool-{name}"),
            m.slo(f"pool-{name}"),
        )
        for name in expected
    }
    wanted = {}
    for name, (model, routing, reason) in expected.items():
        base = {"model": model, "slo_class": "interactive", "routing": routing}
        # A client error misses nothing; the client that left 390 ms after the EPP took its call, before its 500 ms
        # TTFT target, could not have seen a late first token yet: nothing missed either (classes[].aborts).
        slos = (
            {}
            if reason in {"invalid", "aborted"}
            else {("interactive", routing, model, s): (1.0, 1.0) for s in ("ttft", "tpot", "goodput")}
        )
        wanted[name] = ({labelset(**base): 1.0}, {labelset(**base, reason=reason): 1.0}, slos)
    assert observed == wanted
    assert m.nonzero("sloscope_ttft_seconds_count") == {}  # a failed request observes no latency
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="failed"): 6}
    assert m.nonzero("sloscope_spans_dropped_total") == {}

    rows = by_span(store_rows(tmp_path, 6))
    for name, gateway in gateways.items():
        row = rows[hex_ids(gateway)]
        assert (row["failure_reason"], row["routing"], row["ttft_seconds"]) == (
            expected[name][2],
            expected[name][1],
            None,
        )
        assert row["arrival_ns"] == started_ns(gateway)


def test_bodyless_request_is_not_an_llm_call(fleet_of: Callable[..., tuple[Server, Fleet]]) -> None:
    """A request without a body (GET /v1/models through the gateway) is no LLM call: ignored.

    Upstream (llm-d-router ebab6879): headers with EndOfStream go to fallbackToRandomEndpoint
    (pkg/epp/handlers/request.go:38-47,60-73): no orchestration, no scheduling span, nothing on
    gateway.request (server.go:460) but its unset status; the model server answers 200 and, not generating,
    emits no llm_request. Expect no request and, once its trace's TTL (2 s) passed, one no_anchor outcome.
    """
    pool = "pool-get"
    server, fleet = fleet_of()
    epp = Epp(fleet, pool)
    epp.gateway(None, 10, 25)
    fleet.flush(epp.process)

    m = settle(server, outcomes=1)
    assert ignored(m) == {"requests": {}, "failed": {}, "outcomes": {labelset(outcome="no_anchor"): 1}, "dropped": {}}


def test_passthrough_request_is_not_an_llm_call(fleet_of: Callable[..., tuple[Server, Fleet]]) -> None:
    """A POST no parser claims (here /tokenize) is forwarded by the passthrough parser and scheduled, but it is
    no LLM call: ignored. (Beyond the brief's list: the default parser list of the commit followed.)

    Upstream (llm-d-router ebab6879, the commit "Add passthrough-parser to the default parser list"):
    pkg/epp/config/loader/defaults.go:255-260 puts passthrough-parser last; its ParseRequest returns the raw
    body with no model (parsers/passthrough/passthrough.go); the parser is no ModelNameRewriter, so
    modelRewriteIfNeeded returns before its empty-model check (director.go:383-400) and the orchestration span
    gets target_model "" (director.go:265-267); scheduling runs (the chart's default profile; the prefix-cache
    scorer has no payload to score), and its spans carry gen_ai.request.id but no gen_ai.request.model
    (scheduler_profile.go:321-330). vLLM's /tokenize emits no llm_request. Expect no
    request and one no_anchor outcome after the trace TTL, as for any non-LLM traffic.
    """
    pool = "pool-passthrough"
    server, fleet = fleet_of()
    epp = Epp(fleet, pool)
    rid = request_id()
    gateway = epp.gateway(None, 10, 40)
    orchestration = epp.orchestration(gateway, 11, 16, model="")
    epp.schedule(orchestration, 11.5, request_id=rid, model="", unscored=("prefix-cache-scorer",))
    fleet.flush(epp.process)

    m = settle(server, outcomes=1)
    assert ignored(m) == {"requests": {}, "failed": {}, "outcomes": {labelset(outcome="no_anchor"): 1}, "dropped": {}}


# ---- 4. n > 1 -----------------------------------------------------------------------------------------


def test_vllm_completions_with_three_choices(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """POST /v1/completions with n=3 on vLLM 0.33.0: three llm_request spans, one request.

    Upstream: vLLM splits n > 1 into n child engine requests, each with its own llm_request span, all with
    the parent's external id ``cmpl-<X-Request-Id>-0`` and gen_ai.request.n = 1 (v1/engine/async_llm.py:536-560,
    v1/engine/parallel_sampling.py:75,84-96; completion/serving.py:147,183,199-217), no gen_ai.response.model
    (output_processor.py:957-993); all three are children of gateway.request (llm-d-router ebab6879,
    request.go:127-138), the model is the orchestration span's target_model (director.go:265-266).

     choice  TTFT   e2e    tokens  TPOT
     A       0.20   1.20   21      0.050
     B       0.15   1.75   17      0.100
     C       0.25   0.85   9       0.075
    One request: TTFT = 0.15 (the fastest choice; meets 200 ms), TPOT = 0.1 (the slowest; misses 80 ms),
    47 completion tokens, 3 choices. Export order: front end, the pod (one batch), EPP.
    """
    pool = "pool-n3"
    server, fleet = fleet_of(**store_settings(tmp_path))
    epp = Epp(fleet, pool)
    client = Client(fleet, "batch-scorer")
    pod = VllmPod(fleet, "n3-vllm-0")
    rid = request_id()
    call = client.chat(
        None, 0, 1800, headers={"x-llm-d-slo-ttft-ms": "200", "x-llm-d-slo-tpot-ms": "80"}, operation="text_completion"
    )
    gateway = epp.call(remote(call), 10, 1790, request_id=rid)
    choices = [(0.2, 1.2, 21), (0.15, 1.75, 17), (0.25, 0.85, 9)]
    spans = [
        pod.llm_request(
            remote(gateway),
            20,
            request_id=f"cmpl-{rid}-0",
            ttft=ttft,
            e2e=e2e,
            completion_tokens=tokens,
            prompt_tokens=300,
            max_tokens=64,
        )
        for ttft, e2e, tokens in choices
    ]
    fleet.flush(client.process, pod.process, epp.process)

    m = settle(server, outcomes=1)
    assert m.nonzero("sloscope_requests_total", pool=pool) == {
        labelset(model=MODEL, slo_class="interactive", routing="default"): 1
    }
    assert m.nonzero("sloscope_pod_requests_total", pool=pool) == {labelset(pod="n3-vllm-0"): 1}
    hist = {"model": MODEL, "pool": pool, "slo_class": "interactive"}
    assert m.value("sloscope_ttft_seconds_count", **hist) == 1
    # the fastest choice's TTFT from gateway.request's start (10 ms before the choices')
    assert m.value("sloscope_ttft_seconds_sum", **hist) == pytest.approx(0.010 + 0.15, abs=1e-9)
    assert m.value("sloscope_tpot_seconds_count", **hist) == 1
    assert m.value("sloscope_tpot_seconds_sum", **hist) == pytest.approx((1.75 - 0.15) / 16, abs=1e-9)
    assert m.slo(pool) == {
        ("interactive", "default", MODEL, "ttft"): (1, 0),
        ("interactive", "default", MODEL, "tpot"): (1, 1),
        ("interactive", "default", MODEL, "goodput"): (1, 1),
    }
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="joined"): 1}
    assert m.nonzero("sloscope_spans_dropped_total") == {}

    (row,) = store_rows(tmp_path, 1)
    assert (row["trace_id"], row["span_id"]) in {hex_ids(s) for s in spans}
    assert (row["choices"], row["completion_tokens"], row["ttft_source"]) == (3, 47, "gateway_arrival")


# ---- 5. SGLang ---------------------------------------------------------------------------------------


def test_sglang_request(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """An SGLang 0.5.23 request (unified mode) under gateway.request.

    Upstream (sglang-0.5.23 wheel, sha256 00b3cd5b..., engines.md §1): the root span ``" Req <rid[:8]>"``
    (leading space in unified mode; srt/observability/trace.py L563-569), INTERNAL, child of the incoming
    traceparent (trace.py L558-573), scope "sglang server" (L263), resource service.name "sglang" (L237-241);
    attributes rid and module at start (L565-567), the gen_ai.* latencies, usage, request and response
    attributes at finish (req_time_stats.py L535-562; tokenizer_manager.py L3944-4011), finish_reasons as a JSON
    string, and NO gen_ai.latency.time_in_queue (trace.py L865, never written). rid = uuid4().hex
    (io_struct.py L564). Children: the tokenizer thread span with tokenize and api_server_dispatch (trace.py
    L384-396; req_time_stats.py L413-474), and, from the scheduler process, the scheduler thread span with
    request_process, prefill_waiting, prefill_forward/chunked_prefill, decode_waiting, decode_forward/decode_loop
    (req_time_stats.py L791-952), top-level slices linked to the previous one (trace.py L649-650).
    The EPP side: llm-d-router ebab6879 as in the other tests.

    One request on sglang-0, TTFT 0.3 (meets 500 ms), queue time null in the store.
    Export order: front end, scheduler process, tokenizer process, EPP.
    """
    pool = "pool-sglang"
    server, fleet = fleet_of(**store_settings(tmp_path))
    epp = Epp(fleet, pool)
    client = Client(fleet, "chat-frontend")
    tokenizer, scheduler = fleet.process(sglang_resource("sglang-0")), fleet.process(sglang_resource("sglang-0"))
    pod = sglang.SglangServer(
        FleetWriter(fleet, tokenizer), FleetWriter(fleet, scheduler), sglang.sglang_process("sglang-0")
    )
    rid = uuid.uuid4().hex
    x_request_id = request_id()
    call = client.chat(None, 0, 1300, headers={"x-llm-d-slo-ttft-ms": "500"})
    gateway = epp.call(remote(call), 5, 1240, request_id=x_request_id)
    attributes = sglang.request_attributes(
        rid=rid, ttft=0.3, e2e=1.2, prefill=0.298, decode=0.9, inference=1.198, prompt_tokens=512,
        completion_tokens=64, cached_tokens=256, max_tokens=128, top_p=0.95, temperature=0.6, top_k=20, model=MODEL,
    )  # fmt: skip
    ns = fleet.ns
    root = pod.request(remote(gateway), ns(20), ns(1220), rid=rid, attributes=attributes)
    dispatch = pod.tokenizer_thread(root, ns(20), ns(21.5), ns(22), host_id="3f2a9c1e5b7d4a60", pid=87)
    slices = sglang.SchedulerSlices(
        ns(22.3), ns(22.8), ns(40), ns(300), ns(302), ns(1219),
        loops=[(ns(302 + 300 * i), ns(600 + 300 * i)) for i in range(3)],
    )  # fmt: skip
    pod.scheduler_thread(root, dispatch, slices, host_id="3f2a9c1e5b7d4a60", pid=143)
    fleet.flush(client.process, scheduler, tokenizer, epp.process)

    m = settle(server, outcomes=1)
    assert m.nonzero("sloscope_requests_total", pool=pool) == {
        labelset(model=MODEL, slo_class="interactive", routing="default"): 1
    }
    assert m.nonzero("sloscope_pod_requests_total", pool=pool) == {labelset(pod="sglang-0"): 1}
    hist = {"model": MODEL, "pool": pool, "slo_class": "interactive"}
    assert m.value("sloscope_ttft_seconds_count", **hist) == 1
    # from gateway.request's start (5 ms) to the first token: the scheduler's root span starts at 20 ms
    assert m.value("sloscope_ttft_seconds_sum", **hist) == pytest.approx(0.015 + 0.3, abs=1e-9)
    assert m.slo(pool) == {
        ("interactive", "default", MODEL, "ttft"): (1, 0),
        ("interactive", "default", MODEL, "goodput"): (1, 0),
    }
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="joined"): 1}
    assert m.nonzero("sloscope_spans_dropped_total") == {}

    (row,) = store_rows(tmp_path, 1)
    assert (row["trace_id"], row["span_id"]) == hex_ids(root)
    assert (row["pod"], row["ttft_source"], row["queue_seconds"]) == ("sglang-0", "gateway_arrival", None)


# ---- 6. routing profiles ------------------------------------------------------------------------------


def test_both_routing_profiles(fleet_of: Callable[..., tuple[Server, Fleet]]) -> None:
    """One EPP with two scheduling profiles, chosen per request by the header-profile-handler (no spans of
    its own; pkg/epp/framework/plugins/scheduling/profilehandler/headerprofile/): "predicted" is the chart's
    latency-predictor profile (latency-scorer, scorer/latency/plugin.go:38), "default" the chart's profile
    without it (queue-scorer, kv-cache-utilization-scorer, prefix-cache-scorer;
    config/charts/routerlib/templates/_config.yaml). Each scorer leaves an llm_d.epp.scorer.<type> span with
    llm_d.epp.scorer.type (scheduler_profile.go:288-315); llm-d-router ebab6879. SLO headers on an Envoy-like
    ingress sibling; vLLM 0.33.0 llm_request children of gateway.request.

     request  profile    pod  TTFT   target  verdict
     P1       predicted  0    0.2    500     met
     P2       predicted  0    0.3    500     met
     P3       predicted  1    0.6    500     MISS
     D1       default    0    0.4    500     met
     D2       default    1    0.7    500     MISS
    """
    pool = "pool-routing"
    server, fleet = fleet_of()
    epp = Epp(fleet, pool)
    envoy = Envoy(fleet)
    pods = [VllmPod(fleet, "routing-vllm-0"), VllmPod(fleet, "routing-vllm-1", http=True)]
    plan = [
        ("predicted", PREDICTED_SCORERS, 0, 0.2),
        ("predicted", PREDICTED_SCORERS, 0, 0.3),
        ("predicted", PREDICTED_SCORERS, 1, 0.6),
        ("default", DEFAULT_SCORERS, 0, 0.4),
        ("default", DEFAULT_SCORERS, 1, 0.7),
    ]
    for i, (profile, scorers, pod, ttft) in enumerate(plan):
        t = 2000.0 * i
        rid = request_id()
        caller = foreign_parent()
        envoy.ingress(caller, t, t + 1500, request_id=rid, headers={"http.request.header.x-llm-d-slo-ttft-ms": "500"})
        gateway = epp.call(caller, t + 2, t + 1490, request_id=rid, profile=profile, scorers=scorers)
        pods[pod].llm_request(
            remote(gateway), t + 10, request_id=f"chatcmpl-{rid}", ttft=ttft, e2e=1.2, completion_tokens=30
        )
    fleet.flush(envoy.process, *(p.process for p in pods), epp.process)

    m = settle(server, outcomes=5)
    assert m.nonzero("sloscope_requests_total", pool=pool) == {
        labelset(model=MODEL, slo_class="interactive", routing="predicted"): 3,
        labelset(model=MODEL, slo_class="interactive", routing="default"): 2,
    }
    assert m.slo(pool) == {
        ("interactive", "predicted", MODEL, "ttft"): (3, 1),
        ("interactive", "predicted", MODEL, "goodput"): (3, 1),
        ("interactive", "default", MODEL, "ttft"): (2, 1),
        ("interactive", "default", MODEL, "goodput"): (2, 1),
    }
    assert m.nonzero("sloscope_pod_requests_total", pool=pool) == {
        labelset(pod="routing-vllm-0"): 3,
        labelset(pod="routing-vllm-1"): 2,
    }
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="joined"): 5}
    assert m.nonzero("sloscope_spans_dropped_total") == {}


# ---- 7. header generations -----------------------------------------------------------------------------


def test_both_header_generations(fleet_of: Callable[..., tuple[Server, Fleet]], tmp_path: Path) -> None:
    """The SLO headers of both generations: GIE's x-slo-ttft-ms / x-slo-tpot-ms (late 2025,
    /work/shared/fixtures/request-headers.md, GIE main @ 4d37fbca) and llm-d-router's x-llm-d-slo-ttft-ms /
    x-llm-d-slo-tpot-ms (llm-d-router ebab6879 pkg/epp/metadata/consts.go:49-56, the old names kept as deprecated
    aliases, :75-76), alone and together with different values (x-llm-d-* wins). The array form
    ``http.request.header.<name>: [value]`` is on the client's span (an OpenTelemetry SDK's header capture),
    the plain form ``<name>: value`` on an Envoy-like ingress span (a custom tag named after the header).
    EPP and vLLM spans as in the other tests (llm-d-router ebab6879, vLLM 0.33.0).

     req  form   headers                                            TTFT  TPOT   class        verdicts
     H1   array  llm-d ttft 300                                     0.4   -      interactive  ttft MISS
     H2   plain  llm-d ttft 300                                     0.4   -      interactive  ttft MISS
     H3   array  x-slo ttft 250                                     0.2   -      interactive  ttft met
     H4   plain  x-slo ttft 250                                     0.2   -      interactive  ttft met
     H5   array  llm-d ttft 300, tpot 20; x-slo ttft 5000, tpot 500  0.4   0.05   interactive  both MISS
     H6   plain  the same                                           0.4   0.05   interactive  both MISS
    (Were x-slo-* to win in H5/H6, they would be standard and meet both.)
    """
    pool = "pool-headers"
    server, fleet = fleet_of(**store_settings(tmp_path))
    epp = Epp(fleet, pool)
    envoy = Envoy(fleet)
    client = Client(fleet, "chat-frontend")
    pod = VllmPod(fleet, "headers-vllm-0")
    both = {"x-llm-d-slo-ttft-ms": "300", "x-slo-ttft-ms": "5000", "x-llm-d-slo-tpot-ms": "20", "x-slo-tpot-ms": "500"}
    plan = [
        ("array", {"x-llm-d-slo-ttft-ms": "300"}, 0.4, (0.3, None)),
        ("plain", {"x-llm-d-slo-ttft-ms": "300"}, 0.4, (0.3, None)),
        ("array", {"x-slo-ttft-ms": "250"}, 0.2, (0.25, None)),
        ("plain", {"x-slo-ttft-ms": "250"}, 0.2, (0.25, None)),
        ("array", both, 0.4, (0.3, 0.02)),
        ("plain", both, 0.4, (0.3, 0.02)),
    ]
    targets: dict[tuple[str, str], tuple[float, float | None]] = {}
    for i, (form, headers, ttft, target) in enumerate(plan):
        t = 2000.0 * i
        rid = request_id()
        if form == "array":
            parent: Context = remote(client.chat(None, t, t + 1500, headers=headers))
        else:
            parent = foreign_parent()
            envoy.ingress(parent, t, t + 1500, request_id=rid, headers=headers)
        gateway = epp.call(parent, t + 2, t + 1490, request_id=rid)
        # e2e 1.4 s, 21 tokens: TPOT (1.4 - ttft) / 20 = 0.05 s for H5 and H6
        llm = pod.llm_request(
            remote(gateway), t + 10, request_id=f"chatcmpl-{rid}", ttft=ttft, e2e=ttft + 1.0, completion_tokens=21
        )
        targets[hex_ids(llm)] = target
    fleet.flush(client.process, envoy.process, pod.process, epp.process)

    m = settle(server, outcomes=6)
    assert m.nonzero("sloscope_requests_total", pool=pool) == {
        labelset(model=MODEL, slo_class="interactive", routing="default"): 6
    }
    assert m.slo(pool) == {
        ("interactive", "default", MODEL, "ttft"): (6, 4),
        ("interactive", "default", MODEL, "tpot"): (2, 2),
        ("interactive", "default", MODEL, "goodput"): (6, 4),
    }
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="joined"): 6}

    rows = by_span(store_rows(tmp_path, 6))
    assert {key: (row["ttft_target_seconds"], row["tpot_target_seconds"]) for key, row in rows.items()} == targets


# ---- 8. the late-2025 shape -------------------------------------------------------------------------------


def test_late_2025_shape_still_counts(fleet_of: Callable[..., tuple[Server, Fleet]]) -> None:
    """The GIE-era shape sloscope was first built for still counts as before: gateway.request (scope
    "gateway-api-inference-extension", GIE pkg/epp/handlers/server.go:133-134 at 812efb21, the first EPP that
    traced, 2026-01-16) carrying the pool, the requested model and the captured headers of
    /work/shared/fixtures/request-headers.md (GIE main @ 4d37fbca: x-slo-ttft-ms, x-slo-tpot-ms,
    x-prediction-based-scheduling true/false, #1839..#1929), with the vLLM llm_request child carrying
    gen_ai.response.model: the spans sloscope.testing builds and tests/integration/test_serve_scenario.py
    sends. The EPP of that era put no attribute on its span itself; a gateway in front tagged it.

     req  headers                                  routing    TTFT  e2e   tok  verdicts
     G1   ttft 200, tpot 50, prediction true        predicted  0.15  0.60  11   ttft met, tpot met (0.045)
     G2   ttft 200, prediction false                default    0.25  0.75  11   ttft MISS
     G3   ttft 2000, prediction-based-scheduling-off default   1.50  3.40  20   standard, ttft met
    """
    pool = "pool-gie"
    server, fleet = fleet_of()
    epp_process, pod_process = (
        fleet.process(plain_resource("epp")),
        fleet.process(Resource.create({"service.name": "vllm", "k8s.pod.name": "gie-vllm-0"})),
    )
    epp = gie_2025.Gie2025Epp(FleetWriter(fleet, epp_process), upstream.Process({"service.name": "epp"}))
    pod = gie_2025.Vllm2025Pod(FleetWriter(fleet, pod_process), upstream.Process({"k8s.pod.name": "gie-vllm-0"}))
    plan = [
        ("200", "50", {"http.request.header.x-prediction-based-scheduling": ["true"]}, (0.15, 0.6, 11)),
        ("200", None, {"http.request.header.x-prediction-based-scheduling": ["false"]}, (0.25, 0.75, 11)),
        ("2000", None, {"http.request.header.x-prediction-based-scheduling-off": ["true"]}, (1.5, 3.4, 20)),
    ]
    ns = fleet.ns
    for i, (ttft_ms, tpot_ms, routing, (ttft, e2e, tokens)) in enumerate(plan):
        t = 4000.0 * i
        rid = request_id()
        extra = {"inference_pool": pool, **routing}
        attrs = gateway_attributes(slo_ttft_ms=ttft_ms, slo_tpot_ms=tpot_ms, model="llama", request_id=rid, extra=extra)
        gateway = epp.gateway(None, ns(t), ns(t + e2e * 1000 + 20), attrs)
        llm = vllm_attributes(ttft=ttft, e2e=e2e, completion_tokens=tokens, model="llama", request_id=f"chatcmpl-{rid}")
        pod.llm_request(remote(gateway), ns(t + 5), ns(t + 5 + e2e * 1000), llm)
    fleet.flush(pod_process, epp_process)

    m = settle(server, outcomes=3)
    assert m.nonzero("sloscope_requests_total", pool=pool) == {
        labelset(model="llama", slo_class="interactive", routing="predicted"): 1,
        labelset(model="llama", slo_class="interactive", routing="default"): 1,
        labelset(model="llama", slo_class="standard", routing="default"): 1,
    }
    assert m.slo(pool) == {
        ("interactive", "predicted", "llama", "ttft"): (1, 0),
        ("interactive", "predicted", "llama", "tpot"): (1, 0),
        ("interactive", "predicted", "llama", "goodput"): (1, 0),
        ("interactive", "default", "llama", "ttft"): (1, 1),
        ("interactive", "default", "llama", "goodput"): (1, 1),
        ("standard", "default", "llama", "ttft"): (1, 0),
        ("standard", "default", "llama", "goodput"): (1, 0),
    }
    assert m.nonzero("sloscope_pod_requests_total", pool=pool) == {labelset(pod="gie-vllm-0"): 3}
    hist = {"model": "llama", "pool": pool, "slo_class": "interactive"}
    # each from gateway.request's start, 5 ms before vLLM's
    assert m.value("sloscope_ttft_seconds_sum", **hist) == pytest.approx(0.4 + 2 * 0.005, abs=1e-9)
    assert m.nonzero("sloscope_traces_joined_total") == {labelset(outcome="joined"): 3}
    assert m.nonzero("sloscope_spans_dropped_total") == {}
    assert math.isclose(m.value("sloscope_tpot_seconds_sum", **hist), (0.6 - 0.15) / 10 + (0.75 - 0.25) / 10)
