"""A fleet's worth of llm-d traffic as call records: agent sessions of many LLM calls per trace, P/D included.

Each session is one trace (the agent's ``invoke_agent`` root, never exported) holding ``calls`` LLM calls; the
calls cycle through the shapes the llm-d demo emits (exporter/sloscope/demo/llmd_spans.py, llm-d-router
ebab6879 and vLLM 0.33): plain chat and completions calls on one pod, an n = 3 completions call, P/D through
the routing sidecar's NIXL and P2P connectors and with sidecar tracing off, a model-server error and a call
shed by flow control. Latencies, token counts and pods vary with the call's index, so SLO verdicts and
histogram buckets differ between calls. Every record is a deterministic function of its indices.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from sloscope.demo.agents import Call, Session
from sloscope.demo.calls import MODEL_SERVER_ERROR, SHED_MESSAGE, CallRecord, Scheduling
from tests.support.demo_calls import PODS, T0, choices, completion, decision, disaggregated, request, single

SHAPES = ("chat", "pd-nixl", "completions", "pd-p2p", "n3", "error", "pd-off", "shed")
FAILED = frozenset({"error", "shed"})


def _template(shape: str, index: int) -> CallRecord:
    """One call of the shape; a single-pod call's pod, TTFT and length follow ``index``."""
    if shape.startswith("pd-"):
        return disaggregated(shape.removeprefix("pd-"))
    if shape == "n3":
        return choices()
    if shape == "shed":
        call = Call(request(), "chat", failure="shed")
        return CallRecord(
            _placeholder(call), call, T0, T0 + 0.001, T0 + 0.001,
            http_status=429, error=SHED_MESSAGE, orchestration_error=SHED_MESSAGE,
        )  # fmt: skip
    if shape == "error":
        call = Call(request(), "chat", failure="error")
        schedule = Scheduling("predicted-latency", T0, T0 + 0.004, decision())
        return CallRecord(
            _placeholder(call), call, T0, T0 + 0.015, T0 + 0.004, (schedule,), http_status=500, error=MODEL_SERVER_ERROR
        )
    record = single(Call(request(), shape))  # type: ignore[arg-type]
    ttft = 0.1 + (index % 9) * 0.1  # 0.1 .. 0.9 s against the 500 ms TTFT target
    tokens = 10 + index % 50
    done = completion(PODS[index % len(PODS)], T0 + 0.005, ttft, ttft + 0.02 * (tokens - 1), tokens)
    return replace(record, completions=(done,))


def _placeholder(call: Call) -> Session:
    return Session(1, 1, call.request.slo_class, False, (call,))


def session_records(sessions: int, calls: int = 5) -> list[CallRecord]:
    """``sessions`` agent sessions of ``calls`` calls each, in session order."""
    records: list[CallRecord] = []
    for s in range(sessions):
        planned = []
        for c in range(calls):
            index = s * calls + c
            template = _template(SHAPES[index % len(SHAPES)], index)
            rid = str(uuid.UUID(int=(0x5C05 << 64) | index, version=4))
            call = replace(template.call, request=replace(template.call.request, request_id=rid))
            sidecar = template.sidecar
            if sidecar is not None:
                sidecar = replace(sidecar, request_uuid=str(uuid.UUID(int=index + 1, version=1)))
            planned.append(replace(template, call=call, sidecar=sidecar))
        session = Session(
            trace_id=(0x5C05C09E << 96) | (s + 1),
            root_span_id=0xA9E47000 + s,
            slo_class="interactive",
            old_headers=s % 4 == 3,  # x-slo-* rather than x-llm-d-slo-*
            calls=tuple(r.call for r in planned),
        )
        records.extend(replace(r, session=session) for r in planned)
    return records
