"""Bytes per pending trace: what a real ``sloscope serve`` holds for a trace that waits for its gateway spans.

Run from the repository root as part of ``make bench`` (``.venv/bin/python bench/pending.py``; ``--quick`` for a
short run). docs/performance.md explains the numbers.

For each join engine (``native``, ``python``) and case, one server (run.py's ``Server``, pinned to one core) with
join windows of an hour, so nothing leaves by time, and caps above N, so nothing is evicted, takes N waiting traces
of the payloads of bench/payloads.py:

* ``two-span`` (``build``) without its ``gateway.request`` spans: vLLM's span waits for its parent, the way the
  child span of a trace waits while its parent is still in an exporter's batch (one span held);
* ``two-span both``: the gateway span given a parent that never comes and the SLO header attributes mapped to keys
  the spans lack, so that nothing settles the request (tests/unit/processors/test_native_join.py's waiting trace:
  both held);
* ``llm-d`` (``build_llmd``: agent sessions of four calls, P/D included) without the gateway spans (about 47 held).

Once ``sloscope_traces_pending`` shows all N and the server is idle, it reads

* ``sloscope_traces_pending_bytes`` / N: the join's own account (the native engine: the bytes Rust holds; the
  Python reference: its estimate of the Python objects), the figure ``join.max_pending_bytes`` caps;
* the growth of the server's resident set (VmRSS of /proc/<pid>/status, after the warm-up and after the N traces)
  / N: what the machine pays, allocator slack and every index included.

Both are also given per held span. It asserts nothing and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

# Sibling modules in bench/: the script's folder is first on sys.path.
from payloads import PayloadSet, build, build_llmd
from run import Client, Server, family, machine, output_options, scrape, wait_for_requests, wait_idle, write_results

ENGINES = ("native", "python")
GATEWAY = frozenset({"gateway.request"})
MISSING_PARENT = bytes.fromhex("00000000000000aa")  # a span id no export carries
HOUR = 3600.0


def held(payloads: PayloadSet, *, drop: frozenset[str] = frozenset(), orphan: frozenset[str] = frozenset()
         ) -> tuple[list[bytes], int, int]:  # fmt: skip
    """The exports less the spans named in ``drop``, those in ``orphan`` given a parent that never comes.

    Returns (payloads, spans kept, traces)."""
    out, spans, traces = [], 0, set()
    for payload in payloads.payloads:
        request = ExportTraceServiceRequest.FromString(payload)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                kept = [s for s in scope_spans.spans if s.name not in drop]
                for span in kept:
                    if span.name in orphan:
                        span.parent_span_id = MISSING_PARENT
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)
                spans += len(kept)
                traces.update(s.trace_id for s in kept)
        out.append(request.SerializeToString())
    return out, spans, len(traces)


@dataclass(frozen=True)
class Case:
    label: str
    what: str  # what the held traces wait for
    payloads: tuple[list[bytes], int, int]
    settings: dict[str, Any]


def cases(traces: int) -> list[Case]:
    two_span = build(2 * traces, seed=1)
    return [
        Case("two-span", "vLLM's span waits for its gateway span", held(two_span, drop=GATEWAY), {}),
        # as tests/unit/processors/test_native_join.py's waiting trace: the gateway span's caller has not come and no
        # SLO header settles the request (the header attributes are mapped to keys the spans do not carry)
        Case(
            "two-span both",
            "both spans wait for the gateway span's caller",
            held(two_span, orphan=GATEWAY),
            {"attributes": {"slo_ttft_ms": ["-"], "slo_tpot_ms": ["-"]}},
        ),
        Case(
            "llm-d",
            "an agent session waits for its gateway spans",
            held(build_llmd(4 * traces, seed=7), drop=GATEWAY),
            {},
        ),
    ]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def settings(engine: str, traces: int, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        **extra,
        "log_level": "INFO",
        "shutdown_grace_seconds": 10,
        "listeners": {"host": "127.0.0.1", "otlp_grpc_port": 0, "otlp_http_port": 0, "metrics_port": 0},
        "self_tracing": {"enabled": False},
        "join": {
            "engine": engine,
            "window_seconds": HOUR,
            "trace_ttl_seconds": HOUR,
            "failure_window_seconds": HOUR,
            "max_request_seconds": HOUR,
            "max_pending_traces": 2 * traces,
            "max_pending_bytes": 16 * 1024**3,
        },
    }


def gauge(port: int, name: str) -> float:
    return sum(family(scrape(port), name).values())


def measure(engine: str, case: Case, *, args: argparse.Namespace, warmup: PayloadSet, workdir: Path
            ) -> dict[str, Any]:  # fmt: skip
    payloads, spans, traces = case.payloads
    label = case.label
    server = Server(settings(engine, traces, case.settings), args.cpu, workdir)
    try:
        client = Client(server.otlp_http_port, 4, 0.05)
        deadline = time.monotonic() + args.timeout
        client.send(warmup.payloads, deadline)  # complete traces: lazy imports, first-request costs; none stays
        wait_for_requests(server.metrics_port, warmup.requests, deadline)
        wait_idle(server, deadline)
        before = rss_bytes(server.proc.pid)
        base_pending = gauge(server.metrics_port, "sloscope_traces_pending")
        client.send(payloads, deadline)
        while gauge(server.metrics_port, "sloscope_traces_pending") < base_pending + traces:
            if time.monotonic() > deadline:
                raise SystemExit(f"{engine} {label}: the pending traces never reached {traces}")
            time.sleep(0.1)
        wait_idle(server, deadline)
        after = rss_bytes(server.proc.pid)
        pending = gauge(server.metrics_port, "sloscope_traces_pending") - base_pending
        pending_bytes = gauge(server.metrics_port, "sloscope_traces_pending_bytes")
        client.close()
    finally:
        server.stop()
    return {
        "engine": engine,
        "payload_set": label,
        "waiting": case.what,
        "traces": traces,
        "pending_traces": pending,
        "spans_held": spans,
        "pending_bytes": pending_bytes,
        "pending_bytes_per_trace": pending_bytes / traces,
        "pending_bytes_per_span": pending_bytes / spans,
        "rss_before": before,
        "rss_after": after,
        "rss_growth_per_trace": (after - before) / traces,
        "rss_growth_per_span": (after - before) / spans,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print("\nbytes per pending trace (join windows of an hour; pending_bytes: the join's account)")
    head = ("engine", "case", "traces", "spans/trace", "pending_bytes/trace", "RSS growth/trace", "per span")
    print(f"{head[0]:>7} {head[1]:>13} {head[2]:>8} {head[3]:>12} {head[4]:>20} {head[5]:>17} {head[6]:>16}")
    for r in rows:
        per_span = f"{r['pending_bytes_per_span']:,.0f} / {r['rss_growth_per_span']:,.0f}"
        print(
            f"{r['engine']:>7} {r['payload_set']:>13} {r['traces']:>8,} {r['spans_held'] / r['traces']:>12.1f} "
            f"{r['pending_bytes_per_trace']:>20,.0f} {r['rss_growth_per_trace']:>17,.0f} {per_span:>16}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--quick", action="store_true", help="a short run: 5,000 traces of each kind")
    add("--traces", type=int, default=20_000, help="two-span traces held (default 20000; agent sessions: about N / 12)")
    add("--cpu", type=int, default=0, help="core the server is pinned to (default 0)")
    output_options(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.traces = 5_000
    if args.cpu not in os.sched_getaffinity(0):
        args.cpu = None
    info = machine()
    print(f"sloscope {info['sloscope']} ({info['commit']}); load average {os.getloadavg()[0]:.2f}", flush=True)
    warmup = build(2048, seed=2, first_request=10**9)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sloscope-bench-pending-") as tmp:
        for case in cases(args.traces):
            for engine in ENGINES:
                rows.append(measure(engine, case, args=args, warmup=warmup, workdir=Path(tmp)))
                print(f"  {engine} {case.label}: {rows[-1]['pending_bytes_per_trace']:,.0f} B/trace", flush=True)
    print_table(rows)
    write_results(args, "pending", {"machine": info, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
