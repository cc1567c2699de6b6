"""The sampling probability a trace state records (OTEP 235's ``ot=th:``), read as the SDKs write it."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace._sampling_experimental import (
    composable_traceid_ratio_based,
    composite_sampler,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sloscope.processors.trace_sampling import MAX_THRESHOLD, probability_of, threshold_of


@pytest.mark.parametrize(
    ("tracestate", "threshold", "probability"),
    [
        ("ot=th:0", 0, 1.0),
        ("ot=th:8", 0x80000000000000, 0.5),
        ("ot=th:c", 0xC0000000000000, 0.25),
        ("ot=th:e6666666666666", 0xE6666666666666, 0.1),  # the SDKs' 10 %: 0x1999999999999a / 2**56 is 0.1
        ("ot=th:ffffffffffffff", MAX_THRESHOLD - 1, 2**-56),
        ("vendor=a:b, ot=rv:0123456789abcd;th:8;x:y,other=1", 0x80000000000000, 0.5),  # among other members
        ("ot=th:C", 0xC0000000000000, 0.25),  # upper case, as the SDKs' parsers read it
    ],
)
def test_a_threshold_is_its_top_hex_digits_and_keeps_the_rest_of_the_traces(
    tracestate: str, threshold: int, probability: float
) -> None:
    assert threshold_of(tracestate) == threshold
    assert probability_of(tracestate) == probability


@pytest.mark.parametrize(
    "tracestate",
    [
        "",  # a ratio sampler that records nothing
        "ot=rv:0123456789abcd",  # randomness, no threshold
        "ot=th:",
        "ot=th:123456789abcdef",  # 15 digits: beyond 56 bits
        "ot=th:8g",
        "ot=th:1_0",
        "ot=p:3",  # the withdrawn p-value of OTEP 168
        "xot=th:8",
        "ot:th:8",
    ],
)
def test_a_trace_state_without_a_well_formed_threshold_says_no_probability(tracestate: str) -> None:
    assert threshold_of(tracestate) is None
    assert probability_of(tracestate) is None


def test_the_first_ot_member_is_read_as_written() -> None:
    assert probability_of("ot=th:8,ot=th:c") == 0.5
    assert probability_of("ot=x:1;th:c;th:8") == 0.25


@pytest.mark.parametrize("ratio", [1.0, 0.5, 0.1, 0.01, 0.001])
def test_the_sdks_consistent_ratio_sampler_is_read_back_at_its_ratio_on_a_parent_based_child(ratio: float) -> None:
    """A root span kept by opentelemetry-sdk's composite ratio sampler (``_sampling_experimental``, 1.45) carries
    ``th``; a child in another process, under the SDKs' default ``ParentBased`` sampler and W3C propagation (an
    EPP's call to vLLM), inherits the trace state and with it the probability, which reads back as the ratio up to
    the threshold's 56 bits."""
    root_tracer = TracerProvider(sampler=composite_sampler(composable_traceid_ratio_based(ratio))).get_tracer("epp")
    child_tracer = TracerProvider().get_tracer("vllm")  # the default sampler: parentbased_always_on
    propagator = TraceContextTextMapPropagator()
    read = []
    for _ in range(2_000 if ratio >= 0.01 else 20_000):
        with root_tracer.start_as_current_span("gateway.request") as root:
            if not root.is_recording():
                continue
            headers: dict[str, str] = {}
            propagator.inject(headers)
        with child_tracer.start_as_current_span("llm_request", context=propagator.extract(headers)) as child:
            states = (root.get_span_context().trace_state, child.get_span_context().trace_state)
            read.append(tuple(probability_of(state.to_header()) for state in states))
    assert len(read) >= 10
    (root, child), *_ = read
    assert set(read) == {(root, root)}  # one threshold for every trace, the child's its root's
    assert root == pytest.approx(ratio, rel=1e-15)
