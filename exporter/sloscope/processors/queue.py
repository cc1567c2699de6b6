"""The bounded hand-off between receivers and the trace assembler.

Capacity is counted in spans, not batches, so memory stays bounded whatever batch sizes clients
use. :meth:`SpanQueue.offer` is called on the receivers' event-loop thread: it never blocks and
never raises. A batch that does not fit is refused whole; the receiver answers 429 /
RESOURCE_EXHAUSTED and the client retries it later, so nothing is half-accepted.

A batch is a list of spans (the Python decoder's) or a :class:`~sloscope._native.SpanBatch` (the native
decoder's, spans in native memory); both are counted with ``len``.
"""

from __future__ import annotations

import threading
from collections import deque

from sloscope.receivers.consumers import Batch


class SpanQueue:
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._batches: deque[Batch] = deque()
        self._size = 0
        self._closed = False
        self._ready = threading.Condition(threading.Lock())

    def __len__(self) -> int:
        """Spans waiting."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def offer(self, batch: Batch) -> bool:
        """Queue the batch if it fits and the queue is open; False otherwise."""
        if not batch:
            return not self._closed
        with self._ready:
            if self._closed or self._size + len(batch) > self.capacity:
                return False
            self._batches.append(batch)
            self._size += len(batch)
            self._ready.notify()
        return True

    def take(self, timeout: float) -> list[Batch]:
        """Every waiting batch, waiting up to ``timeout`` seconds for the first one."""
        with self._ready:
            if not self._batches and not self._closed:
                self._ready.wait(timeout)
            batches = list(self._batches)
            self._batches.clear()
            self._size = 0
        return batches

    def close(self) -> None:
        """Refuse new batches and wake the consumer; waiting batches can still be taken."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
