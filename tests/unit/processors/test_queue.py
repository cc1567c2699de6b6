"""The bounded span queue: capacity in spans, refusals instead of growth, shutdown semantics."""

from __future__ import annotations

import threading

from sloscope.processors.queue import SpanQueue
from sloscope.testing import span


def batch(n: int) -> list:
    return [span(1, i + 1, "s", {}) for i in range(n)]


def test_refuses_a_batch_that_does_not_fit_and_keeps_what_it_holds() -> None:
    queue = SpanQueue(5)
    assert queue.offer(batch(3))
    assert not queue.offer(batch(3))
    assert len(queue) == 3
    assert queue.offer(batch(2))
    assert [len(b) for b in queue.take(0)] == [3, 2]
    assert len(queue) == 0


def test_close_refuses_new_batches_but_waiting_ones_can_be_taken() -> None:
    queue = SpanQueue(10)
    queue.offer(batch(2))
    queue.close()
    assert not queue.offer(batch(1))
    assert [len(b) for b in queue.take(0)] == [2]


def test_take_wakes_on_offer() -> None:
    queue = SpanQueue(10)
    got: list = []
    taker = threading.Thread(target=lambda: got.extend(queue.take(30)))
    taker.start()
    queue.offer(batch(1))
    taker.join(10)
    assert not taker.is_alive()
    assert [len(b) for b in got] == [1]
