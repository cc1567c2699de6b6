"""The error budget of a compliance period, as a review window spends it, and the error-budget policy's status.

An SLO with objective o over a compliance period P allows a share 1 - o of the period's eligible requests to
miss: the period's error budget is (1 - o) x N_P. A review window shorter than the period does not know N_P,
so it is estimated from the traffic seen over the time W the data covers (the store's bins with requests, not the
window asked for: a short run in a long window says nothing of the rest), scaled to the period (N_P = N_W x P / W,
the traffic-weighted estimate Sloth's and Pyrra's period ratios use). The share of the period's budget spent is::

    budget consumed = V_W / ((1 - o) x N_W x P / W) = mean burn rate x W / P,
    mean burn rate  = (V_W / N_W) / (1 - o)

which is the Google SRE workbook's "budget consumed = burn rate x alert window / period" (chapter "Alerting on
SLOs"). A week at mean burn rate 1 spends a quarter of a four-week budget; a week at 4 spends all of it.

The policy status (docs/review.md, "Error-budget policy") reads the budget the window left, 1 - consumed:

- ``exhausted``: nothing left (consumed >= 1): the policy's freeze applies;
- ``at risk``: less than ``AT_RISK_REMAINING`` left, or burning faster than the period allows (mean burn rate
  above ``AT_RISK_BURN_RATE``: at that pace the budget runs out before the period ends);
- ``healthy``: otherwise.

The window counts only its own spend: when it is shorter than the period, earlier weeks of the period may have
spent more. Review the whole period (``--since 28d``) for the period's true remaining budget.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["AT_RISK", "AT_RISK_BURN_RATE", "AT_RISK_REMAINING", "EXHAUSTED", "HEALTHY", "consumed", "status"]

AT_RISK_REMAINING = 0.25
"""Less than a quarter of the period's budget left is at risk."""
AT_RISK_BURN_RATE = 1.0
"""Spending faster than the pace that lasts the period is at risk."""
HEALTHY, AT_RISK, EXHAUSTED = "healthy", "at risk", "exhausted"


def consumed(mean_burn_rate: pd.Series, window_seconds: float, period_seconds: pd.Series) -> pd.Series:
    """The share of the period's error budget spent in a window of ``window_seconds`` at ``mean_burn_rate``."""
    return mean_burn_rate * window_seconds / period_seconds


def status(remaining: pd.Series, mean_burn_rate: pd.Series) -> pd.Series:
    """The policy status of each row (null where there is no objective, so no budget)."""
    verdict = pd.Series(pd.NA, index=remaining.index, dtype="string")
    known = remaining.notna()
    verdict[known] = HEALTHY
    verdict[known & ((remaining < AT_RISK_REMAINING) | (mean_burn_rate > AT_RISK_BURN_RATE))] = AT_RISK
    verdict[known & (remaining <= 0)] = EXHAUSTED
    return verdict
