"""The review's SQL engine: a DuckDB connection whose ``requests`` and ``eligible`` views are one window's rows.

Over the store, ``requests`` reads the window's Parquet files in place (only their complete files: the
``.incoming`` folders of the replicas are never listed, as in :func:`sloscope.store.files.list_files`), so the
memory a review takes is that of its aggregates and of DuckDB's own buffers, capped by ``memory_limit``
(DuckDB spills sorts and hash tables to a temporary directory beyond it). Over a DataFrame (the unit tests'
hand-made requests) the same views read the frame: every table is made by the same SQL either way.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from sloscope.review import ReviewError, UsageError
from sloscope.review.queries import ELIGIBLE
from sloscope.review.window import Window
from sloscope.store.files import list_files
from sloscope.store.read import StoreError, check_version
from sloscope.store.schema import SCHEMA

__all__ = ["COLUMNS", "DEFAULT_MEMORY_LIMIT", "Engine", "Requests", "Rows", "rows"]

DEFAULT_MEMORY_LIMIT = "2GB"
"""DuckDB's cap on its own memory: a month of a large fleet is reviewed in it (beyond, it spills to disk)."""

COLUMNS = (
    "trace_id",
    "request_id",
    "end_time",
    "arrival_time",
    "model",
    "pool",
    "pod",
    "slo_class",
    "routing",
    "ttft_target_seconds",
    "tpot_target_seconds",
    "ttft_seconds",
    "tpot_seconds",
    "queue_seconds",
    "prefill_seconds",
    "decode_seconds",
    "completion_tokens",
    "ttft_met",
    "tpot_met",
    "goodput_met",
    "prediction_source",
    "predicted_ttft_seconds",
    "predicted_tpot_seconds",
    "prediction_quantile",
    "prediction_objective",
    "ttft_headroom_seconds",
    "tpot_headroom_seconds",
    "failure_reason",
    "join_outcome",
    "invalid_fields",
    "prediction_skipped",
)
"""The columns the review reads (the store has more; see ``sloscope.store.schema``)."""

_LABELS = ("model", "pool", "pod", "slo_class", "routing", "prediction_source")
_DUCKDB_TYPES = {pa.string(): "VARCHAR", pa.float64(): "DOUBLE", pa.int64(): "BIGINT", pa.bool_(): "BOOLEAN"}


def _sql_type(arrow: pa.DataType) -> str:
    if pa.types.is_timestamp(arrow):
        return "TIMESTAMPTZ_NS"
    if pa.types.is_list(arrow):
        return f"{_sql_type(arrow.value_type)}[]"
    return _DUCKDB_TYPES[arrow]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _select(available: set[str]) -> str:
    """The review's columns, labels read as ``unknown`` where null, columns older files lack as typed nulls."""
    parts = []
    for name in COLUMNS:
        if name not in available:
            parts.append(f"CAST(NULL AS {_sql_type(SCHEMA.field(name).type)}) AS {name}")
        elif name in _LABELS:
            parts.append(f"COALESCE(CAST({name} AS VARCHAR), 'unknown') AS {name}")
        else:
            parts.append(name)
    return ", ".join(parts)


@dataclass(frozen=True)
class Engine:
    """DuckDB's limits for one review: ``memory_limit`` (DuckDB's size syntax, 2GB), ``threads`` (None: every
    core), ``temp_directory`` (where it spills beyond the limit; None: a temporary directory of its own)."""

    memory_limit: str = DEFAULT_MEMORY_LIMIT
    threads: int | None = None
    temp_directory: Path | None = None

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with these limits; raises :class:`UsageError` for a memory limit it cannot read."""
        connection = duckdb.connect(":memory:")
        try:
            connection.execute(f"SET memory_limit = {_literal(self.memory_limit)}")
        except duckdb.Error:
            connection.close()
            raise UsageError(f"--memory-limit: not a size: {self.memory_limit!r} (like 2GB or 512MB)") from None
        connection.execute("SET parquet_metadata_cache = true")  # each query reads the same files' footers
        connection.execute("SET enable_progress_bar = false")  # stderr is for the one line of an error
        if self.threads is not None:
            connection.execute(f"SET threads = {int(self.threads)}")
        spill = self.temp_directory or _own_temporary_directory()
        connection.execute(f"SET temp_directory = {_literal(str(spill))}")
        return connection


def _own_temporary_directory() -> Path:
    """A directory for this review's spilled blocks alone (two reviews at once must not share DuckDB's temporary
    file names), removed when the process ends."""
    spill = Path(tempfile.mkdtemp(prefix="sloscope-review-"))
    atexit.register(shutil.rmtree, spill, True)
    return spill


class Rows:
    """One window's requests as SQL views on a DuckDB connection; :meth:`table` runs a query over them."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, source: str, available: set[str]) -> None:
        self.connection = connection
        self._done: dict[str, pd.DataFrame] = {}  # by query and parameters: the rows do not change meanwhile
        connection.execute(f"CREATE OR REPLACE TEMP VIEW requests AS SELECT {_select(available)} FROM {source}")
        connection.execute(f"CREATE OR REPLACE TEMP VIEW eligible AS {ELIGIBLE}")

    @classmethod
    def of_frame(cls, frame: pd.DataFrame, engine: Engine | None = None) -> Rows:
        """The requests of a DataFrame in the store's columns (through Arrow: its timestamps keep nanoseconds)."""
        connection = (engine or Engine()).connect()
        fields = [SCHEMA.field(name) for name in frame.columns if name in SCHEMA.names]
        table = pa.Table.from_pandas(frame[[f.name for f in fields]], schema=pa.schema(fields), preserve_index=False)
        connection.register("frame", table)
        return cls(connection, "frame", set(table.column_names))

    @classmethod
    def of_store(cls, root: Path, window: Window, engine: Engine | None = None) -> Rows | None:
        """The requests of the store that ended in ``window``, or None when no file can hold one.

        Raises :class:`ReviewError` when the store is missing or a file unreadable or written by a newer schema.
        """
        if not root.is_dir():
            raise ReviewError(f"record store {root} does not exist")
        files = [f.path for f in list_files(root) if window.start - pd.Timedelta(hours=1) < f.hour < window.end]
        if not files:
            return None
        try:
            for path in files:
                check_version(path)
        except StoreError as exc:
            raise ReviewError(str(exc)) from None
        except OSError as exc:
            raise ReviewError(f"record store {root}: {exc}") from None
        connection = (engine or Engine()).connect()
        connection.execute("SET preserve_insertion_order = false")  # every query orders what it returns
        listed = "[" + ", ".join(_literal(str(path)) for path in files) + "]"
        scan = f"read_parquet({listed}, union_by_name = true, hive_partitioning = false)"
        try:
            available = {row[0] for row in connection.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
        except duckdb.Error as exc:
            raise ReviewError(f"record store {root}: {exc}") from None
        bounds = f"end_time >= {_timestamp(window.start)} AND end_time < {_timestamp(window.end)}"
        return cls(connection, f"(SELECT * FROM {scan} WHERE {bounds})", available)

    def table(self, sql: str, times: Sequence[str] = (), serial: bool = False, **parameters: Any) -> pd.DataFrame:
        """The query's result as a (small) DataFrame; ``times``: its columns of epoch nanoseconds, made UTC times.

        ``serial`` runs it on one thread: a sum of floating-point numbers depends on the order it adds them in, and
        threads add in the order they happen to finish; on one thread the same store gives the same bytes.
        """
        key = repr((sql, sorted(parameters.items()), tuple(times)))
        if key in self._done:
            return self._done[key].copy()
        [(threads,)] = self.connection.execute("SELECT current_setting('threads')").fetchall()
        try:
            if serial:
                self.connection.execute("SET threads = 1")
            frame = self.connection.execute(sql, parameters or None).df()
        except duckdb.Error as exc:
            raise ReviewError(f"the review's query failed: {exc}") from None
        finally:
            if serial:
                self.connection.execute(f"SET threads = {int(threads)}")
        for column in times:
            frame[column] = pd.to_datetime(frame[column].astype("int64"), unit="ns", utc=True)
        self._done[key] = frame
        return frame.copy()

    def scalars(self, sql: str, **parameters: Any) -> tuple[Any, ...]:
        """The one row of a query."""
        [row] = self.table(sql, **parameters).itertuples(index=False, name=None)
        return tuple(None if pd.isna(value) else value.item() if hasattr(value, "item") else value for value in row)


Requests = Rows | pd.DataFrame
"""The requests of a window: the store's, as SQL views (:class:`Rows`), or a DataFrame in the store's columns."""


def rows(requests: Requests) -> Rows:
    """The requests as SQL views: the store's (already) or a DataFrame's (the unit tests' hand-made rows)."""
    return requests if isinstance(requests, Rows) else Rows.of_frame(requests)


def _timestamp(moment: Any) -> str:
    return f"CAST({_literal(pd.Timestamp(moment).isoformat())} AS TIMESTAMPTZ_NS)"
