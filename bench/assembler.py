"""What the trace join costs per span for each upstream generation's traces, in one run.

Run from the repository root as part of ``make bench`` (``.venv/bin/python bench/assembler.py``).
docs/performance.md explains the numbers. The same assembler joins three workloads of decoded spans,
taking turns over several repetitions (best of each), so a machine whose speed drifts hits them alike:

1. gie-2025: one trace per request, ``gateway.request`` with the captured headers and vLLM's
   ``llm_request`` under it (the late-2025 shape, as ``bench/payloads.py`` builds it for the ingest run);
2. llm-d: agent sessions of five sequential calls in one trace whose root never arrives, the sessions'
   calls interleaved; per call an Envoy span
   with the headers beside the EPP's ``gateway.request`` > orchestration > scheduler profile > scoring >
   scorer and pick spans, and vLLM 0.33's ``llm_request``;
3. llm-d P/D: the same calls through the routing sidecar's NIXL connector (its server span,
   ``forward_request``, ``prefill`` and ``decode`` with their HTTP client spans, the prefill and decode
   pods' ``llm_request``).

It prints microseconds per span and per request and the ratios to gie-2025, and asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from sloscope.attributes import Mapping
from sloscope.config import Attributes, Join
from sloscope.processors.assembler import TraceAssembler
from sloscope.records import Span
from sloscope.testing import epp_spans, gateway_attributes, span, vllm_033_attributes, vllm_attributes

T0 = 1_764_582_000_000_000_000
MS = 1_000_000
SIDECAR = {"service.name": "llm-d-disagg-sidecar"}
MODEL = "Qwen/Qwen3-8B"


def _pod(n: int) -> dict[str, str]:
    return {"service.name": "vllm", "k8s.pod.name": f"vllm-{n % 8}"}


def gie_2025(requests: int) -> list[list[Span]]:
    spans = []
    for n in range(requests):
        start = T0 + n * MS
        spans.append(
            span(
                n + 1,
                1,
                "gateway.request",
                gateway_attributes(slo_ttft_ms="500", request_id=f"r{n}"),
                resource={"service.name": "epp"},
                start_ns=start,
            )
        )
        spans.append(
            span(
                n + 1,
                2,
                "llm_request",
                vllm_attributes(request_id=f"chatcmpl-r{n}"),
                parent=1,
                resource=_pod(n),
                start_ns=start + MS,
            )
        )
    return _batches(spans)


def _epp_call(trace: int, base: int, request_id: str, start: int) -> list[Span]:
    """Envoy's span with the headers beside the EPP's spans of the call, both under the agent's root."""
    envoy = span(
        trace,
        base + 8,
        "ingress",
        {"http.request.header.x-request-id": [request_id], "http.request.header.x-llm-d-slo-ttft-ms": ["500"]},
        parent=1,
        resource={"service.name": "envoy"},
        start_ns=start - MS,
    )
    return [envoy, *epp_spans(trace, base, request_id=request_id, parent=1, start_ns=start, model=MODEL)]


def _vllm(trace: int, span_id: int, parent: int, *, request_id: str, start: int, n: int, tokens: int = 11) -> Span:
    attributes = vllm_033_attributes(request_id=request_id, ttft=0.1, e2e=1.0, completion_tokens=tokens)
    return span(trace, span_id, "llm_request", attributes, parent=parent, resource=_pod(n), start_ns=start)


def llm_d(requests: int, *, disaggregated: bool = False) -> list[list[Span]]:
    spans = []
    sessions = max(requests // 5, 1)
    for n in range(requests):
        # Five calls per agent session, one after another: a session's next call comes once its last is over,
        # while the other sessions' calls arrive in between. The agent's root (span 1) is never sent.
        trace, call = n % sessions + 1, n // sessions
        base, rid, start = 100 * (call + 1), f"r{n}", T0 + n * MS
        spans += _epp_call(trace, base, rid, start)
        if not disaggregated:
            spans.append(_vllm(trace, base + 9, base, request_id=f"chatcmpl-{rid}", start=start + MS, n=n))
            continue
        spans += [
            span(
                trace,
                base + 10,
                "llm_d.pd_proxy.POST /v1/chat/completions",
                {"http.response.status_code": 200},
                parent=base,
                resource=SIDECAR,
                start_ns=start + MS,
            ),
            span(trace, base + 11, "forward_request", {}, parent=base + 10, resource=SIDECAR, start_ns=start + MS),
            span(trace, base + 12, "prefill", {}, parent=base + 11, resource=SIDECAR, start_ns=start + MS),
            span(trace, base + 13, "HTTP POST", {}, parent=base + 12, resource=SIDECAR, start_ns=start + MS),
            span(trace, base + 14, "decode", {}, parent=base + 12, resource=SIDECAR, start_ns=start + 2 * MS),
            span(trace, base + 15, "HTTP POST", {}, parent=base + 14, resource=SIDECAR, start_ns=start + 2 * MS),
            _vllm(trace, base + 16, base + 13, request_id=f"chatcmpl-{rid}", start=start + MS, n=n + 1, tokens=1),
            _vllm(trace, base + 17, base + 15, request_id=f"chatcmpl-{rid}", start=start + 2 * MS, n=n),
        ]
    return _batches(spans)


def _batches(spans: list[Span], size: int = 512) -> list[list[Span]]:
    return [spans[i : i + size] for i in range(0, len(spans), size)]


def run(batches: list[list[Span]]) -> tuple[float, int]:
    """Seconds to consume every batch with a fresh assembler, and the requests it emitted."""
    emitted: list[object] = []
    assembler = TraceAssembler(
        Join(), Mapping(Attributes()), emitted.append, count_dropped=lambda *_: None, count_outcome=lambda *_: None
    )
    started = time.perf_counter()
    for batch in batches:
        assembler.consume(batch)
    assembler.flush()
    return time.perf_counter() - started, len(emitted)


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("--requests", type=int, default=20_000, help="requests per workload (default 20000)")
    arguments.add_argument("--repetitions", type=int, default=5, help="turns of each workload (default 5)")
    options = arguments.parse_args()
    workloads: dict[str, Callable[[], list[list[Span]]]] = {
        "gie-2025": lambda: gie_2025(options.requests),
        "llm-d": lambda: llm_d(options.requests),
        "llm-d P/D": lambda: llm_d(options.requests, disaggregated=True),
    }
    built = {name: make() for name, make in workloads.items()}
    best: dict[str, float] = {}
    for _ in range(options.repetitions):
        for name, batches in built.items():
            seconds, requests = run(batches)
            assert requests == options.requests, f"{name}: {requests} requests emitted of {options.requests}"
            best[name] = min(best.get(name, seconds), seconds)
    base = best["gie-2025"] / options.requests
    print(f"{'workload':<12} {'spans/request':>13} {'µs/span':>8} {'µs/request':>11} {'x gie-2025':>11}")
    for name, batches in built.items():
        spans = sum(len(b) for b in batches)
        per_request = best[name] / options.requests
        print(
            f"{name:<12} {spans / options.requests:>13.0f} {best[name] / spans * 1e6:>8.2f} "
            f"{per_request * 1e6:>11.1f} {per_request / base:>11.2f}"
        )


if __name__ == "__main__":
    main()
