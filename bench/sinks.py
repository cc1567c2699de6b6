"""What the record sinks cost per request, against what evaluating the request costs, in one run.

Run from the repository root as part of ``make bench`` (``.venv/bin/python bench/sinks.py``).
docs/performance.md explains the numbers. Every measurement takes turns with the others over
several repetitions (best of each), so a machine whose speed drifts hits them alike; the ratios are
what to read.

1. evaluate: the SLO evaluator and the Prometheus publisher, per request of batches of 4,096 (the default
   ``join.batch_requests``: the work every request costs on the pipeline worker without sinks);
2. tracker: the prediction tracker's own work on the worker on the same batches, without sinks (the tightest
   running TPOT SLO on the pod, comparisons); record: what a record sink adds to it on the worker (the
   tracker with a sink, less the tracker alone): each batch's records built as one Arrow table from its
   columns, its pods' states as of arrival included, and handed to the sink; shadow record: the records of
   requests settled by a shadow call, built together from their rows of their batch, as the shadow predictor
   settles a call's answers (on the event loop);
3. store write: the store's own thread putting the record tables together and writing one zstd
   Parquet file per 10,000 rows, fsync included;
4. export emit: the OTLP export's ``emit`` of the record tables on the worker (its builder thread builds the
   spans).

It prints a table and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support builds the records

from tests.support.records import BASE_NS, joined  # noqa: E402
from tests.support.stage import stage  # noqa: E402

from sloscope.config import Export, Headroom, Predictions  # noqa: E402
from sloscope.loading import default_spec  # noqa: E402
from sloscope.processors.joined_batch import EvaluatedBatch  # noqa: E402
from sloscope.processors.pod_history import PodHistory  # noqa: E402
from sloscope.processors.predictions import Pending, PredictionSeries, PredictionTracker  # noqa: E402
from sloscope.processors.record_parts import batch_rows  # noqa: E402
from sloscope.processors.running_slos import RunningSLOs  # noqa: E402
from sloscope.processors.streaming_modes import StreamingModes  # noqa: E402
from sloscope.publishers.otlp_export import OTLPExport  # noqa: E402
from sloscope.publishers.sinks import SinkMetrics  # noqa: E402
from sloscope.receivers.discovery import Target  # noqa: E402
from sloscope.receivers.protocols import PodState  # noqa: E402
from sloscope.records import JoinedRequest  # noqa: E402
from sloscope.store.files import write_atomic  # noqa: E402

POD = Target(pool="pool-a", pod="vllm-0", address="10.0.0.1:8000")
BATCH = 4096  # join.batch_requests' default


def requests(count: int, rng: random.Random) -> list[JoinedRequest]:
    out = []
    for n in range(count):
        ttft = rng.uniform(0.05, 1.5)
        out.append(
            joined(
                n + 1,
                ttft_seconds=ttft,
                server_ttft_seconds=ttft,
                e2e_seconds=ttft + rng.uniform(0.2, 8.0),
                completion_tokens=float(rng.randint(2, 600)),
                slo_ttft_ms=rng.choice([300.0, 500.0, 1000.0]),
            )
        )
    return out


def best(fn: Callable[[], None], items: int, repetitions: int, results: dict[str, list[float]], name: str) -> None:
    started = time.perf_counter()
    fn()
    results.setdefault(name, []).append((time.perf_counter() - started) / items * 1e6)


def queued_for_shadow(evaluated: list[EvaluatedBatch]) -> list[Pending]:
    """Every request as if queued for a shadow prediction: its objects and its row of the batch."""
    pending = []
    for each in evaluated:
        rows = batch_rows(each, np.arange(len(each)))
        for n, (request, evaluation) in enumerate(each.pairs()):
            at = (request.arrival_ns or request.start_ns) / 1e9
            pending.append(Pending(request, evaluation, ("llama", "pool-a"), "pool-a", POD.key, at, None, rows.row(n)))
    return pending


def settle_in_calls(tracker: PredictionTracker, pending: list[Pending]) -> None:
    """Every request settled without a prediction, as many at once as a shadow call settles."""
    call = Predictions().batch_size
    for start in range(0, len(pending), call):
        with tracker.settling():
            for item in pending[start : start + call]:
                tracker.unpredicted(item, None)


def report(results: dict[str, list[float]], requests: int, repetitions: int) -> None:
    """The table: each step's best per request, and its ratio to evaluating."""
    base = min(results["evaluate"])
    bests = {name: min(values) for name, values in results.items()}
    bests["record"] = bests.pop("tracker with a sink") - bests["tracker"]
    where = {"store write": "store thread", "shadow record": "event loop"}
    print(f"{requests} requests, best of {repetitions}; ratio = cost / evaluate")
    print(f"{'per request':<18} {'best us':>9} {'ratio':>7}   where")
    for name in ("evaluate", "tracker", "record", "shadow record", "store write", "export emit"):
        value = bests[name]
        print(f"{name:<18} {value:>9.2f} {value / base:>7.2f}   {where.get(name, 'pipeline worker')}")


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("--requests", type=int, default=20_000, help="requests per measurement")
    arguments.add_argument("--repetitions", type=int, default=5, help="turns of every measurement")
    options = arguments.parse_args()
    # The export sends to a closed port on purpose (emit is what is timed): its retry warnings are noise here.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    logging.getLogger("sloscope").setLevel(logging.CRITICAL)
    rng = random.Random(1)
    batch = requests(options.requests, rng)
    spec = default_spec()
    evaluator = stage(spec)
    registry = evaluator.registry
    chunks = [batch[start : start + BATCH] for start in range(0, len(batch), BATCH)]
    history = PodHistory(64, 60.0, 60.0)
    history.track(POD)
    history.record(POD.key, BASE_NS / 1e9 - 1, PodState(3.0, 20.0, 0.4, None, frozenset()))
    queued: list[pa.RecordBatch] = []

    def tracker(sink: Callable[[pa.RecordBatch], None] | None) -> PredictionTracker:
        return PredictionTracker(
            settings=Predictions(shadow=False),
            headroom=Headroom(),
            history=history,
            running=RunningSLOs(),
            series=PredictionSeries(CollectorRegistry(), ["pool-a"]),
            predicted_pools=set(),
            streaming_of=StreamingModes({}, default=True).streaming,
            sink=sink,
        )

    evaluated = [evaluator.evaluated(chunk) for chunk in chunks]
    pending = queued_for_shadow(evaluated)
    export = OTLPExport(Export(enabled=True, endpoint="127.0.0.1:9", max_queue_size=10**9), SinkMetrics(registry))
    export.start()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        hour = datetime.fromtimestamp(BASE_NS / 1e9, UTC)

        def run_evaluate() -> None:
            for chunk in chunks:
                evaluator.publish(*chunk)

        def run_tracker() -> None:  # a tracker of its own each run: the running TPOT SLOs start alike
            plain = tracker(None)
            for each in evaluated:
                plain.publish(each)

        def run_record() -> None:
            queued.clear()
            recording = tracker(queued.append)
            for each in evaluated:
                recording.publish(each)

        def run_shadow_record() -> None:
            settle_in_calls(tracker([].append), pending)

        def run_store() -> None:
            table = pa.Table.from_batches(queued)
            for start in range(0, table.num_rows, 10_000):
                write_atomic(root, hour, table.slice(start, 10_000), hour, "bench")

        def run_export() -> None:
            for records in queued:
                export.emit(records)

        run_record()
        for turn in range(options.repetitions):
            steps = [
                ("evaluate", run_evaluate),
                ("tracker", run_tracker),
                ("tracker with a sink", run_record),
                ("shadow record", run_shadow_record),
                ("store write", run_store),
            ]
            steps = steps[turn % 5 :] + steps[: turn % 5]
            for name, fn in steps:
                best(fn, len(batch), options.repetitions, results, name)
        for _ in range(options.repetitions):  # last: the builder thread keeps working after emit returns
            best(run_export, len(batch), options.repetitions, results, "export emit")
    export.shutdown(0.1)
    report(results, options.requests, options.repetitions)


if __name__ == "__main__":
    main()
