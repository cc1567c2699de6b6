"""The record store's rows in the review window: as SQL views for the report, or as a DataFrame (small windows)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sloscope.review import ReviewError
from sloscope.review.engine import COLUMNS, Engine, Rows
from sloscope.review.window import Window

__all__ = ["COLUMNS", "load_frame", "store_rows", "to_frame"]

_MET = ("ttft_met", "tpot_met", "goodput_met")


def store_rows(root: Path, window: Window, engine: Engine | None = None) -> tuple[Rows, Rows | None]:
    """The window's requests and those of the period of the same length just before it (None when the store has
    none there: retention, or a store younger than that); raises ReviewError when the window has none."""
    requests = Rows.of_store(root, window, engine)
    if requests is None or _count(requests) == 0:
        raise ReviewError(f"record store {root} has no requests that ended between {window}")
    try:
        previous = Rows.of_store(root, Window(window.start - (window.end - window.start), window.start), engine)
    except ReviewError:
        return requests, None
    return requests, previous if previous is not None and _count(previous) else None


def _count(rows: Rows) -> int:
    return int(rows.scalars("SELECT COUNT(*) FROM requests")[0])


def load_frame(root: Path, window: Window) -> pd.DataFrame:
    """Every request that ended in ``window`` as a DataFrame (a notebook's view of a small window; the report
    itself aggregates in SQL); raises ReviewError when the store is unreadable or has none."""
    requests, _ = store_rows(root, window)
    return to_frame(requests.connection.sql("SELECT * FROM requests").to_arrow_table().to_pandas())


def to_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Verdicts as nullable booleans (null: not eligible), counts as nullable integers, labels without nulls."""
    frame = frame.copy()
    for column in _MET:
        frame[column] = frame[column].astype("boolean")
    frame["completion_tokens"] = frame["completion_tokens"].astype("Int64")
    for column in ("model", "pool", "pod", "slo_class", "routing", "prediction_source"):
        frame[column] = frame[column].fillna("unknown").astype(str)
    return frame
