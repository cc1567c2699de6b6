"""The record store's rows in the review window, as a pandas DataFrame with the dtypes the analysis expects."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sloscope.review import ReviewError
from sloscope.review.window import Window
from sloscope.store.read import StoreError, read_records

__all__ = ["COLUMNS", "load_frame", "load_previous"]

COLUMNS = (
    "trace_id",
    "request_id",
    "end_time",
    "arrival_time",
    "model",
    "pool",
    "pod",
    "slo_class",
    "routing",
    "ttft_target_seconds",
    "tpot_target_seconds",
    "ttft_seconds",
    "tpot_seconds",
    "queue_seconds",
    "prefill_seconds",
    "decode_seconds",
    "completion_tokens",
    "ttft_met",
    "tpot_met",
    "goodput_met",
    "prediction_source",
    "predicted_ttft_seconds",
    "predicted_tpot_seconds",
    "prediction_quantile",
    "prediction_objective",
    "ttft_headroom_seconds",
    "tpot_headroom_seconds",
    "failure_reason",
    "join_outcome",
    "invalid_fields",
    "prediction_skipped",
)
"""The columns the review reads (the store has more; see ``sloscope.store.schema``)."""

_MET = ("ttft_met", "tpot_met", "goodput_met")


def load_frame(root: Path, window: Window) -> pd.DataFrame:
    """Every request that ended in ``window``; raises ReviewError when the store is unreadable or has none."""
    try:
        table = read_records(root, window.start, window.end, COLUMNS)
    except StoreError as exc:
        raise ReviewError(str(exc)) from None
    except OSError as exc:  # a file that is not Parquet, or unreadable
        raise ReviewError(f"record store {root}: {exc}") from None
    if table.num_rows == 0:
        raise ReviewError(f"record store {root} has no requests that ended between {window}")
    return to_frame(table.to_pandas())


def load_previous(root: Path, window: Window) -> pd.DataFrame | None:
    """The requests of the period of the same length just before ``window``, or None when the store has none
    (retention, or the store is younger than that)."""
    previous = Window(window.start - (window.end - window.start), window.start)
    try:
        table = read_records(root, previous.start, previous.end, COLUMNS)
    except (StoreError, OSError):
        return None
    return to_frame(table.to_pandas()) if table.num_rows else None


def to_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Verdicts as nullable booleans (null: not eligible), counts as nullable integers, labels without nulls."""
    frame = frame.copy()
    for column in _MET:
        frame[column] = frame[column].astype("boolean")
    frame["completion_tokens"] = frame["completion_tokens"].astype("Int64")
    for column in ("model", "pool", "pod", "slo_class", "routing", "prediction_source"):
        frame[column] = frame[column].fillna("unknown").astype(str)
    return frame
