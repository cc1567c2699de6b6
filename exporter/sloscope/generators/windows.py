"""Multi-window multi-burn-rate alert windows, derived from an SLO class's compliance period.

The windows are those of the Google SRE workbook ("Alerting on SLOs", table 5-8), which Sloth ships as
``internal/alert/windows/google-30d.yaml`` and ``google-28d.yaml``: page when 2% of the error budget is spent
in an hour or 5% in six hours, open a ticket when 10% is spent in a day or in three days. Each long window is
paired with a short one (1/12 of it) that must also burn, so the alert stops soon after the burning stops.

The burn factor of a window is how many times faster than "exactly spend the budget over the period" the
errors arrive: ``budget share x period / long window``. For a 30-day period this gives the workbook's 14.4, 6,
3 and 1; for the 28-day default, 13.44, 5.6, 2.8 and 0.9333... The alert threshold on an error ratio is the
factor times the error budget (1 - objective).

Only change these windows when you understand multi-window multi-burn-rate alerts: the pairs are chosen
so that detection time, reset time and precision are balanced (the workbook discusses the trade-off).

The arithmetic is exact (:class:`fractions.Fraction`), so thresholds render as the shortest decimal and a test
can compare them with ``==``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

__all__ = [
    "PAGE",
    "TICKET",
    "BurnWindow",
    "Severity",
    "burn_windows",
    "duration_seconds",
    "format_duration",
]

Severity = Literal["page", "ticket"]
PAGE: Severity = "page"
TICKET: Severity = "ticket"

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def duration_seconds(text: str) -> int:
    """Seconds in a one-unit Prometheus duration such as ``5m``, ``6h`` or ``28d``."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a one-unit Prometheus duration: {text!r} (use a number and one of s, m, h, d, w)")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def format_duration(seconds: float) -> str:
    """The shortest one-unit Prometheus duration for ``seconds`` (``2419200`` -> ``28d``); weeks are written in days."""
    if seconds <= 0 or seconds != int(seconds):
        raise ValueError(f"a duration must be a positive whole number of seconds, not {seconds!r}")
    whole = int(seconds)
    for unit in ("d", "h", "m", "s"):
        if whole % _UNIT_SECONDS[unit] == 0:
            return f"{whole // _UNIT_SECONDS[unit]}{unit}"
    raise AssertionError("unreachable: every whole number of seconds is a multiple of 1s")


@dataclass(frozen=True)
class BurnWindow:
    """One (long, short) window pair of a multi-window multi-burn-rate alert, for one compliance period."""

    severity: Severity
    long: str
    """The window the budget share is measured over (``1h``)."""
    short: str
    """The window that must burn too, so the alert resets soon after the burning stops (``5m``)."""
    budget_share: Fraction
    """Share of the period's error budget spent over ``long`` at the threshold (``2/100``)."""
    period_seconds: Fraction
    """The compliance period the budget belongs to."""

    @property
    def long_seconds(self) -> int:
        return duration_seconds(self.long)

    @property
    def short_seconds(self) -> int:
        return duration_seconds(self.short)

    @property
    def exact_factor(self) -> Fraction:
        """Burn rate, as a multiple of the rate that spends exactly the whole budget over the period."""
        return self.budget_share * self.period_seconds / self.long_seconds

    @property
    def factor(self) -> float:
        """:attr:`exact_factor` as the nearest float (14.4 for the 1h window of a 30-day period)."""
        return float(self.exact_factor)

    def exact_threshold(self, objective: float) -> Fraction:
        """Error ratio above which this pair burns too fast for ``objective``: factor x (1 - objective).

        The objective is read from its shortest decimal (0.99 is 99/100, not the float's binary expansion), so
        the threshold of 14.4 x 1% is exactly 0.144.
        """
        budget = 1 - Fraction(repr(objective))
        if not 0 < budget < 1:
            raise ValueError(f"an objective must lie strictly between 0 and 1, not {objective!r}")
        return self.exact_factor * budget

    def threshold(self, objective: float) -> float:
        return float(self.exact_threshold(objective))


# (severity, long window, short window, budget share in percent), after the SRE workbook and Sloth.
_PAIRS: tuple[tuple[Severity, str, str, int], ...] = (
    (PAGE, "1h", "5m", 2),
    (PAGE, "6h", "30m", 5),
    (TICKET, "1d", "2h", 10),
    (TICKET, "3d", "6h", 10),
)


def burn_windows(period_seconds: float) -> tuple[BurnWindow, ...]:
    """The four window pairs for a compliance period: two for ``page``, then two for ``ticket``, fastest first."""
    if period_seconds <= 0:
        raise ValueError(f"a compliance period must be positive, not {period_seconds!r}")
    period = Fraction(period_seconds)
    return tuple(
        BurnWindow(severity, long, short, Fraction(percent, 100), period) for severity, long, short, percent in _PAIRS
    )
