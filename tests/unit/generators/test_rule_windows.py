"""Multi-window multi-burn-rate windows: the workbook's factors, exactly, for any compliance period."""

from __future__ import annotations

from fractions import Fraction

import pytest

from sloscope.generators.windows import PAGE, TICKET, burn_windows, duration_seconds, format_duration

DAY = 86400


def test_a_30_day_period_gives_the_workbook_factors_exactly() -> None:
    windows = burn_windows(30 * DAY)
    assert [w.factor for w in windows] == [14.4, 6.0, 3.0, 1.0]
    assert [w.exact_factor for w in windows] == [Fraction(72, 5), 6, 3, 1]


def test_a_28_day_period_scales_the_factors_by_28_over_30() -> None:
    windows = burn_windows(28 * DAY)
    assert [w.factor for w in windows] == [13.44, 5.6, 2.8, 14 / 15]
    assert windows[3].factor == pytest.approx(0.93333333333)


def test_the_pairs_are_sloths_page_and_ticket_windows() -> None:
    pairs = [(w.severity, w.long, w.short, w.budget_share) for w in burn_windows(30 * DAY)]
    assert pairs == [
        (PAGE, "1h", "5m", Fraction(2, 100)),
        (PAGE, "6h", "30m", Fraction(5, 100)),
        (TICKET, "1d", "2h", Fraction(10, 100)),
        (TICKET, "3d", "6h", Fraction(10, 100)),
    ]
    assert all(w.long_seconds == 12 * w.short_seconds for w in burn_windows(30 * DAY))


@pytest.mark.parametrize(
    ("objective", "expected"),
    [
        pytest.param(0.99, [0.144, 0.06, 0.03, 0.01], id="99% leaves a 1% budget"),
        pytest.param(0.999, [0.0144, 0.006, 0.003, 0.001], id="99.9% leaves 0.1%"),
        pytest.param(0.95, [0.72, 0.3, 0.15, 0.05], id="95% leaves 5%"),
    ],
)
def test_thresholds_are_factor_times_budget_without_binary_noise(objective: float, expected: list[float]) -> None:
    assert [w.threshold(objective) for w in burn_windows(30 * DAY)] == expected


def test_the_threshold_of_a_low_objective_can_exceed_one() -> None:
    # 13.44 x 10%: an error ratio cannot reach it, so that pair never fires (the slower one still can).
    assert burn_windows(28 * DAY)[0].threshold(0.9) == pytest.approx(1.344)


@pytest.mark.parametrize("objective", [0.0, 1.0, 1.5])
def test_an_objective_outside_zero_one_is_refused(objective: float) -> None:
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        burn_windows(30 * DAY)[0].threshold(objective)


def test_a_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        burn_windows(0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300), ("30m", 1800), ("1h", 3600), ("6h", 21600), ("1d", 86400), ("3d", 259200), ("4w", 2419200)],
)
def test_durations_parse(text: str, seconds: int) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "1h30m", "-5m", "5 m", "1y"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        duration_seconds(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2419200, "28d"), (2592000, "30d"), (604800, "7d"), (5400, "90m"), (3600, "1h"), (90, "90s")],
)
def test_durations_format_in_the_largest_whole_unit(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("seconds", [0, -60, 1.5])
def test_only_whole_positive_seconds_format(seconds: float) -> None:
    with pytest.raises(ValueError, match="whole number"):
        format_duration(seconds)
