"""CPU per span of sloscope beside the OpenTelemetry Collector with the spanmetrics connector, in one run.

Run from the repository root as part of ``make bench`` (``.venv/bin/python bench/collector.py``); it needs the
Collector of ``make tools`` (.tools/bin/otelcol-sloscope, built with the Collector builder from
tools/collector/builder-config.yaml). docs/performance.md explains the numbers.

Two servers run on the same core(s), each started with ``taskset``: ``sloscope serve`` with its default settings
(self-tracing off, as for run.py's uninstrumented server) and the Collector with the pipeline a Collector user would
build for RED metrics: ``otlp`` receiver -> ``batch`` -> ``spanmetrics`` connector -> ``prometheus`` exporter
(default dimensions: service.name, span.name, span.kind, status.code). Both get exactly the exports of
bench/payloads.py (the ingest benchmark's), over OTLP/HTTP protobuf and then OTLP/gRPC, slice by slice, taking turns
(so a machine whose speed drifts hits both alike). A slice counts as done when the server's own series show every
request (sloscope_requests_total) or every span (traces_span_metrics_calls_total) of it.

Reported per server, transport and core count: CPU microseconds per span (user + system time from
/proc/<pid>/stat, before and after each slice, over the spans of the slice) and spans/s (spans over the time from
the first export sent to the series showing them all), and the ratio of sloscope's CPU per span to the
Collector's. CPU per span is the number to compare: spans/s is bounded by this Python client too (compare the
servers' CPU share: below one core per core given, the client was the limit). With two cores the client shares
them on a two-core machine. It asserts nothing about speed and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml

# Sibling modules in bench/: the script's folder is first on sys.path.
from payloads import PayloadSet, build
from run import (
    BENCH,
    LISTENING,
    Client,
    LoadMeter,
    Server,
    family,
    machine,
    process_cpu_seconds,
    rate,
    requests_counted,
    scrape,
    slices_of,
    wait_for_requests,
    wait_quiet,
)

ROOT = BENCH.parent
COLLECTOR = ROOT / ".tools" / "bin" / "otelcol-sloscope"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
CALLS_SERIES = "traces_span_metrics_calls_total"  # spanmetrics' calls counter through the prometheus exporter
READY = "Everything is ready"
POLL_SECONDS = 0.02


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collector_config(grpc_port: int, http_port: int, metrics_port: int) -> dict[str, Any]:
    """otlp -> batch -> spanmetrics -> prometheus; the connector flushes every 100 ms so a slice's end shows soon."""
    return {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"127.0.0.1:{grpc_port}"},
                    "http": {"endpoint": f"127.0.0.1:{http_port}"},
                }
            }
        },
        "processors": {"batch": {}},
        "connectors": {"spanmetrics": {"metrics_flush_interval": "100ms"}},
        # resource attributes as labels: the 8 vLLM pods differ only in k8s.pod.name, and without it their series
        # would collide in the exposition (one pod's counts shown for all)
        "exporters": {
            "prometheus": {
                "endpoint": f"127.0.0.1:{metrics_port}",
                "resource_to_telemetry_conversion": {"enabled": True},
            }
        },
        "service": {
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["spanmetrics"]},
                "metrics": {"receivers": ["spanmetrics"], "exporters": ["prometheus"]},
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
        },
    }


class Collector:
    """The Collector pinned to ``cpus`` (taskset; the Go runtime sizes GOMAXPROCS from that affinity)."""

    def __init__(self, cpus: str | None, workdir: Path) -> None:
        self.grpc_port, self.otlp_http_port, self.metrics_port = free_port(), free_port(), free_port()
        config = workdir / f"collector-{time.monotonic_ns()}.yaml"
        config.write_text(yaml.safe_dump(collector_config(self.grpc_port, self.otlp_http_port, self.metrics_port)))
        command = [str(COLLECTOR), f"--config=file:{config}"]
        if cpus is not None:
            command = ["taskset", "-c", cpus, *command]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(60) or self.proc.poll() is not None:
            self.stop()
            raise SystemExit("the Collector did not start:\n" + "\n".join(self.log[-20:]))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            if READY in line:  # every pipeline started, the receivers last
                self._ready.set()
        self._ready.set()

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def counted(self) -> float:
        return sum(family(scrape(self.metrics_port), CALLS_SERIES).values())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class GrpcClient:
    """Raw serialized exports over one OTLP/gRPC channel, ``in_flight`` calls at a time."""

    def __init__(self, port: int, in_flight: int, retry_wait: float) -> None:
        self._port = port
        self._in_flight = in_flight
        self._retry_wait = retry_wait

    def close(self) -> None:
        pass

    def send(self, payloads: list[bytes], deadline: float) -> int:
        """Every payload once, retrying RESOURCE_EXHAUSTED (sloscope's full queue); how many retries."""
        retries = 0
        with grpc.insecure_channel(f"127.0.0.1:{self._port}") as channel:
            export = channel.unary_unary(EXPORT_METHOD)  # bytes in, bytes out: no (de)serializer
            pending = list(reversed(payloads))
            flying: list[tuple[bytes, grpc.Future]] = []
            while pending or flying:
                while pending and len(flying) < self._in_flight:
                    payload = pending.pop()
                    flying.append((payload, export.future(payload, timeout=120)))
                payload, call = flying.pop(0)
                try:
                    call.result()
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                        raise SystemExit(f"sending failed: {error.code()}: {error.details()}") from error
                    retries += 1
                    time.sleep(self._retry_wait)
                    pending.append(payload)
        return retries


@dataclass
class Slice:
    spans: int
    elapsed_s: float
    cpu_s: float

    @property
    def cpu_us_per_span(self) -> float:
        return self.cpu_s / self.spans * 1e6


class Target:
    """One server and one client per transport; ``done(expected)`` tells when the server has counted a slice."""

    def __init__(
        self,
        label: str,
        cpu_seconds: Callable[[], float],
        clients: dict[str, Any],
        counted: Callable[[], float],
        unit: str,
    ) -> None:
        self.label = label
        self.cpu_seconds = cpu_seconds
        self.clients = clients
        self.counted = counted
        self.unit = unit  # "requests" or "spans": what counted() counts
        self.total = 0.0
        self.slices: dict[str, list[Slice]] = {transport: [] for transport in clients}

    def send(self, transport: str, payloads: list[bytes], spans: int, timeout: float) -> Slice:
        expected = self.total + (spans // 2 if self.unit == "requests" else spans)
        deadline = time.monotonic() + timeout
        cpu = self.cpu_seconds()
        start = time.perf_counter()
        self.clients[transport].send(payloads, deadline)
        while self.counted() < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.label}: timed out at {self.counted():.0f} of {expected:.0f} {self.unit}")
            time.sleep(POLL_SECONDS)
        done = Slice(spans, time.perf_counter() - start, self.cpu_seconds() - cpu)
        self.total = expected
        self.slices[transport].append(done)
        return done

    def result(self, transport: str) -> dict[str, Any]:
        slices = self.slices[transport]
        spans = sum(s.spans for s in slices)
        cpu = sum(s.cpu_s for s in slices)
        elapsed = sum(s.elapsed_s for s in slices)
        return {
            "label": self.label,
            "transport": transport,
            "spans": spans,
            "cpu_us_per_span": cpu / spans * 1e6,
            "spans_per_s": spans / elapsed,
            "cpu_share": cpu / elapsed,
            "slices": [{**asdict(s), "cpu_us_per_span": s.cpu_us_per_span} for s in slices],
        }


def sloscope_target(
    cpus: str | None, workdir: Path, args: argparse.Namespace, warmup: PayloadSet
) -> tuple[Target, Server]:
    settings = {
        "log_level": "INFO",
        "shutdown_grace_seconds": 10,
        "listeners": {"host": "127.0.0.1", "otlp_grpc_port": 0, "otlp_http_port": 0, "metrics_port": 0},
        "self_tracing": {"enabled": False},
    }
    server = Server(settings, cpus, workdir)  # type: ignore[arg-type]  # taskset -c takes a list: "0,1"
    line = next(entry for entry in server.log if LISTENING in entry)
    grpc_port = int(line.split("otlp_grpc=", 1)[1].split()[0].rsplit(":", 1)[1])
    clients = {
        "http": Client(server.otlp_http_port, args.connections, args.retry_wait),
        "grpc": GrpcClient(grpc_port, args.connections, args.retry_wait),
    }
    clients["http"].send(warmup.payloads, time.monotonic() + args.timeout)
    wait_for_requests(server.metrics_port, warmup.requests, time.monotonic() + args.timeout)
    target = Target("sloscope", server.cpu_seconds, clients, lambda: requests_counted(server.metrics_port), "requests")
    target.total = requests_counted(server.metrics_port)
    return target, server


def collector_target(
    cpus: str | None, workdir: Path, args: argparse.Namespace, warmup: PayloadSet
) -> tuple[Target, Collector]:
    collector = Collector(cpus, workdir)
    clients = {
        "http": Client(collector.otlp_http_port, args.connections, args.retry_wait),
        "grpc": GrpcClient(collector.grpc_port, args.connections, args.retry_wait),
    }
    target = Target("collector spanmetrics", collector.cpu_seconds, clients, collector.counted, "spans")
    target.send("http", warmup.payloads, warmup.spans, args.timeout)
    target.slices["http"].clear()  # the warm-up is not measured
    return target, collector


def run_cores(
    cores: int, args: argparse.Namespace, measured: dict[str, PayloadSet], warmup: PayloadSet, workdir: Path
) -> list[dict[str, Any]]:
    """Both servers on the first ``cores`` usable cores; every slice to each, in turns, per transport."""
    usable = sorted(os.sched_getaffinity(0))
    cpus = ",".join(str(c) for c in usable[:cores]) if shutil.which("taskset") else None
    sloscope, server = sloscope_target(cpus, workdir, args, warmup)
    try:
        collector, otelcol = collector_target(cpus, workdir, args, warmup)
    except BaseException:
        server.stop()
        raise
    pids = [server.proc.pid, otelcol.proc.pid]
    results = []
    try:
        for transport, payloads in measured.items():
            slices = slices_of(payloads, args.batch_spans, args.slice_spans)
            print(
                f"{cores} core(s) [{cpus}], OTLP/{transport}: {len(slices)} slices of {slices[0].spans:,} spans",
                flush=True,
            )
            for number, part in enumerate(slices):
                wait_quiet(args.quiet_wait, pids, quiet_seconds=0.5)
                turn = [sloscope, collector] if number % 2 == 0 else [collector, sloscope]
                line = []
                for target in turn:
                    load = LoadMeter(pids)
                    done = target.send(transport, payloads.payloads[part.start : part.stop], part.spans, args.timeout)
                    other = load.other_seconds() / done.elapsed_s
                    speed = rate(done.spans / done.elapsed_s)
                    line.append(
                        f"{target.label} {done.cpu_us_per_span:.1f} µs/span {speed} spans/s (others {other:.2f})"
                    )
                print(f"  slice {number + 1}/{len(slices)}: " + "; ".join(line), flush=True)
            pair = [sloscope.result(transport), collector.result(transport)]
            for row in pair:
                row["cores"] = cores
            results.extend(pair)
    finally:
        for target in (sloscope, collector):
            for client in target.clients.values():
                client.close()
        otelcol.stop()
        server.stop()
    return results


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for cores in sorted({r["cores"] for r in rows}):
        for transport in ("http", "grpc"):
            pick = {r["label"]: r for r in rows if r["cores"] == cores and r["transport"] == transport}
            s, c = pick["sloscope"], pick["collector spanmetrics"]
            out.append(
                {
                    "cores": cores,
                    "transport": transport,
                    "sloscope_cpu_us_per_span": s["cpu_us_per_span"],
                    "collector_cpu_us_per_span": c["cpu_us_per_span"],
                    "cpu_per_span_ratio": s["cpu_us_per_span"] / c["cpu_us_per_span"],
                    "sloscope_spans_per_s": s["spans_per_s"],
                    "collector_spans_per_s": c["spans_per_s"],
                    "sloscope_cpu_share": s["cpu_share"],
                    "collector_cpu_share": c["cpu_share"],
                }
            )
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    print()
    print(
        f"{'cores':>5} {'OTLP':>5} {'sloscope µs/span':>17} {'Collector µs/span':>18} {'ratio':>6} "
        f"{'sloscope spans/s':>17} {'Collector spans/s':>18} {'CPU share s/C':>14}"
    )
    for r in rows:
        print(
            f"{r['cores']:>5} {r['transport']:>5} {r['sloscope_cpu_us_per_span']:>17.1f} "
            f"{r['collector_cpu_us_per_span']:>18.1f} {r['cpu_per_span_ratio']:>5.1f}x "
            f"{rate(r['sloscope_spans_per_s']):>17} {rate(r['collector_spans_per_s']):>18} "
            f"{r['sloscope_cpu_share']:>6.2f}/{r['collector_cpu_share']:.2f}"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--spans", type=int, default=100_000, help="spans sent to each server per transport and core count")
    add("--batch-spans", type=int, default=512, help="spans per OTLP export request (default 512)")
    add("--slice-spans", type=int, default=25_000, help="spans per slice; the servers take turns (default 25000)")
    add("--pods", type=int, default=8, help="vLLM pods the requests are spread over (default 8)")
    add("--connections", type=int, default=4, help="concurrent HTTP connections / gRPC calls (default 4)")
    add("--cores", type=int, nargs="+", default=[1, 2], help="core counts to pin the servers to (default 1 2)")
    add("--retry-wait", type=float, default=0.05, help="seconds to wait before retrying a full queue")
    add("--quiet-wait", type=float, default=120, help="wait up to this long for other processes to go idle")
    add("--timeout", type=float, default=600, help="give up on one slice after this many seconds")
    add("--out", type=Path, default=BENCH / "results", help="JSON results folder (default bench/results)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if not COLLECTOR.is_file():
        print(f"{COLLECTOR} is missing: run `make tools` (it builds the Collector with the Collector builder)")
        return 1
    available = len(os.sched_getaffinity(0))
    args.cores = [c for c in args.cores if c <= available]
    info = machine()
    print(f"sloscope {info['sloscope']} ({info['commit']}), {info['cpus']} CPUs ({info['cpu']}); {COLLECTOR.name}")
    warmup = build(4 * args.batch_spans, args.batch_spans, args.pods, seed=2, first_request=10**9)
    # the same requests for both transports but for their ids: sloscope drops a trace it has already emitted
    measured = {
        "http": build(args.spans, args.batch_spans, args.pods, seed=1),
        "grpc": build(args.spans, args.batch_spans, args.pods, seed=1, first_request=10**8),
    }
    first = measured["http"]
    print(f"payloads: {len(first.payloads)} exports, {first.spans:,} spans per transport (bench/payloads.py)")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sloscope-bench-collector-") as tmp:
        for cores in args.cores:
            rows.extend(run_cores(cores, args, measured, warmup, Path(tmp)))
    summary = ratios(rows)
    print_table(summary)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"collector-{stamp}.json"
    version = subprocess.run([str(COLLECTOR), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    document = {
        "time": stamp,
        "machine": info,
        "collector": version,
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "summary": summary,
        "runs": rows,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
