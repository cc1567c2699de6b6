"""The windows the trace assembler waits out: each anchor's join window and each gateway span's failure window,
soonest first."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

TIDY_FROM = 4096  # the shortest queue that is tidied


class Deadlines:
    """(deadline, trace id, span id), in the order they were pushed, which is the order of their deadlines (one
    window length a queue, the clock never goes back).

    Most entries go stale long before their deadline: a request is emitted as soon as it is whole, and the failure
    window (15 s by default) outlives it by far. Left until their deadline, stale entries numbered the rate times the
    window, beyond every pending cap. So once the queue is longer than twice what it held after the last tidying (and
    ``TIDY_FROM``), the entries whose span no longer waits are dropped: a scan per as many pushes, O(1) amortized.
    The native join's ``Deadlines`` (``native/src/join/deadlines.rs``) tidies at the same lengths.
    """

    def __init__(self) -> None:
        self._queue: deque[tuple[float, str, str]] = deque()
        self._tidy_at = TIDY_FROM

    def __len__(self) -> int:
        return len(self._queue)

    def push(self, deadline: float, trace_id: str, span_id: str, waiting: Callable[[str, str], bool]) -> None:
        """Adds a window; ``waiting`` tells whether an older entry's span still waits, should the queue be tidied."""
        self._queue.append((deadline, trace_id, span_id))
        if len(self._queue) > self._tidy_at:
            self._queue = deque(entry for entry in self._queue if waiting(entry[1], entry[2]))
            self._tidy_at = max(TIDY_FROM, 2 * len(self._queue))

    def pop_due(self, now: float) -> tuple[str, str] | None:
        """The next (trace id, span id) whose deadline is ``now`` or past, taken out."""
        if not self._queue or self._queue[0][0] > now:
            return None
        _, trace_id, span_id = self._queue.popleft()
        return trace_id, span_id

    def clear(self) -> None:
        self._queue.clear()
        self._tidy_at = TIDY_FROM
