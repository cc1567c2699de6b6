"""Realistic OTLP trace exports for the benchmark: the catalogue's shapes (sloscope.upstream), written as
opentelemetry.proto messages directly (``build``) or by the demo's emitter over the OpenTelemetry SDK (``build_llmd``).

``build``: every request is one trace of two spans, as the late-2025 EPP and vLLM emit them
(:mod:`sloscope.upstream.gie_2025`):

* ``gateway.request`` (the EPP, root span): the captured request headers ``x-slo-ttft-ms``,
  ``x-slo-tpot-ms`` and ``x-request-id`` as OpenTelemetry string arrays, and ``gen_ai.request.model``;
* ``llm_request`` (vLLM, child of the gateway span): request id, token counts,
  latencies, sampling parameters; resource ``service.name`` and ``k8s.pod.name`` (one of N pods).

One export holds the spans of ``batch_spans / 2`` requests the way an OpenTelemetry Collector
forwards them: one ``ResourceSpans`` per vLLM pod that served some of them, then one for the EPP
(a child span ends, and is exported, before its parent). The SLO headers vary so that every class
of the built-in SLO spec (interactive, standard, none) occurs, and latencies vary so that some
requests meet their SLOs and some miss them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from sloscope.testing import key_values
from sloscope.upstream import gie_2025
from sloscope.upstream.vllm import vllm_033_attributes
from sloscope.upstream.writer import Drawn, Process, Scope

MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct")

# (x-slo-ttft-ms, x-slo-tpot-ms, weight): None means the header is absent.
SLO_HEADERS: tuple[tuple[str | None, str | None, int], ...] = (
    ("200", "50", 3),  # interactive, tight
    ("500", None, 2),  # interactive, TTFT only
    ("1000", "100", 2),  # interactive, loose
    ("2000", "150", 1),  # standard
    (None, "80", 1),  # standard, TPOT only
    (None, None, 1),  # no SLO: the default class
)
_WEIGHTS = [w for _, _, w in SLO_HEADERS]


@dataclass(frozen=True)
class PayloadSet:
    payloads: list[bytes]
    spans: int
    requests: int  # traces, i.e. joined requests sloscope will count in sloscope_requests_total

    @property
    def size_bytes(self) -> int:
        return sum(len(p) for p in self.payloads)


_KINDS = {"server": Span.SPAN_KIND_SERVER, "internal": Span.SPAN_KIND_INTERNAL, "client": Span.SPAN_KIND_CLIENT}


class _ProtoWriter:
    """The catalogue's spans as OTLP protobuf spans of trace ``trace_id``, span ids numbered from ``next_id`` (a span's
    handle: its id), kept per process until :meth:`export` puts them in one request."""

    def __init__(self) -> None:
        self.trace_id, self.next_id = b"", 0
        self._kept: dict[int, tuple[Scope, list[Span]]] = {}  # by the process's identity: a Process is unhashable

    def span(self, process: Process, scope: Scope, drawn: Drawn[bytes]) -> bytes:
        span_id, self.next_id = self.next_id.to_bytes(8, "big"), self.next_id + 1
        proto = Span(
            trace_id=self.trace_id,
            span_id=span_id,
            parent_span_id=drawn.parent or b"",
            name=drawn.name,
            kind=_KINDS[drawn.kind],
            start_time_unix_nano=drawn.start_ns,
            end_time_unix_nano=drawn.end_ns,
            attributes=key_values(dict(drawn.attributes)),
        )
        self._kept.setdefault(id(process), (scope, []))[1].append(proto)
        return span_id

    def export(self, processes: Sequence[Process]) -> ExportTraceServiceRequest:
        """One ResourceSpans per process of ``processes`` that wrote spans, in that order; then forgets them."""
        export = ExportTraceServiceRequest()
        for process in processes:
            kept = self._kept.get(id(process))
            if kept is None:
                continue
            scope, spans = kept
            scope_spans = ScopeSpans(scope=InstrumentationScope(name=scope.name, version=scope.version), spans=spans)
            resource = Resource(attributes=key_values(dict(process.attributes)))
            export.resource_spans.append(ResourceSpans(resource=resource, scope_spans=[scope_spans]))
        self._kept.clear()
        return export


def build(total_spans: int, batch_spans: int = 512, pods: int = 8, seed: int = 1, first_request: int = 0) -> PayloadSet:
    """Serialized exports holding ``total_spans`` spans (rounded up to whole requests and batches).

    ``first_request`` offsets every trace, span and request id, so that two sets built with
    disjoint ranges (warm-up and measured) never share a trace.
    """
    if batch_spans < 2 or batch_spans % 2:
        raise ValueError("batch_spans must be an even number >= 2 (two spans per request)")
    rng = random.Random(seed)
    per_batch = batch_spans // 2
    batches = -(-total_spans // batch_spans)
    writer = _ProtoWriter()
    epp_process = Process({"service.name": "epp", "k8s.pod.name": "epp-5d8f7b6c9-x2k4p"})
    pod_processes = [
        Process({"service.name": "vllm", "k8s.pod.name": f"vllm-{i % len(MODELS)}-{i:02d}-7f9c4"}) for i in range(pods)
    ]
    epp = gie_2025.Gie2025Epp(writer, epp_process)
    vllm_pods = [gie_2025.Vllm2025Pod(writer, process) for process in pod_processes]
    now_ns = time.time_ns()
    payloads: list[bytes] = []
    n = first_request
    for _ in range(batches):
        for _ in range(per_batch):
            n += 1
            pod = rng.randrange(pods)
            writer.trace_id, writer.next_id = (0x5105C09E << 96 | n).to_bytes(16, "big"), 2 * n
            _request(rng, n, now_ns + n * 1_000_000, model=MODELS[pod % len(MODELS)], epp=epp, pod=vllm_pods[pod])
        payloads.append(writer.export([*pod_processes, epp_process]).SerializeToString())
    requests = batches * per_batch
    return PayloadSet(payloads, spans=2 * requests, requests=requests)


def _request(
    rng: random.Random,
    n: int,
    start_ns: int,
    *,
    model: str,
    epp: gie_2025.Gie2025Epp[bytes],
    pod: gie_2025.Vllm2025Pod[bytes],
) -> None:
    """The EPP's gateway span and vLLM's child span of request number ``n``."""
    request_id = f"{n:08x}-6b1f-4c2e-9a7d-{rng.getrandbits(48):012x}"
    ttft_ms, tpot_ms, _ = rng.choices(SLO_HEADERS, _WEIGHTS)[0]

    prompt_tokens = rng.randint(32, 4096)
    completion_tokens = rng.randint(1, 1024)
    queue = rng.expovariate(1 / 0.05)
    ttft = queue + prompt_tokens * rng.uniform(0.00005, 0.0002) + rng.uniform(0.005, 0.02)
    tpot = rng.lognormvariate(-3.4, 0.45)  # median ~33 ms, some over 100 ms
    e2e = ttft + tpot * max(completion_tokens - 1, 0)
    end_ns = start_ns + int(e2e * 1e9)

    headers = gie_2025.gateway_attributes(slo_ttft_ms=ttft_ms, slo_tpot_ms=tpot_ms, model=model, request_id=request_id)
    gateway = epp.gateway(None, start_ns - 2_000_000, end_ns + 1_000_000, headers)
    attributes = vllm_033_attributes(
        request_id=f"chatcmpl-{request_id}",
        ttft=ttft,
        e2e=e2e,
        completion_tokens=completion_tokens,
        prompt_tokens=prompt_tokens,
        queue=queue,
        max_tokens=1024,
        temperature=rng.choice((0.0, 0.7, 1.0)),
    )
    pod.llm_request(gateway, start_ns, end_ns, attributes)


# ---- today's upstream: agent traces and P/D requests ------------------------------------------------------------

LLMD_PODS = tuple(f"vllm-{i}" for i in range(8))
_T0 = 1_764_582_000.0


def build_llmd(
    total_spans: int,
    batch_spans: int = 512,
    calls_per_trace: int = 4,
    pd_share: float = 0.25,
    seed: int = 1,
    *,
    first_session: int = 0,
) -> PayloadSet:
    """Exports of agent sessions as today's llm-d stack sends them, made by the demo's span emitter.

    Each trace is one agent session of ``calls_per_trace`` sequential LLM calls (the agent's root span is never
    exported); a call is Envoy's ``ingress`` and the EPP's ``gateway.request`` with its scheduling spans, then
    either vLLM's ``llm_request`` on one pod or, for ``pd_share`` of the calls, a P/D request through the decode
    pod's routing sidecar (NIXL: the prefill leg, then the decode leg, each with its own ``llm_request``). Spans
    are exported in the order the processes finish them, ``batch_spans`` (about) per export, as a Collector's
    batch processor forwards them: an export holds about one call of each of the sessions in flight, and a call's
    spans may straddle two exports. ``requests`` counts LLM calls. ``first_session`` offsets the sessions' numbers,
    from which their trace ids are made (``seed`` changes span ids, not trace ids): sets sent to one server need
    disjoint ranges, or a later set continues the traces of an earlier one.
    """
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sloscope.demo.llmd_spans import LlmdSpanEmitter

    random.seed(seed)  # the SDK draws span ids from the random module: the same bytes every run
    rng = random.Random(seed)
    exporter = InMemorySpanExporter()
    emitter = LlmdSpanEmitter(LLMD_PODS, lambda: SimpleSpanProcessor(exporter), model=MODELS[0])
    payloads: list[bytes] = []
    pending: list = []
    spans = requests = 0
    session_number = first_session
    group = max(1, batch_spans // 16)  # sessions in flight at once: about one call of each per export
    while spans < total_spans:
        sessions = [_session_records(rng, session_number + i + 1, calls_per_trace, pd_share) for i in range(group)]
        session_number += group
        for wave in zip(*sessions, strict=True):  # call k of every session, then call k + 1 (calls are sequential)
            for record in wave:
                emitter.emit(record)
                requests += 1
                pending.extend(exporter.get_finished_spans())
                exporter.clear()
                if len(pending) >= batch_spans:
                    payloads.append(encode_spans(pending).SerializeToString())
                    spans += len(pending)
                    pending = []
    if pending:
        payloads.append(encode_spans(pending).SerializeToString())
        spans += len(pending)
    emitter.shutdown()
    return PayloadSet(payloads, spans=spans, requests=requests)


def _session_records(rng: random.Random, number: int, calls: int, pd_share: float) -> list:
    """The call records of one agent session: sequential calls with a short think time between them."""
    from sloscope.demo.agents import Call, Session
    from sloscope.demo.calls import CallRecord, Scheduling, SidecarTimes
    from sloscope.demo.records import PodSnapshot, SimRequest
    from sloscope.demo.router import Decision
    from sloscope.predictor.features import Features

    # Every session carries an SLO header: a call without one waits for its chain to the trace root, which an
    # agent trace never sends, so it would stay pending for the join window and measure the window, not the work.
    ttft_ms, tpot_ms, _ = rng.choices(SLO_HEADERS[:-1], _WEIGHTS[:-1])[0]
    slo_class = "interactive" if ttft_ms in ("200", "500", "1000") else "standard" if ttft_ms or tpot_ms else "none"
    plans = []
    for i in range(calls):
        request = SimRequest(
            f"{number:08x}-{i:04x}-4c1a-9a57-{rng.getrandbits(48):012x}",
            slo_class,
            MODELS[0],
            rng.randint(32, 4096),
            rng.randint(2, 512),
            float(ttft_ms) if ttft_ms else None,
            float(tpot_ms) if tpot_ms else None,
            0.0,
        )
        plans.append(Call(request, "chat", pd="nixl" if rng.random() < pd_share else None))
    session = Session((0x11D0 << 112) | number, (number << 8) | 1, slo_class, False, tuple(plans))
    records = []
    at = _T0 + number * 0.01
    for call in plans:
        pod, other = rng.sample(LLMD_PODS, 2)
        states = tuple(
            (p, PodSnapshot(rng.randint(0, 4), rng.randint(1, 16), rng.uniform(0.1, 0.9))) for p in LLMD_PODS
        )
        features = Features(0.5, call.request.prompt_tokens, 0, 8, 1, 0.0)
        decision = Decision(pod, "predicted", features, 300.0, 40.0, states, tuple(rng.random() for _ in LLMD_PODS))
        queue = rng.expovariate(1 / 0.02)
        ttft = queue + call.request.prompt_tokens * rng.uniform(0.00005, 0.0002)
        tokens = call.request.output_tokens
        e2e = ttft + rng.lognormvariate(-3.4, 0.45) * (tokens - 1)

        completion = partial(_completion, queue=queue, prompt_tokens=call.request.prompt_tokens)
        decode_schedule = Scheduling("decode" if call.pd else "predicted-latency", at, at + 0.004, decision)
        if call.pd is None:
            done = completion(pod, at + 0.005, ttft, e2e, tokens)
            record = CallRecord(session, call, at, done.finished + 0.001, at + 0.004, (decode_schedule,), (done,))
        else:
            prefill_decision = Decision(other, "predicted", features, 300.0, 40.0, states)
            schedules = (decode_schedule, Scheduling("prefill", at + 0.004, at + 0.005, prefill_decision))
            prefill = completion(other, at + 0.0071, ttft, ttft, 1)
            start = prefill.finished + 0.001
            decode = completion(pod, start, 0.03, 0.03 + (e2e - ttft), tokens)
            times = SidecarTimes(
                "nixlv2", f"uuid-{number}-{len(records)}", at + 0.006, at + 0.0062, at + 0.0065, at + 0.0070,
                prefill.finished, prefill.finished + 0.0001, start - 0.0003, start - 0.0001,
                decode.finished + 0.0001, decode.finished + 0.0002, decode.finished + 0.0003, decode.finished + 0.0005,
            )  # fmt: skip
            record = CallRecord(
                session, call, at, times.end + 0.0005, at + 0.0055, schedules, (decode,), prefill=prefill, sidecar=times
            )
        records.append(record)
        at = record.end + rng.uniform(0.1, 0.6)
    return records


def _completion(
    where: str, arrived: float, ttft: float, e2e: float, tokens: int, *, queue: float, prompt_tokens: int
) -> object:
    from sloscope.demo.records import Completion

    return Completion(where, arrived, arrived + queue, arrived + ttft, arrived + e2e, prompt_tokens, tokens)
