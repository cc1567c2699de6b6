"""A batch of evaluated requests as label codes and masks, for :meth:`PrometheusPublisher.publish`.

What every family's group-by reads (the rows' capped labels as codes, whether each failed and reached a pod),
and the trace ids an exemplar reads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sloscope.columnar.cardinality import Labels
from sloscope.columnar.columns import Codes, Column, Floats, Groups, Mask, appearance, distinct, first_named
from sloscope.columnar.series import CounterFamily, HistogramFamily
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.processors.trace_sampling import adjusted_counts

CounterPlan = tuple[CounterFamily, list[Labels], Groups, bool]  # a family, its label sets, rows, whether weighted
HistogramPlan = tuple[HistogramFamily, list[Labels], Groups, Floats, bool]  # ..., the values, whether exemplars
AssumedProbability = Callable[[str], float]  # a pool's sampling probability where a trace recorded none


class BatchRows:
    """A batch's rows as label codes and masks: what every family's group-by reads."""

    def __init__(
        self,
        batch: EvaluatedBatch,
        model: Column,
        pool: Column,
        slo_class: Column,
        pod: Column,
        *,
        assumed: AssumedProbability = lambda pool: 1.0,
    ) -> None:
        records = batch.records
        self.batch, self.verdicts = batch, batch.verdicts
        self.pool, self.pod = pool, pod
        self.routing = appearance(*batch.strings("routing"))
        reason, reasons = batch.strings("failure_reason")
        self.failed: Mask = reason >= 0
        self.reason = distinct(np.where(self.failed, reason, len(reasons)), [*reasons, ""])  # read only where failed
        # a request refused or lost before any pod is no pod's
        _, (has_pod, has_endpoint) = first_named([batch.strings("pod"), batch.strings("endpoint")], "")
        self.on_a_pod: Mask = ~self.failed | has_pod | has_endpoint
        self.base_columns: tuple[Column, ...] = (model, pool, slo_class, self.routing)
        self.histogram_columns: tuple[Column, ...] = (model, pool, slo_class)
        self._records = records
        self.weights = _adjusted_counts(batch, batch.labels.counted_pool, assumed)  # a capped pool's own setting

    @staticmethod
    def codes(columns: tuple[Column | str, ...]) -> list[Codes]:
        return [column.codes for column in columns if isinstance(column, Column)]

    @staticmethod
    def keys(columns: tuple[Column | str, ...], groups: Groups) -> list[Labels]:
        """The label values of each group (a ``str`` in ``columns`` is a constant label, the SLO's)."""
        first = groups.first
        parts = [
            [column] * len(first)
            if isinstance(column, str)
            else [column.values[i] for i in column.codes[first].tolist()]
            for column in columns
        ]
        return list(zip(*parts, strict=True))

    @staticmethod
    def labels_at(columns: tuple[Column | str, ...], row: int) -> tuple[str, ...]:
        return tuple(column if isinstance(column, str) else column.values[column.codes[row]] for column in columns)

    def trace_ids(self, rows: Codes) -> Callable[[Codes], list[str]]:
        """The trace ids of the given positions among ``rows``, read only for the rows an exemplar keeps."""
        records = self._records
        return lambda positions: records.ids("trace_id", rows[positions].tolist())


def _adjusted_counts(batch: EvaluatedBatch, pool: Column, assumed: AssumedProbability) -> Floats | None:
    """Each row's adjusted count, from its trace's recorded probability or its pool's assumed one; None when every
    one is 1 (every trace kept), so the families count rows."""
    per_pool = np.array([*(assumed(name) for name in pool.values), 1.0])  # a row without a pool (-1): as kept
    weights = adjusted_counts(batch.records.floats("sampling_probability"), per_pool[pool.codes])
    return None if bool((weights == 1.0).all()) else weights
