"""``join.workers``: the join sharded by trace id inside the process gives the series of one worker.

The same traffic (tests/support/join_traces.py's generated traces, and bench/payloads.py's exports: the
benchmark's calls and today's llm-d agent sessions with P/D requests) through pipelines of 1, 2 and 4
workers publishes the same sloscope_* samples, join outcomes and drop counters included. What is
promised, exactly: every request whose spans are in one trace. A call split across two traces (the
gateway's and vLLM's, joined by request id) joins only when both trace ids fall on the same worker,
as docs/scale-out.md says; the last test pins that.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator

import pytest
from bench import payloads
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sloscope import conventions as c
from sloscope._native import SpanBatch
from sloscope.attributes import Mapping
from sloscope.config import Settings
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline, shard_join
from sloscope.processors import shards
from sloscope.processors.shards import ShardedQueue, shard_of
from sloscope.receivers.native_decode import NativeDecoder
from sloscope.records import Span
from tests.support.join_traces import Shapes, Step, deliveries

WORKERS = (1, 2, 4)


def generated(seed: int, traces: int, *, cross: bool) -> Iterator[list[Span]]:
    return (value for kind, value in deliveries(random.Random(seed), traces, cross=cross) if kind == "spans")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def series(registry: CollectorRegistry) -> Series:
    """The sloscope_* samples of /metrics (the text format carries no exemplars), creation times aside.
    Histogram sums to 12 digits: the workers hand their requests over in another order, and float addition
    is not associative."""
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.startswith("sloscope_") and not sample.name.endswith("_created"):
                value = float(f"{sample.value:.12g}") if sample.name.endswith("_sum") else sample.value
                out[(sample.name, frozenset(sample.labels.items()))] = value
    return out


def outcome_counts(run: Series) -> dict[str, float]:
    return {dict(labels)["outcome"]: v for (name, labels), v in run.items() if name == "sloscope_traces_joined_total"}


def pipeline(workers: int, engine: str = "native", clock: Clock | None = None, **join: object) -> Pipeline:
    settings = Settings.model_validate({"join": {"engine": engine, "workers": workers, **join}})
    return Pipeline(settings, default_spec(), CollectorRegistry(), clock=clock or Clock())


def run_steps(workers: int, steps: Iterable[Step], engine: str = "native", **join: object) -> Series:
    """The deliveries at their clock steps: each batch joined as it comes, windows expiring as the clock moves."""
    clock = Clock()
    piped = pipeline(workers, engine, clock, **join)
    for kind, value in steps:
        if kind == "spans":
            assert piped.queue.offer(value)
        else:
            clock.now += value
        piped.drain()
    assert piped.shutdown()  # not started: every shard drains its queue, then flushes
    return series(piped.registry)


def run_exports(workers: int, exports: list[bytes]) -> Series:
    """The exports as the receivers take them: decoded natively, submitted to intake (which routes them)."""
    piped = pipeline(workers, max_spans_per_trace=256)
    decoder = NativeDecoder(Mapping(piped.settings.attributes), piped.intake.keep)
    for export in exports:
        assert piped.intake.submit(decoder.protobuf(export), "http").status.name == "ACCEPTED"
    assert piped.shutdown()
    return series(piped.registry)


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("by_request_id", [True, False])
def test_generated_traces_give_the_same_series_for_any_worker_count(engine: str, by_request_id: bool) -> None:
    """Without calls split across traces; joining by request id on or off (it still decides within a trace).
    Model-server spans wait for their gateway spans, and coordinator calls for their legs, from the start: learnt
    from the traffic (``auto``), the first ones' waits depend on the order the workers hand over in
    (docs/configuration.md, ``join.wait_for_gateway`` and ``join.wait_for_legs``)."""
    steps = list(deliveries(random.Random(6), 400, cross=False))
    waits = {"wait_for_legs": "always", "wait_for_gateway": "always"}
    runs = [run_steps(n, steps, engine, by_request_id=by_request_id, **waits) for n in WORKERS]
    assert runs[1] == runs[0] and runs[2] == runs[0]
    assert len(runs[0]) > 500
    outcomes = outcome_counts(runs[0])
    assert outcomes[c.OUTCOME_JOINED] > 300 and outcomes[c.OUTCOME_FAILED] > 0 and outcomes[c.OUTCOME_NO_ANCHOR] > 0


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_coordinator_leg_is_joined_alike_for_any_worker_count(engine: str) -> None:
    """Seed 5's first batch holds a coordinator leg's vLLM span ahead of every gateway span. Learnt from the traffic
    (``wait_for_gateway: auto``), whether it waits for its gateway depends on whether another worker took a gateway
    span of the batch first; waiting from the start (``always``), it waits on every worker count. ``always`` waited
    only once a gateway span had come: this seed joined that leg one way with one worker and another with two."""
    steps = list(deliveries(random.Random(5), 400, cross=False))
    runs = [
        run_steps(n, steps, engine, by_request_id=True, wait_for_legs="always", wait_for_gateway="always")
        for n in WORKERS
    ]
    assert runs[1] == runs[0] and runs[2] == runs[0]


@pytest.mark.parametrize(
    "exports",
    [payloads.build(4_096, batch_spans=256).payloads, payloads.build_llmd(3_000, batch_spans=256).payloads],
    ids=["benchmark calls", "llm-d agent sessions with P/D"],
)
def test_the_benchmark_exports_give_the_same_series_for_any_worker_count(exports: list[bytes]) -> None:
    runs = [run_exports(n, exports) for n in WORKERS]
    assert runs[1] == runs[0] and runs[2] == runs[0]
    assert runs[0][("sloscope_spans_received_total", frozenset({("transport", "http")}))] > 2_900
    assert outcome_counts(runs[0])[c.OUTCOME_JOINED] > 200


COUNTED = ("sloscope_traces_joined_total", "sloscope_requests_total", "sloscope_requests_failed_total")


def counted(*runs: Series) -> Counter[tuple[str, frozenset[tuple[str, str]]]]:
    """The outcome and request counters of separate runs, added up (every other series aside)."""
    total: Counter[tuple[str, frozenset[tuple[str, str]]]] = Counter()
    for run in runs:
        total.update({key: value for key, value in run.items() if key[0] in COUNTED and value})
    return total


@pytest.mark.parametrize("by_request_id", [True, False])
def test_a_call_split_across_traces_is_joined_across_them_only_on_one_worker(by_request_id: bool) -> None:
    """Calls whose gateway spans are in a trace of their own (EPPs before 2026), delivered, then past every
    window. A pair whose trace ids fall on the same worker counts as with one worker; the halves of any other
    pair count as if each had come without the other (docs/scale-out.md): joined by request id, or a model
    server having answered the gateway's request id, only within one worker."""
    shapes = Shapes(random.Random(11))
    pairs: list[tuple[list[Span], list[Span]]] = []
    while len(pairs) < 40:
        traces = shapes.traces()
        if len(traces) == 2:
            pairs.append((traces[0].spans, traces[1].spans))
    together = [pair for pair in pairs if shard_of(pair[0][0].trace_id, 2) == shard_of(pair[1][0].trace_id, 2)]
    apart = [pair for pair in pairs if pair not in together]
    assert len(together) > 5 and len(apart) > 5

    def run(workers: int, batches: Iterable[list[Span]]) -> Series:
        steps: list[Step] = [*(("spans", batch) for batch in batches), ("advance", 40.0)]
        return run_steps(workers, steps, by_request_id=by_request_id)

    one = run(1, (a + b for a, b in pairs))
    two = run(2, (a + b for a, b in pairs))
    alone = counted(run(1, (a + b for a, b in together)), run(1, (a for a, _ in apart)), run(1, (b for _, b in apart)))
    assert counted(two) == alone
    assert counted(two) != counted(one)
    joined_by_id = outcome_counts(one).get(c.OUTCOME_JOINED_BY_REQUEST_ID, 0)
    assert joined_by_id > 30 if by_request_id else joined_by_id == 0


def test_native_and_reference_batches_split_alike() -> None:
    """A trace's spans can come from both decoders: both splits send a trace id to the same shard."""
    spans = [span for batch in generated(2, 200, cross=True) for span in batch]
    for n in (1, 2, 3, 4):
        native = [[(s.trace_id, s.span_id) for s in part.to_spans()] for part in SpanBatch.from_spans(spans).split(n)]
        listed = [[(s.trace_id, s.span_id) for s in part] for part in shards.split(spans, n)]
        assert native == listed
        assert sorted(pair for part in native for pair in part) == sorted((s.trace_id, s.span_id) for s in spans)
    batch = SpanBatch.from_spans(spans)
    assert [len(p) for p in batch.split(2)] and len(batch) == 0  # the spans moved out
    with pytest.raises(ValueError, match="at least 1"):
        SpanBatch.from_spans(spans).split(0)


def test_the_sharded_queue_counts_its_capacity_in_total_and_refuses_a_batch_whole() -> None:
    spans = next(b for b in generated(4, 100, cross=False) if len(b) >= 5)
    queue = ShardedQueue(len(spans) + 2, 3)
    assert queue.offer(spans) and len(queue) == len(spans)
    assert not queue.offer(spans[:3])  # 3 more exceed the total, wherever they would go
    assert len(queue) == len(spans)
    assert queue.offer(spans[:2]) and len(queue) == queue.capacity
    taken = sum(len(batch) for shard in queue.shards for batch in shard.take(0))
    assert (taken, len(queue)) == (len(spans) + 2, 0)
    queue.close()
    assert queue.closed and all(shard.closed for shard in queue.shards) and not queue.offer(spans)


def test_the_caps_are_totals_and_the_gauges_sum_the_workers() -> None:
    settings = Settings.model_validate({"join": {"workers": 4, "max_pending_traces": 10, "max_pending_bytes": 4001}})
    shard = shard_join(settings.join, 4)
    assert (shard.max_pending_traces, shard.max_pending_bytes, shard.max_done_traces) == (2, 1000, 50_000)
    assert shard_join(settings.join, 1) is settings.join
    piped = pipeline(4)
    for batch in generated(6, 60, cross=False):
        assert piped.queue.offer(batch)
    registry = piped.registry
    assert registry.get_sample_value(c.QUEUE_SPANS.exposed_name) == len(piped.queue) > 0
    assert registry.get_sample_value(c.QUEUE_CAPACITY_SPANS.exposed_name) == piped.settings.limits.queue_spans
    for worker in piped._shards:
        for batch in worker.queue.take(0):
            worker.assembler.consume(batch)
    pending = sum(worker.assembler.pending for worker in piped._shards)
    assert registry.get_sample_value(c.TRACES_PENDING.exposed_name) == pending > 0
    assert registry.get_sample_value(c.TRACES_PENDING_BYTES.exposed_name) == sum(
        worker.assembler.pending_bytes for worker in piped._shards
    )
    assert piped.shutdown()
