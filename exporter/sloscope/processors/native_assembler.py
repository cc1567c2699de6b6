"""The trace assembler of the native core (``sloscope._native.NativeAssembler``), with the interface
of :class:`sloscope.processors.assembler.TraceAssembler`, its reference.

The join runs in Rust on a :class:`sloscope._native.SpanBatch` (the native decoder's output), whose
spans it takes: Python holds nothing per span. The requests of one call (consume, expire, flush) come
back as one Arrow record batch of :data:`sloscope.processors.joined_batch.SCHEMA`, its buffers written in
Rust and moved to pyarrow through the Arrow C data interface in one call (not wrapped column by column: that
cost as much as the join). Given ``records``, that batch is what the caller gets (the pipeline hands it to the
evaluator whole); otherwise ``emit`` gets its rows as :class:`JoinedRequest` objects, one by one.
The rules are the reference's, held to it by differential tests (tests/unit/test_native_join.py);
only ``pending_bytes`` means something else: the bytes Rust holds for pending traces, which
``join.max_pending_bytes`` bounds, rather than the reference's estimate of Python objects.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa

from sloscope._native import NativeAssembler, SpanBatch
from sloscope.attributes import Mapping
from sloscope.config import Join
from sloscope.processors import joined_batch
from sloscope.processors.assembler import Count, Emit
from sloscope.records import Span

if TYPE_CHECKING:
    from sloscope._native import ExportedBatch

_Counts = list[tuple[str, str, int]]
_Records: TypeAlias = "ExportedBatch | None"
EmitRecords = Callable[[pa.RecordBatch], None]


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
        records: EmitRecords | None = None,
    ) -> None:
        """``reference_bytes`` counts pending bytes as the reference estimates them (for tests that
        compare the two under ``join.max_pending_bytes``); ``records``, when given, takes each call's
        requests as one record batch (none for a call that emitted nothing) instead of ``emit``."""
        _check_columns()
        self._native = NativeAssembler(join, mapping.rules(), re.compile(join.request_id_pattern), reference_bytes)
        self._emit = emit
        self._records = records
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

    def consume(self, spans: SpanBatch | Sequence[Span]) -> None:
        batch = spans if isinstance(spans, SpanBatch) else SpanBatch.from_spans(spans)
        self._deliver(*self._native.consume(batch, self._clock()))

    def expire(self, now: float | None = None) -> None:
        self._deliver(*self._native.expire(self._clock() if now is None else now))

    def flush(self) -> int:
        flushed, requests, counts = self._native.flush()
        self._deliver(requests, counts)
        return int(flushed)

    def _deliver(self, records: _Records, counts: _Counts) -> None:
        self._pending, self._pending_bytes = int(self._native.pending), int(self._native.pending_bytes)
        for kind, reason, n in counts:
            self._count[kind](reason, n)
        if records is None:
            return
        batch = pa.RecordBatch._import_from_c(records.address, joined_batch.SCHEMA)
        if self._records is not None:
            self._records(batch)
            return
        for request in joined_batch.to_requests(batch):
            self._emit(request)


def _check_columns() -> None:
    """ValueError when the native join's columns are not :data:`joined_batch.SCHEMA`'s: the batches it exports
    are imported with that schema, which names and types their columns, so they must agree (checked once)."""
    native = [tuple(column) for column in NativeAssembler.columns()]
    expected = [(field.name, str(field.type)) for field in joined_batch.SCHEMA]
    if native != expected:
        raise ValueError(f"the native join's columns {native} are not {expected}")
