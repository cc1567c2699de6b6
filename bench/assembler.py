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
from sloscope.testing import EPP, RecordWriter, gateway_attributes, sidecar_spans, vllm_033_attributes, vllm_attributes
from sloscope.upstream.envoy import Envoy, captured_headers
from sloscope.upstream.gie_2025 import Gie2025Epp, Vllm2025Pod
from sloscope.upstream.llmd_router import Epp
from sloscope.upstream.vllm import VllmPod
from sloscope.upstream.writer import Process

T0 = 1_764_582_000_000_000_000
MS = 1_000_000
SECOND = 1000 * MS
MODEL = "Qwen/Qwen3-8B"
PODS = [Process({"service.name": "vllm", "k8s.pod.name": f"vllm-{n}"}) for n in range(8)]
GIE_EPP = Process({"service.name": "epp"})


def gie_2025(requests: int) -> list[list[Span]]:
    """A trace per request: the late-2025 EPP's gateway.request with the headers, vLLM's llm_request under it."""
    spans: list[Span] = []
    for n in range(requests):
        start, writer = T0 + n * MS, RecordWriter(n + 1, 1)
        attributes = gateway_attributes(slo_ttft_ms="500", request_id=f"r{n}")
        gateway = Gie2025Epp(writer, GIE_EPP).gateway(None, start, start + SECOND, attributes)
        pod = Vllm2025Pod(writer, PODS[n % len(PODS)])
        pod.llm_request(gateway, start + MS, start + MS + SECOND, vllm_attributes(request_id=f"chatcmpl-r{n}"))
        spans += writer.spans
    return _batches(spans)


def _epp_call(writer: RecordWriter, request_id: str, start: int) -> int:
    """Envoy's span with the headers beside the EPP's spans of the call, both under the agent's root (span 1);
    returns the gateway span."""
    headers = captured_headers(request_id=request_id, headers={"x-llm-d-slo-ttft-ms": "500"})
    Envoy(writer).ingress(1, start - MS, start - MS + SECOND, headers)
    return Epp(writer, EPP).call(
        1, start, start + SECOND, request_id=request_id, model=MODEL, scorers=("latency-scorer",)
    )


def _vllm(writer: RecordWriter, parent: int, *, request_id: str, start: int, n: int, tokens: int = 11) -> None:
    attributes = vllm_033_attributes(request_id=request_id, ttft=0.1, e2e=1.0, completion_tokens=tokens)
    pod = PODS[n % len(PODS)]
    VllmPod(writer, str(pod.attributes["k8s.pod.name"]), pod).llm_request(parent, start, attributes)


def llm_d(requests: int, *, disaggregated: bool = False) -> list[list[Span]]:
    spans: list[Span] = []
    sessions = max(requests // 5, 1)
    for n in range(requests):
        # Five calls per agent session, one after another: a session's next call comes once its last is over,
        # while the other sessions' calls arrive in between. The agent's root (span 1) is never sent.
        trace, call = n % sessions + 1, n // sessions
        base, rid, start = 100 * (call + 1), f"r{n}", T0 + n * MS
        epp, pods = RecordWriter(trace, base), RecordWriter(trace, base + 20)
        gateway = _epp_call(epp, rid, start)
        spans += epp.spans
        if not disaggregated:
            _vllm(pods, gateway, request_id=f"chatcmpl-{rid}", start=start + MS, n=n)
            spans += pods.spans
            continue
        # the decode pod's sidecar, each leg as long as its pod's llm_request (they overlap: the times are the
        # workload's, not a serial NIXL call's)
        sidecar, (prefill_post, decode_post) = sidecar_spans(
            trace, base + 10, parent=gateway, forward_ns=start + MS, prefill=(start + MS, start + 2 * MS + SECOND),
            decode=(start + 2 * MS, start + 3 * MS + SECOND),
        )  # fmt: skip
        _vllm(pods, prefill_post, request_id=f"chatcmpl-{rid}", start=start + MS, n=n + 1, tokens=1)
        _vllm(pods, decode_post, request_id=f"chatcmpl-{rid}", start=start + 2 * MS, n=n)
        spans += sidecar + pods.spans
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
