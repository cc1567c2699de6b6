"""Group-by over a batch's label columns, with numpy: the few distinct label sets of many rows.

A label column is held as codes (an index per row) into its distinct values, listed in order of first
appearance: the order in which one-request-at-a-time processing would have met them, which is what label
caps and series budgets admit by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.intp]
"""The array types of a batch's columns: values, row masks, codes or row numbers (defined here once)."""

_TABLE_SLOTS = 1 << 16  # label combinations numbered by a table of slots up to this (or 4 per row), else sorted


@dataclass(frozen=True, slots=True)
class Column:
    """A label per row: ``values[codes[row]]``, ``values`` distinct and in order of first appearance."""

    codes: Codes
    values: list[str]

    def counts(self) -> list[int]:
        """How many rows carry each value."""
        counts: list[int] = np.bincount(self.codes, minlength=len(self.values)).tolist()
        return counts

    def mapped(self, new_values: Sequence[str]) -> Column:
        """Each value replaced by ``new_values[i]`` (which may repeat: folded values become one)."""
        if list(new_values) == self.values:
            return self
        return distinct(self.codes, new_values)

    def at(self, rows: npt.NDArray[np.intp]) -> list[str]:
        values = self.values
        return [values[i] for i in self.codes[rows].tolist()]


def distinct(codes: Codes, values: Sequence[str]) -> Column:
    """Codes into ``values`` (which may repeat) as a :class:`Column`: one code per distinct value."""
    first: dict[str, int] = {}
    remap = [first.setdefault(value, i) for i, value in enumerate(values)]
    return appearance(np.asarray(remap, dtype=np.intp)[codes], values)


def from_list(values: Sequence[str]) -> Column:
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.intp, count=len(values))
    return Column(codes, list(index))


def first_named(columns: Sequence[tuple[Codes, list[str]]], default: str) -> tuple[Column, list[Mask]]:
    """Per row, the first of ``columns`` (string columns as :func:`~sloscope.columnar.arrow_arrays.strings`
    codes) that holds a non-empty string there, else ``default`` (``a or b or default``); and for each column,
    the rows where it held one."""
    n = len(columns[0][0])
    code = np.full(n, -1, dtype=np.intp)
    values: list[str] = []
    named: list[Mask] = []
    for codes, these in columns:
        holds = (codes >= 0) & np.array([v != "" for v in these] + [False], dtype=bool)[codes]
        taken = holds & (code < 0)
        code[taken] = codes[taken] + len(values)
        values += these
        named.append(holds)
    code[code < 0] = len(values)
    return distinct(code, [*values, default]), named


def appearance(codes: Codes, values: Sequence[str]) -> Column:
    """Codes into ``values`` re-coded so the distinct values used are listed in order of first appearance."""
    if len(codes) == 0:
        return Column(codes, [])
    ids, first, _ = numbered(codes, len(values))
    return Column(ids, [values[i] for i in codes[first].tolist()])


def numbered(keys: Codes, size: int) -> tuple[Codes, Codes, Codes]:
    """``keys`` (each in ``[0, size)``) numbered in order of first appearance: per row its number, per number its
    first row and its count of rows. A table of ``size`` slots instead of a sort: the label codes of a batch
    are small, and sorting thousands of rows per family was most of a batch's cost."""
    n = len(keys)
    first = np.full(size, n, dtype=np.intp)
    np.minimum.at(first, keys, np.arange(n))
    used = np.flatnonzero(first < n)
    order = used[np.argsort(first[used])]  # first rows are distinct: any sort is stable here
    rank = np.empty(size, dtype=np.intp)
    rank[order] = np.arange(len(order))
    ids = rank[keys]
    return ids, first[order], np.bincount(ids, minlength=len(order))


def stable_order(keys: Codes, size: int) -> npt.NDArray[np.intp]:
    """``argsort(keys, kind="stable")`` for keys in ``[0, size)``: numpy sorts 16-bit integers stably by radix,
    in one pass, and larger ones by merging."""
    if size <= np.iinfo(np.int16).max:
        keys = keys.astype(np.int16)
    order: npt.NDArray[np.intp] = np.argsort(keys, kind="stable")
    return order


@dataclass(frozen=True, slots=True)
class Groups:
    """The distinct combinations of some columns over the selected rows: ``ids[row]`` (-1: not selected)."""

    ids: Codes
    first: Codes  # per group, its first row
    counts: list[int]

    def __len__(self) -> int:
        return len(self.first)

    def rows(self) -> npt.NDArray[np.intp]:
        """Rows of the selection, ordered by group then by row (stable: each group's rows stay in order)."""
        selected = np.flatnonzero(self.ids >= 0)
        return selected[stable_order(self.ids[selected], len(self))]


def group(columns: Sequence[Codes], selected: Mask | None = None) -> Groups:
    """Group the ``selected`` rows (all: None) by the combination of their codes, groups in order of first row."""
    n = len(columns[0])
    rows = np.flatnonzero(selected) if selected is not None else np.arange(n)
    ids = np.full(n, -1, dtype=np.intp)
    if len(rows) == 0:
        return Groups(ids, np.zeros(0, dtype=np.intp), [])
    radices = [int(codes.max(initial=0)) + 1 for codes in columns]
    combinations = math.prod(radices)
    if combinations < 2**62:  # the combination as one integer (mixed radix)
        combined = np.zeros(n, dtype=np.intp)
        for codes, radix in zip(columns, radices, strict=True):
            combined = combined * radix + codes
        if combinations <= max(_TABLE_SLOTS, 4 * n) and int(combined.min(initial=0)) >= 0:  # few: by a table
            group_ids, first_rows, group_counts = numbered(combined[rows], combinations)
            ids[rows] = group_ids
            return Groups(ids, rows[first_rows], group_counts.tolist())
        _, first, inverse, counts = np.unique(
            combined[rows], return_index=True, return_inverse=True, return_counts=True
        )
    else:  # too many distinct values to number every combination: compare them as rows
        stacked = np.stack(columns, axis=1)[rows]
        _, first, inverse, counts = np.unique(
            stacked, axis=0, return_index=True, return_inverse=True, return_counts=True
        )
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    ids[rows] = rank[inverse.reshape(-1)]
    return Groups(ids, rows[first[order]], counts[order].tolist())
