"""Generated traces for the differential tests of the trace join (tests/unit/processors/test_native_join.py).

Every shape the join rules name, drawn at random from a seed: late-2025 traces (the EPP's span with
the headers, vLLM's below it), llm-d-router's (``gateway.request`` > orchestration > scheduling, vLLM
under it or beside it under the caller's span, an Envoy span with captured headers outside it),
agent traces of many calls with tool spans (now and then a long-lived session of 20 to 40 calls), P/D with
the routing sidecar's spans or without them (chunked decodes, decode stages that never come), ``n > 1``
choices, gateway requests that fail for each reason or are no LLM call, failed model-server spans, lone
model-server spans, traces whose gateway spans went to a trace of their own (joined by request id), traces
with no model-server span.
Then they are delivered as exporters deliver them: interleaved, in random order, split into batches,
with spans lost, resent (duplicates, retries) or late, and with the clock moving between batches
across every window. The shapes follow llm-d-router ebab6879 (``pkg/epp/handlers/server.go:460``,
``pkg/epp/requestcontrol/director.go:242-267``, ``pkg/epp/scheduling/scheduler_profile.go:153-382``; the
sidecar's ``forward_request`` at ``pkg/sidecar/proxy/chat_completions.go:66``, its ``prefill`` / ``decode``
legs at ``connector_nixlv2.go:87,296`` and ``llm_d.pd_proxy.prefill`` / ``.decode`` at
``connector_mooncake.go:201,243``) and vLLM 0.33.0's ``llm_request`` span, and every span an upstream writes is
drawn by the catalogue (:mod:`sloscope.upstream`). What the catalogue does not draw is either a caller's own span
(a client's, an agent's, a tool's: no upstream's) or a deliberate deformation of an upstream's shape (header forms
and values no one sends, a missing TTFT, a made-up span name), each marked where it is made.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sloscope.records import STATUS_ERROR, Span
from sloscope.upstream.coordinator import Coordinator
from sloscope.upstream.envoy import Envoy, captured_headers
from sloscope.upstream.gie_2025 import GATEWAY_REQUEST, Gie2025Epp, Vllm2025Pod, gateway_attributes
from sloscope.upstream.llmd_router import Epp
from sloscope.upstream.pd_sidecar import LOCAL_VLLM, Connector, Legs, Peer, Sidecar
from sloscope.upstream.vllm import LLM_REQUEST, VllmPod, llm_request_attributes, vllm_process
from sloscope.upstream.writer import Drawn, Process, Scope

MS = 1_000_000
T0 = 1_760_000_000_000_000_000
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B")
EPP = {"service.name": "llm-d-epp"}
EPP_PROCESS = Process(EPP)
PATH = "/v1/chat/completions"
PREFILL_ADDRESS, PREFILL_TARGET = "10.0.2.11", "10.0.2.11:8000"
PEER = Peer("10.0.3.7", "10.0.0.5", 50412, "Envoy/1.36", "10.0.0.5", 1834, 48211)
# (status message, HTTP code) of a gateway request that reached no model server: every failure reason.
FAILURES: tuple[tuple[str, int | None], ...] = (
    ("inference error: ResourceExhausted - flow control saturated", None),
    ("inference error: Internal - request cannot be admitted: latency-slo-admitter", None),
    ("inference error: ResourceExhausted - request timed out in queue", 429),
    ("context deadline exceeded", None),
    ("client disconnected", None),
    ("context canceled", 499),
    ("", None),  # no error at all: aborted when unanswered
    ("", 429),
    ("", 504),
    ("", 503),
    ("inference error: BadRequest - bad body", 400),
    ("upstream connect error", None),
)


# Trace states a sampler may have written: none (a ratio sampler that records nothing), OTEP 235 thresholds (every
# trace, one in two, the SDKs' 10 % and 1 % among other members), and malformed or withdrawn ones that say nothing.
TRACESTATES = (
    "",
    "",
    "",
    "ot=th:0",
    "ot=th:8",
    "ot=th:e6666666666666",
    "vendor=x, ot=rv:0123456789abcd;th:fd70a3d70a3d70",
    "ot=th:zz",
    "ot=p:3",
)


def tracestate_of(hex_id: str) -> str:
    """A trace state drawn from an id rather than from the shapes' random stream, so that the shapes drawn from a
    seed stay those of that seed."""
    try:
        return TRACESTATES[int(hex_id[-8:], 16) % len(TRACESTATES)]
    except ValueError:
        return ""


@dataclass
class Trace:
    """The spans of one trace being built, with a span id per span. Its spans carry the trace's trace state, but
    one in ten carries its own (a hop that sampled again, or propagated none)."""

    rng: random.Random
    trace_id: str
    start_ns: int
    spans: list[Span] = field(default_factory=list)

    def add(
        self,
        name: str,
        attributes: dict[str, Any],
        *,
        parent: str = "",
        resource: dict[str, Any] | None = None,
        at_ms: float = 0.0,
        length_ms: float = 1000.0,
        status: tuple[int, str] = (0, ""),
    ) -> str:
        span_id = f"{self.rng.getrandbits(64) | 1:016x}"
        start = self.start_ns + int(at_ms * MS)
        self.spans.append(
            Span(
                trace_id=self.trace_id,
                span_id=span_id,
                parent_span_id=parent,
                name=name,
                start_ns=start,
                end_ns=start + int(length_ms * MS),
                attributes=attributes,
                resource=resource if resource is not None else EPP,
                tracestate=tracestate_of(span_id if int(span_id[:2], 16) < 26 else self.trace_id),
                status_code=status[0],
                status_message=status[1],
            )
        )
        return span_id


class TraceWriter:
    """The catalogue's spans (:mod:`sloscope.upstream`) added to a :class:`Trace` (random span ids); ``status``:
    the status of a span the catalogue draws as a success (a model server's span that failed, which no upstream
    module of the catalogue draws)."""

    def __init__(self, trace: Trace, status: tuple[int, str] = (0, "")) -> None:
        self.trace, self.status = trace, status

    def span(self, process: Process, scope: Scope, drawn: Drawn[str]) -> str:
        del scope
        failure = drawn.failure
        return self.trace.add(
            drawn.name,
            dict(drawn.attributes),
            parent=drawn.parent or "",
            resource=dict(process.attributes),
            at_ms=(drawn.start_ns - self.trace.start_ns) / MS,
            length_ms=(drawn.end_ns - drawn.start_ns) / MS,
            status=(STATUS_ERROR, failure) if failure is not None else self.status,
        )


class Shapes:
    """Builders of the upstream shapes, drawing every free choice from ``rng``."""

    def __init__(self, rng: random.Random, *, cross: bool = True) -> None:
        self.rng = rng
        self.serial = 0
        self.cross = cross  # calls split across traces (joined by request id) among the shapes

    def trace(self) -> Trace:
        rng = self.rng
        return Trace(rng, f"{rng.getrandbits(128) | 1:032x}", T0 + rng.randrange(10**12))

    def request_id(self) -> str:
        self.serial += 1
        if self.rng.random() < 0.02:
            return f"réq-{self.serial}"  # not ASCII: the native join asks Python's re
        return f"{self.serial:08x}-{self.rng.getrandbits(32):08x}"

    def pod(self) -> str:
        return f"vllm-{self.rng.randrange(4)}"

    def headers(self) -> dict[str, Any]:
        """SLO headers as a gateway captured them: deliberately in every form the mapping reads (arrays or plain,
        either generation's names), and with values no client should send (padded, not numbers)."""
        rng, out = self.rng, {}
        form = rng.choice(("http.request.header.x-llm-d-slo-", "x-llm-d-slo-", "http.request.header.x-slo-", "x-slo-"))
        if rng.random() < 0.7:
            value = rng.choice(("200", "500", " 1000 ", "abc", "1_5"))
            out[f"{form}ttft-ms"] = [value] if form.startswith("http.") else value
        if rng.random() < 0.5:
            value = rng.choice(("50", "100", "nan"))
            out[f"{form}tpot-ms"] = [value] if form.startswith("http.") else value
        if rng.random() < 0.15:
            out["http.request.header.x-prediction-based-scheduling"] = [rng.choice(("true", "false", "maybe"))]
        if rng.random() < 0.1:
            out["x-prediction-based-scheduling-off"] = ""
        return out

    def vllm(
        self,
        trace: Trace,
        parent: str,
        request_id: str,
        *,
        at_ms: float,
        form: str = "chatcmpl-{}",
        status: tuple[int, str] = (0, ""),
        made_up_name: str | None = None,
        late2025: bool = False,
    ) -> str:
        """A model server's span: vLLM 0.33's ``llm_request`` as the catalogue draws it (the late-2025 vLLM's with
        ``late2025``), with the response's model set and random stage times, sometimes deformed."""
        rng = self.rng
        ttft = round(rng.uniform(0.01, 0.8), 4)
        e2e = round(ttft + rng.uniform(0.0, 3.0), 4)
        model = rng.choice(MODELS)
        prompt_tokens = rng.randint(1, 4000)
        completion_tokens = rng.choice((0, 1, 2, rng.randint(3, 900)))
        queue, prefill = round(rng.uniform(0, 0.1), 4), round(rng.uniform(0, 0.3), 4)
        decode = round(rng.uniform(0, 2), 4)
        attributes = llm_request_attributes(
            request_id=form.format(request_id), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            ttft=ttft, e2e=e2e, queue=queue, prefill=prefill, decode=decode, inference=prefill + decode,
            max_tokens=1024, top_p=1.0, temperature=0.7, model=model,
        )  # fmt: skip
        if rng.random() < 0.1:  # deformed: no TTFT, which no engine of the catalogue leaves out
            del attributes["gen_ai.latency.time_to_first_token"]
        if rng.random() < 0.05:
            attributes["gen_ai.request.id"] = rng.randrange(10**6)  # an integer id, as TensorRT-LLM's (no module here)
        start = trace.start_ns + int(at_ms * MS)
        end = start + int(e2e * 1000 * MS)
        writer, pod = TraceWriter(trace, status), self.pod()
        if made_up_name is not None:  # deformed: a name no upstream writes, on a span that anchors all the same
            return trace.add(
                made_up_name, attributes, parent=parent, resource=dict(vllm_process(pod).attributes), at_ms=at_ms,
                length_ms=e2e * 1000, status=status,
            )  # fmt: skip
        if late2025:
            return Vllm2025Pod(writer, vllm_process(pod)).llm_request(parent, start, end, attributes)
        return VllmPod(writer, pod).llm_request(parent, start, attributes, end_ns=end)

    def epp(
        self,
        trace: Trace,
        parent: str,
        request_id: str,
        *,
        at_ms: float,
        scheduled: bool = True,
        status: tuple[int, str] = (0, ""),
    ) -> str:
        """llm-d-router's EPP spans of one call, as the catalogue draws them; returns the gateway span's id."""
        return self.epp_call(trace, parent, request_id, at_ms=at_ms, scheduled=scheduled, status=status)[0]

    def epp_call(
        self,
        trace: Trace,
        parent: str,
        request_id: str,
        *,
        at_ms: float,
        scheduled: bool = True,
        status: tuple[int, str] = (0, ""),
    ) -> tuple[str, str, str]:
        """:meth:`epp`, returning the gateway span's id, the orchestration span's and the call's model."""
        model = self.rng.choice(MODELS)
        first = len(trace.spans)
        gateway = Epp(TraceWriter(trace), EPP_PROCESS).call(
            parent,
            *self.epp_call_times(trace, at_ms),
            request_id=request_id,
            model=model,
            scorers=self.scorers() if scheduled else None,
            status=status[1] if status[0] else None,
        )
        return gateway, trace.spans[first + 1].span_id, model  # Epp.call draws the orchestration second

    @staticmethod
    def epp_call_times(trace: Trace, at_ms: float) -> tuple[int, int]:
        """When an EPP call ``at_ms`` into the trace starts and ends: each lasts four seconds."""
        start = trace.start_ns + int(at_ms * MS)
        return start, start + 4000 * MS

    def scorers(self) -> tuple[str]:
        """The one scorer of an EPP call's profile run."""
        return (self.rng.choice(("latency-scorer", "prefix-cache-scorer")),)

    # ---- one LLM call ----------------------------------------------------------------------

    def call(self, trace: Trace, parent: str, at_ms: float) -> None:
        """One LLM call of some shape under ``parent`` (a caller's span, or none)."""
        kind = self.rng.choices(
            ("late2025", "llmd", "llmd_sibling", "pd", "choices", "failed", "failed_anchor", "lone", "coordinator"),
            (3, 4, 2, 2, 1, 2, 1, 1, 2),
        )[0]
        getattr(self, f"_{kind}")(trace, parent, at_ms)

    def late2025_gateway(
        self, trace: Trace, parent: str, attributes: dict[str, Any], *, at_ms: float = 0.0, length_ms: float = 1000.0
    ) -> str:
        """The late-2025 EPP's gateway.request as the catalogue draws it, with the attributes a gateway tagged it
        with (the request id as a plain ``x-request-id``, the headers of :meth:`headers`)."""
        start = trace.start_ns + int(at_ms * MS)
        return Gie2025Epp(TraceWriter(trace), EPP_PROCESS).gateway(
            parent, start, start + int(length_ms * MS), attributes
        )

    def envoy(self, trace: Trace, parent: str, attributes: dict[str, Any], *, at_ms: float, length_ms: float) -> str:
        """Envoy's ingress span as the catalogue draws it, with ``attributes`` as its tags."""
        start = trace.start_ns + int(at_ms * MS)
        return Envoy(TraceWriter(trace)).ingress(parent, start, start + int(length_ms * MS), attributes)

    def _late2025(self, trace: Trace, parent: str, at_ms: float) -> None:
        request_id = self.request_id()
        extra = {"x-request-id": request_id, **self.headers()}
        attributes = gateway_attributes(model=self.rng.choice(MODELS), extra=extra)
        if self.rng.random() < 0.3:  # the predictions a deployment's gateway may tag (the attribute mapping reads them)
            attributes["llm_d.predicted_ttft_ms"] = 120.5
            attributes["prefix_cache_score"] = 0.5
        gateway = self.late2025_gateway(trace, parent, attributes, at_ms=at_ms, length_ms=3000)
        self.vllm(trace, gateway, request_id, at_ms=at_ms + 5, late2025=True)

    def _llmd(self, trace: Trace, parent: str, at_ms: float) -> None:
        request_id = self.request_id()
        envoy = ""
        if self.rng.random() < 0.4:  # Envoy's span with the captured headers encloses the EPP's
            tags = {**captured_headers(request_id=request_id, headers={}), **self.headers()}
            envoy = self.envoy(trace, parent, tags, at_ms=at_ms - 1, length_ms=6000)
        gateway = self.epp(trace, envoy or parent, request_id, at_ms=at_ms)
        self.vllm(trace, gateway, request_id, at_ms=at_ms + 5)

    def _llmd_sibling(self, trace: Trace, parent: str, at_ms: float) -> None:
        """The caller's traceparent won at the gateway: vLLM's span is a sibling of gateway.request."""
        request_id = self.request_id()
        self.epp(trace, parent, request_id, at_ms=at_ms)
        if self.rng.random() < 0.5:  # the request id as an Envoy custom tag
            self.envoy(trace, parent, {"x-request-id": request_id, **self.headers()}, at_ms=at_ms - 1, length_ms=1000)
        self.vllm(trace, parent, request_id, at_ms=at_ms + 5)

    def _pd(self, trace: Trace, parent: str, at_ms: float) -> None:
        """P/D: the EPP's call (with prepare_disaggregation, or without, as if its span was lost), the decode pod's
        sidecar's spans and both pods' model-server spans; or sidecar tracing off (its default)."""
        rng = self.rng
        request_id = self.request_id()
        gateway, orchestration, model = self.epp_call(trace, parent, request_id, at_ms=at_ms)
        if rng.random() < 0.6:
            start = trace.start_ns + int((at_ms + 3) * MS)
            Epp(TraceWriter(trace), EPP_PROCESS).prepare_disaggregation(
                orchestration, start, start + MS, request_id=request_id, model=model,
                prefill_address=PREFILL_ADDRESS,
            )  # fmt: skip
        if rng.random() < 0.3:  # sidecar tracing off: two model-server spans under the gateway
            self.vllm(trace, gateway, request_id, at_ms=at_ms + 5)
            if rng.random() < 0.8:
                self.vllm(trace, gateway, request_id, at_ms=at_ms + 50)
            return
        connector: Connector = rng.choice(("nixlv2", "offloading"))  # legs prefill/decode, or llm_d.pd_proxy.*
        ms = [trace.start_ns + int((at_ms + offset) * MS) for offset in (3, 4, 5, 58, 60, 3000, 3001, 3002)]
        sidecar = Sidecar(TraceWriter(trace))
        forward = gateway  # deformed: the legs straight under the gateway, the sidecar's server spans missing
        if rng.random() < 0.8:
            if rng.random() < 0.5:
                forward = sidecar.forward_request(
                    gateway, ms[1], ms[6], connector=connector, path=PATH, prefill_target=PREFILL_TARGET
                )
            else:  # otelhttp's server span alone, its forward_request lost
                forward = sidecar.server(gateway, ms[0], ms[7], path=PATH, peer=PEER)
        first = len(trace.spans)
        legs = Legs(connector, "5f0c6a3e", ms[1], (ms[2], ms[3]), (ms[2], ms[3]), (ms[4], ms[5]), (ms[4], ms[5]))
        prefill_post, decode_post = sidecar.legs(forward, legs, path=PATH, prefill_target=PREFILL_TARGET)
        self.vllm(trace, prefill_post, request_id, at_ms=at_ms + 6)
        if rng.random() >= 0.85:  # the decode stage never came: the decode leg and its POST not exported either
            del trace.spans[first + 2 : first + 4]
            return
        chunks = rng.choice((1, 1, 2))
        self.vllm(trace, decode_post, request_id, at_ms=at_ms + 61)
        if chunks == 2:  # --decode-chunk-size: the second chunk's POST under chunked_decode, under the decode leg
            decode = trace.spans[first + 2].span_id
            chunked = sidecar.chunked_decode(decode, ms[4], ms[5], chunk_size=256, chunks=2, total_tokens=300)
            start = trace.start_ns + int((at_ms + 561) * MS)
            post = sidecar.post(chunked, start, ms[5], target=LOCAL_VLLM, path=PATH)
            self.vllm(trace, post, request_id, at_ms=at_ms + 561)

    def _coordinator(self, trace: Trace, parent: str, at_ms: float) -> None:
        """llm-d's coordinator: an EPP call per phase, each with the client's request id, after a conditional-decode
        probe the EPP may refuse; the model servers' spans under their EPP's (its traceparent won) or beside them."""
        rng = self.rng
        request_id = self.request_id()
        coordinator = Coordinator(Epp(TraceWriter(trace), EPP_PROCESS))
        beside = rng.random() < 0.5
        if rng.random() < 0.6:
            coordinator.probe(
                parent, *self.epp_call_times(trace, at_ms), request_id=request_id, model=rng.choice(MODELS),
                scorers=self.scorers(),
            )  # fmt: skip
        phases = ["encode"] * rng.choice((0, 0, 1, 2)) + ["prefill", "decode"]
        if rng.random() < 0.15:
            phases.pop()  # the decode leg never came
        for i, phase in enumerate(phases):
            at = at_ms + 10 + 4100 * i
            gateway = coordinator.leg(
                parent, phase, *self.epp_call_times(trace, at), request_id=request_id, model=rng.choice(MODELS),
                scorers=self.scorers(),
            )  # fmt: skip
            self.vllm(trace, parent if beside else gateway, request_id, at_ms=at + 5)

    def _choices(self, trace: Trace, parent: str, at_ms: float) -> None:
        request_id = self.request_id()
        if self.rng.random() < 0.5:
            parent = self.epp(trace, parent, request_id, at_ms=at_ms)
        elif not parent:  # the caller's own span (no upstream's), with the request id
            parent = trace.add("client", {"x-request-id": request_id}, at_ms=at_ms - 1)
        for i in range(self.rng.randint(2, 4)):
            self.vllm(trace, parent, request_id, at_ms=at_ms + 5 + i, form="cmpl-{}-" + str(i))

    def _failed(self, trace: Trace, parent: str, at_ms: float) -> None:
        rng = self.rng
        request_id = self.request_id()
        message, code = rng.choice(FAILURES)
        status = (STATUS_ERROR, message) if message else (0, "")
        if rng.random() < 0.25:  # late-2025: the headers on the EPP's span, or a passthrough with none
            attributes: dict[str, Any] = {"x-request-id": request_id}
            if rng.random() < 0.8:
                attributes = gateway_attributes(model=rng.choice(MODELS), extra={**attributes, **self.headers()})
            if code is not None:
                attributes["http.response.status_code"] = code
            # the failure's status on it: the catalogue's late-2025 EPP draws none, so the name alone is its
            trace.add(GATEWAY_REQUEST, attributes, parent=parent, at_ms=at_ms, status=status)
            return
        gateway = self.epp(trace, parent, request_id, at_ms=at_ms, scheduled=rng.random() < 0.5)
        if status[0]:  # deformed: a made-up child span that failed with the message (no upstream writes it)
            trace.add("gateway.request_error", {}, parent=gateway, status=status)
        if code is not None:  # Envoy's status code and the request id as a custom tag
            envoy = {"http.status_code": str(code), "x-request-id": request_id}
            self.envoy(trace, parent, envoy, at_ms=at_ms - 1, length_ms=6000)

    def _failed_anchor(self, trace: Trace, parent: str, at_ms: float) -> None:
        request_id = self.request_id()
        gateway = self.epp(trace, parent, request_id, at_ms=at_ms)
        message = self.rng.choice(("engine dead", "request timed out", "client disconnected"))
        self.vllm(trace, gateway, request_id, at_ms=at_ms + 5, status=(STATUS_ERROR, message))

    def _lone(self, trace: Trace, parent: str, at_ms: float) -> None:
        name = self.rng.choice((LLM_REQUEST, "sglang.request"))  # any span with gen_ai.latency.e2e anchors
        self.vllm(trace, parent, self.request_id(), at_ms=at_ms, made_up_name=None if name == LLM_REQUEST else name)

    # ---- whole traces ----------------------------------------------------------------------

    def traces(self) -> list[Trace]:
        """One to three traces: a single call, an agent's calls, or a call split across traces."""
        rng = self.rng
        kind = rng.choices(("single", "agent", "cross", "no_anchor"), (8, 2, 2 if self.cross else 0, 1))[0]
        trace = self.trace()  # client, agent.run, tool.call, batch.job: the callers' own spans, no upstream's
        if kind == "single":
            parent = trace.add("client", {}, at_ms=-2, length_ms=9000) if rng.random() < 0.3 else ""
            self.call(trace, parent, 0)
        elif kind == "agent":
            root = trace.add("agent.run", rng.choice(({}, {"agent.name": "planner"})), length_ms=60000)
            calls = rng.randint(2, 8) if rng.random() > 0.03 else rng.randint(20, 40)  # a long-lived session, at times
            for i in range(calls):
                if rng.random() < 0.5:
                    trace.add("tool.call", {}, parent=root, at_ms=1000 * i + 900)  # carries nothing
                self.call(trace, root, 1000 * i)
        elif kind == "cross":
            return self._cross(trace)
        else:
            root = trace.add("batch.job", {}, length_ms=5000)
            trace.add("tool.call", {"x-request-id": self.request_id()}, parent=root)
        return [trace]

    def _cross(self, trace: Trace) -> list[Trace]:
        """EPPs before 2026: the gateway spans in a trace of their own, vLLM's in the caller's."""
        rng = self.rng
        request_id = self.request_id()
        epp = self.trace()
        if rng.random() < 0.5:
            extra = {"x-request-id": request_id, **self.headers()}
            self.late2025_gateway(epp, "", gateway_attributes(model=MODELS[0], extra=extra))
        else:
            self.epp(epp, "", request_id, at_ms=0)
        parent = trace.add("client", {}, at_ms=-1) if rng.random() < 0.5 else ""
        self.vllm(trace, parent, request_id, at_ms=5)
        return [epp, trace] if rng.random() < 0.5 else [trace, epp]


# ---- delivery ---------------------------------------------------------------------------------

Step = tuple[str, Any]  # ("spans", list[Span]) or ("advance", seconds)


def deliveries(rng: random.Random, traces: int, *, cross: bool = True) -> Iterator[Step]:
    """``traces`` generated traces as exporters deliver them, with the clock advancing between batches;
    without ``cross``, no call is split across traces."""
    shapes = Shapes(rng, cross=cross)
    sent: list[Span] = []
    delayed: list[Span] = []
    made = 0
    while made < traces:
        pool: list[Span] = []
        for _ in range(rng.randint(1, 12)):  # traces in flight together
            for trace in shapes.traces():
                pool.extend(trace.spans)
                made += 1
        pool = [s for s in pool if rng.random() > 0.03]  # lost on the way: missing parents, missing gateways
        if rng.random() < 0.7:
            rng.shuffle(pool)
        else:  # children end, and are exported, before their parents
            pool.sort(key=lambda s: (s.end_ns, s.span_id))
        for span in list(pool):
            if rng.random() < 0.03:
                pool.remove(span)
                delayed.append(span)  # held back in an exporter's queue: late, or still in time
        while pool:
            size = rng.choice((1, 2, 3, 5, 8, 20, 64))
            batch, pool = pool[:size], pool[size:]
            if sent and rng.random() < 0.05:  # an exporter retried a batch it had sent
                batch = batch + rng.sample(sent, min(len(sent), rng.randint(1, 3)))
            if delayed and rng.random() < 0.2:
                batch = [*batch, delayed.pop(0)]
            sent.extend(batch)
            del sent[:-200]
            yield ("spans", batch)
            yield ("advance", _advance(rng))
    if delayed:
        yield ("spans", delayed)
    yield ("advance", 40.0)


def _advance(rng: random.Random) -> float:
    """Mostly a moment; sometimes past the join window, the failure window, a trace's time to live,
    or a long decode's max_request_seconds."""
    return rng.choices((0.0, 0.3, 1.5, 5.0, 16.0, 31.0, 700.0), (30, 30, 20, 8, 5, 3, 1))[0]
