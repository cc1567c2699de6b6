"""What the data is worth: its real time span and gaps, how well it was joined, and the requests that missed worst.

Functions from the window's requests (SQL views: :mod:`engine`) to tables; docs/review.md, "Data", "Data quality" and
"Top offending requests", says how to read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sloscope.conventions import OUTCOME_JOINED, OUTCOME_JOINED_BY_REQUEST_ID, SIGNALS
from sloscope.review import queries
from sloscope.review.engine import Requests, rows

__all__ = [
    "JOINED",
    "OFFENDER_LIMIT",
    "SAMPLING_NOTE",
    "Span",
    "data_quality",
    "gaps",
    "join_ratio",
    "observed_seconds",
    "offenders",
    "span",
]

JOINED = (OUTCOME_JOINED, OUTCOME_JOINED_BY_REQUEST_ID)
"""Join outcomes where the model-server span found its gateway span: the request's routing and targets are known."""
OFFENDER_LIMIT = 10
SAMPLING_NOTE = (
    "counts are of sampled requests: the EPP samples traces (parentbased_traceidratio, 10% by default) and the "
    "store keeps no sampling ratio, so counts are not scaled up; ratios estimate the whole traffic's"
)


def _seen(requests: Requests, bin_seconds: int) -> pd.DatetimeIndex:
    """The starts of the bins (aligned as the burn table's) that hold at least one request's end."""
    bins = rows(requests).table(queries.BINS_SEEN, times=["bin_start"], bin_ns=bin_seconds * 1_000_000_000)
    return pd.DatetimeIndex(bins["bin_start"]) if not bins.empty else pd.DatetimeIndex([], tz="UTC")


def gaps(requests: Requests, bin_seconds: int, window: tuple[pd.Timestamp, pd.Timestamp] | None = None) -> pd.DataFrame:
    """Stretches without a request: of whole bins (aligned as the burn table's) between the first and the last
    request, and, given the review ``window``, from its start to the first request's bin and from the last
    request's bin to its end (the whole window when there is no request): ``gap_start``, ``gap_end`` and
    ``seconds``. A gap is a time the report cannot speak for: sloscope down, no traffic, or no sampled trace."""
    step = pd.Timedelta(seconds=bin_seconds)
    columns = ["gap_start", "gap_end", "seconds"]
    seen = _seen(requests, bin_seconds)
    stretches: list[tuple[pd.Timestamp, pd.Timestamp]] = []
    if len(seen):
        every = pd.date_range(seen[0], seen[-1], freq=step)
        stretches = [(start, end + step) for start, end in _runs(every.difference(seen), step)]
    if window is not None:
        start, end = window
        if not len(seen):
            stretches = [(start, end)]
        else:
            if seen[0] > start:
                stretches.insert(0, (start, seen[0]))
            if seen[-1] + step < end:
                stretches.append((seen[-1] + step, end))
    rows_ = [{"gap_start": a, "gap_end": b, "seconds": (b - a).total_seconds()} for a, b in stretches]
    return pd.DataFrame(rows_, columns=columns)


def observed_seconds(requests: Requests, bin_seconds: int, window: tuple[pd.Timestamp, pd.Timestamp]) -> float:
    """The part of the review ``window`` the data speaks for: its bins (aligned as the burn table's) that hold a
    request, each clipped to the window. The error budget is judged over it, not over the window asked for."""
    step = pd.Timedelta(seconds=bin_seconds)
    start, end = window
    total = pd.Timedelta(0)
    for moment in _seen(requests, bin_seconds):
        total += max(pd.Timedelta(0), min(moment + step, end) - max(moment, start))
    return float(total.total_seconds())


def _runs(moments: pd.DatetimeIndex, step: pd.Timedelta) -> Iterable[tuple[pd.Timestamp, pd.Timestamp]]:
    """(first, last) of each run of consecutive ``step``-spaced moments."""
    start = previous = None
    for moment in moments:
        if previous is not None and moment - previous == step:
            previous = moment
            continue
        if start is not None and previous is not None:
            yield start, previous
        start = previous = moment
    if start is not None and previous is not None:
        yield start, previous


@dataclass(frozen=True)
class Span:
    """The window's requests: how many, the first and last end time (None without requests), the join ratio."""

    requests: int
    first: pd.Timestamp | None
    last: pd.Timestamp | None
    join_ratio: float

    @property
    def seconds(self) -> float:
        """From the first request's end to the last's (0 without requests)."""
        return 0.0 if self.first is None or self.last is None else float((self.last - self.first).total_seconds())


def span(requests: Requests) -> Span:
    count, first, last, outcomes, joined = rows(requests).scalars(
        queries.SPAN, joined=JOINED[0], by_request_id=JOINED[1]
    )
    ratio = joined / outcomes if outcomes else float("nan")
    moment = [pd.Timestamp(value, unit="ns", tz="UTC") if value is not None else None for value in (first, last)]
    return Span(int(count), moment[0], moment[1], float(ratio))


def join_ratio(requests: Requests) -> float:
    """Share of the requests whose model-server span was joined with its gateway span (NaN for no outcome)."""
    return span(requests).join_ratio


_MEASURES = ("join outcome", "invalid value", "failed request", "prediction skipped")


def data_quality(requests: Requests) -> pd.DataFrame:
    """From the store, per measure and key: ``count`` and ``share`` of the window's requests.

    - ``join outcome``: how the assembler joined each request (``joined``, ``joined_by_request_id``,
      ``anchor_only``, ...);
    - ``invalid value``: requests with that field missing, negative or not finite (a request can count under
      several fields);
    - ``failed request``: requests that failed, by ``failure_reason``;
    - ``prediction skipped``: requests without a shadow prediction, by reason.
    """
    found = rows(requests)
    total = span(found).requests
    table = found.table(queries.DATA_QUALITY)
    table["order"] = table["measure"].map({measure: i for i, measure in enumerate(_MEASURES)})
    table = table.sort_values(["order", "key"]).drop(columns="order").reset_index(drop=True)
    table["key"] = table["key"].astype(object)
    table["count"] = table["count"].astype("int64")
    table["share"] = table["count"] / total if total else np.nan
    table.insert(0, "source", "store")
    return table


def offenders(requests: Requests, limit: int = OFFENDER_LIMIT) -> pd.DataFrame:
    """Per signal, the ``limit`` requests that missed their target by the largest factor (``over_target`` =
    actual / target), with their trace ids: the requests to open in the tracing UI first. Ties go to the earlier
    request. Failed requests without an actual value are in the data quality table instead."""
    columns = ["signal", "trace_id", "request_id", "end_time", "model", "pool", "pod", "slo_class", "routing"]
    columns += ["actual_seconds", "target_seconds", "over_target", "failure_reason"]
    table = rows(requests).table(queries.OFFENDERS, limit=limit)
    table["end_time"] = pd.to_datetime(table["end_time"].astype("int64"), unit="ns", utc=True)
    order = {signal: i for i, signal in enumerate(SIGNALS)}
    table = table.sort_values(
        ["signal", "over_target", "end_time"],
        ascending=[True, False, True],
        key=lambda c: c.map(order) if c.name == "signal" else c,
    )
    return table[columns].reset_index(drop=True)
