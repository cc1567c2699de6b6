"""Where the record store's files live, how one is written atomically, and how old ones go.

Layout (Hive-style partitions, which pandas, DuckDB and Spark read as columns)::

    <root>/date=2026-11-30/hour=14/part-20261130T145901Z-<replica>-3f9a1c2e.parquet
    <root>/.incoming/<replica>/<random>.parquet.tmp      a file being written (never read)

A file is written under ``.incoming/<replica>/``, flushed and fsynced, then renamed into its
partition and the partition directory fsynced: a reader or a crash sees either the whole file or
none of it. Readers skip ``.incoming`` (pyarrow ignores names starting with ``.``; its ``.tmp``
files do not match ``*.parquet`` either); a restart deletes what a crash left in its own replica's
folder (:mod:`sloscope.store.replica`), and another replica's leftovers only once they are too old
to be in flight. Retention is store-wide (every replica applies the same limits to every complete
file), and an emptied partition directory is removed only while it is empty, so a replica renaming
a file into it at that moment keeps its file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "ABANDONED_SECONDS",
    "INCOMING",
    "StoredFile",
    "clean_incoming",
    "enforce_retention",
    "list_files",
    "probe_writable",
    "write_atomic",
]

INCOMING = ".incoming"
# A temporary file untouched this long belongs to a replica that died while writing it (a write
# takes seconds); another replica deletes it then, so the folders of gone pods do not pile up.
ABANDONED_SECONDS = 3600.0
_PARTITION = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$"), re.compile(r"^hour=(\d{2})$")
COMPRESSION = "zstd"


@dataclass(frozen=True, order=True)
class StoredFile:
    hour: datetime  # start of the file's partition hour, UTC
    path: Path
    size: int


def partition_dir(root: Path, hour: datetime) -> Path:
    return root / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"


def write_atomic(root: Path, hour: datetime, table: pa.Table, now: datetime, replica: str) -> StoredFile:
    """Writes ``table`` as one Parquet file into ``hour``'s partition; whole or not at all.

    Raises :class:`OSError` (with the path in ``filename``) when the store cannot be written.
    """
    incoming = root / INCOMING / replica
    token = uuid.uuid4().hex[:8]
    temporary = incoming / f"{token}.parquet.tmp"
    try:
        incoming.mkdir(parents=True, exist_ok=True)
        with temporary.open("wb") as file:
            pq.write_table(table, file, compression=COMPRESSION)
            file.flush()
            os.fsync(file.fileno())
        target_dir = partition_dir(root, hour)
        target = target_dir / f"part-{now:%Y%m%dT%H%M%SZ}-{replica}-{token}.parquet"
        _rename_into(temporary, target)
        _fsync_dir(target_dir)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        if exc.filename is None:  # Arrow's writer reports the errno without the file
            raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno or errno.EIO), str(temporary)) from exc
        raise
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return StoredFile(hour, target, target.stat().st_size)


def probe_writable(root: Path, replica: str) -> None:
    """Creates, fsyncs and deletes a one-byte file where this replica writes; raises :class:`OSError` if it cannot.

    How a store that failed with nothing left to write learns that it can write again (and is ready).
    """
    incoming = root / INCOMING / replica
    probe = incoming / f"probe-{uuid.uuid4().hex[:8]}.tmp"
    try:
        incoming.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as file:
            file.write(b"\0")
            file.flush()
            os.fsync(file.fileno())
    finally:
        probe.unlink(missing_ok=True)


def _rename_into(temporary: Path, target: Path) -> None:
    """Renames into the partition, creating it again if another replica's retention removed it just now."""
    for attempt in range(3):
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(temporary, target)
            return
        except FileNotFoundError:
            if attempt == 2 or not temporary.exists():
                raise


def _fsync_dir(path: Path) -> None:
    """Makes a rename durable: the directory entry is on disk, not only in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clean_incoming(root: Path, replica: str, now: float | None = None) -> int:
    """Deletes what a crash of this replica left half-written, and other replicas' abandoned files.

    This replica's folder is emptied (nothing of it is in flight before it starts). Another
    replica's temporary file, or one left at the top of ``.incoming/`` by a version without
    per-replica folders, goes only once untouched for :data:`ABANDONED_SECONDS`: that replica may
    be writing it right now. Returns how many files were deleted.
    """
    incoming = root / INCOMING
    if not incoming.is_dir():
        return 0
    stale_before = (time.time() if now is None else now) - ABANDONED_SECONDS
    removed = 0
    for entry in incoming.iterdir():
        if entry.name == replica and entry.is_dir():
            for path in entry.iterdir():
                path.unlink(missing_ok=True)
                removed += 1
        elif entry.is_dir():
            removed += _remove_abandoned(entry.iterdir(), stale_before)
            _rmdir_if_empty(entry)
        else:
            removed += _remove_abandoned([entry], stale_before)
    return removed


def _remove_abandoned(paths: Iterable[Path], stale_before: float) -> int:
    removed = 0
    for path in paths:
        try:
            if path.stat().st_mtime < stale_before:
                path.unlink()
                removed += 1
        except FileNotFoundError:  # renamed into its partition, or deleted, meanwhile
            continue
    return removed


def _rmdir_if_empty(path: Path) -> None:
    """Removes a directory only while it is empty: a file renamed into it meanwhile keeps it (and stays)."""
    with contextlib.suppress(OSError):  # not empty, or gone already
        path.rmdir()


def list_files(root: Path) -> list[StoredFile]:
    """Every complete file, oldest partition first."""
    return sorted(_walk(root))


def _walk(root: Path) -> Iterator[StoredFile]:
    if not root.is_dir():
        return
    for date_dir in root.iterdir():
        date = _PARTITION[0].match(date_dir.name)
        if date is None or not date_dir.is_dir():
            continue
        for hour_dir in date_dir.iterdir():
            hour = _PARTITION[1].match(hour_dir.name)
            if hour is None or not hour_dir.is_dir():
                continue
            start = datetime.strptime(f"{date.group(1)} {hour.group(1)}", "%Y-%m-%d %H").replace(tzinfo=UTC)
            for path in hour_dir.glob("*.parquet"):
                try:
                    yield StoredFile(start, path, path.stat().st_size)
                except FileNotFoundError:  # deleted between the listing and the stat
                    continue


@dataclass(frozen=True)
class Retention:
    """What one retention pass removed, and what is left."""

    by_age: int
    by_size: int
    files: int
    bytes: int


def enforce_retention(root: Path, max_age_seconds: float, max_bytes: int, now: datetime) -> Retention:
    """Deletes whole partitions older than ``max_age_seconds``, then the oldest files beyond ``max_bytes``.

    A partition goes once its whole hour is older than the age limit, so a review of the last N
    days never finds a partly deleted hour.
    """
    files = list_files(root)
    by_age = by_size = 0
    kept: list[StoredFile] = []
    for stored in files:
        if (now - stored.hour).total_seconds() - 3600 > max_age_seconds:
            stored.path.unlink(missing_ok=True)
            by_age += 1
        else:
            kept.append(stored)
    total = sum(stored.size for stored in kept)
    while kept and total > max_bytes:
        oldest = kept.pop(0)
        oldest.path.unlink(missing_ok=True)
        total -= oldest.size
        by_size += 1
    if by_age or by_size:
        _remove_empty_partitions(root)
    return Retention(by_age, by_size, len(kept), total)


def _remove_empty_partitions(root: Path) -> None:
    for date_dir in root.glob("date=*"):
        for hour_dir in date_dir.glob("hour=*"):
            if hour_dir.is_dir():
                _rmdir_if_empty(hour_dir)
        if date_dir.is_dir():
            _rmdir_if_empty(date_dir)
