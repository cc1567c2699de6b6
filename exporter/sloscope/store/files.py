"""Where the record store's files live, how one is written atomically, and how old ones go.

Layout (Hive-style partitions, which pandas, DuckDB and Spark read as columns)::

    <root>/date=2026-11-30/hour=14/part-20261130T145901Z-3f9a1c2e.parquet
    <root>/.incoming/<random>.parquet.tmp      a file being written (never read)

A file is written under ``.incoming/``, flushed and fsynced, then renamed into its partition and
the partition directory fsynced: a reader or a crash sees either the whole file or none of it.
Readers skip ``.incoming`` (pyarrow ignores names starting with ``.``; its ``.tmp`` files do not
match ``*.parquet`` either); a restart deletes what a crash left there.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["INCOMING", "StoredFile", "clean_incoming", "enforce_retention", "list_files", "write_atomic"]

INCOMING = ".incoming"
_PARTITION = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$"), re.compile(r"^hour=(\d{2})$")
COMPRESSION = "zstd"


@dataclass(frozen=True, order=True)
class StoredFile:
    hour: datetime  # start of the file's partition hour, UTC
    path: Path
    size: int


def partition_dir(root: Path, hour: datetime) -> Path:
    return root / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"


def write_atomic(root: Path, hour: datetime, table: pa.Table, now: datetime) -> StoredFile:
    """Writes ``table`` as one Parquet file into ``hour``'s partition; whole or not at all."""
    incoming = root / INCOMING
    incoming.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    temporary = incoming / f"{token}.parquet.tmp"
    try:
        with temporary.open("wb") as file:
            pq.write_table(table, file, compression=COMPRESSION)
            file.flush()
            os.fsync(file.fileno())
        target_dir = partition_dir(root, hour)
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / f"part-{now:%Y%m%dT%H%M%SZ}-{token}.parquet"
        os.replace(temporary, target)
        _fsync_dir(target_dir)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return StoredFile(hour, target, target.stat().st_size)


def _fsync_dir(path: Path) -> None:
    """Makes a rename durable: the directory entry is on disk, not only in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clean_incoming(root: Path) -> int:
    """Deletes files a crash left half-written; returns how many."""
    incoming = root / INCOMING
    if not incoming.is_dir():
        return 0
    removed = 0
    for path in incoming.iterdir():
        path.unlink(missing_ok=True)
        removed += 1
    return removed


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
            if hour_dir.is_dir() and not any(hour_dir.iterdir()):
                shutil.rmtree(hour_dir, ignore_errors=True)
        if date_dir.is_dir() and not any(date_dir.iterdir()):
            shutil.rmtree(date_dir, ignore_errors=True)
