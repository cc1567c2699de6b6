"""Joined requests as one numpy batch (:class:`~sloscope.columnar.batch.Batch`): the columnar form evaluation
and publishing work on.

The columns are derived from :class:`~sloscope.records.JoinedRequest` itself, one per field in field order, so
the two cannot drift apart:

* ``str`` and ``str | None`` fields are label columns (a code per row into the few distinct pods, models,
  outcomes...), except those whose every row differs (:data:`TEXTS`: trace, span and request ids), which are
  text columns decoded only for the rows asked; ``None`` is null, an empty string stays an empty string;
* ``float | None`` fields are float columns: ``None`` is not held, and NaN or infinity stay values, so the
  evaluator still reports them as invalid rather than missing;
* ``int`` fields (``start_ns``, ``end_ns``, ``arrival_ns``, ``choices``...) are int64 columns, never null.

This is the contract a producer of joined requests other than the Python assembler (the native join) writes:
:func:`check` says what is wrong with a batch that does not keep it. :func:`from_requests` builds a batch from
objects and :func:`to_requests` gives the objects back, for tests and for the rows a publisher needs as objects;
:func:`from_columns` reads the native join's buffers, :func:`to_arrow` makes the joined part of the records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from sloscope.columnar.batch import (
    Batch,
    Column,
    FloatColumn,
    IntColumn,
    LabelColumn,
    TextColumn,
    labels_of,
    texts_of,
)
from sloscope.columnar.columns import Mask
from sloscope.processors.labels import RowLabels
from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.evaluate_batch import Verdicts

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KINDS",
    "KIND_NAMES",
    "NAMES",
    "TEXTS",
    "EvaluatedBatch",
    "check",
    "from_columns",
    "from_requests",
    "to_arrow",
    "to_requests",
]

TEXTS = frozenset({"trace_id", "span_id", "request_id"})
"""The string fields whose every row differs: text columns, not label columns."""


def _kinds() -> dict[str, tuple[type[Column], bool]]:
    """Each field's column kind and whether it may be null."""
    kinds: dict[str, tuple[type[Column], bool]] = {}
    for field in dataclasses.fields(JoinedRequest):
        annotation = field.type if isinstance(field.type, str) else field.type.__name__
        if annotation in ("str", "str | None"):
            kind: type[Column] = TextColumn if field.name in TEXTS else LabelColumn
        elif annotation == "float | None":
            kind = FloatColumn
        elif annotation == "int":
            kind = IntColumn
        else:  # a new kind of field must be given its column kind here
            raise TypeError(f"JoinedRequest.{field.name}: no column kind for {annotation!r}")
        kinds[field.name] = (kind, annotation.endswith("| None"))
    return kinds


KINDS = _kinds()
NAMES = tuple(KINDS)
_ROW = attrgetter(*NAMES)


def _ints(values: Sequence[int]) -> IntColumn:
    return IntColumn(np.array(values, dtype=np.int64))


_BUILD: dict[type[Column], Callable[[Sequence[Any]], Column]] = {  # a column's builder by its kind
    LabelColumn: labels_of,
    TextColumn: texts_of,
    FloatColumn: FloatColumn.of,
    IntColumn: _ints,
}


def from_requests(requests: Sequence[JoinedRequest]) -> Batch:
    """One batch of ``requests``, in their order (an empty batch for none)."""
    rows = [_ROW(request) for request in requests]
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in NAMES]
    return Batch(len(rows), {name: _BUILD[KINDS[name][0]](column) for name, column in zip(NAMES, columns, strict=True)})


def to_requests(batch: Batch) -> list[JoinedRequest]:
    """The batch's rows as objects again, equal field for field to those it was built from."""
    check(batch)
    columns = [batch.pylist(name) for name in NAMES]
    return [JoinedRequest(*row) for row in zip(*columns, strict=True)]


def check(batch: Batch) -> None:
    """Raises ValueError naming the first column that differs from the contract (name, kind or nulls)."""
    if tuple(batch.names) != NAMES:
        raise ValueError(f"joined batch columns {batch.names} are not {list(NAMES)}")
    for name, (kind, nullable) in KINDS.items():
        column = batch.column(name)
        if not isinstance(column, kind):
            raise ValueError(f"joined batch column {name} is {type(column).__name__}, not {kind.__name__}")
        if not nullable:
            nulls = int((~batch.held(name)).sum())
            if nulls:
                raise ValueError(f"joined batch column {name} has {nulls} null(s); it has none")


KIND_NAMES: dict[type[Column], str] = {FloatColumn: "float", IntColumn: "int", LabelColumn: "label", TextColumn: "text"}
"""Each kind of column as the native join names it (``NativeAssembler.columns()``)."""


def from_columns(taken: tuple[int, list[Any]]) -> Batch:
    """The native join's requests taken (``NativeAssembler.take()``: how many, and each column's buffers in field
    order), read where they are: no object per request."""
    rows, parts = taken
    columns: dict[str, Column] = {}
    for name, part in zip(NAMES, parts, strict=True):
        kind = KINDS[name][0]
        if kind is FloatColumn:
            values, held = part
            columns[name] = FloatColumn(np.frombuffer(values, dtype=np.float64), _held(held, rows))
        elif kind is IntColumn:
            columns[name] = IntColumn(np.frombuffer(part[0], dtype=np.int64))
        elif kind is LabelColumn:
            codes, distinct = part
            columns[name] = LabelColumn(np.frombuffer(codes, dtype=np.intp), distinct)
        else:
            offsets, data, held = part
            columns[name] = TextColumn(
                np.frombuffer(offsets, dtype=np.int64), np.frombuffer(data, dtype=np.uint8), _held(held, rows)
            )
    return Batch(rows, columns)


def _held(held: bytes | None, rows: int) -> Mask:
    return np.ones(rows, dtype=bool) if held is None else np.frombuffer(held, dtype=bool)


def to_arrow(batch: Batch) -> pa.RecordBatch:
    """The batch as an Arrow record batch with a string, float64 or int64 column per field: the joined part of the
    records the store writes and the export sends (Arrow is imported only where records are kept)."""
    import pyarrow as pa

    from sloscope.columnar import arrow_arrays

    arrays = []
    for name in NAMES:
        column = batch.column(name)
        if isinstance(column, FloatColumn):
            arrays.append(arrow_arrays.float_column(column))
        elif isinstance(column, IntColumn):
            arrays.append(arrow_arrays.int_array(column.values))
        elif isinstance(column, LabelColumn):
            codes, values = batch.coded(name)
            arrays.append(arrow_arrays.coded_strings(codes, values))
        else:
            arrays.append(arrow_arrays.text_array(column.offsets, column.data, column.held))
    return pa.RecordBatch.from_arrays(arrays, names=list(NAMES))


class EvaluatedBatch:
    """A batch of joined requests with its verdicts and the label values each row is published under: what the
    evaluator hands every publisher.

    Publishers read :attr:`records`, :attr:`verdicts` and :attr:`labels` as columns; the few that need objects
    for some rows (the requests a tracker queues or records) ask :meth:`pairs_at` for those rows only.
    """

    def __init__(
        self,
        records: Batch,
        verdicts: Verdicts,
        labels: RowLabels,
        requests: Sequence[JoinedRequest] | None = None,
    ) -> None:
        self.records = records
        self.verdicts = verdicts
        self.labels = labels
        self.strings = records.coded  # a label column's (codes, values), read by the verdicts and every publisher
        self._requests = list(requests) if requests is not None else None
        self._evaluations: list[Evaluation] | None = None

    def __len__(self) -> int:
        return len(self.records)

    def requests(self) -> list[JoinedRequest]:
        """The rows as objects: those the batch was built from, else converted once."""
        if self._requests is None:
            self._requests = to_requests(self.records)
        return self._requests

    def pairs(self) -> list[tuple[JoinedRequest, Evaluation]]:
        if self._evaluations is None:
            self._evaluations = self.verdicts.evaluations()
        return list(zip(self.requests(), self._evaluations, strict=True))

    def pairs_at(self, rows: Sequence[int]) -> list[tuple[JoinedRequest, Evaluation]]:
        """The (request, evaluation) pairs of ``rows`` only, in that order: a publisher that needs objects for a few
        requests of a batch (those it queues or records) converts those, not the whole batch."""
        if self._requests is not None:
            requests = [self._requests[row] for row in rows]
        else:
            requests = to_requests(self.records.take(np.asarray(rows, dtype=np.intp)))
        if self._evaluations is not None:
            evaluations = [self._evaluations[row] for row in rows]
        else:
            evaluations = self.verdicts.take(np.asarray(rows, dtype=np.intp)).evaluations()
        return list(zip(requests, evaluations, strict=True))
