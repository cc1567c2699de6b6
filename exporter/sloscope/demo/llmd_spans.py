"""The spans today's upstream exports for one agent call: Envoy, llm-d-router's EPP and sidecar, vLLM 0.33.

Shapes, names, kinds, scopes and attributes are those of llm-d-router ebab6879 and vLLM 0.33.0 as described
in fixtures/llm-d-router/spans.md and fixtures/vllm/llm_request-span-0.33.0.md; docs/demo.md draws the trees.
The EPP's scheduling spans (profile runs, the disagg profile handler) are drawn by the catalogue
(:class:`sloscope.upstream.llmd_router.Epp`) from the simulation's decisions.
Each process the demo stands for has its own TracerProvider and exporter: the gateway's Envoy
(``envoy-gateway``), the EPP (``llm-d-epp``), each pod's vLLM (resource ``k8s.pod.name``, as
``OTEL_RESOURCE_ATTRIBUTES`` would set it) and each pod's routing sidecar (``llm-d-disagg-sidecar``).
Context crosses processes only as a W3C ``traceparent``, injected by one and extracted by the next:

* the agent sends its session's context (the ``invoke_agent`` span, never exported); Envoy's ``ingress`` span
  and the EPP's ``gateway.request`` are both its children (Envoy passes the client's traceparent on);
* the EPP forwards ``gateway.request``'s context: vLLM's ``llm_request`` is its child, or, through the routing
  sidecar when it traces, the child of the sidecar's ``HTTP POST`` of that leg.

Spans are made when a call is over, with the times the simulation measured (:class:`~sloscope.demo.calls.CallRecord`),
as integer nanoseconds from :func:`~sloscope.demo.records.ns`: the ground truth uses the same integers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from sloscope.demo.agents import Call, Session
from sloscope.demo.calls import MODEL_SERVER_ERROR, CallRecord, Scheduling, SidecarTimes
from sloscope.demo.records import Completion, PodSnapshot, ns
from sloscope.demo.spans import completion_attributes
from sloscope.upstream.llmd_router import Epp, ProfileRun, ScorerRun, epp_process
from sloscope.upstream.writer import Drawn, Process, Scope

__all__ = ["COMMIT", "LlmdSpanEmitter", "agent_context"]

COMMIT = "ebab687927f5331c1b39defcb579a07951bce56c"  # llm-d-router, the scope attribute commit-sha
BUILD_REF = "main"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
OTELHTTP = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
EPP_SCOPES = {
    "handlers": "llm-d-router/pkg/epp/handlers",
    "requestcontrol": "llm-d-router/pkg/epp/requestcontrol",
    "scheduling": "llm-d-router/pkg/epp/scheduling",
    "plugins": "llm-d-router/pkg/epp/framework/plugins/scheduling",
}
SIDECAR_SCOPE = "llm-d-router/pkg/sidecar/proxy"
VLLM_SCOPE = "vllm.tracing.otel"
POD_PORT = 8000  # the pods' (and the decode pods' sidecars') API port
LOCAL_VLLM = ("localhost", 8200)  # where the sidecar reaches its own pod's vLLM
ENVOY_ADDRESS = "10.0.1.5"
CLIENT_ADDRESS = "10.0.3.7"
USER_AGENT = "AsyncOpenAI/Python 1.109.1"
INTERNAL, SERVER, CLIENT = SpanKind.INTERNAL, SpanKind.SERVER, SpanKind.CLIENT
_PROPAGATOR = TraceContextTextMapPropagator()


def agent_context(session: Session) -> Context:
    """The agent's invoke_agent span, as a remote parent: sloscope never receives it."""
    parent = SpanContext(
        session.trace_id, session.root_span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _across(context: Context) -> Context:
    """The context as the next process sees it: injected as traceparent, extracted on the other side."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return _PROPAGATOR.extract(carrier)


def _ms(seconds: float) -> float:
    """float64(duration.Milliseconds()): whole milliseconds, truncated."""
    return float(int(seconds * 1000))


class LlmdSpanEmitter:
    """One TracerProvider per simulated process; :meth:`emit` exports one call's spans."""

    def __init__(
        self, pods: Sequence[str], processor: Callable[[], SpanProcessor], namespace: str = "demo", model: str = ""
    ) -> None:
        def provider(resource: Resource) -> TracerProvider:
            made = TracerProvider(resource=resource)
            made.add_span_processor(processor())
            return made

        self._namespace = namespace
        self._envoy = provider(Resource({"service.name": "envoy-gateway"}))
        self._epp = provider(Resource({"service.name": "llm-d-epp", "service.version": BUILD_REF}, SCHEMA_URL))
        self._vllm = {
            pod: provider(
                Resource.create(
                    {
                        "vllm.instrumenting_module_name": "vllm.llm_engine",
                        "vllm.process_id": "1",
                        "k8s.pod.name": pod,
                        "k8s.namespace.name": namespace,
                    }
                )
            )
            for pod in pods
        }
        # Dockerfile.sidecar stamps another version package: the sidecar's service.version is empty
        sidecar = Resource({"service.name": "llm-d-disagg-sidecar", "service.version": ""}, SCHEMA_URL)
        self._sidecars = {pod: provider(sidecar) for pod in pods}
        self._addresses = {pod: f"10.0.0.{10 + i}" for i, pod in enumerate(pods)}
        self._model = model
        self._catalogue = Epp(_SdkWriter(self._epp), epp_process())  # the EPP's scheduling spans

    @property
    def providers(self) -> list[TracerProvider]:
        return [self._envoy, self._epp, *self._vllm.values(), *self._sidecars.values()]

    def flush(self, timeout_millis: int = 10_000) -> bool:
        return all([p.force_flush(timeout_millis) for p in self.providers])

    def shutdown(self) -> None:
        for provider in self.providers:
            provider.shutdown()

    def emit(self, record: CallRecord) -> None:
        """Export the call's spans (see the module docstring for who is whose parent)."""
        caller = _across(agent_context(record.session))  # the agent's traceparent, read by Envoy and the EPP
        self._ingress(record, caller)
        handlers = self._epp_tracer("handlers")
        gateway = handlers.start_span("gateway.request", caller, SERVER, start_time=ns(record.arrival))
        gateway_context = trace.set_span_in_context(gateway)
        self._orchestration(record, gateway_context)
        forwarded = _across(gateway_context)  # the traceparent the EPP injects towards the pod
        if record.sidecar is not None:
            self._sidecar(record, record.sidecar, forwarded)
        else:
            if record.prefill is not None:
                self._llm_request(record, record.prefill, forwarded, prefill=True)
            for completion in record.completions:
                self._llm_request(record, completion, forwarded)
        if record.orchestration_error is not None:
            _fail(gateway, record.orchestration_error, record.end)
        elif record.error == MODEL_SERVER_ERROR:
            gateway.set_status(Status(StatusCode.ERROR, MODEL_SERVER_ERROR))
        gateway.end(end_time=ns(record.end))

    # ---- the gateway ------------------------------------------------------------------------------------------

    def _ingress(self, record: CallRecord, caller: Context) -> None:
        call, session = record.call, record.session
        prefix = "x-slo" if session.old_headers else "x-llm-d-slo"
        attributes: dict[str, AttributeValue] = {
            "http.request.method": "POST",
            "url.path": call.path,
            "http.request.header.x-request-id": [call.request.request_id],
        }
        if call.request.slo_ttft_ms is not None:
            attributes[f"http.request.header.{prefix}-ttft-ms"] = [f"{call.request.slo_ttft_ms:g}"]
        if call.request.slo_tpot_ms is not None:
            attributes[f"http.request.header.{prefix}-tpot-ms"] = [f"{call.request.slo_tpot_ms:g}"]
        attributes["http.response.status_code"] = record.http_status
        tracer = self._envoy.get_tracer("envoy")
        span = tracer.start_span("ingress", caller, SERVER, attributes=attributes, start_time=ns(record.arrival))
        if record.http_status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=ns(record.end))

    # ---- the EPP ------------------------------------------------------------------------------------------------

    def _epp_tracer(self, scope: str) -> trace.Tracer:
        return self._epp.get_tracer(EPP_SCOPES[scope], BUILD_REF, attributes={"commit-sha": COMMIT})

    def _orchestration(self, record: CallRecord, parent: Context) -> None:
        call = record.call
        span = self._epp_tracer("requestcontrol").start_span(
            "gateway.request_orchestration",
            parent,
            SERVER,
            attributes={"target_model": call.request.model, "request_prio": call.priority},
            start_time=ns(record.arrival),
        )
        context = trace.set_span_in_context(span)
        if call.pd is None:
            for scheduling in record.schedules:
                self._profile_run(call, scheduling, context)
        else:
            self._disaggregated(record, context)
        if record.orchestration_error is not None:
            _fail(span, record.orchestration_error, record.routed)
        span.end(end_time=ns(record.routed))

    def _disaggregated(self, record: CallRecord, parent: Context) -> None:
        """The disagg-profile-handler in decode-first order: pick, decode, pick, prefill, pick, prepare."""
        call = record.call
        decode, prefill = record.schedules
        self._catalogue.disaggregated(
            parent,
            self._run(decode),
            self._run(prefill),
            request_id=call.request.request_id,
            model=call.request.model,
            prefill_address=self._addresses[prefill.decision.pod],
            prepared=(ns(prefill.end), ns(record.routed)),
            port=POD_PORT,
        )

    def _profile_run(self, call: Call, scheduling: Scheduling, parent: Context) -> None:
        self._catalogue.run_profile(
            parent, self._run(scheduling), request_id=call.request.request_id, model=call.request.model
        )

    def _run(self, scheduling: Scheduling) -> ProfileRun:
        """The profile run of a scheduling the simulation made: its candidates, its scorers' scores per pod, and the
        picker's choice first, then the rest best first (at most 5, named "<namespace>/<pod>-rank-<i>")."""
        decision = scheduling.decision
        n = len(decision.candidates)
        scorers = _scorers(decision.routing, decision.candidates, decision.latency_scores)
        totals = dict.fromkeys((pod for pod, _ in decision.candidates), 0.0)
        for _, weight, scores in scorers:
            for pod, score in scores.items():
                totals[pod] += weight * score
        ranked = sorted(totals, key=lambda pod: (pod != decision.pod, -totals[pod]))[:5]
        return ProfileRun(
            scheduling.profile,
            ns(scheduling.start),
            ns(scheduling.end),
            n,
            n,
            [ScorerRun(kind, weight, tuple(scores.values())) for kind, weight, scores in scorers],
            [f"{self._namespace}/{pod}-rank-0" for pod in ranked],
            [round(totals[pod], 4) for pod in ranked],
        )

    # ---- the routing sidecar and vLLM ---------------------------------------------------------------------------

    def _sidecar(self, record: CallRecord, times: SidecarTimes, forwarded: Context) -> None:
        call = record.call
        decode_pod, prefill_pod = (s.decision.pod for s in record.schedules)
        assert record.prefill is not None and record.completions
        sidecar = self._sidecars[decode_pod]
        http = sidecar.get_tracer(OTELHTTP, "0.68.0")
        proxy = sidecar.get_tracer(SIDECAR_SCOPE, "", attributes={"commit-sha": ""})
        prefill_target = f"{self._addresses[prefill_pod]}:{POD_PORT}"
        server = http.start_span(
            f"llm_d.pd_proxy.POST {call.path}",
            forwarded,
            SERVER,
            start_time=ns(times.start),
            attributes={
                "server.address": self._addresses[decode_pod],
                "server.port": POD_PORT,
                "http.request.method": "POST",
                "url.scheme": "http",
                "network.peer.address": ENVOY_ADDRESS,
                "network.peer.port": 43512,
                "user_agent.original": USER_AGENT,
                "client.address": CLIENT_ADDRESS,
                "url.path": call.path,
                "network.protocol.version": "1.1",
            },
        )
        forward = proxy.start_span(
            "forward_request",
            trace.set_span_in_context(server),
            SERVER,
            start_time=ns(times.forward_start),
            attributes={
                "llm_d.pd_proxy.connector": times.connector,
                "llm_d.pd_proxy.kv_connector": times.connector,
                "llm_d.pd_proxy.ec_connector": "",
                "llm_d.pd_proxy.request_path": call.path,
                "llm_d.openai.api": "chat_completions",
                "llm_d.pd_proxy.disaggregation_used": True,
                "llm_d.pd_proxy.prefill_target": prefill_target,
                "llm_d.pd_proxy.prefill_candidates": 1,
            },
        )
        legs = _Legs(emitter=self, record=record, times=times, proxy=proxy, http=http, prefill_target=prefill_target)
        legs.run(trace.set_span_in_context(forward))
        forward.end(end_time=ns(times.forward_end))
        server.set_attributes(
            {
                "http.request.body.size": 512 + 4 * call.request.prompt_tokens,
                "http.response.body.size": 64 + 6 * record.completions[0].completion_tokens,
                "http.response.status_code": 200,
            }
        )
        server.end(end_time=ns(times.end))

    def _llm_request(self, record: CallRecord, completion: Completion, parent: Context, prefill: bool = False) -> None:
        """vLLM 0.33's llm_request, set once at the end (output_processor.py do_tracing)."""
        call = record.call
        tracer = self._vllm[completion.pod].get_tracer(VLLM_SCOPE)
        attributes = completion_attributes(
            completion, call.vllm_request_id, 1 if prefill else call.request.output_tokens
        )
        span = tracer.start_span(
            "llm_request", parent, SERVER, attributes=attributes, start_time=ns(completion.arrived)
        )
        span.end(end_time=ns(completion.finished))


class _Legs:
    """The sidecar's P/D legs under forward_request: NIXL (serial) or P2P (concurrent), spans.md section 2."""

    def __init__(
        self,
        *,
        emitter: LlmdSpanEmitter,
        record: CallRecord,
        times: SidecarTimes,
        proxy: trace.Tracer,
        http: trace.Tracer,
        prefill_target: str,
    ) -> None:
        self.emitter, self.record, self.times = emitter, record, times
        self.proxy, self.http, self.prefill_target = proxy, http, prefill_target

    def run(self, forward: Context) -> None:
        times = self.times
        nixl = times.connector == "nixlv2"
        prefill_name, decode_name = (
            ("prefill", "decode") if nixl else ("llm_d.pd_proxy.prefill", "llm_d.pd_proxy.decode")
        )
        prefill = self.proxy.start_span(prefill_name, forward, INTERNAL, start_time=ns(times.prefill_start))
        prefill_context = trace.set_span_in_context(prefill)
        # NIXL's prefill POST is the prefill span's child; P2P clones the request before the span starts
        self._post(prefill_context if nixl else forward, prefill=True)
        decode = self.proxy.start_span(decode_name, prefill_context, INTERNAL, start_time=ns(times.decode_start))
        self._post(trace.set_span_in_context(decode), prefill=False)
        prefill_ms = _ms(times.prefill_post_end - times.prefill_post_start)
        decode_ms = _ms(times.decode_post_end - times.decode_post_start)
        common = {"llm_d.pd_proxy.connector": times.connector}
        if nixl:
            prefill.set_attributes(
                {"llm_d.pd_proxy.request_id": times.request_uuid, "llm_d.pd_proxy.prefill_target": self.prefill_target}
            )
            prefill.set_attributes(common)
            prefill.set_attributes(
                {"llm_d.pd_proxy.prefill.status_code": 200, "llm_d.pd_proxy.prefill.duration_ms": prefill_ms}
            )
            decode.set_attributes(
                {
                    "llm_d.pd_proxy.request_id": times.request_uuid,
                    **common,
                    "llm_d.pd_proxy.decode.streaming": self.record.call.api == "chat",
                    "llm_d.pd_proxy.decode.data_parallel": False,
                    "llm_d.pd_proxy.decode.target": f"{LOCAL_VLLM[0]}:{LOCAL_VLLM[1]}",
                    "llm_d.pd_proxy.decode.duration_ms": decode_ms,
                    "llm_d.pd_proxy.total_duration_ms": _ms(times.decode_end - times.forward_start),
                    "llm_d.pd_proxy.true_ttft_ms": _ms(times.decode_post_start - times.forward_start),
                    "llm_d.pd_proxy.prefill_duration_ms": prefill_ms,
                    "llm_d.pd_proxy.decode_duration_ms": decode_ms,
                    "llm_d.pd_proxy.coordinator_overhead_ms": _ms(times.decode_post_start - times.prefill_post_end),
                }
            )
        else:
            prefill.set_attributes(
                {
                    "llm_d.pd_proxy.prefill_target": self.prefill_target,
                    **common,
                    "llm_d.pd_proxy.prefill.async": True,
                    "llm_d.pd_proxy.prefill.status_code": 200,
                    "llm_d.pd_proxy.prefill.duration_ms": prefill_ms,
                }
            )
            decode.set_attributes(
                {
                    **common,
                    "llm_d.pd_proxy.decode.concurrent_with_prefill": True,
                    "llm_d.pd_proxy.decode.duration_ms": decode_ms,
                    "llm_d.pd_proxy.decode.target": f"{LOCAL_VLLM[0]}:{LOCAL_VLLM[1]}",
                    "llm_d.pd_proxy.total_duration_ms": _ms(times.decode_end - times.forward_start),
                    "llm_d.pd_proxy.true_ttft_ms": _ms(times.decode_post_start - times.forward_start),
                    "llm_d.pd_proxy.decode_duration_ms": decode_ms,
                    "llm_d.pd_proxy.concurrent_pd": True,
                }
            )
        prefill.end(end_time=ns(times.prefill_end))
        decode.end(end_time=ns(times.decode_end))

    def _post(self, parent: Context, *, prefill: bool) -> None:
        """otelhttp's CLIENT span for one leg, whose context the pod's vLLM extracts."""
        times, path = self.times, self.record.call.path
        host, port = self.prefill_target.split(":") if prefill else LOCAL_VLLM
        start, end = (
            (times.prefill_post_start, times.prefill_post_end)
            if prefill
            else (times.decode_post_start, times.decode_post_end)
        )
        post = self.http.start_span(
            "HTTP POST",
            parent,
            CLIENT,
            start_time=ns(start),
            attributes={
                "http.request.method": "POST",
                "url.full": f"http://{host}:{port}{path}",
                "server.address": str(host),
                "server.port": int(port),
                "network.protocol.version": "1.1",
            },
        )
        completion = self.record.prefill if prefill else self.record.completions[0]
        assert completion is not None
        self.emitter._llm_request(self.record, completion, _across(trace.set_span_in_context(post)), prefill=prefill)
        post.set_attribute("http.response.status_code", 200)
        post.end(end_time=ns(end))


class _SdkWriter:
    """The catalogue's spans (:mod:`sloscope.upstream`) made by one process's TracerProvider; a span's handle is
    the context its children are made in."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracers: dict[str, trace.Tracer] = {}

    def span(self, process: Process, scope: Scope, drawn: Drawn[Context]) -> Context:
        del process  # the provider's resource
        tracer = self._tracers.get(scope.name)
        if tracer is None:
            tracer = self._provider.get_tracer(scope.name, scope.version, attributes=dict(scope.attributes))
            self._tracers[scope.name] = tracer
        made = tracer.start_span(
            drawn.name, drawn.parent, _KINDS[drawn.kind], attributes=dict(drawn.attributes), start_time=drawn.start_ns
        )
        if drawn.error is not None:
            _fail(made, drawn.error, drawn.end_ns / 1e9)
        elif drawn.status is not None:
            made.set_status(Status(StatusCode.ERROR, drawn.status))
        made.end(end_time=drawn.end_ns)
        return trace.set_span_in_context(made)


_KINDS = {"server": SERVER, "internal": INTERNAL, "client": CLIENT}


def _fail(span: Span, message: str, at: float) -> None:
    """span.RecordError(err) then span.SetStatus(codes.Error, err.Error()), as the EPP does."""
    span.add_event(
        "exception",
        {"exception.type": "github.com/llm-d/llm-d-router/pkg/common/error.Error", "exception.message": message},
        timestamp=ns(at),
    )
    span.set_status(Status(StatusCode.ERROR, message))


def _scorers(
    routing: str, candidates: tuple[tuple[str, PodSnapshot], ...], latency_scores: tuple[float, ...]
) -> list[tuple[str, float, Mapping[str, float]]]:
    """(scorer type, weight, score per pod) of the profile that scheduled the request."""
    pods = [pod for pod, _ in candidates]
    if routing == "predicted":
        return [("latency-scorer", 1.0, dict(zip(pods, latency_scores, strict=True)) if latency_scores else {})]
    waiting = max((state.waiting for _, state in candidates), default=0)
    return [
        ("queue-scorer", 2.0, {pod: 1.0 - s.waiting / waiting if waiting else 1.0 for pod, s in candidates}),
        ("kv-cache-utilization-scorer", 2.0, {pod: 1.0 - s.kv_cache_utilization for pod, s in candidates}),
        ("prefix-cache-scorer", 3.0, dict.fromkeys(pods, 0.0)),  # the demo has no prefix cache
    ]
