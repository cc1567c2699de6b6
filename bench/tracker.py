"""What the prediction tracker costs per request, in batches against one request at a time.

Run from the repository root (``.venv/bin/python bench/tracker.py``). The tracker runs as the service runs it
(pipeline.py, service/pools.py): handed each evaluated batch, its labels admitted; only the tracker's own call is
timed. One at a time is the reference the differential tests hold it to (tests/support/reference.py). Batches
are made as the native join makes them (a record batch, no request objects: the one-at-a-time reference then
pays for converting the rows to objects, which is counted) or from objects (the Python join). Measurements take
turns over several repetitions (best of each). It prints µs per request and asserts nothing about speed.

Scenarios: ``spans`` (no pools: only predictions carried on spans are compared, half the requests carry one),
``spans, no TPOT SLO`` (the same without TPOT SLOs: no running-SLO bookkeeping, which is per request in both
paths), ``shadow`` (pools with a predictor: every request without a prediction is queued for a shadow one, a
queue that never fills), ``store`` (``spans`` with a record sink, so every request becomes a record: one table
per batch in the batch path, one per request in the reference, whose records are objects turned into a row each).
CPU time of the process (``time.process_time``), so that other work on the machine counts less.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support generates the requests

from bench.columnar import fleet  # noqa: E402
from tests.support.joined_requests import SPEC  # noqa: E402
from tests.support.reference import ReferenceTracker, RequestLabels  # noqa: E402
from tests.support.stage import stage  # noqa: E402

from sloscope.config import Headroom, Predictions  # noqa: E402
from sloscope.processors import joined_batch  # noqa: E402
from sloscope.processors.joined_batch import EvaluatedBatch  # noqa: E402
from sloscope.processors.pod_history import PodHistory  # noqa: E402
from sloscope.processors.predictions import PredictionSeries  # noqa: E402
from sloscope.processors.running_slos import RunningSLOs  # noqa: E402
from sloscope.processors.streaming_modes import StreamingModes  # noqa: E402
from sloscope.publishers.in_memory import InMemoryPublisher, PublishedRow  # noqa: E402
from sloscope.receivers.discovery import Target  # noqa: E402
from sloscope.receivers.protocols import PodState  # noqa: E402
from sloscope.records import JoinedRequest  # noqa: E402
from sloscope.slo.evaluate import evaluate  # noqa: E402
from sloscope.store.schema import Records  # noqa: E402

STATE = PodState(waiting=3.0, running=7.0, kv_cache_utilization=0.25, lora=None, models=frozenset())
SCENARIOS = ("spans", "spans, no TPOT SLO", "shadow", "store")


def requests(count: int) -> list[JoinedRequest]:
    """The fleet's requests, half with predictions on their spans, TPOT SLOs on pods discovery knows, at 1,000
    requests per second of 2 s each (some 125 running per pod when a request arrives)."""
    rng = random.Random(3)
    base = 1_700_000_000_000_000_000
    return [
        dataclasses.replace(
            r,
            predicted_ttft_ms=rng.choice((150.0, 400.0)) if i % 2 else None,
            predicted_tpot_ms=rng.choice((20.0, 45.0)) if i % 2 else None,
            start_ns=base + i * 1_000_000,
            arrival_ns=base + i * 1_000_000,
            end_ns=base + i * 1_000_000 + 2_000_000_000,
        )
        for i, r in enumerate(fleet(count))
    ]


class Stage:
    """The evaluator stage (label admission, the Prometheus publisher) and the tracker (the reference's, which
    publishes batches as the production one does), on one registry."""

    def __init__(self, scenario: str) -> None:
        self.stage = stage(SPEC, default_pool="default")
        registry, telemetry = self.stage.registry, self.stage.telemetry
        history = PodHistory(8, 1e12, 60.0)
        for pod in range(16):
            target = Target(pool=("pool-a", "pool-b")[pod % 2], pod=f"vllm-{pod}", address=f"10.0.0.{pod}:8000")
            history.track(target)
            history.record(target.key, 1_600_000_000.0, STATE)
        self.records: list[Records] = []
        shadow = scenario == "shadow"  # "spans, no TPOT SLO" is "spans" on other requests
        self.tracker = ReferenceTracker(
            settings=Predictions(shadow=shadow, max_pending=10**9),
            headroom=Headroom(),
            history=history,
            running=RunningSLOs(),
            series=PredictionSeries(registry, ["pool-a", "pool-b"], telemetry.series_budget),
            predicted_pools={"pool-a", "pool-b"} if shadow else set(),
            streaming_of=StreamingModes({}, default=True).streaming,
            sink=self.records.append if scenario == "store" else None,
        )


def chunks_of(all_requests: list[JoinedRequest], size: int, scenario: str) -> list[list[JoinedRequest]]:
    if scenario == "spans, no TPOT SLO":
        all_requests = [dataclasses.replace(r, slo_tpot_ms=None) for r in all_requests]
    return [all_requests[i : i + size] for i in range(0, len(all_requests), size)]


def per_request(chunks: list[list[JoinedRequest]], scenario: str, native: bool) -> float:
    stage, spent = Stage(scenario), 0.0
    for chunk in chunks:
        evaluated = stage.stage.evaluated(chunk)  # the labels, admitted as in production
        stage.stage.publisher.publish(evaluated)
        labels = [RequestLabels(*row[2:]) for row in _rows(evaluated)]
        start = time.process_time()
        pairs = evaluated.pairs() if native else [(r, evaluate(r, SPEC)) for r in chunk]  # what the tracker is given
        spent += time.process_time() - start
        for (request, evaluation), label in zip(pairs, labels, strict=True):
            start = time.process_time()
            stage.tracker.publish_request(request, evaluation, label)
            spent += time.process_time() - start
    return spent


def batched(chunks: list[list[JoinedRequest]], scenario: str, native: bool) -> float:
    stage, spent = Stage(scenario), 0.0
    for chunk in chunks:
        records = joined_batch.from_requests(chunk)
        evaluated = stage.stage.evaluator.evaluated(records, None if native else chunk)
        stage.stage.publisher.publish(evaluated)
        start = time.process_time()
        stage.tracker.publish(evaluated)
        spent += time.process_time() - start
    return spent


def _rows(evaluated: EvaluatedBatch) -> list[PublishedRow]:
    seen = InMemoryPublisher()
    seen.publish(evaluated)
    return seen.rows()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--scenario", choices=SCENARIOS, nargs="+", default=list(SCENARIOS))
    args = parser.parse_args()
    all_requests = requests(args.requests)
    kinds: dict[str, Callable[[list[list[JoinedRequest]], str, bool], float]] = {
        "per request": per_request,
        "batch": batched,
    }
    print(f"µs per request of the prediction tracker, {args.requests} requests, best of {args.repeat}")
    print(f"{'scenario':>20}{'join':>8}{'batch size':>12}" + "".join(f"{kind:>14}" for kind in kinds))
    for scenario in args.scenario:
        for native in (True, False):
            for size in args.sizes:
                chunks = chunks_of(all_requests, size, scenario)
                best = {kind: float("inf") for kind in kinds}
                for _ in range(args.repeat):
                    for kind, run in kinds.items():
                        best[kind] = min(best[kind], run(chunks, scenario, native) / len(all_requests) * 1e6)
                join = "native" if native else "python"
                print(f"{scenario:>20}{join:>8}{size:>12}" + "".join(f"{best[kind]:>14.2f}" for kind in kinds))


if __name__ == "__main__":
    main()
