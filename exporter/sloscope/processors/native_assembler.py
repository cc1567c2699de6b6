"""The trace assembler of the native core (``sloscope._native.NativeAssembler``), with the interface
of :class:`sloscope.processors.assembler.TraceAssembler`, its reference.

The join runs in Rust on a :class:`sloscope._native.SpanBatch` (the native decoder's output), whose
spans it takes: Python holds nothing per span. The requests it emits are gathered in Rust, across calls,
until :meth:`NativeTraceAssembler.take` hands them over as one numpy batch (:mod:`sloscope.processors.joined_batch`),
each column's buffers written in Rust and read by numpy where they are (not concatenated from one small batch per
call: that cost a quarter of the evaluation). Given ``gathered``, the
caller is told how many requests each call emitted and takes them when it wants a batch (the pipeline, once
an evaluation batch is due); otherwise ``emit`` gets each call's requests as :class:`JoinedRequest` objects,
one by one.
The rules are the reference's, held to it by differential tests (tests/unit/processors/test_native_join.py);
only ``pending_bytes`` means something else: the bytes Rust holds for pending traces, which
``join.max_pending_bytes`` bounds, rather than the reference's estimate of Python objects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sloscope._native import GatewayMemory, JoinStep, NativeAssembler, SpanBatch
from sloscope.attributes import Mapping
from sloscope.columnar.batch import Batch
from sloscope.config import Join
from sloscope.processors import joined_batch
from sloscope.processors.assembler import Count, Emit
from sloscope.processors.join_spec import JoinSpec
from sloscope.records import Span
from sloscope.upstream.vocabulary import VOCABULARY, SpanVocabulary

Gathered = Callable[[int], None]


class NativeTraceAssembler:
    """Groups spans by trace id and emits joined requests, natively. Single-threaded, as the reference."""

    def __init__(
        self,
        join: Join,
        mapping: Mapping,
        emit: Emit,
        *,
        count_dropped: Count,
        count_outcome: Count,
        clock: Callable[[], float] = time.monotonic,
        reference_bytes: bool = False,
        gathered: Gathered | None = None,
        gateway_memory: GatewayMemory | None = None,
        vocabulary: SpanVocabulary = VOCABULARY,
    ) -> None:
        """``reference_bytes`` counts pending bytes as the reference estimates them (for tests that
        compare the two under ``join.max_pending_bytes``); ``gathered``, when given, is told how many
        requests each call emitted (when any), which wait for :meth:`take` instead of going to ``emit``;
        ``gateway_memory`` is shared with the pipeline's other shards (when a gateway span last came);
        ``vocabulary`` the span words the native join is built from (the reference reads :data:`VOCABULARY`)."""
        _check_columns()
        self._native = NativeAssembler(JoinSpec(join, mapping, vocabulary), reference_bytes, gateway_memory)
        self._emit = emit
        self._gathered = gathered
        self._count = {"dropped": count_dropped, "outcome": count_outcome}
        self._clock = clock
        self._pending = self._pending_bytes = 0

    # The gauges read these from the scrape's thread, while the worker's call may hold the native
    # assembler (borrowed mutably, the GIL released: another borrow would raise), so they are the
    # values after the worker's last call, which the worker itself reads.

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def gathered(self) -> int:
        """Requests emitted and not yet taken (read by the thread that calls consume, as take is)."""
        return int(self._native.gathered)

    def consume(self, spans: SpanBatch | Sequence[Span]) -> None:
        batch = spans if isinstance(spans, SpanBatch) else SpanBatch.from_spans(spans)
        self._deliver(self._native.consume(batch, self._clock()))

    def expire(self, now: float | None = None) -> None:
        self._deliver(self._native.expire(self._clock() if now is None else now))

    def flush(self) -> int:
        step = self._native.flush()
        self._deliver(step)
        return step.flushed

    def take(self) -> Batch | None:
        """The requests emitted since the last take, in order, as one batch (None for none). Only the thread that
        calls consume, expire and flush may call it."""
        taken = self._native.take()
        return None if taken is None else joined_batch.from_columns(taken)

    def _deliver(self, step: JoinStep) -> None:
        self._pending, self._pending_bytes = int(self._native.pending), int(self._native.pending_bytes)
        for kind, reason, n in step.counts:
            self._count[kind](reason, n)
        emitted = step.emitted
        if not emitted:
            return
        if self._gathered is not None:
            self._gathered(emitted)
            return
        batch = self.take()
        assert batch is not None
        for request in joined_batch.to_requests(batch):
            self._emit(request)


def _check_columns() -> None:
    """ValueError when the native join's columns are not those of :mod:`joined_batch` (names, order and kinds):
    :func:`joined_batch.from_columns` reads its buffers by them (checked once)."""
    native = [tuple(column) for column in NativeAssembler.columns()]
    expected = [(name, joined_batch.KIND_NAMES[kind]) for name, (kind, _) in joined_batch.KINDS.items()]
    if native != expected:
        raise ValueError(f"the native join's columns {native} are not {expected}")
