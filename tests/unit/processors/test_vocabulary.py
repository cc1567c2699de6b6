"""The native join is built from the Python vocabulary: it reads every word from the object it is given.

The Python join reads :data:`sloscope.upstream.vocabulary.VOCABULARY`; the native one is handed the object when
an assembler is made and reads each field by its name (``native/src/join/vocabulary.rs``), so no word is typed
twice. These tests hold it to that: a field the object lacks fails by name, and words changed in the object
change what the native join recognises and writes, with nothing rebuilt.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from sloscope import conventions as c
from sloscope.attributes import Mapping
from sloscope.config import Attributes, Join
from sloscope.processors import joined_batch
from sloscope.processors.native_assembler import NativeTraceAssembler
from sloscope.records import JoinedRequest, Span
from sloscope.testing import epp_spans, span, vllm_attributes
from sloscope.upstream.vocabulary import VOCABULARY, Failures, Outcomes, Routings, SpanVocabulary, TtftSources

START = 1_700_000_000_000_000_000
SHED = (2, "inference error: ResourceExhausted - request cannot be admitted: saturated")


def joined(spans: list[Span], vocabulary: Any = VOCABULARY) -> list[JoinedRequest]:
    """What the native join makes of one delivery of spans once every window is over."""
    join = Join()
    assembler = NativeTraceAssembler(
        join,
        Mapping(Attributes()),
        lambda _: None,
        count_dropped=lambda *_: None,
        count_outcome=lambda *_: None,
        gathered=lambda _: None,
        clock=lambda: 1000.0,
        vocabulary=vocabulary,
    )
    assembler.consume(spans)
    assembler.expire(1000.0 + join.trace_ttl_seconds + 1)
    batch = assembler.take()
    return [] if batch is None else joined_batch.to_requests(batch)


def scored_call() -> list[Span]:
    """A call the EPP scheduled with its latency scorer, answered by a vLLM pod (its llm_request under the EPP)."""
    epp = epp_spans(1, 1, request_id="req-1", parent=0, start_ns=START)
    anchor = span(1, 20, "llm_request", vllm_attributes(request_id="chatcmpl-req-1"), parent=1, start_ns=START + 1)
    return [*epp, anchor]


def shed_call() -> list[Span]:
    """A call the EPP refused before scheduling it, for load."""
    return epp_spans(2, 1, request_id="req-2", parent=0, start_ns=START, scorer=None, status=SHED)


def test_the_llm_d_words_read_the_llm_d_shapes() -> None:
    (scored,) = joined(scored_call())
    (shed,) = joined(shed_call())
    assert (scored.routing, scored.failure_reason) == (c.ROUTING_PREDICTED, None)
    assert (scored.outcome, scored.ttft_source) == (c.OUTCOME_JOINED, c.TTFT_GATEWAY_ARRIVAL)
    assert (shed.routing, shed.failure_reason, shed.outcome) == (c.ROUTING_NONE, c.FAILURE_SHED, c.OUTCOME_FAILED)


def test_words_changed_in_the_object_change_what_the_native_join_reads_and_writes() -> None:
    """A scorer prefix the EPP does not use (so the scorer span is only a scheduling span's child, and the call
    was scheduled without prediction), and other spellings of the labels it writes: no rebuild, no constant."""
    words = dataclasses.replace(
        VOCABULARY,
        scorer_prefix="other_router.scorer.",
        routings=Routings(default="by_default", none="never_routed"),
        failures=Failures(shed="load_shed"),
        outcomes=Outcomes(joined="matched", failed="refused"),
        ttft_sources=TtftSources(gateway_arrival="from_the_gateway"),
        shed_phrases=("saturated",),
    )
    (scored,) = joined(scored_call(), words)
    (shed,) = joined(shed_call(), words)
    assert (scored.routing, scored.outcome, scored.ttft_source) == ("by_default", "matched", "from_the_gateway")
    assert (shed.routing, shed.failure_reason, shed.outcome) == ("never_routed", "load_shed", "refused")


def test_a_shed_phrase_the_object_lacks_is_not_read() -> None:
    words = dataclasses.replace(VOCABULARY, shed_phrases=("over capacity",), client_error_codes=())
    (shed,) = joined(shed_call(), words)
    assert shed.failure_reason == c.FAILURE_ERROR  # an error status that says nothing the words know


@pytest.mark.parametrize("missing", sorted(f.name for f in dataclasses.fields(SpanVocabulary)))
def test_every_word_is_read_by_name_and_a_missing_one_is_named(missing: str) -> None:
    fields = {f.name: getattr(VOCABULARY, f.name) for f in dataclasses.fields(SpanVocabulary)}
    joined(scored_call(), SimpleNamespace(**fields))
    del fields[missing]
    with pytest.raises(AttributeError, match=missing):
        joined(scored_call(), SimpleNamespace(**fields))


def test_a_mistyped_word_is_refused() -> None:
    with pytest.raises(TypeError):
        joined(scored_call(), dataclasses.replace(VOCABULARY, precondition_failed="412"))


def test_the_join_outputs_are_the_series_labels() -> None:
    assert tuple(VOCABULARY.failures) == c.FAILURE_REASONS
    assert tuple(VOCABULARY.routings) == c.ROUTINGS
    assert tuple(VOCABULARY.phases) == c.PHASES
    assert tuple(VOCABULARY.outcomes) == c.OUTCOMES
    assert set(VOCABULARY.drops) < set(c.DROP_REASONS)  # the intake's own (queue_full, invalid, shutdown) aside
    assert set(VOCABULARY.ttft_sources) < set(c.TTFT_SOURCES)  # the call joiner's coordinator aside
    assert set(VOCABULARY.early_phases) < set(VOCABULARY.phases)
