"""Routing spans to the join workers (``join.workers``): every span of a trace to the same one.

A trace's join needs all its spans in one assembler, so intake splits each batch by a stable hash of
the trace id; a native batch splits natively (``SpanBatch.split``), a list of the reference
decoder's spans here, by the same hash (one trace's spans can come from both decoders: the native
JSON decoder leaves some bodies to the reference). :class:`ShardedQueue` is the single queue intake
sees: its capacity is the total of ``limits.queue_spans`` across workers, a batch is accepted or
refused whole, and each worker takes from its own shard.
"""

from __future__ import annotations

import threading

from sloscope._native import SpanBatch
from sloscope.processors.queue import SpanQueue
from sloscope.receivers.consumers import Batch
from sloscope.records import Span

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finalizer, as native/src/span.rs ``mix``."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def shard_of(trace_id: str, n: int) -> int:
    """The shard of a hex trace id, as native/src/span.rs ``shard_of`` computes it from its 16 bytes."""
    try:
        value = int(trace_id, 16)
    except ValueError:  # not hex: any stable choice will do (the native decoder refuses such ids)
        return 0
    return _mix(((value >> 64) & _MASK) ^ _mix(value & _MASK)) % n


def split(batch: Batch, n: int) -> list[Batch]:
    """The batch as ``n`` batches by trace id, order kept within each. A native batch is left empty."""
    if isinstance(batch, SpanBatch):
        return list(batch.split(n))
    parts: list[list[Span]] = [[] for _ in range(n)]
    shards: dict[str, int] = {}
    for span in batch:
        shard = shards.get(span.trace_id)
        if shard is None:
            shard = shards[span.trace_id] = shard_of(span.trace_id, n)
        parts[shard].append(span)
    return list(parts)


class ShardedQueue:
    """One queue to intake, one shard per join worker; the capacity is the total across them.

    ``offer`` never blocks and never raises, as :class:`SpanQueue`'s: it checks the total under its own
    lock before splitting, and the workers' takes only shrink the shards, so a batch that fits is put
    whole and one that does not is refused whole (and left intact for the receiver to count).
    """

    def __init__(self, capacity: int, shards: int) -> None:
        if shards < 2:
            raise ValueError("a sharded queue has at least two shards")
        self.capacity = capacity
        self.shards = [SpanQueue(capacity) for _ in range(shards)]  # bounded by the total, checked here
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        """Spans waiting, in every shard."""
        return sum(len(shard) for shard in self.shards)

    @property
    def closed(self) -> bool:
        return self._closed

    def offer(self, batch: Batch) -> bool:
        if not batch:
            return not self._closed
        with self._lock:
            if self._closed or len(self) + len(batch) > self.capacity:
                return False
            for shard, part in zip(self.shards, split(batch, len(self.shards)), strict=True):
                shard.offer(part)
        return True

    def close(self) -> None:
        """Refuse new batches and wake every worker; waiting batches can still be taken."""
        with self._lock:
            self._closed = True
            for shard in self.shards:
                shard.close()
