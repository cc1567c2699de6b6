"""Reads the record store back: the rows whose request ended in ``[start, end)``.

Partitions outside the range are never opened. Files written by a newer schema version are
refused with a clear error rather than misread; older files are read by column name, so a column
added later is simply null in them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sloscope.store.files import list_files
from sloscope.store.schema import METADATA_KEY, SCHEMA, SCHEMA_VERSION

__all__ = ["StoreError", "check_version", "read_records"]


class StoreError(Exception):
    """The store cannot be read as asked (missing, empty range, written by a newer sloscope)."""


def read_records(root: Path, start: datetime, end: datetime, columns: Sequence[str] | None = None) -> pa.Table:
    """Every row with ``start <= end_time < end`` (aware datetimes), in the current schema.

    ``columns`` reads only those (a week of a busy fleet is tens of millions of rows: a reader that
    needs a third of the columns should not hold the rest in memory).
    """
    if not root.is_dir():
        raise StoreError(f"record store {root} does not exist")
    files = [f for f in list_files(root) if start - timedelta(hours=1) < f.hour < end]
    for stored in files:
        check_version(stored.path)
    if not files:
        empty = SCHEMA.empty_table()
        return empty.select(list(columns)) if columns is not None else empty
    dataset = ds.dataset([str(f.path) for f in files], schema=SCHEMA, format="parquet")
    condition = (pc.field("end_time") >= pa.scalar(start, SCHEMA.field("end_time").type)) & (
        pc.field("end_time") < pa.scalar(end, SCHEMA.field("end_time").type)
    )
    return dataset.to_table(columns=list(columns) if columns is not None else None, filter=condition)


def check_version(path: Path) -> None:
    """Raises :class:`StoreError` when ``path`` was written by a newer schema than this sloscope reads."""
    metadata = pq.read_schema(path).metadata or {}
    version = int(metadata.get(METADATA_KEY, b"0"))
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written with record schema version {version}; this sloscope reads up to "
            f"{SCHEMA_VERSION}: upgrade sloscope to review it"
        )
