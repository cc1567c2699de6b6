"""What the join remembers of an emitted trace's spans (the reference ``SeenSpans``; the native join's
``native/src/join/seen.rs`` has the same cases in its tests)."""

from __future__ import annotations

from sloscope.processors.trace_state import CLAIMED, PARENT, SEEN, SeenSpans
from sloscope.records import Span


def span(span_id: int, parent: int | None = None) -> Span:
    return Span("t" * 32, f"{span_id:016x}", f"{parent:016x}" if parent is not None else "", "s", 0, 1, {}, {})


def listed(seen: SeenSpans, bit: int) -> list[int]:
    return [int(span_id, 16) for span_id, marks in seen.marks.items() if marks & bit]


def test_each_list_keeps_its_newest_cap_and_an_id_with_no_list_left_is_forgotten() -> None:
    seen = SeenSpans()
    seen.remember([span(1, 9), span(2)], claimed=True, cap=3)
    seen.remember([span(3, 8), span(1)], claimed=False, cap=3)
    seen.remember([span(4, 7)], claimed=True, cap=2)
    assert (listed(seen, SEEN), listed(seen, CLAIMED), listed(seen, PARENT)) == ([3, 4], [2, 4], [9, 7])
    assert [int(i, 16) for i in seen.marks] == [9, 2, 3, 4, 7]  # order of first mention; a parent after its span
    assert seen.counts == {SEEN: 2, CLAIMED: 2, PARENT: 2}


def test_an_id_in_a_list_later_than_its_first_mention_is_as_old_as_that() -> None:
    seen = SeenSpans()
    seen.remember([span(1), span(2)], claimed=False, cap=8)
    seen.remember([span(3), span(4)], claimed=False, cap=8)
    seen.remember([span(2), span(1)], claimed=True, cap=1)
    assert (listed(seen, CLAIMED), listed(seen, SEEN)) == ([2], [4])


def test_a_copy_is_a_duplicate_and_a_parent_of_or_a_child_under_a_claimed_span_is_late() -> None:
    seen = SeenSpans()
    seen.remember([span(1, 5), span(2, 1)], claimed=True, cap=8)
    seen.remember([span(3, 6)], claimed=False, cap=8)
    assert [seen.verdict(s) for s in (span(2), span(3), span(5), span(7, 2), span(7, 3), span(7, 6))] == [
        "duplicate",
        "duplicate",
        "late",
        "late",
        None,
        None,
    ]
