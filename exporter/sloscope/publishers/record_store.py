"""The record store publisher: evaluated requests in, hourly Parquet files out.

Records come as Arrow tables in the store's schema (:mod:`sloscope.store.schema`) and wait in memory as
they came (bounded by ``store.max_buffered_records`` rows; beyond it new rows are dropped and counted) until
``store.flush_interval_seconds`` has passed or ``store.max_rows_per_file`` wait, then a thread of the
store's own writes them, the waiting tables' rows of each partition hour touched put together into one file
(or several of ``store.max_rows_per_file``), each file atomically (:mod:`sloscope.store.files`). Writing
never happens on the pipeline worker or the event loop, so a slow disk costs memory up to the bound, never
SLO series.

Crash safety: a SIGKILL loses what was still in memory, and at most leaves a temporary file that
the next start deletes; every file in a partition is complete. SIGTERM flushes everything
accepted before the process exits (:meth:`RecordStore.shutdown`).

A write the filesystem refuses (disk full, read-only, permission denied: any :class:`OSError`)
loses nothing: its records go back to the front of the buffer and are written again every
``store.retry_interval_seconds``, and once writes have failed for ``store.failure_grace_seconds``
:meth:`RecordStore.problem` gives the reason, which ``/readyz`` reports. The buffer's bound still
holds while they wait: a record beyond it is dropped, counted, and the first drop of a run is
logged with the reason. What is still held when shutdown ends is logged, counted ``failed`` and
reported in :attr:`RecordStore.unwritten`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge

from sloscope import conventions as c
from sloscope import threads
from sloscope.columnar import arrow_arrays
from sloscope.config import Store
from sloscope.publishers.sinks import FailureWindow, SinkMetrics, refused
from sloscope.store.files import clean_incoming, enforce_retention, probe_writable, write_atomic
from sloscope.store.replica import replica_id
from sloscope.store.schema import SCHEMA, Records

__all__ = ["RecordStore"]

log = logging.getLogger(__name__)


class RecordStore:
    name = c.SINK_STORE

    def __init__(
        self,
        settings: Store,
        metrics: SinkMetrics,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._root = settings.directory
        self._clock = clock
        self.replica = replica_id(settings.replica_id)
        self._buffer: deque[pa.RecordBatch] = deque()
        self._held = 0  # rows in the buffer
        self._writing = 0  # rows taken from the buffer by the write under way; they count against its bound
        self._dropping = False  # the current run of drops at the bound has been logged
        self._fault = FailureWindow(self.name, settings.failure_grace_seconds)
        self._unwritten = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._count = metrics.sink(self.name, self.queued)
        self._files = Gauge(c.STORE_FILES.name, c.STORE_FILES.help, registry=registry)
        self._bytes = Gauge(c.STORE_BYTES.name, c.STORE_BYTES.help, registry=registry)
        deleted = Counter(
            c.STORE_FILES_DELETED.name, c.STORE_FILES_DELETED.help, c.STORE_FILES_DELETED.labels, registry=registry
        )
        self._deleted = {reason: deleted.labels(reason) for reason in (c.DELETED_AGE, c.DELETED_SIZE)}

    def queued(self) -> int:
        return self._held + self._writing

    def start(self) -> None:
        """Creates the store, deletes what a crash left half-written, applies retention, starts writing.

        A store that cannot be created or cleaned does not stop the service: it starts not ready
        (with the reason) and the writer keeps trying.
        """
        if self._thread is not None:
            return
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            leftovers = clean_incoming(self._root, self.replica)
        except OSError as exc:
            self._fault.failed(_reason(exc, self._root))
        else:
            if leftovers:
                log.warning("record store: deleted %d incomplete file(s) left by an earlier crash", leftovers)
            self._retain()
        log.info("record store at %s, replica %s", self._root, self.replica)
        self._thread = threads.start(self._run, "sloscope-record-store")

    def emit(self, records: Records) -> None:
        """The rows held for writing, in order, until the buffer's bound; those beyond it dropped and counted."""
        if refused(records, "record store", self._count):
            return
        rows = records.num_rows
        ready = first_drop = False
        with self._lock:
            held = self._held + self._writing
            accepted = max(min(self._settings.max_buffered_records - held, rows), 0)
            dropped = rows - accepted
            if accepted:
                self._dropping = False
                self._buffer.extend(_batches(records.slice(0, accepted)))
                self._held += accepted
                # While writes fail the retry timer paces the attempts, not every arriving record.
                ready = self._held >= self._settings.max_rows_per_file and not self._fault.failing
            if dropped:
                first_drop, self._dropping = not self._dropping, True
            held += accepted
        if ready:
            self._wake.set()
        if dropped:
            self._count(c.RECORD_DROPPED, dropped)
            if first_drop:
                why = f" while writes fail ({self._fault.reason})" if self._fault.failing else ""
                log.error(
                    "record store: %d record(s) held (store.max_buffered_records)%s; new records are dropped and "
                    "counted until they are written",
                    held,
                    why,
                )

    def _run(self) -> None:
        interval = self._settings.flush_interval_seconds
        retry = min(interval, self._settings.retry_interval_seconds)
        while not self._stopping.is_set():
            self._wake.wait(retry if self._fault.failing else interval)
            self._wake.clear()
            self.flush()
        self.flush()  # everything accepted before shutdown

    def flush(self) -> int:
        """Writes every waiting record; returns how many were written. Called by the store's thread.

        When the filesystem refuses a write, that file's records and every later one go back to the
        front of the buffer, in order, for the next attempt.
        """
        with self._lock:
            batches, self._buffer = list(self._buffer), deque()
            self._writing, self._held = self._held, 0
        held_back: list[pa.RecordBatch] = []
        try:
            if not batches:
                if self._fault.failing:  # nothing to write, yet readiness waits for a write that succeeds
                    self._probe()
                return 0
            chunks = [
                (hour, chunk)
                for hour, rows in _by_hour(pa.Table.from_batches(batches, schema=SCHEMA), self._clock())
                for chunk in _chunks(rows, self._settings.max_rows_per_file)
            ]
            written = 0
            for n, (hour, chunk) in enumerate(chunks):
                try:
                    written += self._write(hour, chunk)
                except OSError as exc:
                    self._fault.failed(_reason(exc, self._root))
                    held_back = [batch for _, rest in chunks[n:] for batch in rest.to_batches()]
                    return written
            self._fault.succeeded()
            self._retain()
            return written
        finally:
            with self._lock:
                self._buffer.extendleft(reversed(held_back))
                self._held += sum(batch.num_rows for batch in held_back)
                self._writing = 0

    def _probe(self) -> None:
        try:
            probe_writable(self._root, self.replica)
        except OSError as exc:
            self._fault.failed(_reason(exc, self._root))
        else:
            self._fault.succeeded()

    def _write(self, hour: datetime, table: pa.Table) -> int:
        """Writes one file; raises :class:`OSError` when the filesystem refuses it (the rows are kept)."""
        count: int = table.num_rows
        if count == 0:
            return 0
        try:
            write_atomic(self._root, hour, table, datetime.fromtimestamp(self._clock(), UTC), self.replica)
        except OSError:
            raise
        except Exception:
            log.exception("record store: writing %d record(s) of %s failed; they are lost", count, hour)
            self._count(c.RECORD_FAILED, count)
            return 0
        self._count(c.RECORD_WRITTEN, count)
        return count

    def _retain(self) -> None:
        settings = self._settings
        try:
            now = datetime.fromtimestamp(self._clock(), UTC)
            result = enforce_retention(self._root, settings.retention_hours * 3600, settings.max_bytes, now)
        except OSError:
            log.exception("record store: retention failed")
            return
        self._deleted[c.DELETED_AGE].inc(result.by_age)
        self._deleted[c.DELETED_SIZE].inc(result.by_size)
        self._files.set(result.files)
        self._bytes.set(result.bytes)

    def problem(self) -> str | None:
        return self._fault.problem()

    @property
    def unwritten(self) -> int:
        return self._unwritten

    def shutdown(self, timeout: float) -> bool:
        """Writes everything accepted, then stops; False when the deadline passed first or records stay unwritten."""
        self._stopping.set()
        self._wake.set()
        if self._thread is None:
            self.flush()
        else:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._unwritten = self.queued()
                log.error("record store: %d record(s) not written within the shutdown deadline", self._unwritten)
                return False
        with self._lock:
            left, self._buffer, self._held = self._held, deque(), 0
        if left:
            self._unwritten = left
            self._count(c.RECORD_FAILED, left)
            log.error("record store: %d accepted record(s) not written at shutdown: %s", left, self._fault.reason)
        return left == 0


def _reason(exc: OSError, root: object) -> str:
    """``cannot write <path>: <what the system said>``, the text /readyz and the log show."""
    return f"cannot write {exc.filename or root}: {exc.strerror or exc}"


def _batches(records: Records) -> list[pa.RecordBatch]:
    """The records as record batches carrying the store's schema (its version in their metadata)."""
    batches = records.to_batches() if isinstance(records, pa.Table) else [records]
    return [b if b.schema.metadata == SCHEMA.metadata else b.replace_schema_metadata(SCHEMA.metadata) for b in batches]


_HOUR_NS = 3_600_000_000_000


def _by_hour(table: pa.Table, now: float) -> list[tuple[datetime, pa.Table]]:
    """The rows of each UTC hour their request ended in (now, for one without an end), hours in order and each
    hour's rows in theirs."""
    end = table.column("end_time").combine_chunks().view(pa.int64())
    hours = np.where(arrow_arrays.present(end), arrow_arrays.ints(end) // _HOUR_NS * 3600, int(now) // 3600 * 3600)
    starts = np.unique(hours).tolist()
    if len(starts) == 1:
        return [(datetime.fromtimestamp(starts[0], UTC), table)]
    return [
        (datetime.fromtimestamp(start, UTC), table.take(arrow_arrays.int_array(np.flatnonzero(hours == start))))
        for start in starts
    ]


def _chunks(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(at, size) for at in range(0, table.num_rows, size)]
