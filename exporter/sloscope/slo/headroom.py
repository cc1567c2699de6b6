"""Headroom as the endpoint picker (EPP) defines it. Pure functions; seconds in, seconds out.

The EPP's prediction-based scorer computes, for a candidate pod:

- TTFT headroom = TTFT SLO - predicted TTFT;
- TPOT headroom = min(TPOT SLO, tightest TPOT SLO among the requests running on the pod) * buffer
  - predicted TPOT, where buffer is its ``sloBufferFactor`` (1.0 by default) and the running
  requests' SLO counts only when one is known (greater than zero);
- a pod is "positive" when every headroom it was judged on is greater than zero.

The tightest running SLO matters because admitting a request slows every request decoding on the
pod: a pod with a 20 ms TPOT request running has only the room that request leaves.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["is_positive", "tpot_headroom", "ttft_headroom"]


def ttft_headroom(slo: float, predicted: float) -> float:
    return slo - predicted


def tpot_headroom(slo: float, predicted: float, buffer: float = 1.0, tightest_running: float | None = None) -> float:
    budget = slo * buffer
    if tightest_running is not None and tightest_running > 0:
        budget = min(budget, tightest_running * buffer)
    return budget - predicted


def is_positive(headrooms: Iterable[float | None]) -> bool:
    """True when at least one headroom was computed and every computed one is > 0 (None: not judged)."""
    judged = [h for h in headrooms if h is not None]
    return bool(judged) and all(h > 0 for h in judged)
