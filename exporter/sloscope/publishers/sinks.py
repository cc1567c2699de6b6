"""Record sinks: publishers of whole request records (the record store, the OTLP export).

Records travel as Arrow: a table or record batch in the record store's schema (:mod:`sloscope.store.schema`),
a row per request, as the prediction tracker builds them (a batch's settled rows at once, a shadow-predicted
request alone). A sink has the shape of an OpenTelemetry SDK exporter behind its batch processor: ``emit``
never blocks (it appends to a bounded queue, or counts a drop, per row), a thread of the sink's own writes or
sends, and ``shutdown`` flushes what was accepted within a deadline. Records are emitted from the
pipeline worker and from the event loop (after a shadow prediction), so ``emit`` is thread-safe.

A sink also says whether it works (:meth:`RecordSink.problem`, the reason once its writes or
exports have failed for longer than its grace; ``/readyz`` shows it) and, after shutdown, how many
accepted records it could not write (:attr:`RecordSink.unwritten`; ``serve`` then exits non-zero).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from sloscope import conventions as c

if TYPE_CHECKING:
    from sloscope.store.schema import Records  # Arrow: imported with a sink that is on

__all__ = ["FailureWindow", "RecordSink", "RecordSinks", "SinkMetrics"]

log = logging.getLogger(__name__)


class RecordSink(Protocol):
    name: str

    def start(self) -> None: ...

    def emit(self, records: Records) -> None:
        """Takes the rows in order, as many as its bound allows (the rest counted dropped); never blocks."""
        ...

    def shutdown(self, timeout: float) -> bool:
        """Flush everything accepted and stop; False when the deadline ran out first."""
        ...

    def problem(self) -> str | None:
        """Why the sink is not working, once it has failed for longer than its grace; None while it works."""
        ...

    @property
    def unwritten(self) -> int:
        """Records accepted and not written (or sent) when shutdown ended; 0 before."""
        ...


def refused(records: Records, sink: str, count: Callable[[str, int], None]) -> bool:
    """True, with the rows logged and counted ``failed``, when ``records`` are not in the record store's schema."""
    from sloscope.store.schema import check

    try:
        check(records)
    except ValueError as exc:
        log.error("%s: %d record(s) refused (%s)", sink, records.num_rows, exc)
        count(c.RECORD_FAILED, records.num_rows)
        return True
    return False


class FailureWindow:
    """Since when a sink's writes have kept failing, and the latest reason; thread-safe.

    ``failed`` starts the window (and logs once), ``succeeded`` ends it (and logs the recovery);
    :meth:`problem` gives the reason once the window is longer than the grace, so a single failed
    attempt that the next one repairs does not take the replica out of its Service.
    """

    def __init__(self, sink: str, grace_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self._grace = grace_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._reason = ""

    def failed(self, reason: str) -> None:
        with self._lock:
            first = self._since is None
            if first:
                self._since = self._clock()
            self._reason = reason
        if first:
            log.error("record sink %s failing: %s", self._sink, reason)

    def succeeded(self) -> None:
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.warning("record sink %s works again after %.1fs of failures", self._sink, self._clock() - since)

    @property
    def failing(self) -> bool:
        return self._since is not None

    @property
    def reason(self) -> str:
        return self._reason

    def problem(self) -> str | None:
        with self._lock:
            since, reason = self._since, self._reason
        if since is None or self._clock() - since < self._grace:
            return None
        return reason


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

    def emit(self, records: Records) -> None:
        """Hands the records to every sink, in order."""
        if not records.num_rows:
            return
        for sink in self.sinks:
            try:
                sink.emit(records)
            except Exception:
                log.exception("record sink %s failed on %d records", sink.name, records.num_rows)

    def problems(self) -> dict[str, str]:
        """The reason of every sink that has failed for longer than its grace, by sink name."""
        return {sink.name: reason for sink in self.sinks if (reason := sink.problem()) is not None}

    def unwritten(self) -> dict[str, int]:
        """After shutdown: accepted records each sink could not write or send, for the sinks that lost any."""
        return {sink.name: n for sink in self.sinks if (n := sink.unwritten)}

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
