"""The review window from --since, --from and --to."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sloscope.review import UsageError
from sloscope.review.window import Window, parse_window

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    ("since", "start", "end", "expected"),
    [
        ("7d", None, None, ("2026-11-23T12:00:00+00:00", "2026-11-30T12:00:00+00:00")),
        (None, None, None, ("2026-11-23T12:00:00+00:00", "2026-11-30T12:00:00+00:00")),
        ("24h", None, None, ("2026-11-29T12:00:00+00:00", "2026-11-30T12:00:00+00:00")),
        ("90s", None, None, ("2026-11-30T11:58:30+00:00", "2026-11-30T12:00:00+00:00")),
        ("2w", None, None, ("2026-11-16T12:00:00+00:00", "2026-11-30T12:00:00+00:00")),
        ("7d", "2026-11-01", "2026-11-02T06:00:00+02:00", ("2026-11-01T00:00:00+00:00", "2026-11-02T04:00:00+00:00")),
        ("7d", "2026-11-29T10:00:00Z", None, ("2026-11-29T10:00:00+00:00", "2026-11-30T12:00:00+00:00")),
        ("24h", None, "2026-11-10T00:00", ("2026-11-09T00:00:00+00:00", "2026-11-10T00:00:00+00:00")),
    ],
)
def test_window(since: str | None, start: str | None, end: str | None, expected: tuple[str, str]) -> None:
    window = parse_window(since, start, end, NOW)
    assert window == Window(at(expected[0]), at(expected[1]))
    assert window.start.tzinfo is not None


def test_window_prints_in_utc() -> None:
    window = parse_window(None, "2026-11-01T01:00:00+01:00", "2026-11-01T02:00:00+01:00", NOW)
    assert str(window) == "2026-11-01T00:00:00Z to 2026-11-01T01:00:00Z"
    assert window.seconds == 3600.0


@pytest.mark.parametrize(
    ("since", "start", "end", "message"),
    [
        ("7x", None, None, "--since: not a duration: '7x'"),
        ("0d", None, None, "--since: not a duration: '0d'"),
        ("", None, None, None),  # empty falls back to the default 7d
        ("7d", "yesterday", None, "--from: not an ISO 8601 time: 'yesterday'"),
        ("7d", None, "2026-13-01", "--to: not an ISO 8601 time: '2026-13-01'"),
        ("7d", "2026-11-02", "2026-11-01", "the review window is empty: 2026-11-02T00:00:00Z is not before"),
        ("7d", "2026-11-01", "2026-11-01", "the review window is empty"),
    ],
)
def test_bad_windows_are_usage_errors(since: str, start: str | None, end: str | None, message: str | None) -> None:
    if message is None:
        assert parse_window(since, start, end, NOW).seconds == 7 * 86400
        return
    with pytest.raises(UsageError) as caught:
        parse_window(since, start, end, NOW)
    assert str(caught.value).startswith(message)
