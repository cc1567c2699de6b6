"""The queue of join and failure windows (``processors/deadlines.py``): due entries in order, stale ones dropped
once the queue doubles. The native join's ``Deadlines`` has the same unit tests (``native/src/join/deadlines.rs``);
tests/unit/processors/test_assembler.py shows the drop on both engines."""

from __future__ import annotations

from sloscope.processors.deadlines import TIDY_FROM, Deadlines


def test_stale_entries_are_dropped_once_the_queue_doubles_and_due_ones_come_in_order() -> None:
    deadlines = Deadlines()

    def waiting(trace_id: str, span_id: str) -> bool:  # every tenth span still waits
        return int(trace_id) % 10 == 0

    for k in range(TIDY_FROM):
        deadlines.push(float(k), str(k), f"s{k}", waiting)
    assert len(deadlines) == TIDY_FROM  # not longer than TIDY_FROM: untouched
    deadlines.push(float(TIDY_FROM), str(TIDY_FROM), "last", waiting)
    assert len(deadlines) == 410  # the multiples of ten below 4,096; the one just pushed does not wait either
    assert deadlines.pop_due(-1.0) is None
    assert [deadlines.pop_due(25.0) for _ in range(4)] == [("0", "s0"), ("10", "s10"), ("20", "s20"), None]
    deadlines.clear()
    assert len(deadlines) == 0


def test_a_queue_of_waiting_spans_is_tidied_at_twice_its_length() -> None:
    deadlines = Deadlines()
    for k in range(3 * TIDY_FROM):
        deadlines.push(float(k), str(k), "s", lambda *_: True)
    # Tidied at 4,097 entries (keeping all: the next at over 8,194), then at 8,195; none dropped.
    assert len(deadlines) == 3 * TIDY_FROM and deadlines._tidy_at == 2 * 8_195
