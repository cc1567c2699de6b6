"""``sloscope_upstream_contract{pool,check}``: 1 while an assumption about the upstream holds, 0 when broken.

:class:`SpanContractTap` sits among the evaluator's publishers and counts, per pool label, what the spans of each
request carried (:class:`~sloscope.processors.contracts.SpanWindow`); :class:`UpstreamContractCollector` renders
every check at collect time from a callable that judges them (:mod:`sloscope.processors.contracts`), so the series
says what the upstream showed at that moment. A check with nothing to judge by has no series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
import numpy.typing as npt
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sloscope import conventions as c
from sloscope.processors.contracts import SpanCounts, SpanWindow
from sloscope.processors.joined_batch import EvaluatedBatch

__all__ = ["SpanContractTap", "UpstreamContractCollector"]

_GATEWAY = (c.OUTCOME_JOINED, c.OUTCOME_JOINED_BY_REQUEST_ID, c.OUTCOME_FAILED)  # a gateway span was seen
_ANCHORED = (c.OUTCOME_JOINED, c.OUTCOME_JOINED_BY_REQUEST_ID, c.OUTCOME_ANCHOR_ONLY, c.OUTCOME_EVICTED)


class SpanContractTap:
    """Counts what each request's spans carried into the window, under the pool label the request is published
    with (the batch's admitted labels)."""

    def __init__(self, window: SpanWindow) -> None:
        self._window = window

    def publish(self, batch: EvaluatedBatch) -> None:
        pools = batch.labels.pool
        records = batch.records
        codes, outcomes = batch.strings("outcome")  # the codes the verdicts and publishers share: no Arrow kernel
        anchored = _among(codes, outcomes, _ANCHORED)
        gateway = _among(codes, outcomes, _GATEWAY)
        answered = anchored & ~records.held("failure_reason")
        headers = records.held("slo_ttft_ms") | records.held("slo_tpot_ms")
        columns = {
            "anchored": anchored,
            "with_request_id": anchored & records.held("request_id"),
            "answered": answered,
            "with_tokens": answered & records.held("completion_tokens"),
            "gateway": gateway,
            "with_slo_header": gateway & headers,
        }
        sums = {
            name: np.bincount(pools.codes, weights=mask, minlength=len(pools.values)) for name, mask in columns.items()
        }
        for code, pool in enumerate(pools.values):
            self._window.add(pool, SpanCounts(**{name: int(total[code]) for name, total in sums.items()}))


def _among(codes: npt.NDArray[np.intp], values: list[str], wanted: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    """Rows whose string (codes into ``values``, -1 for null) is one of ``wanted``."""
    hits = np.array([value in wanted for value in values] + [False], dtype=bool)  # the last entry: code -1, null
    return hits[codes]


def _family() -> GaugeMetricFamily:
    d = c.UPSTREAM_CONTRACT
    return GaugeMetricFamily(d.name, d.help, labels=d.labels)


class UpstreamContractCollector(Collector):
    """``judge()``: every (pool, check) judged now, True holds, False broken; checks not judged are left out."""

    def __init__(self, judge: Callable[[], Mapping[tuple[str, str], bool]]) -> None:
        self._judge = judge

    def describe(self) -> Iterator[Metric]:
        yield _family()

    def collect(self) -> Iterator[Metric]:
        family = _family()
        for (pool, check), holds in sorted(self._judge().items()):
            family.add_metric([pool, check], 1.0 if holds else 0.0)
        yield family
