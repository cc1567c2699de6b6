"""How right a quantile prediction was, for one request. Pure functions.

The latency predictor is a quantile model: with ``quantile`` 0.9 it predicts the p90 of TTFT and
TPOT for the request's features, not their mean. So the accuracy signal that matters is
**coverage** (the share of requests whose actual latency was at most the prediction), to be
compared with the quantile; a well-calibrated p90 model covers 90% of requests. Relative error alone
would call a perfect p90 model "biased high". Beside coverage: the ratio actual / predicted (its
distribution shows by how much misses miss) and the pinball loss, the loss a quantile regression
minimises, so that two predictors of the same quantile can be ranked.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["Comparison", "compare", "pinball_loss"]


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


def compare(actual: float | None, predicted: float | None, quantile: float) -> Comparison | None:
    """The comparison, or None when either value is missing or unusable.

    A prediction must be positive and finite (a ratio to zero means nothing); an actual must be
    finite and not negative. ``quantile`` must lie strictly between 0 and 1.
    """
    if actual is None or predicted is None:
        return None
    if not (math.isfinite(actual) and math.isfinite(predicted)) or actual < 0 or predicted <= 0:
        return None
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must lie in (0, 1), got {quantile}")
    return Comparison(actual / predicted, actual <= predicted, pinball_loss(actual, predicted, quantile))
