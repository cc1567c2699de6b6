"""Throughput of sloscope's ingest path: raw protobuf decode vs. OTLP/HTTP end to end, in one run.

Run from the repository root as ``make bench`` (``.venv/bin/python bench/run.py``) or with any
Python that has sloscope installed. docs/performance.md explains the method and the numbers.

1. decode: spans/s of ``sloscope.receivers.otlp_decode.decode_protobuf`` over the exact payloads
   sent in step 2, and of ``ExportTraceServiceRequest.FromString`` alone, on the server's core;
2. end to end: ``sloscope serve`` pinned to one core (``taskset``), this process sending the
   payloads over a few keep-alive OTLP/HTTP protobuf connections from another core. A slice's
   clock starts at its first request and stops when a scrape of ``/metrics`` shows
   ``sloscope_requests_total`` (summed over all series) counting every request sent so far:
   spans/s = spans sent / elapsed;
3. step 2 twice: one server with sloscope's self-tracing (opentelemetry-instrumentation-fastapi)
   on, one with it off, and the ratio of the two.

The payloads are cut into slices (``--slice-spans``) and the three measurements take turns on
every slice (decode, tracing on, tracing off, in rotating order), so each covers the same
stretch of time. On a virtual machine whose speed drifts (the one docs/performance.md was
measured on swings by almost 2x within seconds) that is not enough to resolve a few percent,
so a second phase runs two fresh servers and a decode process on the same core *at once*, each
given the same slice at the same moment, and compares their CPU seconds per span: the scheduler
interleaves them every few milliseconds, so a speed change hits all three alike. Before every
slice the script waits for other processes to leave the CPUs, and it reports how much CPU they
took meanwhile.

It prints a table and writes JSON to bench/results/. It asserts nothing about speed.
``--profile`` adds one run with the server profiled (py-spy when installed, else cProfile).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import multiprocessing
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import yaml

# Sibling modules in bench/: the script's folder is first on sys.path.
import profiling
from cpu import process_cpu_seconds
from payloads import PayloadSet, build

BENCH = Path(__file__).resolve().parent

GOAL_SPANS_PER_SECOND = 20_000  # end to end, one core, default settings (self-tracing on)
LISTENING = "sloscope listening:"
REQUESTS_SERIES = "sloscope_requests_total"
POLL_SECONDS = 0.05
IDLE_GROWTH_SECONDS = 0.002  # CPU an idle server may use in one poll interval (4 % of a core)
BUSY_MACHINE_CORES = 0.1  # other processes using more than this during a measurement earn a warning


# ---- the machine ----------------------------------------------------------------------------


def pin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    before = os.sched_getaffinity(0)
    pin(cpu)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _machine_busy_seconds() -> float:
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(f) for f in fields]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # user..steal; guest is already in user


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class LoadMeter:
    """CPU time the whole machine spent busy since creation, less this process's and ``pids``'.

    Other people's work on a shared machine shows up here: a share well above zero means the
    numbers were disturbed.
    """

    def __init__(self, pids: list[int] | None = None) -> None:
        self._pids = pids or []
        self._busy = _machine_busy_seconds()
        self._own = _own_cpu_seconds()
        self._server = self._server_cpu()

    def _server_cpu(self) -> float:
        return sum(process_cpu_seconds(pid) for pid in self._pids)

    def own_seconds(self) -> float:
        return _own_cpu_seconds() - self._own

    def other_seconds(self) -> float:
        busy = _machine_busy_seconds() - self._busy
        return max(0.0, busy - self.own_seconds() - (self._server_cpu() - self._server))


def wait_quiet(max_wait: float, pids: list[int], quiet_seconds: float = 1.0) -> float:
    """Wait up to ``max_wait`` s for other processes to use under BUSY_MACHINE_CORES for ``quiet_seconds``."""
    deadline = time.monotonic() + max_wait
    waited = False
    while True:
        meter = LoadMeter(pids)
        start = time.perf_counter()
        time.sleep(quiet_seconds)
        other = meter.other_seconds() / (time.perf_counter() - start)
        if other <= BUSY_MACHINE_CORES:
            return other
        if time.monotonic() >= deadline:
            print(
                f"  the machine is still busy after {max_wait:.0f}s ({other:.2f} cores used by other "
                "processes): measuring anyway",
                file=sys.stderr,
            )
            return other
        if not waited:
            print(f"  waiting for other processes to leave the CPUs ({other:.2f} cores busy) ...", flush=True)
            waited = True


def machine() -> dict[str, Any]:
    from google.protobuf.internal import api_implementation

    import sloscope

    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break

    def git(*command: str) -> str:
        done = subprocess.run(["git", "-C", str(BENCH.parent), *command], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "protobuf_backend": api_implementation.Type(),
        "uvicorn_http": "httptools" if find_spec("httptools") else "h11",
        "uvloop": find_spec("uvloop") is not None,
        "sloscope": sloscope.__version__,
        "commit": git("rev-parse", "--short", "HEAD"),
        "exporter_modified": bool(git("status", "--porcelain", "--", "exporter")),  # uncommitted changes
    }


def output_options(parser: argparse.ArgumentParser) -> None:
    """--timeout and --out, as every benchmark script that starts servers takes them."""
    parser.add_argument("--timeout", type=float, default=600, help="give up on one slice after this many seconds")
    parser.add_argument("--out", type=Path, default=BENCH / "results", help="JSON results folder (bench/results)")


def write_results(args: argparse.Namespace, prefix: str, document: dict[str, Any]) -> Path:
    """``document`` with the time and the parameters, as ``<args.out>/<prefix>-<UTC time>.json``."""
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"{prefix}-{stamp}.json"
    parameters = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    document = {"time": stamp, "parameters": parameters, "load_average_end": os.getloadavg(), **document}
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults: {path}")
    return path


# ---- step 1: decode -------------------------------------------------------------------------


class Decoder:
    """Times ``decode_protobuf`` and ``FromString`` over a list of payloads, pinned to one core."""

    def __init__(self, payloads: list[bytes], spans: int, cpu: int | None) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        from sloscope.receivers.otlp_decode import decode_protobuf

        self._decode: Callable[[bytes], Any] = decode_protobuf
        self._parse: Callable[[bytes], Any] = ExportTraceServiceRequest.FromString
        self._cpu = cpu
        # An untimed pass first (imports, allocator, caches) that also checks every span decodes.
        decoded = sum(len(decode_protobuf(p).spans) for p in payloads)
        if decoded != spans:
            raise SystemExit(f"decode_protobuf returned {decoded} spans, expected {spans}")

    def measure(self, payloads: list[bytes]) -> tuple[float, float]:
        """Seconds to decode the payloads, and to parse them only."""
        with pinned(self._cpu):
            return self._time(self._decode, payloads), self._time(self._parse, payloads)

    @staticmethod
    def _time(fn: Callable[[bytes], Any], payloads: list[bytes]) -> float:
        start = time.perf_counter()
        for payload in payloads:
            fn(payload)
        return time.perf_counter() - start


class DecodeWorker:
    """A forked process pinned to the servers' core that decodes a slice over and over, timing its CPU.

    It keeps decoding for as long as both servers work on the same slice (the shared-core
    measurement), so all three run side by side for the whole window. Forked before any thread
    starts, it inherits the payloads.
    """

    def __init__(self, payloads: list[bytes], cpu: int | None) -> None:
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self.proc = context.Process(target=self._serve, args=(child, payloads, cpu), daemon=True)
        self.proc.start()

    @staticmethod
    def _serve(conn: Any, payloads: list[bytes], cpu: int | None) -> None:
        from sloscope.receivers.otlp_decode import decode_protobuf

        pin(cpu)
        while (job := conn.recv()) is not None:
            part = payloads[job[0] : job[1]]
            spans = 0
            start = time.process_time()
            while not conn.poll():  # until told to stop
                for payload in part:
                    spans += len(decode_protobuf(payload).spans)
                    if conn.poll():
                        break
            seconds = time.process_time() - start
            conn.recv()
            conn.send((seconds, spans))

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def start(self, part: SliceOf) -> None:
        self._conn.send((part.start, part.stop))

    def finish(self) -> tuple[float, int]:
        """Stop decoding: CPU seconds spent, and spans decoded, since :meth:`start`."""
        self._conn.send("stop")
        seconds, spans = self._conn.recv()
        return float(seconds), int(spans)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


# ---- step 2: the server ---------------------------------------------------------------------


class Server:
    """``sloscope serve`` in a subprocess pinned to one core, on loopback with ports picked by the OS."""

    def __init__(
        self,
        settings: dict[str, Any],
        cpu: int | None,
        workdir: Path,
        cprofile_dir: Path | None = None,
        *,
        program: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``program``: what runs ``serve --config FILE`` (the `sloscope` command of this environment unless told);
        ``env``: added to the environment."""
        config = workdir / f"settings-{time.monotonic_ns()}.yaml"
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        if program is not None:
            command = list(program)
        elif cprofile_dir is not None:
            command = [sys.executable, str(BENCH / "profile_server.py"), str(cprofile_dir)]
        else:
            command = [sys.executable, "-m", "sloscope"]  # the `sloscope` command of this environment
        command += ["serve", "--config", str(config)]
        taskset = cpu is not None and shutil.which("taskset") is not None
        if taskset:
            command = ["taskset", "-c", str(cpu), *command]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SLOSCOPE_")}  # only the file counts
        environ.update(env or {})
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=environ)
        if cpu is not None and not taskset:  # before the interpreter has started any thread
            os.sched_setaffinity(self.proc.pid, {cpu})
        self.log: list[str] = []
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self.ports = self._wait_ready(timeout=30.0)  # by listener: otlp_grpc, otlp_http, metrics
        self.otlp_http_port, self.metrics_port = self.ports["otlp_http"], self.ports["metrics"]

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            if LISTENING in line:
                self._listening.set()

    def _wait_ready(self, timeout: float) -> dict[str, int]:
        """The ports of the line ``sloscope listening: otlp_grpc=H:P otlp_http=H:P metrics=H:P``."""
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.log[-20:])
                raise SystemExit(f"sloscope serve did not start (exit {self.proc.returncode}):\n{tail}")
        line = next(entry for entry in self.log if LISTENING in entry)
        fields = dict(part.split("=", 1) for part in line.split(LISTENING, 1)[1].split())
        return {name: int(address.rsplit(":", 1)[1]) for name, address in fields.items()}

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


def scrape(port: int) -> dict[str, float]:
    """Every sample of the text exposition as {'name{labels}': value}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                samples[series] = float(value)
    return samples


def family(samples: dict[str, float], name: str) -> dict[str, float]:
    """Samples of one series name, keyed by their label text."""
    out = {}
    for series, value in samples.items():
        base, _, labels = series.partition("{")
        if base == name:
            out[labels.rstrip("}")] = value
    return out


def requests_counted(port: int) -> float:
    return sum(family(scrape(port), REQUESTS_SERIES).values())


def wait_idle(server: Server, deadline: float) -> None:
    """Until the server's CPU time grows by less than IDLE_GROWTH_SECONDS for two samples in a row, POLL_SECONDS
    apart (an idle server still wakes its timers: to the nanosecond its CPU time never stands still)."""
    last, still = server.cpu_seconds(), 0
    while still < 2 and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        now = server.cpu_seconds()
        still = still + 1 if now - last < IDLE_GROWTH_SECONDS else 0
        last = now


def wait_for_requests(port: int, expected: float, deadline: float) -> int:
    """Poll /metrics every POLL_SECONDS until sloscope_requests_total sums to ``expected``; the polls."""
    polls = 0
    while True:
        counted = requests_counted(port)
        polls += 1
        if counted >= expected:
            return polls
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out with {counted:.0f} of {expected:.0f} requests counted")
        time.sleep(POLL_SECONDS)


# ---- step 2: the client ---------------------------------------------------------------------


class Client:
    """A few keep-alive HTTP connections to one OTLP/HTTP receiver, used by one thread each."""

    def __init__(self, port: int, connections: int, retry_wait: float) -> None:
        self._connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=120) for _ in range(connections)]
        self._retry_wait = retry_wait

    def close(self) -> None:
        for conn in self._connections:
            conn.close()

    def send(self, payloads: list[bytes], deadline: float) -> int:
        """POST every payload once, retrying 429s after a short wait; how many 429s there were.

        Connections are opened anew for each call (the server closes keep-alive connections idle
        for 5 s, and calls are apart while the other measurements run) and kept alive within it.
        """
        for conn in self._connections:
            conn.close()  # the next request connects again
        lock = threading.Lock()
        pending = iter(payloads)
        retries = [0]
        errors: list[str] = []
        headers = {"Content-Type": "application/x-protobuf"}

        def worker(conn: http.client.HTTPConnection) -> None:
            try:
                while not errors:
                    with lock:
                        payload = next(pending, None)
                    if payload is None:
                        return
                    while True:
                        conn.request("POST", "/v1/traces", payload, headers)
                        response = conn.getresponse()
                        body = response.read()
                        if response.status == 200:
                            break
                        if response.status != 429 or time.monotonic() > deadline:
                            errors.append(f"HTTP {response.status}: {body[:200]!r}")
                            return
                        with lock:
                            retries[0] += 1
                        time.sleep(self._retry_wait)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=worker, args=(conn,)) for conn in self._connections]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise SystemExit(f"sending failed: {errors[0]}")
        return retries[0]


@dataclass
class Slice:
    """One slice of the payloads sent to one server and counted in its series."""

    spans: int
    elapsed_s: float  # first request sent -> a scrape shows every request counted
    send_s: float  # first request sent -> last response received
    retries_429: int
    server_cpu_s: float
    client_cpu_s: float
    metrics_polls: int  # scrapes of /metrics after the last export was answered
    other_cpu_share: float  # CPU used meanwhile by processes other than this one and the servers, in cores

    @property
    def spans_per_s(self) -> float:
        return self.spans / self.elapsed_s


class Target:
    """A running server under measurement: warmed up, then fed slice after slice."""

    def __init__(
        self,
        label: str,
        *,
        self_tracing: bool,
        args: argparse.Namespace,
        workdir: Path,
        warmup: PayloadSet,
        cprofile_dir: Path | None = None,
    ) -> None:
        self.label = label
        self.self_tracing = self_tracing
        settings = {
            "log_level": "INFO",
            "shutdown_grace_seconds": 10,
            "listeners": {"host": "127.0.0.1", "otlp_grpc_port": 0, "otlp_http_port": 0, "metrics_port": 0},
            "join": {"window_seconds": args.window},
            "self_tracing": {"enabled": self_tracing},
        }
        self.server = Server(settings, args.server_cpu, workdir, cprofile_dir)
        self.slices: list[Slice] = []
        self._timeout = args.timeout
        try:
            self.client = Client(self.server.otlp_http_port, args.connections, args.retry_wait)
            # Warm-up: first-request costs (lazy imports, route compilation) stay out of the clock.
            self.client.send(warmup.payloads, time.monotonic() + self._timeout)
            wait_for_requests(self.server.metrics_port, warmup.requests, time.monotonic() + self._timeout)
            self.counted = requests_counted(self.server.metrics_port)
        except BaseException:
            self.server.stop()
            raise

    def send(
        self, payloads: list[bytes], spans: int, requests: int, pids: list[int], *, idle_first: bool = False
    ) -> Slice:
        """Send one slice and wait for its series; ``pids``: the processes that are part of the measurement.

        ``idle_first``: before scraping, wait for the server to stop using CPU, so that the scrapes
        (each costs the server milliseconds) do not weigh on a CPU-time measurement.
        """
        deadline = time.monotonic() + self._timeout
        cpu_before = self.server.cpu_seconds()
        load = LoadMeter(pids)
        start = time.perf_counter()
        retries = self.client.send(payloads, deadline)
        sent = time.perf_counter()
        if idle_first:
            wait_idle(self.server, deadline)
        polls = wait_for_requests(self.server.metrics_port, self.counted + requests, deadline)
        stop = time.perf_counter()
        self.counted += requests
        done = Slice(
            spans=spans,
            elapsed_s=stop - start,
            send_s=sent - start,
            retries_429=retries,
            server_cpu_s=self.server.cpu_seconds() - cpu_before,
            client_cpu_s=load.own_seconds(),
            metrics_polls=polls,
            other_cpu_share=load.other_seconds() / (stop - start),
        )
        self.slices.append(done)
        return done

    def result(self) -> dict[str, Any]:
        spans = sum(s.spans for s in self.slices)
        elapsed = sum(s.elapsed_s for s in self.slices)
        samples = scrape(self.server.metrics_port)
        return {
            "label": self.label,
            "self_tracing": self.self_tracing,
            "spans": spans,
            "elapsed_s": elapsed,
            "spans_per_s": spans / elapsed,
            "send_spans_per_s": spans / sum(s.send_s for s in self.slices),
            "retries_429": sum(s.retries_429 for s in self.slices),
            "server_cpu_share": sum(s.server_cpu_s for s in self.slices) / elapsed,
            "client_cpu_share": sum(s.client_cpu_s for s in self.slices) / elapsed,
            "max_other_cpu_share": max(s.other_cpu_share for s in self.slices),
            "slices": [{**asdict(s), "spans_per_s": s.spans_per_s} for s in self.slices],
            "joined": family(samples, "sloscope_traces_joined_total"),
            "dropped": {k: v for k, v in family(samples, "sloscope_spans_dropped_total").items() if v},
            "otlp_requests": {k: v for k, v in family(samples, "sloscope_otlp_requests_total").items() if v},
        }

    def stop(self) -> None:
        self.client.close()
        self.server.stop()


# ---- the run --------------------------------------------------------------------------------


@dataclass
class DecodeSlice:
    spans: int
    decode_protobuf_s: float
    from_string_s: float
    other_cpu_share: float


@dataclass
class Measured:
    decode: list[DecodeSlice] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)  # the servers alone on the core
    shared: dict[str, Any] = field(default_factory=dict)  # the servers and a decoder sharing it


@dataclass(frozen=True)
class SliceOf:
    start: int  # index of the first export
    stop: int
    spans: int
    requests: int


def slices_of(payloads: PayloadSet, batch_spans: int, slice_spans: int) -> list[SliceOf]:
    """Consecutive slices of about ``slice_spans`` spans (whole exports)."""
    per_slice = max(1, round(slice_spans / batch_spans))
    out = []
    for start in range(0, len(payloads.payloads), per_slice):
        stop = min(start + per_slice, len(payloads.payloads))
        spans = (stop - start) * batch_spans
        out.append(SliceOf(start, stop, spans, spans // 2))
    return out


def measure(args: argparse.Namespace, measured: PayloadSet, warmup: PayloadSet, workdir: Path) -> Measured:
    """Both servers up; then, slice by slice, decode / tracing on / tracing off in rotating order."""
    decoder = Decoder(measured.payloads, measured.spans, args.server_cpu)
    pin(args.client_cpu)
    targets: list[Target] = []
    try:
        for tracing in (True, False):
            label = f"self-tracing {'on' if tracing else 'off'}"
            targets.append(Target(label, self_tracing=tracing, args=args, workdir=workdir, warmup=warmup))
        pids = [t.server.proc.pid for t in targets]
        result = Measured()
        slices = slices_of(measured, args.batch_spans, args.slice_spans)
        print(
            f"alone on core {args.server_cpu}: {len(slices)} slices of {slices[0].spans:,} spans, each decoded "
            "and sent to each server in turn (rotating order)",
            flush=True,
        )
        for number, part in enumerate(slices):
            payloads, spans = measured.payloads[part.start : part.stop], part.spans
            wait_quiet(args.quiet_wait, pids, quiet_seconds=0.5)
            steps: list[Any] = ["decode", *targets]
            steps = steps[number % 3 :] + steps[: number % 3]
            line = []
            for step in steps:
                if step == "decode":
                    load = LoadMeter(pids)
                    start = time.perf_counter()
                    decode_s, parse_s = decoder.measure(payloads)
                    other = load.other_seconds() / (time.perf_counter() - start)
                    result.decode.append(DecodeSlice(spans, decode_s, parse_s, other))
                    line.append(f"decode {rate(spans / decode_s)}")
                else:
                    done = step.send(payloads, spans, part.requests, pids)
                    line.append(f"{step.label} {rate(done.spans_per_s)}")
            print(f"  slice {number + 1}/{len(slices)}: " + ", ".join(line) + " spans/s", flush=True)
        result.targets = [t.result() for t in targets]
        return result
    finally:
        for target in targets:
            target.stop()


def shared_core(
    args: argparse.Namespace, measured: PayloadSet, warmup: PayloadSet, workdir: Path, worker: DecodeWorker
) -> dict[str, Any]:
    """Two fresh servers and the decode worker on one core at once, each given the same slice at the same time.

    The scheduler time-slices the three processes every few milliseconds, so whatever the machine's
    speed does, it does to all three alike: their CPU seconds per span compare fairly. (Wall time
    means nothing here, the three share one core.)
    """
    targets: list[Target] = []
    try:
        for tracing in (True, False):
            label = f"self-tracing {'on' if tracing else 'off'}"
            targets.append(Target(label, self_tracing=tracing, args=args, workdir=workdir, warmup=warmup))
        pids = [worker.pid, *(t.server.proc.pid for t in targets)]
        slices = slices_of(measured, args.batch_spans, args.slice_spans)
        print(
            f"shared core {args.server_cpu}: both servers and a decode process take each slice at once, "
            "CPU time per span compared",
            flush=True,
        )
        rows = []
        for number, part in enumerate(slices):
            wait_quiet(args.quiet_wait, pids, quiet_seconds=0.5)
            payloads = measured.payloads[part.start : part.stop]
            load = LoadMeter(pids)
            start = time.perf_counter()
            decode_cpu, decoded = _all_at_once(worker, targets, payloads, part, pids)
            other = load.other_seconds() / (time.perf_counter() - start)
            on, off = (t.slices[-1].server_cpu_s for t in targets)
            rows.append(
                {
                    "spans": part.spans,
                    "decode_spans": decoded,  # the decode process goes round the slice until both servers are done
                    "decode_cpu_s": decode_cpu,
                    "instrumented_cpu_s": on,
                    "uninstrumented_cpu_s": off,
                    "other_cpu_share": other,
                    "metrics_polls": [t.slices[-1].metrics_polls for t in targets],
                }
            )
            print(
                f"  slice {number + 1}/{len(slices)}: CPU per span: decode {decode_cpu / decoded * 1e6:.1f} us, "
                f"tracing on {on / part.spans * 1e6:.1f} us, off {off / part.spans * 1e6:.1f} us",
                flush=True,
            )
        return {"slices": rows, "targets": [t.result() for t in targets]}
    finally:
        for target in targets:
            target.stop()


def _all_at_once(
    worker: DecodeWorker, targets: list[Target], payloads: list[bytes], part: SliceOf, pids: list[int]
) -> tuple[float, int]:
    """The decode worker and every server's slice together; the worker's CPU seconds and spans decoded."""
    errors: list[BaseException] = []

    def send(target: Target) -> None:
        try:
            target.send(payloads, part.spans, part.requests, pids, idle_first=True)
        except BaseException as exc:  # SystemExit too: report it from the main thread
            errors.append(exc)

    senders = [threading.Thread(target=send, args=(t,)) for t in targets]
    worker.start(part)
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    decoded = worker.finish()
    if errors:
        raise SystemExit(f"shared core: {errors[0]}")
    return decoded


def profile_run(args: argparse.Namespace, measured: PayloadSet, warmup: PayloadSet, workdir: Path) -> dict[str, Any]:
    """One more server (self-tracing on), profiled while it takes every payload in one go."""
    folder = args.out / "profile"
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"profiling: all payloads to one more server (self-tracing on) under {args.profile}, into {folder} ...",
        flush=True,
    )
    cprofile_dir = folder if args.profile == "cprofile" else None
    target = Target("profiled", self_tracing=True, args=args, workdir=workdir, warmup=warmup, cprofile_dir=cprofile_dir)
    spy = None
    try:
        if args.profile == "py-spy":
            executable = profiling.py_spy()
            assert executable is not None
            spy = profiling.PySpy(executable, target.server.proc.pid, folder / "py-spy.collapsed")
            time.sleep(1.0)  # let it attach
        done = target.send(measured.payloads, measured.spans, measured.requests, [target.server.proc.pid])
        if spy is not None:
            spy.stop()
            spy = None
    finally:
        if spy is not None:
            spy.stop()
        target.stop()  # cProfile writes its files when the server exits
    if args.profile == "py-spy":
        summary = profiling.summarize_collapsed(folder / "py-spy.collapsed", args.profile_top)
    else:
        summary = profiling.summarize_pstats(folder, args.profile_top)
    return {"profiler": args.profile, "folder": str(folder), "spans_per_s": done.spans_per_s, "summary": summary}


def summarize(result: Measured) -> dict[str, Any]:
    decode_spans = sum(d.spans for d in result.decode)
    decode_rate = decode_spans / sum(d.decode_protobuf_s for d in result.decode)
    on, off = (next(t for t in result.targets if t["self_tracing"] is flag) for flag in (True, False))
    # A slice's on and off runs are close in time: their ratios show how much the pairing varies.
    paired = [a["spans_per_s"] / b["spans_per_s"] for a, b in zip(on["slices"], off["slices"], strict=True)]
    return {
        "decode_protobuf_spans_per_s": decode_rate,
        "from_string_spans_per_s": decode_spans / sum(d.from_string_s for d in result.decode),
        "end_to_end_instrumented_spans_per_s": on["spans_per_s"],
        "end_to_end_uninstrumented_spans_per_s": off["spans_per_s"],
        "ratio_end_to_end_instrumented_to_decode": on["spans_per_s"] / decode_rate,
        "ratio_end_to_end_uninstrumented_to_decode": off["spans_per_s"] / decode_rate,
        "ratio_instrumented_to_uninstrumented": on["spans_per_s"] / off["spans_per_s"],
        "ratio_instrumented_to_uninstrumented_per_slice": paired,
        "shared_core": _shared_summary(result.shared["slices"]),
        "max_other_cpu_share": max(
            [d.other_cpu_share for d in result.decode]
            + [t["max_other_cpu_share"] for t in result.targets]
            + [r["other_cpu_share"] for r in result.shared["slices"]]
        ),
        "goal_spans_per_s": GOAL_SPANS_PER_SECOND,
        "goal_met": on["spans_per_s"] >= GOAL_SPANS_PER_SECOND,
    }


def _shared_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def per_span(key: str, spans: str = "spans") -> float:
        return sum(r[key] for r in rows) / sum(r[spans] for r in rows) * 1e6

    decode = per_span("decode_cpu_s", "decode_spans")
    on, off = per_span("instrumented_cpu_s"), per_span("uninstrumented_cpu_s")
    return {
        "decode_cpu_us_per_span": decode,
        "instrumented_cpu_us_per_span": on,
        "uninstrumented_cpu_us_per_span": off,
        # Throughput ratios implied by CPU cost: X spans/s per core = 1e6 / (us per span).
        "ratio_end_to_end_instrumented_to_decode": decode / on,
        "ratio_end_to_end_uninstrumented_to_decode": decode / off,
        "ratio_instrumented_to_uninstrumented": off / on,
        "ratio_instrumented_to_uninstrumented_per_slice": [
            r["uninstrumented_cpu_s"] / r["instrumented_cpu_s"] for r in rows
        ],
    }


# ---- output ---------------------------------------------------------------------------------


def rate(value: float) -> str:
    return f"{value:,.0f}"


def _range(values: list[float]) -> str:
    return f"slices {rate(min(values))}-{rate(max(values))}" if len(values) > 1 else ""


def check(target: dict[str, Any], requests: int) -> None:
    """Warn when a run did not measure what it claims (not a speed check)."""
    joined = target["joined"].get('outcome="joined"', 0.0)
    others = {k: v for k, v in target["joined"].items() if v and k != 'outcome="joined"'}
    if others:
        print(f"warning: {target['label']}: not every request joined its gateway span: {others}", file=sys.stderr)
    dropped = {k: v for k, v in target["dropped"].items() if k != 'reason="queue_full"'}
    if dropped:
        print(f"warning: {target['label']}: spans dropped: {dropped}", file=sys.stderr)
    if joined < requests:
        print(f"warning: {target['label']}: {joined:.0f} joined requests for {requests} sent", file=sys.stderr)


def _print_rows(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = [f"{c:>{w}}" for c, w in zip(cells[1:-1], widths[1:-1], strict=True)]
        return "  ".join([first, *rest, cells[-1]]).rstrip()

    print(line(header))
    print(line(tuple("-" * w for w in widths)))
    for row in rows:
        print(line(row))


def print_table(result: Measured, summary: dict[str, Any]) -> None:
    decode = [d.spans / d.decode_protobuf_s for d in result.decode]
    parse = [d.spans / d.from_string_s for d in result.decode]
    rows = [
        (
            "decode_protobuf (OTLP bytes -> sloscope spans)",
            rate(summary["decode_protobuf_spans_per_s"]),
            _range(decode),
        ),
        (
            "ExportTraceServiceRequest.FromString alone",
            rate(summary["from_string_spans_per_s"]),
            f"reference; {_range(parse)}",
        ),
    ]
    for target in result.targets:
        notes = [
            _range([s["spans_per_s"] for s in target["slices"]]),
            f"server CPU {target['server_cpu_share']:.0%}",
            f"{target['retries_429']} x 429",
        ]
        name = f"end to end, {target['label']}{' (default)' if target['self_tracing'] else ''}"
        rows.append((name, rate(target["spans_per_s"]), ", ".join(n for n in notes if n)))
    _print_rows(("alone on one core (wall clock)", "spans/s", "notes"), rows)

    shared = summary["shared_core"]
    print()
    _print_rows(
        ("sharing one core at once (CPU time)", "us/span", "spans/s per core", ""),
        [
            (
                "decode_protobuf",
                f"{shared['decode_cpu_us_per_span']:.1f}",
                rate(1e6 / shared["decode_cpu_us_per_span"]),
                "",
            ),
            (
                "end to end, self-tracing on",
                f"{shared['instrumented_cpu_us_per_span']:.1f}",
                rate(1e6 / shared["instrumented_cpu_us_per_span"]),
                "",
            ),
            (
                "end to end, self-tracing off",
                f"{shared['uninstrumented_cpu_us_per_span']:.1f}",
                rate(1e6 / shared["uninstrumented_cpu_us_per_span"]),
                "",
            ),
        ],
    )

    def pair(key: str) -> tuple[str, str]:
        return f"{summary[key]:.3f}", f"{shared[key]:.3f}"

    alone_slices = summary["ratio_instrumented_to_uninstrumented_per_slice"]
    shared_slices = shared["ratio_instrumented_to_uninstrumented_per_slice"]
    print()
    _print_rows(
        ("ratio", "alone", "shared core", ""),
        [
            ("end to end / decode_protobuf, self-tracing on", *pair("ratio_end_to_end_instrumented_to_decode"), ""),
            ("end to end / decode_protobuf, self-tracing off", *pair("ratio_end_to_end_uninstrumented_to_decode"), ""),
            ("instrumented / uninstrumented", *pair("ratio_instrumented_to_uninstrumented"), ""),
            (
                "  slice by slice, min-max",
                f"{min(alone_slices):.2f}-{max(alone_slices):.2f}",
                f"{min(shared_slices):.2f}-{max(shared_slices):.2f}",
                "",
            ),
            (
                "  throughput cost of self-tracing",
                f"{1 - summary['ratio_instrumented_to_uninstrumented']:.1%}",
                f"{1 - shared['ratio_instrumented_to_uninstrumented']:.1%}",
                "",
            ),
        ],
    )
    print()
    if summary["max_other_cpu_share"] > BUSY_MACHINE_CORES:
        print(
            f"warning: other processes used up to {summary['max_other_cpu_share']:.2f} cores during a "
            "measurement: the numbers are disturbed"
        )
    met = "met" if summary["goal_met"] else "NOT met"
    print(
        f"goal: >= {GOAL_SPANS_PER_SECOND:,} spans/s end to end on one core with default settings: {met} "
        f"({rate(summary['end_to_end_instrumented_spans_per_s'])} spans/s alone on one core)"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--spans", type=int, default=200_000, help="spans sent to each server (default 200000)")
    add("--batch-spans", type=int, default=512, help="spans per OTLP export request (default 512)")
    add(
        "--slice-spans",
        type=int,
        default=25_000,
        help="spans per slice; the measurements take turns slice by slice (default 25000)",
    )
    add("--pods", type=int, default=8, help="vLLM pods the requests are spread over (default 8)")
    add("--connections", type=int, default=4, help="concurrent keep-alive HTTP connections (default 4)")
    add("--window", type=float, default=0.5, help="join.window_seconds of the servers (default 0.5)")
    add("--server-cpu", type=int, default=0, help="core the servers and the decode run on (default 0)")
    add("--client-cpu", type=int, default=1, help="core this client runs on (default 1)")
    add("--retry-wait", type=float, default=0.05, help="seconds to wait before retrying a 429 (default 0.05)")
    add(
        "--quiet-wait",
        type=float,
        default=120,
        help="before each slice, wait up to this many seconds for other processes to go idle (default 120)",
    )
    output_options(parser)
    add(
        "--profile",
        choices=("auto", "py-spy", "cprofile"),
        nargs="?",
        const="auto",
        help="also profile one more server: py-spy if installed (auto), else cProfile",
    )
    add("--profile-top", type=int, default=25, help="functions listed in the profile (default 25)")
    args = parser.parse_args()
    usable = os.sched_getaffinity(0)
    if not {args.server_cpu, args.client_cpu} <= usable or args.server_cpu == args.client_cpu:
        print(
            f"warning: cores {args.server_cpu} and {args.client_cpu} are not two usable cores (usable: "
            f"{sorted(usable)}); running unpinned, the numbers are not comparable",
            file=sys.stderr,
        )
        args.server_cpu = args.client_cpu = None
    if args.profile == "auto":
        args.profile = "py-spy" if profiling.py_spy() else "cprofile"
    elif args.profile == "py-spy" and not profiling.py_spy():
        parser.error("py-spy is not installed (pip install py-spy into the environment running this script)")
    return args


def main() -> int:
    args = parse_args()
    info = machine()
    modified = " + uncommitted changes" if info["exporter_modified"] else ""
    loop = f"uvicorn on {info['uvicorn_http']}{' + uvloop' if info['uvloop'] else ''}"
    print(
        f"sloscope {info['sloscope']} ({info['commit']}{modified}), Python {info['python']}, "
        f"protobuf {info['protobuf_backend']}, {loop}"
    )
    print(
        f"{info['cpus']} CPUs ({info['cpu']}); servers and decode on core {args.server_cpu}, "
        f"client on core {args.client_cpu}"
    )

    print(f"building payloads: {args.spans:,} spans in exports of {args.batch_spans} spans ...", flush=True)
    warmup = build(4 * args.batch_spans, args.batch_spans, args.pods, seed=2, first_request=10**9)
    measured = build(args.spans, args.batch_spans, args.pods, seed=1)
    print(
        f"  {len(measured.payloads)} exports, {measured.spans:,} spans, {measured.requests:,} requests, "
        f"{measured.size_bytes / len(measured.payloads) / 1024:.0f} KiB per export"
    )

    worker = DecodeWorker(measured.payloads, args.server_cpu)  # forked before any thread starts
    try:
        with tempfile.TemporaryDirectory(prefix="sloscope-bench-") as tmp:
            result = measure(args, measured, warmup, Path(tmp))
            result.shared = shared_core(args, measured, warmup, Path(tmp), worker)
            profile = profile_run(args, measured, warmup, Path(tmp)) if args.profile else {}
    finally:
        worker.stop()

    summary = summarize(result)
    print()
    for target in result.targets:
        check(target, measured.requests)
    print_table(result, summary)
    if profile:
        print(f"\nprofiled run: {rate(profile['spans_per_s'])} spans/s (under the profiler: not comparable)")
        profiling.print_summary(profile["summary"])

    document = {
        "machine": info,
        "payloads": {
            "exports": len(measured.payloads),
            "spans": measured.spans,
            "requests": measured.requests,
            "bytes": measured.size_bytes,
        },
        "summary": summary,
        "decode_slices": [asdict(d) for d in result.decode],
        "end_to_end": result.targets,
        "shared_core": result.shared,
        "profile": profile,
    }
    write_results(args, "bench", document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
