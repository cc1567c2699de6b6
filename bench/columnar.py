"""What evaluating and publishing a joined request costs, in batches against one at a time.

Run from the repository root (``.venv/bin/python bench/columnar.py``). For each batch size, the same
generated requests go through ``SLOEvaluator.batch`` (the production path; the Arrow conversion from objects
included, and split out) and, one by one, through the reference the differential tests hold it to
(tests/support/reference.py), each on a fresh registry and the Prometheus publisher alone, so the numbers are
the evaluator's and the publisher's. Measurements take turns over several repetitions (best of each), so a
machine whose speed drifts hits them alike. It prints µs per request and asserts nothing about speed.

Three workloads: ``fleet``, a deployment's traffic (2 models, 2 pools, 16 pods, a few SLO targets, 2%
failed, some invalid values: the label sets repeat, as they do) with every trace kept; ``sampled``, the same
traffic with traces kept at 10 %, 25 % and 100 % as their ``th`` says (every request counted with its adjusted
count: the weighted path); and ``coverage``, the differential tests' requests (tests/support/joined_requests.py:
every class, value, failure and sampling probability, so ten times the label sets).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support generates the requests

from tests.support.joined_requests import SPEC, joined_requests  # noqa: E402
from tests.support.reference import ReferenceEvaluator, ReferencePublisher  # noqa: E402
from tests.support.stage import stage  # noqa: E402

from sloscope.processors import joined_batch  # noqa: E402
from sloscope.records import JoinedRequest  # noqa: E402


def fleet(count: int, *, sampled: bool = False) -> list[JoinedRequest]:
    """Requests of one deployment: the coverage generator's values, label values drawn from a fleet's few; every
    trace kept, or (``sampled``) kept with a probability of 0.1, 0.25 or 1 that the trace records."""
    rng = random.Random(11)
    out = []
    for request in joined_requests(seed=7, count=count):
        failed = rng.random() < 0.02
        out.append(
            dataclasses.replace(
                request,
                target_model=rng.choice(("llama-3-8b", "qwen-2-7b")),
                pool=rng.choice(("pool-a", "pool-b")),
                pod=f"vllm-{rng.randrange(16)}",
                routing="slo_aware",
                slo_ttft_ms=rng.choice((None, 500.0, 2000.0)),
                slo_tpot_ms=rng.choice((None, 50.0)),
                failure_reason=rng.choice(("error", "shed", "timeout")) if failed else None,
                sampling_probability=rng.choice((0.1, 0.25, 1.0)) if sampled else None,
            )
        )
    return out


def per_request(requests: list[JoinedRequest], size: int) -> float:
    evaluator = stage(SPEC, default_pool="default")
    publisher = ReferencePublisher(CollectorRegistry(), SPEC, evaluator.telemetry)
    run = ReferenceEvaluator(SPEC, evaluator.admission, (publisher,))
    start = time.perf_counter()
    for request in requests:
        run(request)
    return time.perf_counter() - start


def batched(requests: list[JoinedRequest], size: int) -> float:
    run = stage(SPEC, default_pool="default").evaluator
    chunks = [requests[i : i + size] for i in range(0, len(requests), size)]
    start = time.perf_counter()
    for chunk in chunks:
        run.batch(chunk)
    return time.perf_counter() - start


def conversion(requests: list[JoinedRequest], size: int) -> float:
    chunks = [requests[i : i + size] for i in range(0, len(requests), size)]
    start = time.perf_counter()
    for chunk in chunks:
        joined_batch.from_requests(chunk)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 128, 256, 512, 2048])
    workloads = ("fleet", "sampled", "coverage")
    parser.add_argument("--workload", choices=workloads, nargs="+", default=list(workloads))
    args = parser.parse_args()
    for workload in args.workload:
        if workload == "coverage":
            requests = joined_requests(seed=7, count=args.requests)
        else:
            requests = fleet(args.requests, sampled=workload == "sampled")
        measure(workload, requests, args.sizes, args.repeat)


def measure(workload: str, requests: list[JoinedRequest], sizes: list[int], repeat: int) -> None:
    kinds: dict[str, Callable[[list[JoinedRequest], int], float]] = {
        "batch": batched,
        "per request (reference)": per_request,
        "  of which from_requests": conversion,
    }
    print(f"{workload}: µs per request (evaluate + Prometheus publish), {len(requests)} requests, best of {repeat}")
    print(f"{'batch size':>12}" + "".join(f"{kind:>26}" for kind in kinds))
    for size in sizes:
        count = len(requests) if size > 1 else min(len(requests), 2048)  # batches of 1 are slow: fewer
        best = {kind: float("inf") for kind in kinds}
        for _ in range(repeat):
            for kind, measure in kinds.items():
                best[kind] = min(best[kind], measure(requests[:count], size) / count * 1e6)
        print(f"{size:>12}" + "".join(f"{best[kind]:>26.2f}" for kind in kinds))


if __name__ == "__main__":
    main()
