"""``make bench``: every benchmark in one run, then the side-by-side summary of their numbers.

Run from the repository root (``.venv/bin/python bench/all.py``, ``--quick`` for a short run of each; ``--only
compare pending`` for some). Each step is its own script in bench/, run as a child process in turn (they pin
their servers to cores and must not overlap); each prints its tables and writes its JSON to bench/results/. At
the end this script prints the headline numbers side by side (CPU per span of the two engines and the Collector
with their ratios, bytes per pending trace, the review per 10 M rows) and writes them, with the load average seen
and the paths of every step's JSON, to bench/results/all-<UTC time>.json. docs/performance.md describes each
step. The defaults are sized for about 15 minutes on the development machine (2 cores).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


@dataclass(frozen=True)
class Step:
    name: str
    script: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    results: str | None = None  # the prefix of the JSON file the script writes to bench/results/


PYTHON_FRONTS = ("--grpc-server", "grpcio", "--http-server", "uvicorn")

STEPS = (
    # end to end: the two join engines and the Collector, both payload sets, HTTP and gRPC, 1 and 2 cores
    Step("compare", "compare.py", quick=("--quick",), results="compare-"),
    # the same in bursts: each server takes 100,000 spans at a time (its queue runs ahead of its join), one core
    Step(
        "compare-burst",
        "compare.py",
        ("--cores", "1", "--engines", "native", "--spans", "200000", "--slice-spans", "100000"),
        ("--cores", "1", "--engines", "native", "--spans", "50000", "--slice-spans", "50000"),
        "compare-",
    ),
    # the burst again with the Python fronts (listeners.grpc.server: grpcio, listeners.otlp_http_server: uvicorn)
    Step(
        "compare-burst-python-fronts",
        "compare.py",
        ("--cores", "1", "--engines", "native", "--spans", "200000", "--slice-spans", "100000", *PYTHON_FRONTS),
        ("--cores", "1", "--engines", "native", "--spans", "50000", "--slice-spans", "50000", *PYTHON_FRONTS),
        "compare-",
    ),
    # what the OTLP transports cost alone (grpc.aio, uvicorn), beside sloscope's whole per thread, one core
    Step("front", "front.py", ("--spans", "100000", "--sets", "3"), ("--spans", "25000", "--sets", "2"), "front-"),
    Step(
        "front-python-fronts",
        "front.py",
        ("--spans", "100000", "--sets", "3", *PYTHON_FRONTS),
        ("--spans", "25000", "--sets", "2", *PYTHON_FRONTS),
        "front-",
    ),
    # bytes per pending trace: the join's account and the server's RSS growth
    Step("pending", "pending.py", quick=("--quick",), results="pending-"),
    # decode alone and self-tracing on/off (one core, the default engine)
    # (waiting at most 3 s for a quiet machine before each slice, not run.py's 120: a shared machine never is)
    Step(
        "ingest",
        "run.py",
        ("--spans", "100000", "--quiet-wait", "3"),
        ("--spans", "25000", "--slice-spans", "12500", "--quiet-wait", "3"),
        "bench-",
    ),
    Step(
        "native-decode",
        "native_decode.py",
        ("--spans", "20000", "--rounds", "3"),
        ("--spans", "10000", "--rounds", "2"),
    ),
    Step(
        "native-decode-llmd",
        "native_decode.py",
        ("--llmd", "--spans", "20000", "--rounds", "3"),
        ("--llmd", "--spans", "10000", "--rounds", "2"),
    ),
    # in process, no HTTP: decode, intake, join and hand-over (evaluation and publishing) per span
    Step(
        "stages",
        "stages.py",
        ("--spans", "100000", "--rounds", "3"),
        ("--spans", "20000", "--rounds", "2"),
        "stages-",
    ),
    # the native join alone, in process: fresh assemblers, then one joining set after set (a server's steady state)
    Step("native-join", "native_join.py", quick=("--spans", "20000", "--repetitions", "2")),
    Step("native-join-steady", "native_join.py", ("--steady", "16"), ("--steady", "6")),
    Step("assembler", "assembler.py", quick=("--requests", "5000", "--repetitions", "2")),
    Step("columnar", "columnar.py", quick=("--requests", "2048", "--repeat", "1")),
    Step("parser", "parser.py", quick=("--repetitions", "2")),
    Step("sinks", "sinks.py", quick=("--requests", "5000", "--repetitions", "2")),
    # the review over the Parquet store (bench/review.py: run it alone for the 100 M rows of the acceptance)
    Step("review", "review.py", ("--rows", "10000000"), ("--rows", "2000000"), "review-"),
)


def newest(prefix: str, since: float) -> Path | None:
    found = [p for p in RESULTS.glob(f"{prefix}*.json") if p.stat().st_mtime >= since]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def run_step(step: Step, quick: bool) -> dict[str, Any]:
    script = BENCH / step.script
    if not script.is_file():  # a step whose script this checkout does not have yet
        print(f"\n== {step.name}: bench/{step.script} is not in this checkout; skipped", flush=True)
        return {"name": step.name, "skipped": True}
    command = [sys.executable, str(script), *(step.quick if quick else step.args)]
    print(f"\n== {step.name}: {' '.join(command[1:])}", flush=True)
    began, load = time.time(), os.getloadavg()
    done = subprocess.run(command, check=False)
    out: dict[str, Any] = {
        "name": step.name,
        "command": command[1:],
        "exit": done.returncode,
        "seconds": time.time() - began,
        "load_average_before": load,
    }
    if step.results and (path := newest(step.results, began)):
        out["results"] = str(path)
    return out


def headline(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The numbers to read side by side, from the steps' JSON."""
    documents = {s["name"]: json.loads(Path(s["results"]).read_text()) for s in steps if "results" in s}
    out: dict[str, Any] = {}
    if "compare" in documents:
        out["end_to_end"] = documents["compare"]["summary"]
    if "compare-burst" in documents:
        out["end_to_end_burst"] = documents["compare-burst"]["summary"]
    if "compare-burst-python-fronts" in documents:
        out["end_to_end_burst_python_fronts"] = documents["compare-burst-python-fronts"]["summary"]
    for step in ("front", "front-python-fronts"):
        if step in documents:
            out[step.replace("-", "_")] = [
                {k: r[k] for k in ("transport", "target", "us_per_span", "us_per_span_by_thread")}
                for r in documents[step]["rows"]
            ]
    if "pending" in documents:
        out["pending"] = [
            {k: r[k] for k in ("engine", "payload_set", "pending_bytes_per_trace", "rss_growth_per_trace")}
            for r in documents["pending"]["rows"]
        ]
    if "review" in documents:
        out["review"] = [
            {
                "rows": r["rows"],
                "seconds_per_10m_rows": r["wall_seconds"] / (r["rows"] / 10_000_000),
                "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
            }
            for r in documents["review"]["results"]
        ]
    return out


def print_headline(numbers: dict[str, Any]) -> None:
    print("\n== side by side")
    for r in numbers.get("end_to_end", []):
        print(
            f"  {r['cores']} core(s) {r['payload_set']:>8} OTLP/{r['transport']:<4}: native "
            f"{r['native_cpu_us_per_span']:.1f}, python {r['python_cpu_us_per_span']:.1f}, Collector "
            f"{r['collector_cpu_us_per_span']:.1f} µs/span; native/Collector {r['native_over_collector']:.2f}x, "
            f"native/python {r['native_over_python']:.2f}x"
        )
    for key, label in (("end_to_end_burst", "burst"), ("end_to_end_burst_native_grpc", "burst, native gRPC front")):
        for r in numbers.get(key, []):
            print(
                f"  {label}, {r['cores']} core {r['payload_set']:>8} OTLP/{r['transport']:<4}: native "
                f"{r['native_cpu_us_per_span']:.1f}, Collector {r['collector_cpu_us_per_span']:.1f} µs/span; "
                f"native/Collector {r['native_over_collector']:.2f}x"
            )
    for key, label in (("front", "front"), ("front_native_grpc", "front, native gRPC front")):
        for r in numbers.get(key, []):
            threads = ", ".join(f"{name} {us:.2f}" for name, us in r["us_per_span_by_thread"].items())
            print(f"  {label} OTLP/{r['transport']:<4} {r['target']:>8}: {r['us_per_span']:.2f} µs/span ({threads})")
    for r in numbers.get("pending", []):
        print(
            f"  pending {r['payload_set']:>8} trace, {r['engine']:>6}: {r['pending_bytes_per_trace']:,.0f} B "
            f"(join's account), {r['rss_growth_per_trace']:,.0f} B RSS"
        )
    for r in numbers.get("review", []):
        print(
            f"  review {r['rows']:,} rows: {r['seconds_per_10m_rows']:.1f} s per 10 M rows, "
            f"peak RSS {r['peak_rss_mib']:,.0f} MiB"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run of every step (a few minutes)")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in STEPS], help="run only these steps")
    args = parser.parse_args()
    began = time.time()
    print(f"load average at the start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    steps = [run_step(s, args.quick) for s in STEPS if not args.only or s.name in args.only]
    numbers = headline(steps)
    print_headline(numbers)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"all-{stamp}.json"
    document = {
        "time": stamp,
        "quick": args.quick,
        "seconds": time.time() - began,
        "load_average_end": os.getloadavg(),
        "steps": steps,
        "headline": numbers,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    failed = [s["name"] for s in steps if s.get("exit")]
    print(f"\n{len(steps)} steps in {time.time() - began:.0f} s; results: {path}")
    if failed:
        print(f"steps that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
