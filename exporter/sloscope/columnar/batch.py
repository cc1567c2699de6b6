"""A batch of rows as numpy columns: the form joined requests take from the join on.

Four kinds of column, each held as the readers read it, so reading costs nothing per row:

* :class:`Floats` -- float64 values and which rows hold one (a null row holds NaN; NaN and infinities
  stay values in held rows, so the evaluator tells a missing value from an invalid one);
* :class:`IntColumn` -- int64 values, never null;
* :class:`LabelColumn` -- a code per row (-1: null) into distinct values, in order of first appearance: the
  few distinct pods, models, pools and outcomes of many rows, grouped and counted without a Python object
  per row, and admitted by label caps in the order one-at-a-time processing would meet them;
* :class:`TextColumn` -- UTF-8 bytes and offsets, for the columns whose every row differs (trace, span and
  request ids): decoded only for the rows asked (the exemplars kept, the records written).

Taking or filtering rows gathers every column with numpy; a label column's codes are put back in order
of first appearance when next read, not on every step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from sloscope.columnar.columns import Codes, Floats, Mask

Int64s = npt.NDArray[np.int64]
_C = TypeVar("_C", "FloatColumn", "IntColumn", "LabelColumn", "TextColumn")

__all__ = ["Batch", "Column", "FloatColumn", "IntColumn", "LabelColumn", "TextColumn", "labels_of", "texts_of"]


@dataclass(frozen=True, slots=True)
class FloatColumn:
    """float64 values, NaN in the rows that hold none (``held`` False)."""

    values: Floats
    held: Mask

    def take(self, rows: Codes) -> FloatColumn:
        return FloatColumn(self.values[rows], self.held[rows])

    def where(self, keep: Mask) -> FloatColumn:
        """The same values, held only in the rows ``keep`` says."""
        return FloatColumn(self.values, self.held & keep)

    @staticmethod
    def of(values: Sequence[float | None]) -> FloatColumn:
        held = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
        return FloatColumn(np.array([np.nan if v is None else v for v in values], dtype=np.float64), held)

    def pylist(self) -> list[float | None]:
        return [float(v) if h else None for v, h in zip(self.values.tolist(), self.held.tolist(), strict=True)]


@dataclass(frozen=True, slots=True)
class IntColumn:
    values: Int64s

    def take(self, rows: Codes) -> IntColumn:
        return IntColumn(self.values[rows])

    def pylist(self) -> list[int]:
        values: list[int] = self.values.tolist()
        return values


@dataclass(frozen=True, slots=True)
class LabelColumn:
    """``values[codes[row]]`` per row, None where the code is -1. ``ordered``: the values are distinct, each
    used, in order of first appearance (as :func:`labels_of` makes them; rows taken may not be, until
    :meth:`in_order`)."""

    codes: Codes
    values: list[str]
    ordered: bool = True

    def take(self, rows: Codes) -> LabelColumn:
        return LabelColumn(self.codes[rows], self.values, ordered=False)

    def in_order(self) -> LabelColumn:
        """The same labels with the values used, distinct, in order of first appearance (values given twice, as a
        column rebuilt from distinct keys may give them, become one)."""
        if self.ordered:
            return self
        codes = self.codes
        used, first = np.unique(codes[codes >= 0], return_index=True)
        index: dict[str, int] = {}
        remap = np.full(len(self.values) + 1, -1, dtype=np.intp)  # the last slot: -1 stays -1
        for old in used[np.argsort(first, kind="stable")].tolist():
            remap[old] = index.setdefault(self.values[old], len(index))
        return LabelColumn(remap[codes], list(index), ordered=True)

    def pylist(self) -> list[str | None]:
        values = self.values
        return [values[code] if code >= 0 else None for code in self.codes.tolist()]


@dataclass(frozen=True, slots=True)
class TextColumn:
    """Strings as UTF-8 ``data`` with row ``i`` at ``data[offsets[i]:offsets[i + 1]]``; None where not held."""

    offsets: Int64s
    data: npt.NDArray[np.uint8]
    held: Mask

    def take(self, rows: Codes) -> TextColumn:
        starts, ends = self.offsets[:-1][rows], self.offsets[1:][rows]
        lengths = ends - starts
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # each output byte's source: its row's start, plus its place within the row
        source = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return TextColumn(offsets, self.data[source], self.held[rows])

    def strings(self, rows: Iterable[int] | None = None) -> list[str | None]:
        """The rows' strings (every row's when ``rows`` is None), decoded now."""
        data, offsets, held = self.data.tobytes(), self.offsets.tolist(), self.held.tolist()
        chosen = range(len(held)) if rows is None else rows
        return [data[offsets[i] : offsets[i + 1]].decode() if held[i] else None for i in chosen]


Column = FloatColumn | IntColumn | LabelColumn | TextColumn


def labels_of(values: Sequence[str | None]) -> LabelColumn:
    """Python strings (None: null) as a label column."""
    index: dict[str, int] = {}
    codes = np.fromiter(
        (-1 if v is None else index.setdefault(v, len(index)) for v in values), dtype=np.intp, count=len(values)
    )
    return LabelColumn(codes, list(index))


def texts_of(values: Sequence[str | None]) -> TextColumn:
    """Python strings (None: null) as a text column."""
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    held = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    return TextColumn(offsets, np.frombuffer(b"".join(encoded), dtype=np.uint8), held)


@dataclass(frozen=True)
class Batch:
    """Rows as named columns of equal length, in a fixed order of names."""

    length: int
    columns: Mapping[str, Column]
    _ordered: dict[str, LabelColumn] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, column in self.columns.items():
            size = len(column.held) if isinstance(column, TextColumn) else len(_values(column))
            if size != self.length:
                raise ValueError(f"column {name} has {size} rows, the batch {self.length}")

    def __len__(self) -> int:
        return self.length

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def column(self, name: str) -> Column:
        return self.columns[name]

    # ---- reading ----------------------------------------------------------------------------

    def floats(self, name: str) -> Floats:
        """A float column's values, NaN where not held (a copy: the caller may write to it)."""
        return self._of(name, FloatColumn).values.copy()

    def held(self, name: str) -> Mask:
        """Rows that hold a value of a float, label or text column."""
        column = self.columns[name]
        if isinstance(column, LabelColumn):
            return column.codes >= 0
        if isinstance(column, IntColumn):
            return np.ones(self.length, dtype=bool)
        return column.held

    def ints(self, name: str) -> Int64s:
        """An int column's values (read only: shared)."""
        return self._of(name, IntColumn).values

    def labels(self, name: str) -> LabelColumn:
        """A label column with its values in order of first appearance (put in order once per batch)."""
        ordered = self._ordered.get(name)
        if ordered is None:
            ordered = self._ordered[name] = self._of(name, LabelColumn).in_order()
        return ordered

    def coded(self, name: str) -> tuple[Codes, list[str]]:
        """A label column as (codes, values): its values in order of first appearance, its codes read only
        (shared by every reader of the batch: the verdicts, the label admission and each publisher)."""
        labels = self.labels(name)
        labels.codes.setflags(write=False)
        return labels.codes, labels.values

    def texts(self, name: str, rows: Iterable[int] | None = None) -> list[str | None]:
        """A text column's strings, of ``rows`` only when given."""
        return self._of(name, TextColumn).strings(rows)

    def ids(self, name: str, rows: Iterable[int]) -> list[str]:
        """A text column with no nulls (trace and span ids), of ``rows`` only."""
        return [text or "" for text in self._of(name, TextColumn).strings(rows)]

    def pylist(self, name: str) -> list[object]:
        """Any column's values as Python objects (None where not held)."""
        column = self.columns[name]
        return list(column.strings() if isinstance(column, TextColumn) else column.pylist())

    def _of(self, name: str, kind: type[_C]) -> _C:
        column = self.columns[name]
        if not isinstance(column, kind):
            raise TypeError(f"column {name} is {type(column).__name__}, not {kind.__name__}")
        return column

    # ---- making new batches -----------------------------------------------------------------

    def take(self, rows: Codes) -> Batch:
        """The rows at ``rows``, in that order."""
        rows = np.asarray(rows, dtype=np.intp)
        return Batch(len(rows), {name: column.take(rows) for name, column in self.columns.items()})

    def filter(self, keep: Mask) -> Batch:
        """The rows where ``keep`` is True, in order."""
        if bool(keep.all()):
            return self
        return self.take(np.flatnonzero(keep))

    def slice(self, start: int, count: int) -> Batch:
        return self.take(np.arange(start, min(start + count, self.length), dtype=np.intp))

    def with_column(self, name: str, column: Column) -> Batch:
        """The same rows with ``name`` replaced (it must be one of the batch's columns)."""
        if name not in self.columns:
            raise KeyError(name)
        return Batch(self.length, {n: column if n == name else c for n, c in self.columns.items()})


def _values(column: Column) -> np.ndarray:
    if isinstance(column, LabelColumn):
        return column.codes
    if isinstance(column, TextColumn):
        return column.held
    return column.values
