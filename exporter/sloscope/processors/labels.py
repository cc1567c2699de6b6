"""Label admission: the step of the evaluator stage that gives every row of a batch the label values it is
published under, before any publisher sees the batch.

A row's model is the one its spans name, else its pool's configured model (vLLM 0.33 names none), else
``unknown``; its pool is the one its spans name, else the pool discovery found its pod in, else the default
pool; its pod is the pod, else the endpoint, else ``unknown``. Each value then passes the label caps
(:class:`~sloscope.columnar.cardinality.LabelGuard`), first come first served in row order, a refused value
folding into ``__other__`` and counted once per row in ``sloscope_label_values_folded_total``.

Admitting once, here, is what lets publishers stay independent of one another: every publisher reads the same
columns off the batch (:attr:`EvaluatedBatch.labels`), so none has to ask another what it published a request
under, and their order stops mattering. Admitting twice would also count every fold twice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from prometheus_client import Counter

from sloscope import conventions as c
from sloscope.columnar.cardinality import LabelGuard
from sloscope.columnar.columns import Column, appearance, distinct, first_named, from_list
from sloscope.processors.placement import Place, Placed, PoolOfPod
from sloscope.slo.evaluate_batch import Strings, Verdicts, models

__all__ = ["LabelAdmission", "RowLabels"]


@dataclass(frozen=True, slots=True)
class RowLabels:
    """The capped label values of every row of a batch, as columns (codes into distinct values)."""

    model: Column
    pool: Column
    slo_class: Column
    pod: Column
    counted_pool: Column  # the pool each row is counted in, before the cap: whose settings apply to it


class LabelAdmission:
    def __init__(
        self,
        max_label_values: dict[str, int],
        folded: Counter,
        default_pool: str,
        *,
        pool_of_pod: PoolOfPod | None = None,
        model_of_pool: dict[str, str] | None = None,
    ) -> None:
        """``folded``: ``sloscope_label_values_folded_total``, every capped label started at 0 here."""
        for label in max_label_values:
            folded.labels(label)
        self.guard = LabelGuard(max_label_values, lambda label: folded.labels(label).inc())
        self.default_pool = default_pool
        self._pool_of_pod = pool_of_pod
        self._model_of_pool = model_of_pool or {}

    def pool(self, named: str | None, placed: Placed) -> str:
        """The span's pool, else the pool discovery found the request's pod in, else the default (not capped)."""
        if named:
            return named
        found = self._pool_of_pod(placed) if self._pool_of_pod is not None else None
        return found or self.default_pool

    def model(self, model: str | None, pool: str) -> str:
        """The spans' model, else the pool's configured one, else unknown (not capped)."""
        return model or self._model_of_pool.get(pool) or c.UNKNOWN

    def admit(self, strings: Strings, verdicts: Verdicts) -> RowLabels:
        """The capped labels of every row, admitted in row order."""
        admit = self.guard.admit_all
        raw_pool = self._pools(strings)
        served, names = models(strings)
        fallback = [self.model(None, pool) for pool in raw_pool.values]
        unnamed = np.array([name == "" for name in names], dtype=bool)[served]
        raw_model = distinct(np.where(unnamed, len(names) + raw_pool.codes, served), [*names, *fallback])
        raw_class = appearance(verdicts.slo_class, verdicts.class_names)
        raw_pod, _ = first_named([strings("pod"), strings("endpoint")], c.UNKNOWN)
        return RowLabels(
            raw_model.mapped(admit(c.MODEL, raw_model.values, raw_model.counts())),
            raw_pool.mapped(admit(c.POOL, raw_pool.values, raw_pool.counts())),
            raw_class.mapped(admit(c.SLO_CLASS, raw_class.values, raw_class.counts())),
            raw_pod.mapped(admit(c.POD, raw_pod.values, raw_pod.counts())),
            raw_pool,
        )

    def _pools(self, strings: Strings) -> Column:
        """:meth:`pool` of every row: discovery is asked only for the rows whose spans name no pool."""
        pools, (named,) = first_named([strings("pool")], self.default_pool)
        if named.all() or self._pool_of_pod is None:
            return pools
        (pod, pods), (endpoint, endpoints) = strings("pod"), strings("endpoint")
        values = pools.at(np.arange(len(named)))
        for row in np.flatnonzero(~named).tolist():
            place = Place(_at(pods, pod[row]), _at(endpoints, endpoint[row]))
            values[row] = self.pool(None, place)
        return from_list(values)


def _at(values: list[str], code: int) -> str | None:
    return values[code] if code >= 0 else None
