"""The maths of predicted-versus-actual and of headroom, on hand-computed values."""

from __future__ import annotations

import math

import pytest

from sloscope.slo.accuracy import Comparison, MeanComparison, compare, compare_mean, pinball_loss
from sloscope.slo.headroom import is_positive, tpot_headroom, ttft_headroom


@pytest.mark.parametrize(
    ("actual", "predicted", "q", "loss"),
    [
        (0.3, 0.2, 0.9, 0.9 * 0.1),  # under-predicted by 100 ms: q * 0.1
        (0.1, 0.2, 0.9, 0.1 * 0.1),  # over-predicted by 100 ms: (1 - q) * 0.1
        (0.2, 0.2, 0.9, 0.0),
        (0.3, 0.2, 0.5, 0.05),  # the median's loss is half the absolute error
    ],
)
def test_pinball_loss(actual: float, predicted: float, q: float, loss: float) -> None:
    assert pinball_loss(actual, predicted, q) == pytest.approx(loss, abs=1e-15)


def test_compare_covered_ratio_and_loss() -> None:
    assert compare(0.15, 0.2, 0.9) == Comparison(0.15 / 0.2, True, pytest.approx(0.005))
    miss = compare(0.25, 0.2, 0.9)
    assert miss is not None
    assert miss.ratio == 1.25
    assert not miss.covered
    assert miss.loss == pytest.approx(0.045)
    exact = compare(0.2, 0.2, 0.9)
    assert exact is not None
    assert exact.covered  # actual <= predicted: equal counts as covered
    assert exact.ratio == 1.0


@pytest.mark.parametrize(
    ("actual", "predicted"),
    [(None, 0.2), (0.2, None), (0.2, 0.0), (0.2, -1.0), (-0.1, 0.2), (math.nan, 0.2), (0.2, math.inf)],
)
def test_compare_refuses_unusable_values(actual: float | None, predicted: float | None) -> None:
    assert compare(actual, predicted, 0.9) is None


def test_compare_refuses_a_quantile_outside_0_1() -> None:
    with pytest.raises(ValueError, match="quantile"):
        compare(0.1, 0.2, 1.0)


@pytest.mark.parametrize(
    ("actual", "predicted", "expected"),
    [
        (0.025, 0.020, MeanComparison(0.020, 0.005, 0.0, 0.005**2)),  # too low by 5 ms
        (0.090, 0.100, MeanComparison(0.100, 0.0, 0.010, 0.010**2)),  # too high by 10 ms
        (0.2, 0.2, MeanComparison(0.2, 0.0, 0.0, 0.0)),
    ],
)
def test_compare_mean_splits_the_error_by_its_sign(actual: float, predicted: float, expected: MeanComparison) -> None:
    """Each term is never negative, so each sum of them only grows, as a counter must."""
    assert compare_mean(actual, predicted) == pytest.approx(expected, abs=1e-15)


def test_compare_mean_refuses_unusable_values() -> None:
    assert compare_mean(0.2, 0.0) is None
    assert compare_mean(math.nan, 0.2) is None


def test_ttft_headroom_is_slo_minus_prediction() -> None:
    assert ttft_headroom(0.2, 0.18) == pytest.approx(0.02)
    assert ttft_headroom(0.2, 0.25) == pytest.approx(-0.05)


def test_tpot_headroom_uses_the_tightest_running_slo_and_the_buffer() -> None:
    assert tpot_headroom(0.05, 0.021) == pytest.approx(0.029)
    assert tpot_headroom(0.05, 0.021, buffer=0.9) == pytest.approx(0.045 - 0.021)
    # a 30 ms request already runs on the pod: the budget is 30 ms, not the request's 50
    assert tpot_headroom(0.05, 0.021, tightest_running=0.03) == pytest.approx(0.009)
    assert tpot_headroom(0.05, 0.021, buffer=0.9, tightest_running=0.03) == pytest.approx(0.027 - 0.021)
    # a looser running SLO does not loosen the request's own
    assert tpot_headroom(0.05, 0.021, tightest_running=0.08) == pytest.approx(0.029)
    # zero means "no running request has a TPOT SLO", as in the EPP
    assert tpot_headroom(0.05, 0.021, tightest_running=0.0) == pytest.approx(0.029)


def test_positive_needs_every_judged_headroom_above_zero() -> None:
    assert is_positive([0.01, 0.002])
    assert not is_positive([0.01, 0.0])
    assert not is_positive([-0.01, 0.5])
    assert is_positive([0.01, None])  # a class without a TPOT target is judged on TTFT alone
    assert not is_positive([None, None])
