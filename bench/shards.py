"""Spans/s of intake and join with 1 and 2 join workers (``join.workers``) and 1 and 2 decode threads
(``limits.decode_threads``), in one process on the cores it is given.

The receivers' path without HTTP: each OTLP/protobuf export of bench/payloads.py (the benchmark's calls and
today's llm-d agent sessions with P/D requests) goes through ``Intake.receive`` (decoded natively in the decode
threads with the GIL released, validated, routed to its join worker's queue) into a started pipeline, whose
workers join natively (GIL released) and hand over to the shared evaluator and publishers (one at a time). The
clock runs from the first export to the scrape that counts every request; a refused export (queue full) is
retried, as a client would. Each configuration runs ``--repeat`` times in turn with the others and the best is
kept (a shared machine's speed drifts). It prints a table; it asserts nothing about speed.

    PYTHONPATH=.:exporter .venv/bin/python -m bench.shards [--spans 200000] [--cpus 0,1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time

from bench import payloads
from prometheus_client import CollectorRegistry

from sloscope.config import Settings
from sloscope.conventions import REQUESTS
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline
from sloscope.receivers.intake import Status

IN_FLIGHT = 8  # exports being decoded or waiting for a decode thread at once, as a few client connections


def counted(registry: CollectorRegistry) -> float:
    total = 0.0
    for metric in registry.collect():
        if metric.name == REQUESTS.name:
            total += sum(s.value for s in metric.samples if s.name == REQUESTS.exposed_name)
    return total


async def send(pipeline: Pipeline, exports: list[bytes]) -> None:
    pending = iter(exports)

    async def connection() -> None:
        for body in pending:
            while True:
                result = await pipeline.intake.receive(body, "", is_json=False, transport="http")
                if result.status is not Status.QUEUE_FULL:
                    break
                await asyncio.sleep(0.001)

    await asyncio.gather(*(connection() for _ in range(IN_FLIGHT)))


def run(workers: int, threads: int, exports: list[bytes], requests: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) from the first export to every request counted."""
    settings = Settings.model_validate(
        {"join": {"workers": workers, "by_request_id": False}, "limits": {"decode_threads": threads}}
    )
    registry = CollectorRegistry()
    pipeline = Pipeline(settings, default_spec(), registry)
    pipeline.start()
    cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    asyncio.run(send(pipeline, exports))
    while counted(registry) < requests:
        time.sleep(0.05)  # a scrape renders every series: rarely, not to compete for the GIL
    elapsed = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    pipeline.shutdown()
    return elapsed, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=200_000, help="spans per run (half of each payload set)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpus", default="0,1", help="the cores this process runs on (taskset's list)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    calls = payloads.build(args.spans // 2)
    # every session's calls in one run: the run's last calls are joined when their session's trace settles
    sessions = payloads.build_llmd(args.spans // 2)
    exports = calls.payloads + sessions.payloads
    spans, requests = calls.spans + sessions.spans, calls.requests + sessions.requests
    configs = [(w, t) for w in (1, 2) for t in (1, 2)]
    best: dict[tuple[int, int], tuple[float, float]] = {}
    run(1, 1, exports[: len(exports) // 10], 1)  # warm up: imports, Arrow kernels, allocator
    for _ in range(args.repeat):
        for config in configs:
            wall, cpu = run(*config, exports, requests)
            if config not in best or wall < best[config][0]:
                best[config] = (wall, cpu)
    print(f"{spans} spans, {requests} requests, cores {args.cpus} (best of {args.repeat})")
    print(f"{'join.workers':>12} {'decode_threads':>14} {'spans/s':>10} {'CPU µs/span':>12} {'cores busy':>10}")
    for (workers, threads), (wall, cpu) in sorted(best.items()):
        print(f"{workers:>12} {threads:>14} {spans / wall:>10,.0f} {cpu / spans * 1e6:>12.2f} {cpu / wall:>10.2f}")


if __name__ == "__main__":
    main()
