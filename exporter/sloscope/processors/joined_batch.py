"""Joined requests as one Arrow record batch: the columnar form evaluation and publishing work on.

The schema is derived from :class:`~sloscope.records.JoinedRequest` itself, one column per field in field
order, so the two cannot drift apart:

* ``str`` fields (``trace_id``, ``span_id``, ``outcome``, ``routing``) are non-null ``string``;
* ``str | None`` fields are nullable ``string`` (``None`` is null; an empty string stays an empty string);
* ``float | None`` fields are nullable ``float64``: ``None`` is null, and NaN or infinity stay values, so
  the evaluator still reports them as invalid rather than missing;
* ``int`` fields (``start_ns``, ``end_ns``, ``arrival_ns``, ``choices``) are non-null ``int64``.

This is the contract a producer of joined requests other than the Python assembler (the native join) writes
directly: a ``pyarrow.RecordBatch`` with exactly :data:`SCHEMA` (:func:`check` says what is wrong with one
that has not; the native join exports its batches through the Arrow C data interface,
``processors/native_assembler.py``). :func:`from_requests` builds it from objects and :func:`to_requests`
gives the objects back, for tests and for the rows a publisher needs as objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from sloscope.columnar import arrow_arrays
from sloscope.processors.labels import RowLabels
from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.evaluate_batch import Verdicts

__all__ = ["SCHEMA", "EvaluatedBatch", "check", "from_requests", "to_requests"]

_TYPES: dict[str, tuple[pa.DataType, bool]] = {  # annotation -> (Arrow type, nullable)
    "str": (pa.string(), False),
    "str | None": (pa.string(), True),
    "float | None": (pa.float64(), True),
    "int": (pa.int64(), False),
}


def _schema() -> pa.Schema:
    fields = []
    for field in dataclasses.fields(JoinedRequest):
        annotation = field.type if isinstance(field.type, str) else field.type.__name__
        if annotation not in _TYPES:  # a new kind of field must be given its column type here
            raise TypeError(f"JoinedRequest.{field.name}: no Arrow type for {annotation!r}")
        arrow_type, nullable = _TYPES[annotation]
        fields.append(pa.field(field.name, arrow_type, nullable=nullable))
    return pa.schema(fields, metadata={"sloscope": "joined_request/v1"})


SCHEMA = _schema()
NAMES = tuple(SCHEMA.names)
_ROW = attrgetter(*NAMES)


_BUILD: dict[pa.DataType, Callable[[Sequence[Any]], pa.Array]] = {  # a column's builder by its type
    pa.string(): arrow_arrays.string_array,
    pa.float64(): arrow_arrays.optional_floats,
    pa.int64(): arrow_arrays.int_array,
}


def from_requests(requests: Sequence[JoinedRequest]) -> pa.RecordBatch:
    """One record batch of ``requests``, in their order (an empty batch for none)."""
    rows = [_ROW(request) for request in requests]
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in NAMES]
    arrays = [_BUILD[field.type](column) for column, field in zip(columns, SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def to_requests(batch: pa.RecordBatch) -> list[JoinedRequest]:
    """The batch's rows as objects again, equal field for field to those it was built from."""
    check(batch)
    columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    return [JoinedRequest(*row) for row in zip(*columns, strict=True)]


def check(batch: pa.RecordBatch) -> None:
    """Raises ValueError naming the first column that differs from :data:`SCHEMA` (name, type or nulls)."""
    if batch.schema.names != SCHEMA.names:
        raise ValueError(f"joined batch columns {batch.schema.names} are not {SCHEMA.names}")
    for field, column in zip(SCHEMA, batch.columns, strict=True):
        if column.type != field.type:
            raise ValueError(f"joined batch column {field.name} is {column.type}, not {field.type}")
        if not field.nullable and column.null_count:
            raise ValueError(f"joined batch column {field.name} has {column.null_count} null(s); it has none")


class EvaluatedBatch:
    """A batch of joined requests with its verdicts and the label values each row is published under: what the
    evaluator hands every publisher.

    Publishers read :attr:`records`, :attr:`verdicts` and :attr:`labels` as columns; the few that need objects
    for some rows (the requests a tracker queues or records) ask :meth:`pairs_at` for those rows only.
    """

    def __init__(
        self,
        records: pa.RecordBatch,
        verdicts: Verdicts,
        labels: RowLabels,
        requests: Sequence[JoinedRequest] | None = None,
        strings: arrow_arrays.StringColumns | None = None,
    ) -> None:
        self.records = records
        self.verdicts = verdicts
        self.labels = labels
        self.strings = strings if strings is not None else arrow_arrays.StringColumns(records)
        self._requests = list(requests) if requests is not None else None
        self._evaluations: list[Evaluation] | None = None

    def __len__(self) -> int:
        return int(self.records.num_rows)

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
            requests = to_requests(self.records.take(arrow_arrays.int_array(list(rows))))
        if self._evaluations is not None:
            evaluations = [self._evaluations[row] for row in rows]
        else:
            evaluations = self.verdicts.take(np.asarray(rows, dtype=np.intp)).evaluations()
        return list(zip(requests, evaluations, strict=True))
