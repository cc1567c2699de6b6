"""What the data is worth: its real time span and gaps, how well it was joined, and the requests that missed worst.

Pure functions from the requests DataFrame (see ``load``) to tables; docs/review.md, "Data", "Data quality" and
"Top offending requests", says how to read them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from sloscope.conventions import OUTCOME_JOINED, OUTCOME_JOINED_BY_REQUEST_ID, SIGNALS

__all__ = ["JOINED", "OFFENDER_LIMIT", "SAMPLING_NOTE", "data_quality", "gaps", "join_ratio", "offenders"]

JOINED = (OUTCOME_JOINED, OUTCOME_JOINED_BY_REQUEST_ID)
"""Join outcomes where the model-server span found its gateway span: the request's routing and targets are known."""
OFFENDER_LIMIT = 10
SAMPLING_NOTE = (
    "counts are of sampled requests: the EPP samples traces (parentbased_traceidratio, 10% by default) and the "
    "store keeps no sampling ratio, so counts are not scaled up; ratios estimate the whole traffic's"
)


def gaps(requests: pd.DataFrame, bin_seconds: int) -> pd.DataFrame:
    """Stretches of whole bins (aligned as the burn table's) between the first and the last request without a
    request: ``gap_start``, ``gap_end`` (the end of the last empty bin) and ``seconds``. A gap is a time the
    report cannot speak for: sloscope down, no traffic, or no sampled trace."""
    step = pd.Timedelta(seconds=bin_seconds)
    columns = ["gap_start", "gap_end", "seconds"]
    if requests.empty:
        return pd.DataFrame(columns=columns)
    seen = pd.DatetimeIndex(requests["end_time"].dt.floor(step).unique()).sort_values()
    every = pd.date_range(seen[0], seen[-1], freq=step)
    empty = every.difference(seen)
    rows = []
    for start, end in _runs(empty, step):
        rows.append({"gap_start": start, "gap_end": end + step, "seconds": (end + step - start).total_seconds()})
    return pd.DataFrame(rows, columns=columns)


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


def join_ratio(requests: pd.DataFrame) -> float:
    """Share of the requests whose model-server span was joined with its gateway span (NaN for no outcome)."""
    outcome = requests["join_outcome"].dropna()
    return float(outcome.isin(JOINED).mean()) if len(outcome) else float("nan")


def data_quality(requests: pd.DataFrame) -> pd.DataFrame:
    """From the store, per measure and key: ``count`` and ``share`` of the window's requests.

    - ``join outcome``: how the assembler joined each request (``joined``, ``joined_by_request_id``,
      ``anchor_only``, ...);
    - ``invalid value``: requests with that field missing, negative or not finite (a request can count under
      several fields);
    - ``failed request``: requests that failed, by ``failure_reason``;
    - ``prediction skipped``: requests without a shadow prediction, by reason.
    """
    total = len(requests)
    parts: list[pd.DataFrame] = []

    def add(measure: str, values: pd.Series) -> None:
        counts = values.dropna().astype(str).value_counts().sort_index()
        parts.append(pd.DataFrame({"measure": measure, "key": counts.index, "count": counts.to_numpy()}))

    add("join outcome", requests["join_outcome"])
    fields = requests["invalid_fields"].dropna()
    add("invalid value", pd.Series([f for listed in fields for f in set(listed)], dtype=object))
    add("failed request", requests["failure_reason"])
    add("prediction skipped", requests["prediction_skipped"])
    table = pd.concat(parts, ignore_index=True)
    table["count"] = table["count"].astype("int64")
    table["share"] = table["count"] / total if total else np.nan
    table.insert(0, "source", "store")
    return table


def offenders(requests: pd.DataFrame, limit: int = OFFENDER_LIMIT) -> pd.DataFrame:
    """Per signal, the ``limit`` requests that missed their target by the largest factor (``over_target`` =
    actual / target), with their trace ids: the requests to open in the tracing UI first. Ties go to the earlier
    request. Failed requests without an actual value are in the data quality table instead."""
    columns = ["signal", "trace_id", "request_id", "end_time", "model", "pool", "pod", "slo_class", "routing"]
    columns += ["actual_seconds", "target_seconds", "over_target", "failure_reason"]
    parts = []
    for signal in SIGNALS:
        actual, target = requests[f"{signal}_seconds"], requests[f"{signal}_target_seconds"]
        missed = requests[f"{signal}_met"].eq(False).fillna(False).astype(bool) & actual.notna() & (target > 0)
        rows = requests.loc[missed].copy()
        rows["signal"] = signal
        rows["actual_seconds"] = actual[missed].astype(float)
        rows["target_seconds"] = target[missed].astype(float)
        rows["over_target"] = rows["actual_seconds"] / rows["target_seconds"]
        rows = rows.sort_values(["over_target", "end_time"], ascending=[False, True]).head(limit)
        parts.append(rows.reindex(columns=columns))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
