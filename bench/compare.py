"""End to end, in one run: sloscope's two join engines beside the OpenTelemetry Collector with spanmetrics.

Run from the repository root as part of ``make bench`` (``.venv/bin/python bench/compare.py``; ``--quick`` for a
short run); it needs the Collector of ``make tools`` (.tools/bin/otelcol-sloscope, built with the Collector builder
from tools/collector/builder-config.yaml). docs/performance.md explains the numbers.

Three servers run on the same core(s), each started with ``taskset``: ``sloscope serve`` with ``join.engine:
native``, the same with ``join.engine: python`` (self-tracing off in both, as for run.py's uninstrumented server),
and the Collector with the pipeline a Collector user would build for RED metrics: ``otlp`` receiver -> ``batch`` ->
``spanmetrics`` connector -> ``prometheus`` exporter (default dimensions: service.name, span.name, span.kind,
status.code). All three get exactly the same serialized exports, both payload sets of bench/payloads.py (``build``:
two-span traces; ``build_llmd``: agent sessions of today's llm-d stack with P/D calls), over OTLP/HTTP protobuf and
OTLP/gRPC, slice by slice, taking turns in rotating order (so a machine whose speed drifts hits all alike). A slice
is done when the server's own series show all of it: every request (sloscope_requests_total, as run.py defines
it) or every span (the Collector's traces_span_metrics_calls_total).

The client is a few processes of its own (``--clients``), pinned to the cores the servers are not on when there are
any, each sending its share of every slice over its own connections; the CPU they use is reported beside the
servers'. Reported per server, payload set, transport and core count: CPU microseconds per span (the CPU time of
every thread of the server process, to the nanosecond: bench/cpu.py, over the slice, less the measured cost of the
/metrics scrapes that found it done) and spans/s (spans over the time from the first export sent to the first
scrape showing them all), and the ratios sloscope/Collector and native/python of CPU per span. It asserts nothing
about speed and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

# Sibling modules in bench/: the script's folder is first on sys.path.
from cpu import clock_of
from payloads import PayloadSet, build, build_llmd
from run import (
    BENCH,
    Client,
    LoadMeter,
    Server,
    family,
    machine,
    output_options,
    process_cpu_seconds,
    rate,
    requests_counted,
    scrape,
    wait_for_requests,
    wait_idle,
    wait_quiet,
    write_results,
)
from sloscope.demo.ports import free_port

ROOT = BENCH.parent
COLLECTOR = ROOT / ".tools" / "bin" / "otelcol-sloscope"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
CALLS_SERIES = "traces_span_metrics_calls_total"  # spanmetrics' calls counter through the prometheus exporter
READY = "Everything is ready"
POLL_SECONDS = 0.05
SCRAPE_SAMPLES = 10  # scrapes timed on an idle server to learn what one costs it
PAYLOAD_SETS = ("two-span", "llm-d")
TRANSPORTS = ("http", "grpc")
ENGINES = ("native", "python")
COLLECTOR_LABEL = "collector"


# ---- the servers ---------------------------------------------------------------------------------------------


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

    def __init__(self, cpus: str, workdir: Path) -> None:
        self.grpc_port, self.otlp_http_port, self.metrics_port = free_port(), free_port(), free_port()
        config = workdir / f"collector-{time.monotonic_ns()}.yaml"
        config.write_text(yaml.safe_dump(collector_config(self.grpc_port, self.otlp_http_port, self.metrics_port)))
        command = ["taskset", "-c", cpus, str(COLLECTOR), f"--config=file:{config}"]
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

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sloscope_settings(
    engine: str, window: float, grpc_server: str | None = None, http_server: str | None = None
) -> dict[str, Any]:
    """``grpc_server``, ``http_server``: the listeners' servers when not the setting's default."""
    fronts: dict[str, Any] = {"grpc": {"server": grpc_server}} if grpc_server else {}
    if http_server:
        fronts["otlp_http_server"] = http_server
    return {
        "log_level": "INFO",
        "shutdown_grace_seconds": 10,
        "listeners": {
            "host": "127.0.0.1",
            "otlp_grpc_port": 0,
            "otlp_http_port": 0,
            "metrics_port": 0,
            **fronts,
        },
        "join": {"engine": engine, "window_seconds": window},
        "self_tracing": {"enabled": False},
    }


def grpc_port_of(server: Server) -> int:
    line = next(entry for entry in server.log if "otlp_grpc=" in entry)
    return int(line.split("otlp_grpc=", 1)[1].split()[0].rsplit(":", 1)[1])


# ---- the client processes ------------------------------------------------------------------------------------


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
        import grpc  # in the client processes only: a gRPC runtime does not survive a fork

        retries = 0
        with grpc.insecure_channel(f"127.0.0.1:{self._port}") as channel:
            export = channel.unary_unary(EXPORT_METHOD)  # bytes in, bytes out: no (de)serializer
            pending = list(reversed(payloads))
            flying: list[tuple[bytes, Any]] = []
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


def _client_main(
    conn: Connection, slices_file: str, *, share: int, shares: int, cpus: list[int], args: dict[str, Any]
) -> None:
    """One client process: loads every slice once, then sends its share (every ``shares``-th export) on request."""
    if cpus:
        os.sched_setaffinity(0, set(cpus))
    with open(slices_file, "rb") as f:
        slices: dict[str, list[PayloadSet]] = pickle.load(f)
    conn.send("ready")
    while (order := conn.recv()) is not None:
        key, number, transport, port = order
        mine = slices[key][number].payloads[share::shares]
        make = Client if transport == "http" else GrpcClient
        client = make(port, args["connections"], args["retry_wait"])
        try:
            retries = client.send(mine, time.monotonic() + args["timeout"])
        except SystemExit as error:
            conn.send(f"error: {error}")
            continue
        finally:
            client.close()
        conn.send(retries)


class Clients:
    """``count`` client processes (spawned: they load the slices from a file, no forked gRPC or threads)."""

    def __init__(self, count: int, cpus: list[int], slices_file: Path, args: argparse.Namespace) -> None:
        context = multiprocessing.get_context("spawn")
        options = {"connections": args.connections, "retry_wait": args.retry_wait, "timeout": args.timeout}
        self._pipes: list[Connection] = []
        self.procs = []
        for share in range(count):
            ours, theirs = context.Pipe()
            proc = context.Process(
                target=_client_main,
                args=(theirs, str(slices_file)),
                kwargs={"share": share, "shares": count, "cpus": cpus, "args": options},
                daemon=True,
            )
            proc.start()
            self._pipes.append(ours)
            self.procs.append(proc)
        for pipe in self._pipes:
            if pipe.recv() != "ready":
                raise SystemExit("a client process did not start")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def cpu_seconds(self) -> float:
        return sum(process_cpu_seconds(pid) for pid in self.pids)

    def send(self, key: str, number: int, transport: str, port: int) -> int:
        for pipe in self._pipes:
            pipe.send((key, number, transport, port))
        retries = 0
        for pipe in self._pipes:
            answer = pipe.recv()
            if isinstance(answer, str):
                raise SystemExit(answer)
            retries += answer
        return retries

    def stop(self) -> None:
        for pipe in self._pipes:
            pipe.send(None)
        for proc in self.procs:
            proc.join(10)


# ---- one server under measurement ----------------------------------------------------------------------------


@dataclass
class Slice:
    payload_set: str
    transport: str
    spans: int
    elapsed_s: float
    cpu_s: float  # the server's, less the scrapes that polled for the end
    client_cpu_s: float
    polls: int
    retries: int
    other_cpu_share: float  # cores used meanwhile by processes outside the measurement
    rss_mib: float  # the server's resident set once the slice is in its series


class Target:
    """One server: its CPU clock, its ports, and ``counted()``: requests (sloscope) or spans (the Collector)."""

    def __init__(
        self,
        label: str,
        proc: subprocess.Popen[str],
        *,
        ports: dict[str, int],
        metrics_port: int,
        counted: Callable[[], float],
        unit: str,
    ) -> None:
        self.label = label
        self.proc = proc
        self.ports = ports  # transport -> port
        self.metrics_port = metrics_port
        self.counted = counted
        self.unit = unit
        self.total = 0.0
        self.scrape_cpu_s = 0.0
        self.slices: list[Slice] = []
        self.clock = clock_of(proc.pid)  # the one LoadMeter reads too

    def cpu_seconds(self) -> float:
        return self.clock.seconds()

    def measure_scrape(self) -> None:
        """What one /metrics scrape costs the server, on an idle server (subtracted from every slice)."""
        wait_idle(self, time.monotonic() + 10)  # type: ignore[arg-type]  # needs only cpu_seconds()
        before = self.cpu_seconds()
        for _ in range(SCRAPE_SAMPLES):
            self.counted()
        self.scrape_cpu_s = (self.cpu_seconds() - before) / SCRAPE_SAMPLES
        self.total = self.counted()

    def send(self, clients: Clients, key: str, number: int, part: PayloadSet, *, transport: str, timeout: float
             ) -> Slice:  # fmt: skip
        expected = self.total + (part.requests if self.unit == "requests" else part.spans)
        deadline = time.monotonic() + timeout
        load = LoadMeter([self.proc.pid, *clients.pids])
        cpu, client_cpu = self.cpu_seconds(), clients.cpu_seconds()
        start = time.perf_counter()
        retries = clients.send(key, number, transport, self.ports[transport])
        wait_idle(self, deadline)  # type: ignore[arg-type]  # scrape once the work is done, not during it
        polls = 1
        while (seen := self.counted()) < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.label}: timed out at {seen:.0f} of {expected:.0f} {self.unit}")
            polls += 1
            time.sleep(POLL_SECONDS)
        elapsed = time.perf_counter() - start
        self.total = expected
        done = Slice(
            payload_set=key.split("/", 1)[0],
            transport=transport,
            spans=part.spans,
            elapsed_s=elapsed,
            cpu_s=self.cpu_seconds() - cpu - polls * self.scrape_cpu_s,
            client_cpu_s=clients.cpu_seconds() - client_cpu,
            polls=polls,
            retries=retries,
            other_cpu_share=load.other_seconds() / elapsed,
            rss_mib=resident_mib(self.proc.pid)[0],
        )
        self.slices.append(done)
        return done

    def result(self, payload_set: str, transport: str) -> dict[str, Any]:
        slices = [s for s in self.slices if s.payload_set == payload_set and s.transport == transport]
        spans = sum(s.spans for s in slices)
        cpu = sum(s.cpu_s for s in slices)
        elapsed = sum(s.elapsed_s for s in slices)
        return {
            "label": self.label,
            "payload_set": payload_set,
            "transport": transport,
            "spans": spans,
            "cpu_us_per_span": cpu / spans * 1e6,
            "spans_per_s": spans / elapsed,
            "cpu_share": cpu / elapsed,
            "client_cpu_share": sum(s.client_cpu_s for s in slices) / elapsed,
            "scrape_cpu_ms": self.scrape_cpu_s * 1e3,
            "max_other_cpu_share": max(s.other_cpu_share for s in slices),
            "rss_mib": max(s.rss_mib for s in slices),  # after any slice of this case
            "peak_rss_mib": resident_mib(self.proc.pid)[1],  # the process's high-water mark so far
            "threads_vanished": self.clock.vanished,  # their time after the last reading is not counted
            "slices": [{**asdict(s), "cpu_us_per_span": s.cpu_s / s.spans * 1e6} for s in slices],
        }


def resident_mib(pid: int) -> tuple[float, float]:
    """The process's resident set now and its high-water mark (``VmRSS``, ``VmHWM``), MiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def sloscope_target(engine: str, cpus: str, workdir: Path, args: argparse.Namespace, warmup: PayloadSet) -> Target:
    settings = sloscope_settings(engine, args.window, args.grpc_server, args.http_server)
    server = Server(settings, cpus, workdir)  # type: ignore[arg-type]  # "0,1"
    try:
        client = Client(server.otlp_http_port, args.connections, args.retry_wait)
        client.send(warmup.payloads, time.monotonic() + args.timeout)  # lazy imports, first-request costs
        client.close()
        wait_for_requests(server.metrics_port, warmup.requests, time.monotonic() + args.timeout)
    except BaseException:
        server.stop()
        raise
    target = Target(
        f"sloscope {engine}",
        server.proc,
        ports={"http": server.otlp_http_port, "grpc": grpc_port_of(server)},
        metrics_port=server.metrics_port,
        counted=lambda: requests_counted(server.metrics_port),
        unit="requests",
    )
    target.stop = server.stop  # type: ignore[attr-defined]
    return target


def collector_target(cpus: str, workdir: Path, args: argparse.Namespace, warmup: PayloadSet) -> Target:
    collector = Collector(cpus, workdir)
    target = Target(
        COLLECTOR_LABEL,
        collector.proc,
        ports={"http": collector.otlp_http_port, "grpc": collector.grpc_port},
        metrics_port=collector.metrics_port,
        counted=lambda: sum(family(scrape(collector.metrics_port), CALLS_SERIES).values()),
        unit="spans",
    )
    target.stop = collector.stop  # type: ignore[attr-defined]
    client = Client(collector.otlp_http_port, args.connections, args.retry_wait)
    client.send(warmup.payloads, time.monotonic() + args.timeout)
    client.close()
    deadline = time.monotonic() + args.timeout
    while target.counted() < warmup.spans and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    return target


# ---- the run -------------------------------------------------------------------------------------------------


def build_slices(args: argparse.Namespace) -> dict[str, list[PayloadSet]]:
    """``set/transport`` -> slices, each a whole set of traces (a slice never splits a trace or a session).

    The two transports get different trace ids (a sloscope server drops a trace it has already emitted); every
    server gets the same bytes.
    """
    count = max(1, round(args.spans / args.slice_spans))
    out: dict[str, list[PayloadSet]] = {}
    ids = 10**7  # request (two-span) or session (llm-d) numbers per slice
    for t, transport in enumerate(TRANSPORTS):
        numbers = [count * t + n for n in range(count)]  # unique over both transports, whatever the count
        out[f"two-span/{transport}"] = [
            build(args.slice_spans, args.batch_spans, args.pods, seed=k + 1, first_request=ids * k) for k in numbers
        ]
        out[f"llm-d/{transport}"] = [
            build_llmd(args.slice_spans, args.batch_spans, seed=k + 1, first_session=ids * k) for k in numbers
        ]
    return out


def run_cores(
    cores: int, args: argparse.Namespace, slices: dict[str, list[PayloadSet]], slices_file: Path, workdir: Path
) -> list[dict[str, Any]]:
    """The three servers on the first ``cores`` usable cores, the clients on the rest (or the same when none)."""
    usable = sorted(os.sched_getaffinity(0))
    server_cpus = usable[:cores]
    client_cpus = usable[cores:] or usable
    cpus = ",".join(map(str, server_cpus))
    warmup = build(4 * args.batch_spans, args.batch_spans, args.pods, seed=2, first_request=10**9)
    targets: list[Target] = []
    clients = None
    try:
        for engine in args.engines:
            targets.append(sloscope_target(engine, cpus, workdir, args, warmup))
        targets.append(collector_target(cpus, workdir, args, warmup))
        clients = Clients(args.clients, client_cpus if client_cpus != usable else [], slices_file, args)
        for target in targets:
            target.measure_scrape()
        pids = [t.proc.pid for t in targets] + clients.pids
        print(
            f"{cores} core(s): servers on [{cpus}], {args.clients} client processes on "
            f"[{','.join(map(str, client_cpus))}]",
            flush=True,
        )
        for key, parts in slices.items():
            payload_set, transport = key.split("/")
            for number, part in enumerate(parts):
                wait_quiet(args.quiet_wait, pids, quiet_seconds=0.5)
                turn = targets[number % len(targets) :] + targets[: number % len(targets)]
                line = []
                for target in turn:
                    done = target.send(clients, key, number, part, transport=transport, timeout=args.timeout)
                    line.append(f"{target.label} {done.cpu_s / done.spans * 1e6:.1f}")
                others = max(s.other_cpu_share for s in (t.slices[-1] for t in targets))
                print(
                    f"  {payload_set} OTLP/{transport} slice {number + 1}/{len(parts)} ({part.spans:,} spans), "
                    f"µs/span: {'; '.join(line)} (others up to {others:.2f} cores)",
                    flush=True,
                )
        rows = []
        for target in targets:
            for payload_set in PAYLOAD_SETS:
                for transport in TRANSPORTS:
                    rows.append({**target.result(payload_set, transport), "cores": cores})
        return rows
    finally:
        if clients is not None:
            clients.stop()
        for target in targets:
            target.stop()  # type: ignore[attr-defined]


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for cores in sorted({r["cores"] for r in rows}):
        for payload_set in PAYLOAD_SETS:
            for transport in TRANSPORTS:
                pick = {
                    r["label"]: r
                    for r in rows
                    if (r["cores"], r["payload_set"], r["transport"]) == (cores, payload_set, transport)
                }
                ran = {k: pick[v] for k, v in LABELS.items() if v in pick}
                row: dict[str, Any] = {"cores": cores, "payload_set": payload_set, "transport": transport}
                for key in ("cpu_us_per_span", "spans_per_s", "client_cpu_share", "rss_mib", "peak_rss_mib"):
                    row.update({f"{k}_{key}": r[key] for k, r in ran.items()})
                for a, b in (("native", "collector"), ("python", "collector"), ("native", "python")):
                    if a in ran and b in ran:
                        row[f"{a}_over_{b}"] = ran[a]["cpu_us_per_span"] / ran[b]["cpu_us_per_span"]
                        row[f"{a}_over_{b}_median"] = median_of_slice_ratios(ran[a], ran[b])
                row["max_other_cpu_share"] = max(r["max_other_cpu_share"] for r in pick.values())
                out.append(row)
    return out


def median_of_slice_ratios(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The median over the slices of ``a``'s CPU per span over ``b``'s on the same slice. The servers take their
    turns at a slice within a second or two, while the machine's speed drifts over a run by a third and more: a
    slice caught by a slow spell skews the ratio of the totals, not the median."""
    pairs = zip(a["slices"], b["slices"], strict=True)
    return statistics.median(x["cpu_us_per_span"] / y["cpu_us_per_span"] for x, y in pairs)


LABELS = {"native": "sloscope native", "python": "sloscope python", "collector": COLLECTOR_LABEL}


def _cell(row: dict[str, Any], key: str, form: str) -> str:
    return format(row[key], form) if key in row else "-"


def print_table(rows: list[dict[str, Any]]) -> None:
    print("\nCPU µs per span (server process, all threads) and ratios of it: of the totals; median: of the slices'")
    head = ("cores", "payloads", "OTLP", "native", "python", "Collector", "nat/Col", "median", "py/Col", "nat/py")
    print(f"{head[0]:>5} {head[1]:>9} {head[2]:>5}" + "".join(f" {h:>9}" for h in head[3:]))
    for r in rows:
        cells = [_cell(r, f"{k}_cpu_us_per_span", ".1f") for k in LABELS]
        keys = ("native_over_collector", "native_over_collector_median", "python_over_collector", "native_over_python")
        shares = [_cell(r, key, ".2f") + "x" * (key in r) for key in keys]
        print(
            f"{r['cores']:>5} {r['payload_set']:>9} {r['transport']:>5}" + "".join(f" {c:>9}" for c in cells + shares)
        )
    print("\nspans/s (first export sent -> series show all) and the client processes' CPU, in cores")
    head = ("cores", "payloads", "OTLP", "native", "python", "Collector", "client n/p/C")
    print(f"{head[0]:>5} {head[1]:>9} {head[2]:>5}" + "".join(f" {h:>9}" for h in head[3:6]) + f" {head[6]:>16}")
    for r in rows:
        speeds = [rate(r[f"{k}_spans_per_s"]) if f"{k}_spans_per_s" in r else "-" for k in LABELS]
        client = "/".join(_cell(r, f"{k}_client_cpu_share", ".2f") for k in LABELS)
        print(
            f"{r['cores']:>5} {r['payload_set']:>9} {r['transport']:>5}"
            + "".join(f" {s:>9}" for s in speeds)
            + f" {client:>16}"
        )
    print("\nresident memory of the server, MiB: the most after a slice of the case (the high-water mark so far)")
    head = ("cores", "payloads", "OTLP", "native", "python", "Collector")
    print(f"{head[0]:>5} {head[1]:>9} {head[2]:>5}" + "".join(f" {h:>14}" for h in head[3:]))
    for r in rows:
        memory = [
            f"{r[f'{k}_rss_mib']:.0f} ({r[f'{k}_peak_rss_mib']:.0f})" if f"{k}_rss_mib" in r else "-" for k in LABELS
        ]
        print(f"{r['cores']:>5} {r['payload_set']:>9} {r['transport']:>5}" + "".join(f" {m:>14}" for m in memory))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--quick", action="store_true", help="a short run: 20,000 spans per case in slices of 10,000")
    add("--spans", type=int, default=50_000, help="spans per server, payload set, transport and core count")
    add("--slice-spans", type=int, default=12_500, help="spans per slice; the servers take turns (default 12500)")
    add(
        "--grpc-server",
        choices=("grpcio", "native"),
        help="listeners.grpc.server of the sloscope servers (default: the setting's, native with the native engine)",
    )
    add(
        "--http-server",
        choices=("uvicorn", "native"),
        help="listeners.otlp_http_server of the sloscope servers (default: the setting's, native with the native "
        "engine)",
    )
    add("--batch-spans", type=int, default=512, help="spans per OTLP export request (default 512)")
    add("--pods", type=int, default=8, help="vLLM pods the two-span requests are spread over (default 8)")
    add("--clients", type=int, default=2, help="client processes (default 2)")
    add("--connections", type=int, default=4, help="HTTP connections / gRPC calls in flight per client (default 4)")
    add("--cores", type=int, nargs="+", default=[1, 2], help="core counts to pin the servers to (default 1 2)")
    add("--window", type=float, default=0.5, help="join.window_seconds of the sloscope servers (default 0.5)")
    add("--retry-wait", type=float, default=0.05, help="seconds to wait before retrying a full queue")
    add("--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="sloscope's join engines (default both)")
    add("--quiet-wait", type=float, default=3, help="wait up to this long for other processes to go idle (default 3)")
    output_options(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.spans, args.slice_spans = 20_000, 10_000
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not COLLECTOR.is_file():
        print(f"{COLLECTOR} is missing: run `make tools` (it builds the Collector with the Collector builder)")
        return 1
    available = len(os.sched_getaffinity(0))
    args.cores = [c for c in args.cores if c <= available]
    info = machine()
    load = os.getloadavg()
    print(f"sloscope {info['sloscope']} ({info['commit']}), {info['cpus']} CPUs ({info['cpu']}); {COLLECTOR.name}")
    print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    slices = build_slices(args)
    for key, parts in slices.items():
        print(f"payloads {key}: {len(parts)} slices, {sum(p.spans for p in parts):,} spans", flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sloscope-bench-compare-") as tmp:
        slices_file = Path(tmp) / "slices.pickle"
        slices_file.write_bytes(pickle.dumps(slices))
        for cores in args.cores:
            rows.extend(run_cores(cores, args, slices, slices_file, Path(tmp)))
    summary = ratios(rows)
    print_table(summary)
    version = subprocess.run([str(COLLECTOR), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    document = {"machine": info, "load_average_start": load, "collector": version, "summary": summary, "runs": rows}
    print(f"\nload average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    write_results(args, "compare", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
