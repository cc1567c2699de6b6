"""What the OTLP transports cost by themselves, beside the whole server, on the same exports.

``bench/compare.py`` sets sloscope's CPU per span beside the Collector's. Part of sloscope's is spent in the Python
servers it receives with, grpcio's ``grpc.aio`` and uvicorn with h11, which a faster pipeline cannot make cheaper.
This measures that part. Pinned to one core and fed the same two-span exports (``bench/payloads.py``: 512 spans, about
242 KiB an export) by a client on another core, each in turn:

* **floor**: the transport alone, in a process of its own, answering at once. For gRPC a ``grpc.aio`` server with
  the raw-bytes ``TraceService/Export`` handler and the channel options of sloscope's receiver
  (``sloscope.receivers.otlp_grpc.server_options`` with the listeners' default limits); for HTTP uvicorn with its h11
  protocol and an ASGI app that reads the body whole and answers 200.
* **sloscope**: ``sloscope serve`` with the native engine, every request counted on its /metrics page, and its CPU
  time per thread: the event loop and any thread Python did not name (``python``), gRPC's threads
  (``event_engine``), the decoding threads (``decode``) and the pipeline (``pipeline``: the join, the evaluation and
  the publishing). What the bench's own scrapes of /metrics cost (measured on the idle server) is taken out.

CPU time is the scheduler's, per thread, to the nanosecond (as ``bench/cpu.py``), read once the server is idle, over
``--sets`` sets of ``--spans`` spans after one set of warm-up (fresh trace ids each), sent as fast as the server
takes them (a burst: unlike bench/compare.py's short slices, the exports queue up ahead of the join). It prints µs
per export and per span, minor page faults per span, and the floor's share of sloscope's, and writes JSON to
bench/results/. It asserts nothing.

Usage: ``.venv/bin/python bench/front.py [--spans 100000] [--sets 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compare import SCRAPE_SAMPLES, GrpcClient, free_port, grpc_port_of, sloscope_settings
from payloads import PayloadSet, build
from run import Client, Server, output_options, requests_counted, wait_for_requests, wait_idle, write_results

SERVER_CPU = 0
CLIENT_CPU = 1
IN_FLIGHT = 4  # calls (gRPC) or connections (HTTP) at once, as bench/compare.py's clients
RETRY_WAIT = 0.05


def thread_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each live thread of ``pid``, summed by name without its number (``decode-3``: ``decode``)."""
    out: dict[str, float] = {}
    task = Path(f"/proc/{pid}/task")
    for tid in os.listdir(task):
        try:
            name = (task / tid / "comm").read_text().strip()
            ns = int((task / tid / "schedstat").read_text().split()[0])
        except OSError:  # the thread exited between the listing and now
            continue
        key = re.sub(r"[-_]?\d+$", "", name) or name
        out[key] = out.get(key, 0.0) + ns / 1e9
    return out


def minor_faults(pid: int) -> int:
    """Pages the process touched for the first time (or again after giving them back): each is zeroed by the kernel."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


class Measured:
    """A server process's CPU clock, per thread (``cpu_seconds`` for ``run.wait_idle``), and what one scrape of its
    /metrics page costs each thread (none for a floor, which is never scraped)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.scrape_cost: dict[str, float] = {}

    def cpu_seconds(self) -> float:
        return sum(thread_seconds(self.pid).values())


# ---- the floors: the transports answering at once, in a process of their own -----------------------------------


def serve_floor(transport: str, port: int) -> None:
    """Runs until killed (in the child process)."""
    os.sched_setaffinity(0, {SERVER_CPU})
    asyncio.run(_grpc_floor(port) if transport == "grpc" else _http_floor(port))


async def _grpc_floor(port: int) -> None:
    import grpc
    from prometheus_client import CollectorRegistry

    from sloscope.config import Limits, Settings
    from sloscope.receivers.otlp_grpc import SERVICE, server_options
    from sloscope.service.listeners import ListenerSetup

    async def export(request: bytes, context: Any) -> bytes:
        return b""

    handler = grpc.unary_unary_rpc_method_handler(export)
    listeners = ListenerSetup(Settings().listeners, CollectorRegistry())  # the defaults' connection limits
    server = grpc.aio.server(options=server_options(Limits().max_request_bytes, listeners.grpc_options()))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def _http_floor(port: int) -> None:
    import uvicorn

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = [(b"content-type", b"application/x-protobuf"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, host="127.0.0.1", port=port, http="h11", lifespan="off", log_level="warning")
    await uvicorn.Server(config).serve()


def start_floor(transport: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", transport, "--port", str(port)])
    deadline = time.monotonic() + 30
    while not _listening(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the {transport} floor server did not start (exit {proc.poll()})")
        time.sleep(0.1)
    return proc, port


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


# ---- one measurement ---------------------------------------------------------------------------------------------


def send(transport: str, port: int, payloads: list[bytes], timeout: float) -> int:
    client = GrpcClient(port, IN_FLIGHT, RETRY_WAIT) if transport == "grpc" else Client(port, IN_FLIGHT, RETRY_WAIT)
    try:
        return client.send(payloads, time.monotonic() + timeout)
    finally:
        client.close()


def measure(
    target: Measured,
    transport: str,
    port: int,
    sets: list[PayloadSet],
    timeout: float,
    *,
    settle: Callable[[int], int],
) -> dict[str, Any]:
    """CPU of ``target`` per export and per span over ``sets[1:]`` (``sets[0]`` warms it up); ``settle(requests)``
    returns once the server has done all the work of that many requests in all, with the scrapes it made to know
    (their cost, ``target.scrape_cost``, is not the exports')."""
    warm, measured = sets[0], sets[1:]
    send(transport, port, warm.payloads, timeout)
    requests = warm.requests
    settle(requests)
    before, faults = thread_seconds(target.pid), minor_faults(target.pid)
    exports = spans = retries = 0
    for payload_set in measured:
        retries += send(transport, port, payload_set.payloads, timeout)
        requests += payload_set.requests
        exports += len(payload_set.payloads)
        spans += payload_set.spans
    scrapes = settle(requests)
    after, faults = thread_seconds(target.pid), minor_faults(target.pid) - faults
    threads = {
        name: seconds - before.get(name, 0.0) - scrapes * target.scrape_cost.get(name, 0.0)
        for name, seconds in after.items()
    }
    cpu = sum(threads.values())
    return {
        "exports": exports,
        "spans": spans,
        "retries": retries,
        "cpu_seconds": cpu,
        "us_per_export": cpu / exports * 1e6,
        "us_per_span": cpu / spans * 1e6,
        "minor_faults_per_span": faults / spans,
        "us_per_span_by_thread": {
            name: seconds / spans * 1e6
            for name, seconds in sorted(threads.items(), key=lambda kv: -kv[1])
            if seconds / spans * 1e6 >= 0.005
        },
    }


def floor_row(transport: str, sets: list[PayloadSet], timeout: float) -> dict[str, Any]:
    proc, port = start_floor(transport)
    target = Measured(proc.pid)

    def settle(_requests: int) -> int:  # it answers at once: done once idle
        wait_idle(target, time.monotonic() + timeout)  # type: ignore[arg-type]  # needs only cpu_seconds()
        return 0

    try:
        return {
            "target": "floor",
            "transport": transport,
            **measure(target, transport, port, sets, timeout, settle=settle),
        }
    finally:
        proc.kill()
        proc.wait()


def scrape_cost(server: Server, target: Measured, timeout: float) -> dict[str, float]:
    """CPU seconds per thread of one /metrics scrape, on the idle server (after the work settled)."""
    wait_idle(target, time.monotonic() + timeout)  # type: ignore[arg-type]
    before = thread_seconds(target.pid)
    for _ in range(SCRAPE_SAMPLES):
        requests_counted(server.metrics_port)
    after = thread_seconds(target.pid)
    return {name: (seconds - before.get(name, 0.0)) / SCRAPE_SAMPLES for name, seconds in after.items()}


def sloscope_rows(
    sets: list[PayloadSet], timeout: float, workdir: Path, grpc_server: str | None, http_server: str | None
) -> list[dict[str, Any]]:
    """One server per transport (a fresh one each: the second must not start warmer than the first)."""
    rows = []
    for transport in ("grpc", "http"):
        server = Server(sloscope_settings("native", 0.5, grpc_server, http_server), SERVER_CPU, workdir)
        target = Measured(server.proc.pid)
        port = grpc_port_of(server) if transport == "grpc" else server.otlp_http_port

        def settle(requests: int, server: Server = server, target: Measured = target) -> int:
            scrapes = wait_for_requests(server.metrics_port, requests, time.monotonic() + timeout)
            wait_idle(target, time.monotonic() + timeout)  # type: ignore[arg-type]
            return scrapes

        try:
            target.scrape_cost = scrape_cost(server, target, timeout)
            rows.append(
                {
                    "target": "sloscope",
                    "transport": transport,
                    **measure(target, transport, port, sets, timeout, settle=settle),
                }
            )
        finally:
            server.stop()
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'transport':<10} {'target':<9} {'µs/export':>10} {'µs/span':>8} {'faults/span':>11}  by thread (µs/span)")
    for r in rows:
        threads = ", ".join(f"{name} {us:.2f}" for name, us in r["us_per_span_by_thread"].items())
        figures = f"{r['us_per_export']:>10.1f} {r['us_per_span']:>8.2f} {r['minor_faults_per_span']:>11.3f}"
        print(f"{r['transport']:<10} {r['target']:<9} {figures}  {threads}")
    for transport in ("grpc", "http"):
        floor, whole = (
            next(r for r in rows if r["transport"] == transport and r["target"] == t) for t in ("floor", "sloscope")
        )
        share = floor["us_per_span"] / whole["us_per_span"]
        print(f"{transport}: the transport alone is {share:.0%} of sloscope's CPU a span")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=100_000, help="spans a set (100000)")
    parser.add_argument("--sets", type=int, default=3, help="sets measured after one set of warm-up (3)")
    parser.add_argument(
        "--grpc-server", choices=("grpcio", "native"), help="sloscope's listeners.grpc.server (default: native)"
    )
    parser.add_argument(
        "--http-server", choices=("uvicorn", "native"), help="sloscope's listeners.otlp_http_server (default: native)"
    )
    parser.add_argument("--serve", choices=("grpc", "http"), help=argparse.SUPPRESS)  # a floor server's process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    output_options(parser)
    args = parser.parse_args()
    if args.serve:
        serve_floor(args.serve, args.port)
        return 0
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench/front.py needs two cores: the server's and the client's")
    os.sched_setaffinity(0, {CLIENT_CPU})
    sets = [build(args.spans, first_request=k * args.spans) for k in range(1 + args.sets)]
    rows = [floor_row("grpc", sets, args.timeout), floor_row("http", sets, args.timeout)]
    with tempfile.TemporaryDirectory() as workdir:
        rows += sloscope_rows(sets, args.timeout, Path(workdir), args.grpc_server, args.http_server)
    rows.sort(key=lambda r: (r["transport"], r["target"]))
    print_table(rows)
    write_results(args, "front", {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
