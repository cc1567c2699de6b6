"""The parts of a request's record the evaluated batch and the prediction tracker hold, and the records built of them.

A record (:mod:`sloscope.store.schema`) is one row made of four parts: the joined request's columns and the
evaluator's (both from the evaluated batch), the prediction part (the pool it is counted in, where its
prediction came from or why it has none, the predictions and headrooms) and the state of its pod at arrival.
The tracker builds the records of the rows a batch settles at once in one go, the rows taken from the batch
together; a request queued for a shadow prediction keeps its row of the batch parts (:class:`BatchRows` of one
row) and gets its record from the same builder when its prediction settles, together with the others settled
with it (the answers of one shadow call): their rows put together, their predictions (:class:`Settled`) as
columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sloscope.columnar.columns import Codes, Floats
from sloscope.processors import joined_batch
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.processors.pod_history import PodHistory, PodKey

if TYPE_CHECKING:
    import pyarrow as pa

# Arrow (pyarrow, the record store's schema) is imported by the functions that build records, not with this module:
# the tracker holds these types whatever the sinks, and serve without record sinks never imports pyarrow.

__all__ = ["BatchRows", "Settled", "batch_rows", "pod_part", "prediction_part", "records", "settled_records"]


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
        return BatchRows(joined_batch.to_arrow(batch.records), batch.verdicts.to_record_batch())
    return BatchRows(joined_batch.to_arrow(batch.records.take(rows)), batch.verdicts.take(rows).to_record_batch())


def prediction_part(
    *,
    pool: pa.Array,
    source: pa.Array,
    skipped: pa.Array,
    objective: pa.Array,
    quantile: pa.Array,
    ttft: pa.Array,
    tpot: pa.Array,
    e2e: pa.Array,
    ttft_headroom: pa.Array,
    tpot_headroom: pa.Array,
    e2e_headroom: pa.Array,
) -> pa.RecordBatch:
    """What the tracker adds to the records of some rows, as the record store's prediction part."""
    import pyarrow as pa

    from sloscope.store.schema import PREDICTION

    columns = {
        "pool": pool,
        "prediction_source": source,
        "prediction_skipped": skipped,
        "predicted_ttft_seconds": ttft,
        "predicted_tpot_seconds": tpot,
        "prediction_quantile": quantile,
        "prediction_objective": objective,
        "ttft_headroom_seconds": ttft_headroom,
        "tpot_headroom_seconds": tpot_headroom,
        "predicted_e2e_seconds": e2e,
        "e2e_headroom_seconds": e2e_headroom,
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in PREDICTION.names], schema=PREDICTION)


class Settled(NamedTuple):
    """A request's prediction once settled (by a shadow call, or why it has none), as its record holds it."""

    pool: str
    source: str
    skipped: str | None = None
    objective: str | None = None
    quantile: float | None = None  # None for a mean prediction
    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    ttft_headroom: float | None = None
    tpot_headroom: float | None = None
    e2e_headroom: float | None = None


def _settled_part(settled: Sequence[Settled]) -> pa.RecordBatch:
    """:func:`prediction_part` of requests settled one at a time, from their values (None: none)."""
    from sloscope.columnar import arrow_arrays

    (pool, source, skipped, objective, *floats) = zip(*settled, strict=True)
    quantile, ttft, tpot, e2e, ttft_headroom, tpot_headroom, e2e_headroom = map(arrow_arrays.optional_floats, floats)
    return prediction_part(
        pool=arrow_arrays.string_array(pool),
        source=arrow_arrays.string_array(source),
        skipped=arrow_arrays.string_array(skipped),
        objective=arrow_arrays.string_array(objective),
        quantile=quantile,
        ttft=ttft,
        tpot=tpot,
        e2e=e2e,
        ttft_headroom=ttft_headroom,
        tpot_headroom=tpot_headroom,
        e2e_headroom=e2e_headroom,
    )


def settled_records(
    history: PodHistory,
    rows: Sequence[BatchRows],
    keys: Sequence[PodKey | None],
    arrival: Sequence[float],
    settled: Sequence[Settled],
) -> pa.RecordBatch:
    """The records of requests whose predictions settled after their batch (a shadow call's answers, skips),
    built together: their rows of their batches put together, their predictions, their pods' states."""
    pods = list(dict.fromkeys(key for key in keys if key is not None))
    codes = np.array([pods.index(key) if key is not None else -1 for key in keys], dtype=np.intp)
    together = BatchRows(_together([r.joined for r in rows]), _together([r.evaluation for r in rows]))
    return records(together, _settled_part(settled), pod_part(history, pods, codes, np.array(arrival, dtype=float)))


def _together(batches: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    """Record batches of one schema as one (dictionary columns unified)."""
    import pyarrow as pa

    if len(batches) == 1:
        return batches[0]
    (batch,) = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return batch


def pod_part(history: PodHistory, keys: Sequence[PodKey], key: Codes, arrival: Floats) -> pa.RecordBatch:
    """Each row's pod state as of its arrival (:meth:`PodHistory.as_of`), null where the row has no pod or its pod
    no sample then: ``key`` codes into ``keys`` (-1: no pod); the history asked once for every row, and the values
    read once per sample found."""
    import pyarrow as pa

    from sloscope.columnar import arrow_arrays
    from sloscope.store.schema import POD

    found, samples = history.as_of_all(keys, key, arrival)
    used, index = np.unique(found, return_inverse=True)  # -1 (no sample), when a row found none, comes first
    index = index.reshape(-1)
    # per sample found: waiting, running, KV-cache utilization (each may be missing) and its scrape time
    values = np.full((4, len(used)), np.nan)
    known = np.zeros((4, len(used)), dtype=bool)
    for n, at in enumerate(used.tolist()):
        if at >= 0:
            sample = samples[at]
            signals = (sample.state.waiting, sample.state.running, sample.state.kv_cache_utilization, sample.at)
            known[:, n] = [value is not None for value in signals]
            values[:, n] = [np.nan if value is None else value for value in signals]
    arrays = [arrow_arrays.float_array(values[i, index], ~known[i, index]) for i in range(3)]
    arrays.append(arrow_arrays.float_array(arrival - values[3, index], ~known[3, index]))
    return pa.RecordBatch.from_arrays(arrays, schema=POD)


def records(rows: BatchRows, prediction: pa.RecordBatch, pod: pa.RecordBatch) -> pa.RecordBatch:
    """The records of the rows: one builder for a batch's rows settled at once and a shadow request's own."""
    from sloscope.store.schema import RecordParts, build_records

    return build_records(RecordParts(rows.joined, rows.evaluation, prediction, pod))
