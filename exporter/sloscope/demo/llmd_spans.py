"""The spans today's upstream exports for one agent call: Envoy, llm-d-router's EPP and sidecar, vLLM 0.33.

Shapes, names, kinds, scopes and attributes are those of llm-d-router ebab6879 and vLLM 0.33.0 as described
in fixtures/llm-d-router/spans.md and fixtures/vllm/llm_request-span-0.33.0.md; docs/demo.md draws the trees.
Every span is drawn by the catalogue (:mod:`sloscope.upstream`: ``envoy``, ``llmd_router``, ``pd_sidecar``,
``vllm``) from the simulation's decisions and times, written by the process's own provider
(:class:`~sloscope.demo.sdk_writer.SdkWriter`).
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
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sloscope.demo.agents import Call, Session
from sloscope.demo.calls import MODEL_SERVER_ERROR, CallRecord, Scheduling, SidecarTimes
from sloscope.demo.records import Completion, PodSnapshot, ns
from sloscope.demo.sdk_writer import SdkWriter
from sloscope.demo.spans import completion_attributes
from sloscope.upstream.envoy import Envoy, captured_headers
from sloscope.upstream.llmd_router import Epp, ProfileRun, ScorerRun, epp_process
from sloscope.upstream.pd_sidecar import Legs, Peer, Sidecar
from sloscope.upstream.vllm import VllmPod

__all__ = ["COMMIT", "LlmdSpanEmitter", "agent_context"]

COMMIT = "ebab687927f5331c1b39defcb579a07951bce56c"  # llm-d-router, the scope attribute commit-sha
BUILD_REF = "main"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
POD_PORT = 8000  # the pods' (and the decode pods' sidecars') API port
ENVOY_ADDRESS = "10.0.1.5"
CLIENT_ADDRESS = "10.0.3.7"
USER_AGENT = "AsyncOpenAI/Python 1.109.1"
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
        vllm = {
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
        sidecars = {pod: provider(sidecar) for pod in pods}
        self._providers = [self._envoy, self._epp, *vllm.values(), *sidecars.values()]
        self._addresses = {pod: f"10.0.0.{10 + i}" for i, pod in enumerate(pods)}
        self._model = model
        # the catalogue's shapes (sloscope.upstream), each process writing through its own provider
        self._gateway = Envoy(SdkWriter(self._envoy))
        self._catalogue = Epp(SdkWriter(self._epp), epp_process(), BUILD_REF)
        self._vllm = {pod: VllmPod(SdkWriter(made), pod) for pod, made in vllm.items()}
        self._sidecars = {pod: Sidecar(SdkWriter(made)) for pod, made in sidecars.items()}

    @property
    def providers(self) -> list[TracerProvider]:
        return self._providers

    def flush(self, timeout_millis: int = 10_000) -> bool:
        return all([p.force_flush(timeout_millis) for p in self.providers])

    def shutdown(self) -> None:
        for provider in self.providers:
            provider.shutdown()

    def emit(self, record: CallRecord) -> None:
        """Export the call's spans (see the module docstring for who is whose parent)."""
        call = record.call
        caller = _across(agent_context(record.session))  # the agent's traceparent, read by Envoy and the EPP
        self._ingress(record, caller)
        refused = record.orchestration_error
        gateway = self._catalogue.gateway(
            caller, ns(record.arrival), ns(record.end), error=refused,
            status=MODEL_SERVER_ERROR if refused is None and record.error == MODEL_SERVER_ERROR else None,
        )  # fmt: skip
        orchestration = self._catalogue.orchestration(
            gateway, ns(record.arrival), ns(record.routed), model=call.request.model, priority=call.priority,
            error=refused,
        )  # fmt: skip
        if call.pd is None:
            for scheduling in record.schedules:
                self._profile_run(call, scheduling, orchestration)
        else:
            self._disaggregated(record, orchestration)
        forwarded = _across(gateway)  # the traceparent the EPP injects towards the pod
        if record.sidecar is not None:
            self._sidecar(record, record.sidecar, forwarded)
        else:
            if record.prefill is not None:
                self._llm_request(record, record.prefill, forwarded, prefill=True)
            for completion in record.completions:
                self._llm_request(record, completion, forwarded)

    # ---- the gateway ------------------------------------------------------------------------------------------

    def _ingress(self, record: CallRecord, caller: Context) -> None:
        call, session = record.call, record.session
        prefix = "x-slo" if session.old_headers else "x-llm-d-slo"
        headers = {}
        if call.request.slo_ttft_ms is not None:
            headers[f"{prefix}-ttft-ms"] = f"{call.request.slo_ttft_ms:g}"
        if call.request.slo_tpot_ms is not None:
            headers[f"{prefix}-tpot-ms"] = f"{call.request.slo_tpot_ms:g}"
        attributes = captured_headers(
            request_id=call.request.request_id, headers=headers, path=call.path, status_code=record.http_status
        )
        self._gateway.ingress(caller, ns(record.arrival), ns(record.end), attributes, failed=record.http_status >= 500)

    # ---- the EPP ------------------------------------------------------------------------------------------------

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
        """The decode pod's sidecar (spans.md section 2), the pods' vLLM under its legs' POSTs."""
        call = record.call
        decode_pod, prefill_pod = (s.decision.pod for s in record.schedules)
        assert record.prefill is not None and record.completions
        sidecar = self._sidecars[decode_pod]
        prefill_target = f"{self._addresses[prefill_pod]}:{POD_PORT}"
        peer = Peer(
            server_address=self._addresses[decode_pod],
            server_port=POD_PORT,
            peer_address=ENVOY_ADDRESS,
            peer_port=43512,
            user_agent=USER_AGENT,
            client_address=CLIENT_ADDRESS,
            request_body_size=512 + 4 * call.request.prompt_tokens,
            response_body_size=64 + 6 * record.completions[0].completion_tokens,
        )
        server = sidecar.server(forwarded, ns(times.start), ns(times.end), path=call.path, peer=peer)
        forward = sidecar.forward_request(
            server, ns(times.forward_start), ns(times.forward_end), connector=times.connector, path=call.path,
            prefill_target=prefill_target,
        )  # fmt: skip
        legs = Legs(
            times.connector,
            times.request_uuid,
            ns(times.forward_start),
            prefill=(ns(times.prefill_start), ns(times.prefill_end)),
            prefill_post=(ns(times.prefill_post_start), ns(times.prefill_post_end)),
            decode=(ns(times.decode_start), ns(times.decode_end)),
            decode_post=(ns(times.decode_post_start), ns(times.decode_post_end)),
            streaming=call.api == "chat",
        )
        prefill_post, decode_post = sidecar.legs(forward, legs, path=call.path, prefill_target=prefill_target)
        self._llm_request(record, record.prefill, _across(prefill_post), prefill=True)
        self._llm_request(record, record.completions[0], _across(decode_post))

    def _llm_request(self, record: CallRecord, completion: Completion, parent: Context, prefill: bool = False) -> None:
        """vLLM 0.33's llm_request, set once at the end (output_processor.py do_tracing)."""
        call = record.call
        attributes = completion_attributes(
            completion, call.vllm_request_id, 1 if prefill else call.request.output_tokens
        )
        self._vllm[completion.pod].llm_request(
            parent, ns(completion.arrived), attributes, end_ns=ns(completion.finished)
        )


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
