"""The two joins read the upstreams with the same words: the native join's vocabulary is the Python one's.

The Python join reads :data:`sloscope.upstream.vocabulary.VOCABULARY`; the native join is compiled with the
constants generated from it (``native/src/join/vocabulary.rs``, ``make generate``) and gives them back through
``sloscope._native.vocabulary()``: the file must be fresh, and the module built from it. A word added to one
and not the other (a new leg span, a new failure phrase) fails here instead of making the two joins disagree on
real traffic, where only the differential tests' generated traces would have a chance to notice.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sloscope import _native
from sloscope import conventions as c
from sloscope.upstream.vocabulary import VOCABULARY, SpanVocabulary, rust_source

GENERATED = Path(__file__).resolve().parents[3] / "native" / "src" / "join" / "vocabulary.rs"

ORDERED = {"phases", "early_phases", "http_status_keys", "client_error_codes", "failure_reasons", "routings"}
"""Fields whose order matters: the first key that has an HTTP status wins, the phrases are read in turn."""


def python_words() -> dict[str, object]:
    return {field.name: getattr(VOCABULARY, field.name) for field in dataclasses.fields(SpanVocabulary)}


def test_the_native_join_has_every_word_and_no_other() -> None:
    assert set(_native.vocabulary()) == set(python_words())


def differs(native: object, python: object, *, ordered: bool) -> bool:
    """Whether a native word differs from the Python one: lists as tuples where order matters, else as sets."""
    if isinstance(python, (frozenset, tuple)):
        if not isinstance(native, list):
            return True
        return (
            tuple(native) != python
            if ordered
            else (frozenset(native) != frozenset(python) or len(native) != len(python))
        )
    return native != python


@pytest.mark.parametrize("name", sorted(f.name for f in dataclasses.fields(SpanVocabulary)))
def test_each_word_is_the_same_in_both_joins(name: str) -> None:
    assert not differs(_native.vocabulary()[name], python_words()[name], ordered=name in ORDERED)


def test_the_join_outputs_are_the_series_labels() -> None:
    assert VOCABULARY.failure_reasons == c.FAILURE_REASONS
    assert VOCABULARY.routings == c.ROUTINGS
    assert VOCABULARY.phases == c.PHASES


def test_a_word_one_join_lacks_is_caught() -> None:
    """The check itself: a leg span name only the Python side knew, a reordered status key, a code in a list."""
    native = _native.vocabulary()
    legs = VOCABULARY.decode_legs | {"llm_d.pd_proxy.decode2"}
    assert differs(native["decode_legs"], legs, ordered=False)
    assert differs(native["http_status_keys"], VOCABULARY.http_status_keys[::-1], ordered=True)
    assert not differs(native["http_status_keys"], VOCABULARY.http_status_keys[::-1], ordered=False)
    assert differs([412], VOCABULARY.precondition_failed, ordered=False)


def test_the_native_constants_are_generated_from_the_python_vocabulary() -> None:
    assert GENERATED.read_text() == rust_source(), "native/src/join/vocabulary.rs is stale: run make generate"


def test_the_generated_constants_say_every_word_once() -> None:
    text = rust_source()
    for field in dataclasses.fields(SpanVocabulary):
        assert text.count(f"pub const {field.name.upper()}:") == 1
        assert text.count(f'("{field.name}", Word::') == 1
