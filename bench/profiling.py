"""Profiling of the server during one end-to-end run: py-spy when installed, else cProfile.

py-spy samples every thread of the running server from outside, with little overhead, and writes
collapsed stacks; cProfile (via profile_server.py) traces the event-loop thread and the pipeline
worker and slows call-heavy code several times over, so only its shares mean something. Neither
is a dependency of the project: install py-spy where you run the benchmark if you want it.
"""

from __future__ import annotations

import collections
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

# Where a sample's time goes: the innermost frame matching one of these (checked in order) decides.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "self-tracing (OpenTelemetry instrumentation)",
        (
            "OpenTelemetryMiddleware",
            "FastAPIInstrumentor",
            "opentelemetry/",
            "asgi/__init__.py",
            "sdk/trace",
            "trace/__init__.py",
            "trace/span.py",
            "_semconv.py",
            "propagat",
        ),
    ),
    ("/metrics scrapes", ("prometheus_client/exposition", "prometheus_client/asgi", "prometheus_client/registry")),
    ("decode (otlp_decode)", ("sloscope/receivers/otlp_decode.py",)),
    ("intake (attribute checks, queue)", ("sloscope/receivers/intake.py",)),
    ("OTLP/HTTP handler", ("sloscope/receivers/otlp_http.py",)),
    (
        "join (assembler, request building)",
        (
            "sloscope/processors/assembler.py",
            "sloscope/processors/joined_request.py",
            "sloscope/processors/trace_state.py",
            "sloscope/processors/span_shapes.py",
        ),
    ),
    ("evaluate (SLO maths, classes)", ("sloscope/slo/", "sloscope/processors/evaluator.py")),
    ("publish (Prometheus series)", ("sloscope/publishers/",)),
    ("pipeline worker, queue", ("sloscope/pipeline.py", "sloscope/processors/queue.py")),
    ("HTTP metrics middleware", ("sloscope/listeners/http_metrics.py",)),
    ("HTTP stack (uvicorn, h11, Starlette, FastAPI)", ("h11/", "uvicorn/", "starlette/", "fastapi/")),
    ("asyncio event loop, sockets", ("asyncio/", "selectors.py", "socket.py")),
)
_LINE = re.compile(r":\d+\)$")


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter or on PATH, if any."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


class PySpy:
    """``py-spy record`` attached to a running process, writing collapsed stacks (one line per stack)."""

    def __init__(self, executable: str, pid: int, out: Path, rate: int = 250) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.proc = subprocess.Popen(
            [
                executable,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote no profile (exit {self.proc.returncode}): {err.strip()[-500:]}")


def summarize_collapsed(path: Path, top: int) -> dict[str, Any]:
    """Shares of sampled CPU by thread, by stage, by function (own time) and by function (inclusive)."""
    threads: collections.Counter[str] = collections.Counter()
    stages: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or len(frames) < 2:
            continue
        n = int(count)
        total += n
        threads[frames[0].split(":", 1)[-1].strip()] += n
        functions = [_LINE.sub(")", f) for f in frames[1:]]
        own[functions[-1]] += n
        for function in set(functions):
            inclusive[function] += n
        stages[_stage(frames[1:])] += n

    def shares(counter: collections.Counter[str], limit: int | None = None) -> list[dict[str, Any]]:
        return [{"name": k, "share": v / total} for k, v in counter.most_common(limit)]

    project = collections.Counter({k: v for k, v in inclusive.items() if "sloscope/" in k})
    return {
        "profiler": "py-spy",
        "samples": total,
        "threads": shares(threads),
        "stages": shares(stages),
        "own": shares(own, top),
        "inclusive": shares(project, top),
    }


def _stage(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, patterns in STAGES:
            if any(p in frame for p in patterns):
                return name
    return "other (GC, imports, threading)"


# Where a thread waits rather than works (the event loop's poll, the worker's queue wait). cProfile
# counts wall time, so these are left out of the totals: shares are of the time the thread was busy.
_WAITING = ("<method 'poll' of 'select.epoll' objects>", "<method 'acquire' of '_thread.lock' objects>")


def summarize_pstats(folder: Path, top: int) -> dict[str, Any]:
    """Own and inclusive time shares per profiled thread, from profile_server.py's pstats files.

    The profiles cover the whole life of the server (start-up and idle time too), not only the run.
    """
    result: dict[str, Any] = {"profiler": "cProfile"}
    for thread in ("main", "pipeline"):
        path = folder / f"{thread}.prof"
        if not path.exists():
            continue
        stats = pstats.Stats(str(path))
        entries = {k: v for k, v in stats.stats.items() if k[2] not in _WAITING}  # type: ignore[attr-defined]
        total = sum(tt for (_cc, _nc, tt, _ct, _callers) in entries.values()) or 1.0
        rows = [
            {
                "name": f"{name} ({_short(file)}:{line})",
                "share": tt / total,
                "cumulative_share": ct / total,
                "calls": nc,
            }
            for (file, line, name), (_cc, nc, tt, ct, _callers) in entries.items()
        ]
        rows.sort(key=lambda r: r["share"], reverse=True)
        result[thread] = rows[:top]
    return result


def _short(filename: str) -> str:
    for marker in ("site-packages" + os.sep, "exporter" + os.sep, "lib" + os.sep):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return filename


def print_summary(summary: dict[str, Any]) -> None:
    if summary.get("profiler") == "py-spy":
        print(f"py-spy, {summary['samples']} samples of busy threads; shares of the server's CPU time")
        for title, key in (
            ("by thread", "threads"),
            ("by stage (innermost matching frame)", "stages"),
            ("by function, own time", "own"),
            ("sloscope functions, inclusive", "inclusive"),
        ):
            print(f"\n  {title}:")
            for row in summary[key]:
                print(f"    {row['share']:6.1%}  {row['name']}")
        return
    print("cProfile (slows call-heavy code several times: compare shares, not times; waits left out)")
    titles = {"main": "event loop: HTTP, decode, intake", "pipeline": "worker: join, evaluate, publish"}
    for thread, title in titles.items():
        if thread in summary:
            print(f"\n  {thread} thread ({title}), own time (cumulative):")
            for row in summary[thread]:
                print(f"    {row['share']:6.1%} ({row['cumulative_share']:6.1%}) {row['calls']:>9}  {row['name']}")
