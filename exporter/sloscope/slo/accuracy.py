"""How right a quantile prediction was, for one request. Pure functions.

The latency predictor is a quantile model: with ``quantile`` 0.9 it predicts the p90 of TTFT and
TPOT for the request's features, not their mean. So the accuracy signal that matters is
**coverage** (the share of requests whose actual latency was at most the prediction), to be
compared with the quantile; a well-calibrated p90 model covers 90% of requests. Relative error alone
would call a perfect p90 model "biased high". Beside coverage: the ratio actual / predicted (its
distribution shows by how much misses miss) and the pinball loss, the loss a quantile regression
minimises, so that two predictors of the same quantile can be ranked.

A predictor run with ``LATENCY_OBJECTIVE_TYPE=mean`` (the llm-d router's chart does) predicts the mean
instead, and about half the requests then exceed their prediction by design: coverage against a quantile
it does not predict means nothing. A mean prediction is judged by its error ``actual - predicted``: the
mean error is the **bias** (positive: too low), the mean absolute error (MAE) and the root mean squared
error (RMSE) its spread; :func:`compare_mean` gives the terms whose sums make them. The error comes split by its
sign (``under``, ``over``) so that every sum only grows, as a Prometheus counter must: bias = (under - over) / n,
MAE = (under + over) / n.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["Comparison", "MeanComparison", "compare", "compare_mean", "pinball_loss"]


def pinball_loss(actual: float, predicted: float, quantile: float) -> float:
    """The quantile (pinball) loss: ``q*(a-p)`` when the prediction was too low,
    ``(1-q)*(p-a)`` when too high.

    In the unit of its inputs. A p90 model pays nine times more per second of under-prediction
    than per second of over-prediction.
    """
    diff = actual - predicted
    return quantile * diff if diff >= 0 else (quantile - 1.0) * diff


class Comparison(NamedTuple):
    """One prediction against its actual; seconds."""

    ratio: float  # actual / predicted
    covered: bool  # actual <= predicted
    loss: float  # pinball loss, seconds


class MeanComparison(NamedTuple):
    """One mean prediction against its actual; seconds (``squared`` in square seconds)."""

    predicted: float
    under: float  # max(actual - predicted, 0): too low by this much
    over: float  # max(predicted - actual, 0): too high by this much (one of the two is 0)
    squared: float  # (actual - predicted) ** 2


def compare_mean(actual: float | None, predicted: float | None) -> MeanComparison | None:
    """The error terms of a mean prediction, or None when either value is missing or unusable (as :func:`compare`)."""
    if not _usable(actual, predicted):
        return None
    assert actual is not None and predicted is not None
    error = actual - predicted
    return MeanComparison(predicted, max(error, 0.0), max(-error, 0.0), error * error)


def _usable(actual: float | None, predicted: float | None) -> bool:
    if actual is None or predicted is None:
        return False
    return math.isfinite(actual) and math.isfinite(predicted) and actual >= 0 and predicted > 0


def compare(actual: float | None, predicted: float | None, quantile: float) -> Comparison | None:
    """The comparison, or None when either value is missing or unusable.

    A prediction must be positive and finite (a ratio to zero means nothing); an actual must be
    finite and not negative. ``quantile`` must lie strictly between 0 and 1.
    """
    if not _usable(actual, predicted):
        return None
    assert actual is not None and predicted is not None
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must lie in (0, 1), got {quantile}")
    return Comparison(actual / predicted, actual <= predicted, pinball_loss(actual, predicted, quantile))
