"""Bytes per pending trace: what a real ``sloscope serve`` holds for a trace that waits for its gateway spans.

Run from the repository root as part of ``make bench`` (``.venv/bin/python bench/pending.py``; ``--quick`` for a
short run). docs/performance.md explains the numbers.

For each join engine (``native``, ``python``) and payload set of bench/payloads.py (``build``: two-span traces;
``build_llmd``: agent sessions with P/D calls), one server (run.py's ``Server``, pinned to one core) with join
windows of an hour, so nothing leaves by time, and caps above N, so nothing is evicted, takes N traces whose gateway
spans (``gateway.request``) are left out of the exports: every model-server span waits for its ancestors, the way
the child span of a trace waits while its parent is still in an exporter's batch. Once
``sloscope_traces_pending`` shows all N and the server is idle, it reads

* ``sloscope_traces_pending_bytes`` / N: the join's own account (the native engine: the bytes Rust holds; the
  Python reference: its estimate of the Python objects), the figure ``join.max_pending_bytes`` caps;
* the growth of the server's resident set (VmRSS of /proc/<pid>/status, after the warm-up and after the N traces)
  / N: what the machine pays, allocator slack and every index included.

Both are also given per held span. It asserts nothing and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

# Sibling modules in bench/: the script's folder is first on sys.path.
from payloads import PayloadSet, build, build_llmd
from run import BENCH, Client, Server, family, machine, scrape, wait_for_requests, wait_idle

ENGINES = ("native", "python")
WITHHELD = frozenset({"gateway.request"})  # the spans a pending trace waits for
HOUR = 3600.0


def without_gateways(payloads: PayloadSet) -> tuple[list[bytes], int, int]:
    """The exports less their gateway spans; (payloads, spans kept, traces)."""
    out, spans, traces = [], 0, set()
    for payload in payloads.payloads:
        request = ExportTraceServiceRequest.FromString(payload)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                kept = [s for s in scope_spans.spans if s.name not in WITHHELD]
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)
                spans += len(kept)
                traces.update(s.trace_id for s in kept)
        out.append(request.SerializeToString())
    return out, spans, len(traces)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def settings(engine: str, traces: int) -> dict[str, Any]:
    return {
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


def measure(engine: str, label: str, held: tuple[list[bytes], int, int], *, args: argparse.Namespace,
            warmup: PayloadSet, workdir: Path) -> dict[str, Any]:  # fmt: skip
    payloads, spans, traces = held
    server = Server(settings(engine, traces), args.cpu, workdir)
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
    print("\nbytes per pending trace (held until its gateway span; join windows of an hour)")
    head = ("engine", "payloads", "traces", "spans/trace", "pending_bytes/trace", "RSS growth/trace", "per span")
    print(f"{head[0]:>7} {head[1]:>9} {head[2]:>8} {head[3]:>12} {head[4]:>20} {head[5]:>17} {head[6]:>16}")
    for r in rows:
        per_span = f"{r['pending_bytes_per_span']:,.0f} / {r['rss_growth_per_span']:,.0f}"
        print(
            f"{r['engine']:>7} {r['payload_set']:>9} {r['traces']:>8,} {r['spans_held'] / r['traces']:>12.1f} "
            f"{r['pending_bytes_per_trace']:>20,.0f} {r['rss_growth_per_trace']:>17,.0f} {per_span:>16}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--quick", action="store_true", help="a short run: 5,000 traces of each kind")
    add("--traces", type=int, default=20_000, help="two-span traces held (default 20000; agent sessions: 4 spans each)")
    add("--cpu", type=int, default=0, help="core the server is pinned to (default 0)")
    add("--timeout", type=float, default=600, help="give up after this many seconds per server")
    add("--out", type=Path, default=BENCH / "results", help="JSON results folder (default bench/results)")
    args = parser.parse_args(argv)
    if args.quick:
        args.traces = 5_000
    if args.cpu not in os.sched_getaffinity(0):
        args.cpu = None
    info = machine()
    print(f"sloscope {info['sloscope']} ({info['commit']}); load average {os.getloadavg()[0]:.2f}", flush=True)
    warmup = build(2048, seed=2, first_request=10**9)
    # a two-span trace holds one span (its model-server span); an agent session of 4 calls about 4 x 3
    sets = {
        "two-span": without_gateways(build(2 * args.traces, seed=1)),
        "llm-d": without_gateways(build_llmd(args.traces * 4, seed=7)),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="sloscope-bench-pending-") as tmp:
        for label, held in sets.items():
            for engine in ENGINES:
                rows.append(measure(engine, label, held, args=args, warmup=warmup, workdir=Path(tmp)))
                print(f"  {engine} {label}: {rows[-1]['pending_bytes_per_trace']:,.0f} B/trace", flush=True)
    print_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"pending-{stamp}.json"
    document = {"time": stamp, "machine": info, "load_average": os.getloadavg(), "rows": rows,
                "parameters": {k: str(v) for k, v in vars(args).items()}}  # fmt: skip
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
