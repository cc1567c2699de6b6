"""A batch of evaluated requests as the columns :meth:`PredictionTracker.publish_batch` reads.

What :meth:`PredictionTracker.publish` works out per request, here per row at once: the request's pod in
discovery (asked once per distinct pool, pod and endpoint of the batch, not once per request), the pool it is
counted in, its arrival, its TPOT SLO and the predictions its spans carried.
"""

from __future__ import annotations

import numpy as np

from sloscope import conventions as c
from sloscope.columnar.columns import Codes, Column, Floats, Mask, distinct, group
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.processors.pod_history import PodHistory, PodKey
from sloscope.records import JoinedRequest

__all__ = ["TrackerRows", "e2e_seconds", "leg_ttft", "target_seconds"]


def e2e_seconds(request: JoinedRequest) -> float | None:
    """The request's end-to-end latency as the EPP measures it: from its arrival (the gateway span's start, else the
    model server's) to the model server's end, the last response byte the EPP relays. None without an end."""
    if not request.end_ns:
        return None
    return (request.end_ns - (request.arrival_ns or request.start_ns)) / 1e9


def leg_ttft(request: JoinedRequest, ttft: float | None) -> float | None:
    """The TTFT of the EPP call whose predictions the request carries: a coordinator call's client TTFT less the
    legs before its final one (the EPP predicted and trained on the final leg alone, processors/calls.py)."""
    if ttft is None or request.ttft_source != c.TTFT_COORDINATOR or not request.call_arrival_ns:
        return ttft
    return ttft - ((request.arrival_ns or request.start_ns) - request.call_arrival_ns) / 1e9


def _index(values: list[str], value: str) -> int:
    """The code of ``value`` among a column's distinct values, -2 (no row's) when absent."""
    return values.index(value) if value in values else -2


def target_seconds(ms: Floats) -> Floats:
    """SLO targets in seconds, NaN where a row carries none or an unusable one (``_target_seconds`` per row)."""
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(ms) & (ms > 0)
    return np.where(valid, ms / 1000.0, np.nan)


class TrackerRows:
    """Per row: labels, pod key, pool, arrival, TPOT SLO and span predictions (NaN: none)."""

    def __init__(self, batch: EvaluatedBatch, model: Column, pool_label: Column, history: PodHistory) -> None:
        records = batch.records
        self.batch, self.model, self.pool_label = batch, model, pool_label
        self.keys, self.key, self.pool = _resolve(batch, pool_label, history)
        start, arrival, end = (records.ints(n) for n in ("start_ns", "arrival_ns", "end_ns"))
        arrived = np.where(arrival != 0, arrival, start)
        self.arrival: Floats = arrived / 1e9
        self.end_ns: list[int] = end.tolist()
        # end-to-end latency as the EPP measures it (:func:`e2e_seconds`), NaN where the request has no first token
        served = ~np.isnan(batch.verdicts.ttft_seconds)
        self.e2e: Floats = np.where(served & (end != 0), (end - arrived) / 1e9, np.nan)
        # the TTFT of the EPP call that made the predictions (:func:`leg_ttft`); no Arrow kernel unless a row is a
        # coordinator call (kernels' first use raises the process's memory, which the flood test bounds)
        call = records.ints("call_arrival_ns")
        self.leg_ttft: Floats = batch.verdicts.ttft_seconds
        if call.any():
            codes, sources = batch.strings("ttft_source")
            coordinated = (call != 0) & (codes == _index(sources, c.TTFT_COORDINATOR))
            self.leg_ttft = self.leg_ttft - np.where(coordinated, (arrived - call) / 1e9, 0.0)
        self.slo_ttft, self.slo_tpot = (
            target_seconds(records.floats("slo_ttft_ms")),
            target_seconds(records.floats("slo_tpot_ms")),
        )
        self.predicted_ttft = records.floats("predicted_ttft_ms") / 1000.0
        self.predicted_tpot = records.floats("predicted_tpot_ms") / 1000.0
        # present, apart from their values: NaN stays a value (a span may carry one)
        self.has_ttft: Mask = records.held("predicted_ttft_ms")
        self.has_tpot: Mask = records.held("predicted_tpot_ms")
        self.carries_prediction: Mask = self.has_ttft | self.has_tpot

    def __len__(self) -> int:
        return len(self.key)


def _resolve(batch: EvaluatedBatch, pool_label: Column, history: PodHistory) -> tuple[list[PodKey], Codes, Column]:
    """Each row's pod key (codes into the keys found, -1: none) and the pool it is counted in: the key's, else the
    span's pool, else its pool label; discovery asked once per distinct (pool, pod, endpoint, pool label)."""
    columns = [batch.strings(name) for name in ("pool", "pod", "endpoint")]
    groups = group([codes + 1 for codes, _ in columns] + [pool_label.codes])
    keys: list[PodKey] = []
    key_of_group: list[int] = []
    pool_of_group: list[str] = []
    for row in groups.first.tolist():
        pool, pod, endpoint = (values[codes[row]] if codes[row] >= 0 else None for codes, values in columns)
        key = history.resolve(pool, pod, endpoint)
        if key is not None:
            key_of_group.append(len(keys))
            keys.append(key)
        else:
            key_of_group.append(-1)
        pool_of_group.append(key[0] if key is not None else (pool or pool_label.values[pool_label.codes[row]]))
    key_codes = np.asarray(key_of_group, dtype=np.intp)[groups.ids]
    return keys, key_codes, distinct(groups.ids, pool_of_group)
