"""The review window: ``--since 7d`` back from now, or ``--from``/``--to`` as ISO 8601 times (UTC when naive)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pandas as pd

from sloscope.review import UsageError
from sloscope.slo.spec import parse_duration

__all__ = ["Window", "parse_window"]


@dataclass(frozen=True)
class Window:
    """Requests whose ``end_time`` is in ``[start, end)``; both aware, UTC."""

    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def bounds(self) -> tuple[pd.Timestamp, pd.Timestamp]:
        return pd.Timestamp(self.start), pd.Timestamp(self.end)

    def __str__(self) -> str:
        return f"{_iso(self.start)} to {_iso(self.end)}"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(text: str) -> timedelta:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from None
    if not isinstance(seconds, int) or seconds <= 0:
        raise UsageError(f"--since: not a duration: {text!r} (use a number and one of s, m, h, d, w, like 7d)")
    return timedelta(seconds=seconds)


def _moment(option: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        example = "like 2026-11-23 or 2026-11-23T14:00:00Z"
        raise UsageError(f"{option}: not an ISO 8601 time: {text!r} ({example})") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_window(since: str | None, start: str | None, end: str | None, now: datetime) -> Window:
    """``--from``/``--to`` win over ``--since``; ``--from`` alone ends now, ``--to`` alone starts ``since`` before it.

    ``since`` defaults to 7d.
    """
    length = _duration(since or "7d")
    until = _moment("--to", end) if end is not None else now.astimezone(UTC)
    begin = _moment("--from", start) if start is not None else until - length
    if begin >= until:
        raise UsageError(f"the review window is empty: {_iso(begin)} is not before {_iso(until)}")
    return Window(begin, until)
