"""The pipeline gathers what the assembler emits and hands it to the evaluator in batches (``join.batch_requests``,
``join.batch_timeout_seconds``); the series are those of one request at a time."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope import conventions as c
from sloscope.columnar.batch import Batch
from sloscope.config import Settings
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline
from sloscope.records import Span
from sloscope.testing import gateway_attributes, span, vllm_attributes

FAMILIES = (
    c.REQUESTS,
    c.REQUESTS_FAILED,
    c.SLO_REQUESTS,
    c.SLO_VIOLATIONS,
    c.POD_REQUESTS,
    c.POD_SLO_VIOLATIONS,
    c.INVALID_VALUES,
    c.TTFT_SECONDS,
    c.TPOT_SECONDS,
    c.E2E_SECONDS,
    c.PROMPT_TOKENS,
    c.COMPLETION_TOKENS,
)


def trace(index: int, rng: random.Random) -> list[Span]:
    """A gateway span and its model-server span, with a TTFT target for most and a TPOT target for some."""
    trace_id = index + 1
    gateway = gateway_attributes(
        slo_ttft_ms=rng.choice((None, "200", "800", "3000")),
        slo_tpot_ms=rng.choice((None, "50")),
        model=rng.choice(("llama-3-8b", "qwen-2-7b")),
    )
    server = vllm_attributes(
        ttft=round(rng.expovariate(1 / 0.3), 6),
        e2e=round(1.0 + rng.random() * 4, 6),
        completion_tokens=rng.choice((1, 2, 40, 300)),
        request_id=f"chatcmpl-{index}",
    )
    return [
        span(trace_id, 1, "gateway.request", gateway, resource={"service.name": "epp"}),
        span(
            trace_id,
            2,
            "llm_request",
            server,
            parent=1,
            resource={"service.name": "vllm", "k8s.pod.name": f"vllm-{index % 5}"},
        ),
    ]


def published(registry: CollectorRegistry) -> list[str]:
    """The request series' lines of the text exposition (the exemplars' timestamps differ between runs)."""
    names = tuple(f"{d.name}{suffix}" for d in FAMILIES for suffix in ("_total{", "_bucket{", "_sum{", "_count{"))
    return [line for line in generate_latest(registry).decode().splitlines() if line.startswith(names)]


AWAITING = c.REQUESTS_AWAITING_EVALUATION.name
BATCH = 128


def run(batches: list[list[Span]], **join: float) -> tuple[list[str], list[int]]:
    """The series of ``batches`` offered one by one to a pipeline drained on this thread, and the sizes of the
    batches the evaluator was handed; each batch is still counted awaiting evaluation while it is evaluated, and
    none is at the end."""
    registry = CollectorRegistry()
    pipeline = Pipeline(Settings.model_validate({"join": join}), default_spec(), registry)
    handed: list[int] = []

    def hand(size: int) -> None:
        handed.append(size)
        assert registry.get_sample_value(AWAITING) == size

    batch, records = pipeline.evaluator.batch, pipeline.evaluator.records
    pipeline.evaluator.batch = lambda requests: (hand(len(requests)), batch(requests))  # type: ignore[method-assign]
    # The native join's record batches (the default engine), whatever their size.
    pipeline.evaluator.records = lambda rows: (hand(len(rows)), records(rows))  # type: ignore[method-assign]
    for spans in batches:
        assert pipeline.queue.offer(spans)
    assert pipeline.shutdown()  # not started: drains the queue on this thread, then flushes
    assert registry.get_sample_value(AWAITING) == 0
    return published(registry), handed


def test_one_span_batch_of_many_traces_gives_the_series_of_one_trace_at_a_time() -> None:
    rng = random.Random(3)
    traces = [trace(i, rng) for i in range(3 * BATCH)]
    together, sizes = run([[s for t in traces for s in t]], batch_timeout_seconds=0)
    apart, singles = run(traces, batch_timeout_seconds=0)  # each assembler call published at once
    assert sizes == [3 * BATCH]  # every request of the consume in one batch
    assert singles == [1] * len(traces)
    assert together == apart
    assert f'{c.REQUESTS.name}_total{{model="llama-3-8b"' in "\n".join(together)


def test_requests_of_many_assembler_calls_are_gathered_into_batches_of_batch_requests() -> None:
    rng = random.Random(5)
    traces = [trace(i, rng) for i in range(3 * BATCH + 7)]
    gathered, sizes = run(traces, batch_requests=BATCH, batch_timeout_seconds=10)
    apart, _ = run(traces, batch_timeout_seconds=0)
    # Full batches as they fill, the rest at the drain's end (idle: nothing to wait for).
    assert sizes == [BATCH, BATCH, BATCH, 7]
    assert gathered == apart


def test_a_batch_the_evaluator_cannot_take_is_evaluated_request_by_request_and_only_the_bad_one_is_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    pipeline = Pipeline(Settings.model_validate({"join": {"batch_timeout_seconds": 10}}), default_spec(), registry)
    evaluated = pipeline.evaluator.evaluated
    poison = f"{3:032x}"  # the trace id of trace(2, ...)

    def fragile(records: Batch, requests: object = None) -> object:
        if poison in records.texts("trace_id"):
            raise ValueError("a row this evaluator cannot take")
        return evaluated(records, requests)  # type: ignore[arg-type]

    pipeline.evaluator.evaluated = fragile  # type: ignore[method-assign]
    rng = random.Random(9)
    assert pipeline.queue.offer([s for i in range(20) for s in trace(i, rng)])
    assert pipeline.shutdown()
    total = sum(
        sample.value
        for family in registry.collect()
        if family.name == c.REQUESTS.name
        for sample in family.samples
        if sample.name.endswith("_total")
    )
    assert total == 19
    assert "evaluating them one by one" in caplog.text
    assert f"evaluation failed on trace {poison}" in caplog.text
