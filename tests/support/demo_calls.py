"""Builders for the llm-d demo's tests: hand-made calls and call records with exact times, and captured spans."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sloscope.demo.agents import Call, Session
from sloscope.demo.calls import CallRecord, Scheduling, SidecarTimes
from sloscope.demo.llmd_spans import LlmdSpanEmitter
from sloscope.demo.records import Completion, PodSnapshot, SimRequest
from sloscope.demo.router import Decision
from sloscope.predictor.features import Features

T0 = 1_764_582_000.0
RID = "7d1c2b8e-4c1a-4f39-9a57-2f8f3f8d0c11"
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
ROOT_SPAN_ID = 0x00F067AA0BA902B7
PODS = ("vllm-0", "vllm-1", "vllm-2")
STATES = (("vllm-0", PodSnapshot(4, 20, 0.5)), ("vllm-1", PodSnapshot(0, 8, 0.25)), ("vllm-2", PodSnapshot(2, 10, 0.3)))
FEATURES = Features(0.25, 450, 0, 8, 1, 0.0)


def request(slo_class: str = "interactive", ttft_ms: float | None = 500.0, tpot_ms: float | None = 50.0) -> SimRequest:
    return SimRequest(RID, slo_class, "meta-llama/Llama-3.1-8B-Instruct", 600, 100, ttft_ms, tpot_ms, T0)


def session(call: Call, old_headers: bool = False) -> Session:
    return Session(TRACE_ID, ROOT_SPAN_ID, call.request.slo_class, old_headers, (call,))


def decision(pod: str = "vllm-1", routing: str = "predicted", scored: bool = True) -> Decision:
    scores = (0.0, 1.0, 0.5) if routing == "predicted" and scored else ()
    return Decision(pod, routing, FEATURES, 300.0, 40.0, STATES, scores)


def completion(pod: str, arrived: float, ttft: float, e2e: float, tokens: int, queue: float = 0.002) -> Completion:
    return Completion(pod, arrived, arrived + queue, arrived + ttft, arrived + e2e, 600, tokens)


def single(call: Call, routing: str = "predicted") -> CallRecord:
    """A call served by vllm-1: scheduled in 4 ms, 0.25 s to the first token, 100 tokens in 2.25 s."""
    done = completion("vllm-1", T0 + 0.005, 0.25, 2.25, 100)
    schedule = Scheduling(
        "predicted-latency" if routing == "predicted" else "default", T0, T0 + 0.004, decision(routing=routing)
    )
    return CallRecord(session(call), call, T0, T0 + 2.26, T0 + 0.004, (schedule,), (done,))


def disaggregated(mode: str = "nixl", routing: str = "predicted") -> CallRecord:
    """P/D: decode on vllm-1, prefill on vllm-2; NIXL runs the stages one after the other, P2P at once."""
    call = Call(request(), "chat", pd=mode)  # type: ignore[arg-type]
    schedules = (
        Scheduling("decode", T0 + 0.001, T0 + 0.004, decision("vllm-1", routing)),
        Scheduling("prefill", T0 + 0.004, T0 + 0.005, decision("vllm-2", routing, scored=False)),
    )
    if mode == "p2p":
        prefill = completion("vllm-2", T0 + 0.0072, 0.08, 0.08, 1)
        decode = completion("vllm-1", T0 + 0.0071, 0.31, 2.31, 100)
        times = SidecarTimes(
            "offloading", "uuid-1", T0 + 0.006, T0 + 0.0062, T0 + 0.0065, T0 + 0.0070, T0 + 0.0875, T0 + 0.0876,
            T0 + 0.0065, T0 + 0.0068, T0 + 2.3175, T0 + 2.3176, T0 + 2.3177, T0 + 2.318,
        )  # fmt: skip
    else:
        prefill = completion("vllm-2", T0 + 0.0071, 0.08, 0.08, 1)
        decode = completion("vllm-1", T0 + 0.0886, 0.03, 2.03, 100)
        times = SidecarTimes(
            "nixlv2", "uuid-1", T0 + 0.006, T0 + 0.0062, T0 + 0.0065, T0 + 0.0070, T0 + 0.0875, T0 + 0.0876,
            T0 + 0.0877, T0 + 0.0880, T0 + 2.1190, T0 + 2.1191, T0 + 2.1192, T0 + 2.1195,
        )  # fmt: skip
    end = times.end + 0.0005
    record = CallRecord(session(call), call, T0, end, T0 + 0.0055, schedules, (decode,), prefill=prefill, sidecar=times)
    return replace(record, sidecar=None) if mode == "off" else record


def choices() -> CallRecord:
    """n = 3 on vllm-1: first tokens after 0.30, 0.25 and 0.28 s; 50, 100 and 20 tokens."""
    call = Call(request(), "completions", n=3, choice_tokens=(50, 100, 20))
    done = (
        completion("vllm-1", T0 + 0.005, 0.30, 0.30 + 49 * 0.04, 50),
        completion("vllm-1", T0 + 0.005, 0.25, 0.25 + 99 * 0.03, 100),
        completion("vllm-1", T0 + 0.005, 0.28, 0.28 + 19 * 0.045, 20),
    )
    schedule = Scheduling("predicted-latency", T0, T0 + 0.004, decision())
    return CallRecord(session(call), call, T0, T0 + 3.3, T0 + 0.004, (schedule,), done)


class Captured:
    """An emitter whose every provider exports to one in-memory exporter, synchronously."""

    def __init__(self, pods: Sequence[str] = PODS) -> None:
        self.exporter = InMemorySpanExporter()
        self.emitter = LlmdSpanEmitter(pods, lambda: SimpleSpanProcessor(self.exporter))

    def spans(self, record: CallRecord) -> list[ReadableSpan]:
        self.exporter.clear()
        self.emitter.emit(record)
        return list(self.exporter.get_finished_spans())
