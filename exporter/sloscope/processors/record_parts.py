"""The parts of a request's record the evaluated batch and the prediction tracker hold, and the records built of them.

A record (:mod:`sloscope.store.schema`) is one row made of four parts: the joined request's columns and the
evaluator's (both from the evaluated batch), the prediction part (the pool it is counted in, where its
prediction came from or why it has none, the predictions and headrooms) and the state of its pod at arrival.
The tracker builds the records of the rows a batch settles at once in one go, the rows taken from the batch
together; a request queued for a shadow prediction keeps its row of the batch parts (:class:`BatchRows` of one
row) and gets its record from the same builder when its prediction settles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from sloscope.columnar import arrow_arrays
from sloscope.columnar.columns import Codes, Floats, Mask
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.processors.pod_history import PodHistory, PodKey
from sloscope.store.schema import POD, PREDICTION, RecordParts, build_records

__all__ = ["BatchRows", "Held", "batch_rows", "one_prediction", "pod_part", "prediction_part", "records"]


class BatchRows(NamedTuple):
    """Some rows of an evaluated batch: their joined columns and their evaluator's columns."""

    joined: pa.RecordBatch
    evaluation: pa.RecordBatch

    def row(self, at: int) -> BatchRows:
        """Row ``at`` alone (a slice: it shares the buffers of these rows)."""
        return BatchRows(self.joined.slice(at, 1), self.evaluation.slice(at, 1))


def batch_rows(batch: EvaluatedBatch, rows: Codes) -> BatchRows:
    """The batch parts of ``rows``, in that order; every row's as they are when ``rows`` are all of them."""
    if len(rows) == len(batch) and bool((rows == np.arange(len(batch))).all()):
        return BatchRows(batch.records, batch.verdicts.to_record_batch())
    return BatchRows(batch.records.take(arrow_arrays.int_array(rows)), batch.verdicts.take(rows).to_record_batch())


class Held(NamedTuple):
    """A float per row and the rows that hold one (NaN may be a value: a span may carry one)."""

    values: Floats
    held: Mask

    def array(self) -> pa.Array:
        return arrow_arrays.float_array(self.values, ~self.held)


def prediction_part(
    *,
    pool: pa.Array,
    source: pa.Array,
    skipped: pa.Array,
    objective: pa.Array,
    quantile: Held,
    ttft: Held,
    tpot: Held,
    e2e: Held,
    ttft_headroom: Held,
    tpot_headroom: Held,
    e2e_headroom: Held,
) -> pa.RecordBatch:
    """What the tracker adds to the records of some rows, as the record store's prediction part."""
    columns = {
        "pool": pool,
        "prediction_source": source,
        "prediction_skipped": skipped,
        "predicted_ttft_seconds": ttft.array(),
        "predicted_tpot_seconds": tpot.array(),
        "prediction_quantile": quantile.array(),
        "prediction_objective": objective,
        "ttft_headroom_seconds": ttft_headroom.array(),
        "tpot_headroom_seconds": tpot_headroom.array(),
        "predicted_e2e_seconds": e2e.array(),
        "e2e_headroom_seconds": e2e_headroom.array(),
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in PREDICTION.names], schema=PREDICTION)


def one_prediction(
    pool: str,
    source: str,
    *,
    skipped: str | None = None,
    objective: str | None = None,
    quantile: float | None = None,
    ttft: float | None = None,
    tpot: float | None = None,
    e2e: float | None = None,
    ttft_headroom: float | None = None,
    tpot_headroom: float | None = None,
    e2e_headroom: float | None = None,
) -> pa.RecordBatch:
    """:func:`prediction_part` of one request, from its values (None: none)."""
    return prediction_part(
        pool=arrow_arrays.string_array([pool]),
        source=arrow_arrays.string_array([source]),
        skipped=arrow_arrays.string_array([skipped]),
        objective=arrow_arrays.string_array([objective]),
        quantile=_one(quantile),
        ttft=_one(ttft),
        tpot=_one(tpot),
        e2e=_one(e2e),
        ttft_headroom=_one(ttft_headroom),
        tpot_headroom=_one(tpot_headroom),
        e2e_headroom=_one(e2e_headroom),
    )


def _one(value: float | None) -> Held:
    return Held(np.array([np.nan if value is None else value]), np.array([value is not None]))


def pod_part(history: PodHistory, keys: Sequence[PodKey], key: Codes, arrival: Floats) -> pa.RecordBatch:
    """Each row's pod state as of its arrival (:meth:`PodHistory.as_of`), null where the row has no pod or its pod
    no sample then: ``key`` codes into ``keys`` (-1: no pod), each distinct pod's samples read once."""
    n = len(key)
    values = np.full((3, n), np.nan)
    known = np.zeros((3, n), dtype=bool)
    age = np.full(n, np.nan)
    for code in np.unique(key[key >= 0]).tolist():
        rows = np.flatnonzero(key == code)
        found, samples = history.as_of_all(keys[code], arrival[rows])
        if not samples:
            continue
        signals = [(s.state.waiting, s.state.running, s.state.kv_cache_utilization) for s in samples]
        of_sample = np.array([[np.nan if v is None else v for v in signal] for signal in signals]).T
        known_of_sample = np.array([[v is not None for v in signal] for signal in signals]).T
        at = np.array([s.at for s in samples])
        hit = found >= 0
        rows, found = rows[hit], found[hit]
        values[:, rows] = of_sample[:, found]
        known[:, rows] = known_of_sample[:, found]
        age[rows] = arrival[rows] - at[found]
    arrays = [arrow_arrays.float_array(values[i], ~known[i]) for i in range(3)]
    arrays.append(arrow_arrays.float_array(age, np.isnan(age)))
    return pa.RecordBatch.from_arrays(arrays, schema=POD)


def records(rows: BatchRows, prediction: pa.RecordBatch, pod: pa.RecordBatch) -> pa.RecordBatch:
    """The records of the rows: one builder for a batch's rows settled at once and a shadow request's own."""
    return build_records(RecordParts(rows.joined, rows.evaluation, prediction, pod))
