"""Throughput of sloscope's ingest path: raw protobuf decode vs. OTLP/HTTP end to end, in one run.

Run from the repository root as ``make bench`` (``.venv/bin/python bench/run.py``) or with any
Python that has sloscope installed. What it measures (docs/performance.md says more):

1. decode: spans/s of ``sloscope.receivers.otlp_decode.decode_protobuf`` over the exact payloads
   of step 2, and of ``ExportTraceServiceRequest.FromString`` alone, on the server's core;
2. end to end: ``sloscope serve`` pinned to one core (``taskset``), this process sending the
   same payloads over a few keep-alive OTLP/HTTP protobuf connections from another core. The
   clock starts at the first request and stops when a scrape of ``/metrics`` shows
   ``sloscope_requests_total`` (summed over all series) counting every request sent:
   spans/s = spans sent / elapsed;
3. step 2 with sloscope's self-tracing (opentelemetry-instrumentation-fastapi) on and off,
   interleaved, and the ratio of the two.

It prints a table and writes the numbers as JSON to bench/results/. It asserts nothing about
speed: it measures. ``--profile`` adds one end-to-end pass with the server under cProfile
(both working threads) and prints the top functions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import os
import platform
import pstats
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import yaml

from payloads import PayloadSet, build  # bench/payloads.py: this script's folder is first on sys.path

BENCH = Path(__file__).resolve().parent

GOAL_SPANS_PER_SECOND = 20_000  # end to end, one core, default settings (self-tracing on)
LISTENING = "sloscope listening:"
REQUESTS_SERIES = "sloscope_requests_total"
POLL_SECONDS = 0.05
BUSY_MACHINE_CORES = 0.1  # other processes using more than this during a measurement earn a warning


# ---- step 1: decode -------------------------------------------------------------------------


@dataclass
class DecodeResult:
    decode_protobuf_spans_per_s: float
    from_string_spans_per_s: float
    decode_protobuf_passes_s: list[float]
    from_string_passes_s: list[float]
    other_cpu_share: float  # CPU used meanwhile by other processes, in cores


def bench_decode(payloads: list[bytes], spans: int, repeats: int) -> DecodeResult:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from sloscope.receivers.otlp_decode import decode_protobuf

    def passes(fn: Any) -> list[float]:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for payload in payloads:
                fn(payload)
            times.append(time.perf_counter() - start)
        return times

    # An untimed pass first (imports, allocator, caches) that also checks every span decodes.
    decoded = sum(len(decode_protobuf(p).spans) for p in payloads)
    if decoded != spans:
        raise SystemExit(f"decode_protobuf returned {decoded} spans, expected {spans}")
    load = LoadMeter()
    start = time.perf_counter()
    full = passes(decode_protobuf)
    parse = passes(ExportTraceServiceRequest.FromString)
    other = load.other_seconds(0.0) / (time.perf_counter() - start)
    return DecodeResult(spans / min(full), spans / min(parse), full, parse, other)


# ---- step 2: the server ---------------------------------------------------------------------


@dataclass
class Ports:
    otlp_http: int
    metrics: int


class Server:
    """``sloscope serve`` in a subprocess pinned to one core, on loopback with ports picked by the OS."""

    def __init__(self, settings: dict[str, Any], cpu: int | None, workdir: Path,
                 profile_dir: Path | None = None) -> None:
        config = workdir / f"settings-{os.getpid()}-{time.monotonic_ns()}.yaml"
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        if profile_dir is not None:
            command = [sys.executable, str(BENCH / "profile_server.py"), str(profile_dir)]
        else:
            command = [sys.executable, "-m", "sloscope"]
        command += ["serve", "--config", str(config)]
        taskset = cpu is not None and shutil.which("taskset") is not None
        if taskset:
            command = ["taskset", "-c", str(cpu), *command]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOSCOPE_")}  # only the file counts
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        if cpu is not None and not taskset:  # before the interpreter has started any thread
            os.sched_setaffinity(self.proc.pid, {cpu})
        self.log: list[str] = []
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self.ports = self._wait_ready(timeout=30.0)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            if LISTENING in line:
                self._listening.set()

    def _wait_ready(self, timeout: float) -> Ports:
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.log[-20:])
                raise SystemExit(f"sloscope serve did not start (exit {self.proc.returncode}):\n{tail}")
        line = next(entry for entry in self.log if LISTENING in entry)
        fields = dict(part.split("=", 1) for part in line.split(LISTENING, 1)[1].split())
        port = {name: int(address.rsplit(":", 1)[1]) for name, address in fields.items()}
        return Ports(otlp_http=port["otlp_http"], metrics=port["metrics"])

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")

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
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
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


# ---- step 2: the client ---------------------------------------------------------------------


@dataclass
class SendStats:
    posts: int = 0
    retries_429: int = 0
    errors: list[str] = field(default_factory=list)


def send_all(
    port: int, payloads: list[bytes], *, connections: int, retry_wait: float, deadline: float
) -> SendStats:
    """POST every payload once (429 retried), over ``connections`` keep-alive connections."""
    stats = SendStats()
    lock = threading.Lock()
    next_index = iter(range(len(payloads)))
    headers = {"Content-Type": "application/x-protobuf"}

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while True:
                with lock:
                    index = next(next_index, None)
                if index is None or stats.errors:
                    return
                while True:
                    conn.request("POST", "/v1/traces", payloads[index], headers)
                    response = conn.getresponse()
                    body = response.read()
                    if response.status == 200:
                        break
                    if response.status == 429 and time.monotonic() < deadline:
                        with lock:
                            stats.retries_429 += 1
                        time.sleep(retry_wait)
                        continue
                    with lock:
                        stats.errors.append(f"HTTP {response.status}: {body[:200]!r}")
                    return
                with lock:
                    stats.posts += 1
        except Exception as exc:
            with lock:
                stats.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, name=f"bench-client-{i}") for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return stats


@dataclass
class EndToEnd:
    label: str
    self_tracing: bool
    spans: int
    requests: int
    elapsed_s: float
    send_s: float
    spans_per_s: float
    send_spans_per_s: float
    retries_429: int
    server_cpu_s: float
    server_cpu_share: float
    metrics_polls: int  # scrapes of /metrics after the last export was answered
    other_cpu_share: float  # CPU used meanwhile by processes other than this one and the server, in cores
    outcomes: dict[str, float]
    dropped: dict[str, float]
    otlp_requests: dict[str, float]


def run_end_to_end(
    label: str,
    *,
    self_tracing: bool,
    warmup: PayloadSet,
    measured: PayloadSet,
    args: argparse.Namespace,
    workdir: Path,
    profile_dir: Path | None = None,
) -> EndToEnd:
    settings = {
        "log_level": "INFO",
        "shutdown_grace_seconds": 10,
        "listeners": {"host": "127.0.0.1", "otlp_grpc_port": 0, "otlp_http_port": 0, "metrics_port": 0},
        "join": {"window_seconds": args.window},
        "self_tracing": {"enabled": self_tracing},
    }
    server = Server(settings, args.server_cpu, workdir, profile_dir)
    try:
        deadline = time.monotonic() + args.timeout
        # Warm-up: first-request costs (lazy imports, route compilation) stay out of the clock.
        client = {"connections": args.connections, "retry_wait": args.retry_wait, "deadline": deadline}
        stats = send_all(server.ports.otlp_http, warmup.payloads, **client)
        if stats.errors:
            raise SystemExit(f"{label}: warm-up failed: {stats.errors[0]}")
        wait_for_requests(server.ports.metrics, warmup.requests, deadline, label)
        baseline = requests_counted(server.ports.metrics)

        cpu_before = server.cpu_seconds()
        load = LoadMeter()
        start = time.perf_counter()
        stats = send_all(server.ports.otlp_http, measured.payloads, **client)
        sent = time.perf_counter()
        if stats.errors:
            raise SystemExit(f"{label}: sending failed: {stats.errors[0]}")
        polls = wait_for_requests(server.ports.metrics, baseline + measured.requests, deadline, label)
        stop = time.perf_counter()
        cpu = server.cpu_seconds() - cpu_before
        other = load.other_seconds(cpu)

        samples = scrape(server.ports.metrics)
        elapsed = stop - start
        return EndToEnd(
            label=label,
            self_tracing=self_tracing,
            spans=measured.spans,
            requests=measured.requests,
            elapsed_s=elapsed,
            send_s=sent - start,
            spans_per_s=measured.spans / elapsed,
            send_spans_per_s=measured.spans / (sent - start),
            retries_429=stats.retries_429,
            server_cpu_s=cpu,
            server_cpu_share=cpu / elapsed,
            metrics_polls=polls,
            other_cpu_share=other / elapsed,
            outcomes=family(samples, "sloscope_traces_joined_total"),
            dropped={k: v for k, v in family(samples, "sloscope_spans_dropped_total").items() if v},
            otlp_requests={k: v for k, v in family(samples, "sloscope_otlp_requests_total").items() if v},
        )
    finally:
        server.stop()


def wait_for_requests(port: int, expected: float, deadline: float, label: str) -> int:
    """Poll /metrics every POLL_SECONDS until sloscope_requests_total sums to ``expected``; the polls."""
    polls = 0
    while True:
        counted = requests_counted(port)
        polls += 1
        if counted >= expected:
            return polls
        if time.monotonic() > deadline:
            raise SystemExit(f"{label}: timed out with {counted:.0f} of {expected:.0f} requests counted")
        time.sleep(POLL_SECONDS)


class LoadMeter:
    """CPU time the whole machine spent busy since creation, less this process's and the server's.

    Other people's work on a shared machine shows up here: a share well above zero means the
    numbers of that run were disturbed.
    """

    def __init__(self) -> None:
        self._busy = _machine_busy_seconds()
        self._own = _own_cpu_seconds()

    def other_seconds(self, server_cpu: float) -> float:
        busy = _machine_busy_seconds() - self._busy
        own = _own_cpu_seconds() - self._own
        return max(0.0, busy - own - server_cpu)


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


# ---- profile --------------------------------------------------------------------------------


def top_functions(path: Path, limit: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(str(path))
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({
            "function": f"{_short(filename)}:{line}({name})",
            "calls": calls,
            "tottime_s": tottime,
            "cumtime_s": cumtime,
            "tottime_share": tottime / total if total else 0.0,
        })
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:limit]


def _short(filename: str) -> str:
    for marker in ("site-packages/", "exporter/", "lib/python"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


# ---- output ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    from google.protobuf.internal import api_implementation

    import sloscope

    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(
        ["git", "-C", str(BENCH), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "protobuf_backend": api_implementation.Type(),
        "uvicorn_http": "httptools" if find_spec("httptools") else "h11",
        "uvloop": find_spec("uvloop") is not None,
        "sloscope": sloscope.__version__,
        "commit": commit,
    }


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


def rate(value: float) -> str:
    return f"{value:,.0f}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--spans", type=int, default=200_000, help="spans per end-to-end run (default 200000)")
    add("--batch-spans", type=int, default=512, help="spans per OTLP export request (default 512)")
    add("--pods", type=int, default=8, help="vLLM pods the requests are spread over (default 8)")
    add("--connections", type=int, default=4, help="concurrent keep-alive HTTP connections (default 4)")
    add("--rounds", type=int, default=1,
        help="end-to-end runs per setting, interleaved on/off; medians are reported (default 1)")
    add("--decode-repeats", type=int, default=3, help="timed decode passes; the best is reported (default 3)")
    add("--window", type=float, default=0.5, help="join.window_seconds of the server (default 0.5)")
    add("--server-cpu", type=int, default=0, help="core the server is pinned to (default 0)")
    add("--client-cpu", type=int, default=1, help="core this client is pinned to (default 1)")
    add("--retry-wait", type=float, default=0.05, help="seconds to wait before retrying a 429 (default 0.05)")
    add("--timeout", type=float, default=600, help="give up on one end-to-end run after this many seconds")
    add("--profile", action="store_true", help="also run once with the server under cProfile")
    add("--profile-top", type=int, default=20, help="functions listed per profiled thread (default 20)")
    add("--out", type=Path, default=BENCH / "results", help="JSON results folder (default bench/results)")
    args = parser.parse_args()
    usable = os.sched_getaffinity(0)
    if not {args.server_cpu, args.client_cpu} <= usable or args.server_cpu == args.client_cpu:
        print(f"warning: cores {args.server_cpu} and {args.client_cpu} are not two usable cores (usable: "
              f"{sorted(usable)}); running unpinned, the numbers are not comparable", file=sys.stderr)
        args.server_cpu = args.client_cpu = None
    return args


def main() -> int:
    args = parse_args()
    info = machine()
    loop = f"uvicorn on {info['uvicorn_http']}{' + uvloop' if info['uvloop'] else ''}"
    print(f"sloscope {info['sloscope']} ({info['commit']}), Python {info['python']}, "
          f"protobuf {info['protobuf_backend']}, {loop}")
    print(f"{info['cpus']} CPUs ({info['cpu']}); "
          f"server on core {args.server_cpu}, client on core {args.client_cpu}")

    print(f"building payloads: {args.spans:,} spans in exports of {args.batch_spans} spans ...", flush=True)
    warmup = build(4 * args.batch_spans, args.batch_spans, args.pods, seed=2, first_request=10**9)
    measured = build(args.spans, args.batch_spans, args.pods, seed=1)
    print(f"  {len(measured.payloads)} exports, {measured.spans:,} spans, {measured.requests:,} requests, "
          f"{measured.size_bytes / len(measured.payloads) / 1024:.0f} KiB per export")

    print("decode (on the server's core, nothing else running) ...", flush=True)
    with pinned(args.server_cpu):
        decode = bench_decode(measured.payloads, measured.spans, args.decode_repeats)
    print(f"  {rate(decode.decode_protobuf_spans_per_s)} spans/s, "
          f"other processes {decode.other_cpu_share:.2f} cores")

    pin(args.client_cpu)
    with tempfile.TemporaryDirectory(prefix="sloscope-bench-") as tmp:
        runs = end_to_end_rounds(args, warmup, measured, Path(tmp))
        profile = profile_run(args, warmup, measured, Path(tmp)) if args.profile else {}

    summary = summarize(decode, runs)
    print()
    print_table(decode, runs, summary)
    if profile:
        print_profile(profile)

    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"bench-{stamp}.json"
    document = {
        "time": stamp,
        "machine": info,
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "payloads": {
            "exports": len(measured.payloads),
            "spans": measured.spans,
            "requests": measured.requests,
            "bytes": measured.size_bytes,
        },
        "decode": asdict(decode),
        "end_to_end": [asdict(r) for r in runs[True] + runs[False]],
        "summary": summary,
        "profile": profile,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults: {path}")
    return 0


def end_to_end_rounds(
    args: argparse.Namespace, warmup: PayloadSet, measured: PayloadSet, workdir: Path
) -> dict[bool, list[EndToEnd]]:
    """``args.rounds`` runs with self-tracing on and off each, alternating which goes first."""
    runs: dict[bool, list[EndToEnd]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for tracing in (True, False) if round_ % 2 == 0 else (False, True):
            label = f"self-tracing {'on' if tracing else 'off'}"
            print(f"end to end, {label} (round {round_ + 1}/{args.rounds}) ...", flush=True)
            result = run_end_to_end(
                label, self_tracing=tracing, warmup=warmup, measured=measured, args=args, workdir=workdir
            )
            runs[tracing].append(result)
            print(f"  {rate(result.spans_per_s)} spans/s in {result.elapsed_s:.2f}s "
                  f"(sent in {result.send_s:.2f}s, {result.retries_429} retried 429s, "
                  f"server CPU {result.server_cpu_share:.0%}, "
                  f"other processes {result.other_cpu_share:.2f} cores)")
            check(result)
    return runs


def profile_run(
    args: argparse.Namespace, warmup: PayloadSet, measured: PayloadSet, workdir: Path
) -> dict[str, Any]:
    profile_dir = args.out / "profile"
    print(f"end to end under cProfile (self-tracing on), profiles in {profile_dir} ...", flush=True)
    profiled = run_end_to_end(
        "profiled", self_tracing=True, warmup=warmup, measured=measured, args=args, workdir=workdir,
        profile_dir=profile_dir,
    )
    profile: dict[str, Any] = {"end_to_end": asdict(profiled)}
    for thread in ("main", "pipeline"):
        path = profile_dir / f"{thread}.prof"
        if path.exists():
            profile[thread] = top_functions(path, args.profile_top)
    return profile


def summarize(decode: DecodeResult, runs: dict[bool, list[EndToEnd]]) -> dict[str, Any]:
    on = statistics.median(r.spans_per_s for r in runs[True])
    off = statistics.median(r.spans_per_s for r in runs[False])
    return {
        "decode_protobuf_spans_per_s": decode.decode_protobuf_spans_per_s,
        "from_string_spans_per_s": decode.from_string_spans_per_s,
        "end_to_end_instrumented_spans_per_s": on,
        "end_to_end_uninstrumented_spans_per_s": off,
        "ratio_end_to_end_instrumented_to_decode": on / decode.decode_protobuf_spans_per_s,
        "ratio_end_to_end_uninstrumented_to_decode": off / decode.decode_protobuf_spans_per_s,
        "ratio_instrumented_to_uninstrumented": on / off,
        "goal_spans_per_s": GOAL_SPANS_PER_SECOND,
        "goal_met": on >= GOAL_SPANS_PER_SECOND,
    }


def check(result: EndToEnd) -> None:
    """Warn when the run did not measure what it claims (not a speed check)."""
    joined = result.outcomes.get('outcome="joined"', 0.0)
    others = {k: v for k, v in result.outcomes.items() if v and k != 'outcome="joined"'}
    if others:
        print(f"  warning: not every request joined its gateway span: {others}", file=sys.stderr)
    dropped = {k: v for k, v in result.dropped.items() if k != 'reason="queue_full"'}
    if dropped:
        print(f"  warning: spans dropped: {dropped}", file=sys.stderr)
    if joined < result.requests:
        print(f"  warning: {joined:.0f} joined requests for {result.requests} sent", file=sys.stderr)
    if result.other_cpu_share > BUSY_MACHINE_CORES:
        print(f"  warning: other processes used {result.other_cpu_share:.2f} cores during the run: "
              "the machine was not quiet, the numbers are disturbed", file=sys.stderr)


def print_table(decode: DecodeResult, runs: dict[bool, list[EndToEnd]], summary: dict[str, Any]) -> None:
    quiet = f"other processes {decode.other_cpu_share:.2f} cores"
    rows = [
        ("decode_protobuf (OTLP bytes -> sloscope spans)", decode.decode_protobuf_spans_per_s, quiet),
        ("ExportTraceServiceRequest.FromString alone", decode.from_string_spans_per_s, "reference"),
    ]
    for tracing in (True, False):
        median = statistics.median(r.spans_per_s for r in runs[tracing])
        each = ", ".join(rate(r.spans_per_s) for r in runs[tracing])
        retries = sum(r.retries_429 for r in runs[tracing])
        cpu = statistics.median(r.server_cpu_share for r in runs[tracing])
        other = max(r.other_cpu_share for r in runs[tracing])
        note = f"server CPU {cpu:.0%}, {retries} x 429, other processes {other:.2f} cores"
        note += f"; runs {each}" if len(runs[tracing]) > 1 else ""
        rows.append((f"end to end, self-tracing {'on (default)' if tracing else 'off'}", median, note))
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}  {'spans/s':>10}  notes")
    print(f"{'-' * width}  {'-' * 10}  {'-' * 5}")
    for name, value, note in rows:
        print(f"{name:<{width}}  {rate(value):>10}  {note}")
    print()
    on = summary["ratio_end_to_end_instrumented_to_decode"]
    off = summary["ratio_end_to_end_uninstrumented_to_decode"]
    print(f"end to end / decode_protobuf:   {on:.2f} (self-tracing on), {off:.2f} (off)")
    ratio = summary["ratio_instrumented_to_uninstrumented"]
    print(f"instrumented / uninstrumented:  {ratio:.3f} (self-tracing costs {1 - ratio:.1%} of throughput)")
    met = "met" if summary["goal_met"] else "NOT met"
    print(f"goal: >= {GOAL_SPANS_PER_SECOND:,} spans/s end to end on one core with default settings: {met} "
          f"({rate(summary['end_to_end_instrumented_spans_per_s'])} spans/s)")


def print_profile(profile: dict[str, Any]) -> None:
    run = profile["end_to_end"]
    print(f"\nprofiled run: {rate(run['spans_per_s'])} spans/s "
          "(cProfile inflates call-heavy code: compare shares, not rates)")
    titles = {
        "main": "event loop: HTTP, decode, intake",
        "pipeline": "worker: assembler, evaluator, publisher",
    }
    for thread, title in titles.items():
        if thread not in profile:
            continue
        print(f"\n{thread} thread ({title}), by own time:")
        for row in profile[thread]:
            print(f"  {row['tottime_share']:6.1%} {row['tottime_s']:7.2f}s own {row['cumtime_s']:7.2f}s cum "
                  f"{row['calls']:>9}  {row['function']}")


if __name__ == "__main__":
    raise SystemExit(main())
