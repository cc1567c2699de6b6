"""Where a span's CPU goes inside the server, stage by stage, without HTTP: decode, intake, join, hand-over.

Run from the repository root (``.venv/bin/python bench/stages.py``; part of ``make bench``). It builds the server's
own pipeline (``Service`` of the default settings with ``join.window_seconds: 0.5`` and self-tracing off, as
bench/compare.py's servers, not started: no listener) and drives it on this thread, pinned to one core, with the
exports of bench/payloads.py (``build``: two-span traces; ``build_llmd``: agent sessions with P/D calls):

* **decode**: the intake's decoder on the export's bytes (``join.engine: native``: the native decoder);
* **intake**: ``Intake.submit``, the checks and the queue;
* **join**: the assembler consuming the queued batches (``Pipeline._consume``);
* **hand-over**: gathering the joined requests, evaluating and publishing them (``Pipeline._hand_over``: the SLO
  verdicts, the Prometheus series and the prediction tracker, in batches of ``join.batch_requests``), the last
  batch included.

CPU time of the process (``time.process_time``) per span, best of ``--rounds`` (each round a fresh pipeline), of
a **cold** pipeline (the measured set is the first it takes) and of a **warm** one (it took ``--warm`` other sets
of the same shape first, other trace ids: a server that has run a while, whose memory of emitted traces, kept to
recognise duplicates and late spans, is full and forgets as it learns).
The sum is what the server spends on a span less its OTLP handler and thread hand-offs: bench/compare.py
measures the whole. It asserts nothing and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

# Sibling modules in bench/: the script's folder is first on sys.path.
from compare import sloscope_settings
from payloads import PayloadSet, build, build_llmd
from run import BENCH, machine, write_results
from sloscope.loading import load
from sloscope.service.server import Service

STAGES = ("decode", "intake", "join", "hand_over")


def pipeline(engine: str, workdir: Path) -> Any:
    """A server's pipeline built from its settings file, as ``sloscope serve`` builds it (not started)."""
    config = workdir / f"settings-{engine}.yaml"
    config.write_text(yaml.safe_dump(sloscope_settings(engine, 0.5)), encoding="utf-8")
    loaded = load(config, None)
    return Service(loaded.settings, loaded.spec).pipeline


def measure(payloads: PayloadSet, engine: str, workdir: Path, before: list[PayloadSet]) -> dict[str, float]:
    """CPU µs per span of each stage over every export of ``payloads``, after the pipeline took ``before``."""
    pipe = pipeline(engine, workdir)
    for earlier in before:
        stages(pipe, earlier)
    gc.collect()
    return stages(pipe, payloads)


def stages(pipe: Any, payloads: PayloadSet) -> dict[str, float]:
    """CPU µs per span of each stage over every export of ``payloads``, as one pipeline takes them."""
    intake, shard = pipe.intake, pipe._shards[0]
    decode = intake.decoder._protobuf  # what the decoding thread runs on an OTLP/HTTP or gRPC body
    seconds = dict.fromkeys(STAGES, 0.0)
    clock = time.process_time
    for payload in payloads.payloads:
        start = clock()
        decoded = decode(payload)
        decoded_at = clock()
        intake.submit(decoded, "http")
        submitted_at = clock()
        seconds["decode"] += decoded_at - start
        seconds["intake"] += submitted_at - decoded_at
        for batch in shard.queue.take(0):
            joining = clock()
            pipe._consume(batch, shard)
            joined = clock()
            pipe._hand_over(shard)
            seconds["join"] += joined - joining
            seconds["hand_over"] += clock() - joined
    start = clock()
    shard.assembler.flush()
    flushed = clock()
    pipe._hand_over(shard, now=True)
    seconds["join"] += flushed - start
    seconds["hand_over"] += clock() - flushed
    return {stage: value / payloads.spans * 1e6 for stage, value in seconds.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=100_000, help="spans per payload set and round (100000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best of each stage is kept (3)")
    parser.add_argument("--engines", nargs="+", default=["native"], choices=("native", "python"))
    parser.add_argument(
        "--warm", type=int, default=5, help="payload sets a warm pipeline takes before the measured one (5)"
    )
    parser.add_argument("--cpu", type=int, default=0, help="the core to run on (0)")
    parser.add_argument("--out", type=Path, default=BENCH / "results", help="JSON results folder (bench/results)")
    args = parser.parse_args()
    if args.cpu in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {args.cpu})
    gc.freeze()  # as the server does after start-up (cli._tune_gc)
    gc.set_threshold(50_000, 20, 100)
    sets = {
        "two-span": [build(args.spans, first_request=k * args.spans) for k in range(args.warm + 1)],
        "llm-d": [build_llmd(args.spans, seed=k + 1, first_session=k * args.spans) for k in range(args.warm + 1)],
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="sloscope-bench-stages-") as tmp:
        for engine in args.engines:
            for name, (payloads, *before) in sets.items():
                for state, taken in (("cold", []), ("warm", before)):
                    rounds = [measure(payloads, engine, Path(tmp), taken) for _ in range(args.rounds)]
                    best = {stage: min(r[stage] for r in rounds) for stage in STAGES}
                    rows.append({"engine": engine, "payload_set": name, "state": state, **best})
                    rows[-1]["total"] = sum(best.values())
    header = f"\n{'engine':>7} {'payloads':>9} {'state':>6}" + "".join(f" {s:>10}" for s in (*STAGES, "total"))
    print(header + "   (CPU µs/span)")
    for row in rows:
        cells = "".join(f" {row[s]:>10.2f}" for s in (*STAGES, "total"))
        print(f"{row['engine']:>7} {row['payload_set']:>9} {row['state']:>6}" + cells)
    write_results(args, "stages", {"machine": machine(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
