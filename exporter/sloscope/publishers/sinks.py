"""Record sinks: publishers of whole request records (the record store, the OTLP export).

A sink has the shape of an OpenTelemetry SDK exporter behind its batch processor: ``emit`` never
blocks (it appends to a bounded queue, or counts a drop), a thread of the sink's own writes or
sends, and ``shutdown`` flushes what was accepted within a deadline. Records are emitted from the
pipeline worker and from the event loop (after a shadow prediction), so ``emit`` is thread-safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from sloscope import conventions as c
from sloscope.records import RequestRecord

__all__ = ["RecordSink", "RecordSinks", "SinkMetrics"]

log = logging.getLogger(__name__)


class RecordSink(Protocol):
    name: str

    def start(self) -> None: ...

    def emit(self, record: RequestRecord) -> None: ...

    def shutdown(self, timeout: float) -> bool:
        """Flush everything accepted and stop; False when the deadline ran out first."""
        ...


class SinkMetrics:
    """``sloscope_records_total{sink,result}`` and ``sloscope_records_queued{sink}`` for the configured sinks."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._records = Counter(c.RECORDS.name, c.RECORDS.help, c.RECORDS.labels, registry=registry)
        self._queued = Gauge(c.RECORDS_QUEUED.name, c.RECORDS_QUEUED.help, c.RECORDS_QUEUED.labels, registry=registry)

    def sink(self, sink: str, queued: Callable[[], int]) -> Callable[[str, int], None]:
        """Registers a sink (its series exist at zero) and returns its counting function."""
        children = {result: self._records.labels(sink, result) for result in c.RECORD_RESULTS}
        self._queued.labels(sink).set_function(lambda: float(queued()))

        def count(result: str, n: int = 1) -> None:
            if n:
                children[result].inc(n)

        return count


class RecordSinks:
    """Hands each record to every sink; one failing sink costs only its own records."""

    def __init__(self, sinks: Sequence[RecordSink]) -> None:
        self.sinks = tuple(sinks)

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def start(self) -> None:
        for sink in self.sinks:
            sink.start()

    def emit(self, record: RequestRecord) -> None:
        for sink in self.sinks:
            try:
                sink.emit(record)
            except Exception:
                log.exception("record sink %s failed on trace %s", sink.name, record.request.trace_id)

    def shutdown(self, timeout: float) -> bool:
        """Flushes every sink, sharing one deadline; True when all flushed in time."""
        deadline = time.monotonic() + timeout
        flushed = True
        for sink in self.sinks:
            try:
                flushed = sink.shutdown(max(deadline - time.monotonic(), 0.1)) and flushed
            except Exception:
                log.exception("record sink %s failed to shut down", sink.name)
                flushed = False
        return flushed
