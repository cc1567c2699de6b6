"""The maths of :mod:`sloscope.slo.accuracy` and :mod:`sloscope.slo.headroom` over a batch, with numpy.

A batch's predictions carried on spans become *events*, one per (request, signal) in request order (TTFT
before TPOT), as :meth:`PredictionTracker.record` meets them one request at a time; a row of a pool whose EPP runs
with streaming off has its first signal named ``e2e`` (code 2) instead of ``ttft``. Each event's terms are
computed with the same IEEE operations as :func:`~sloscope.slo.accuracy.compare`,
:func:`~sloscope.slo.accuracy.compare_mean` and :func:`~sloscope.slo.headroom.tpot_headroom`, so they are
bit-identical, not merely close.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sloscope import conventions as c
from sloscope.columnar.cardinality import Labels
from sloscope.columnar.columns import Codes, Column, Floats, Groups, Mask, group

__all__ = ["Comparisons", "Events", "comparisons", "events", "keys", "tpot_headrooms"]

SIGNALS = (c.SIGNAL_TTFT, c.SIGNAL_TPOT, c.SIGNAL_E2E)  # event signal codes 0, 1 and 2
_TPOT = 1
_E2E = 2


@dataclass(frozen=True, slots=True)
class Events:
    """One event per selected (row, signal): ``row`` ascending, the first signal (TTFT 0, or e2e 2) before TPOT (1)
    within a row."""

    row: Codes
    signal: Codes

    def __len__(self) -> int:
        return len(self.row)

    def pick(self, per_signal: tuple[Floats, Floats]) -> Floats:
        """Each event's value of its signal's array (indexed by row): the first for TTFT or e2e, the second for TPOT."""
        first, tpot = per_signal
        return np.where(self.signal == _TPOT, tpot[self.row], first[self.row])


def events(ttft: Mask, tpot: Mask, e2e: Mask | None = None) -> Events:
    """The events of the rows selected for the first signal and for TPOT, in the order one request at a time meets
    them; the first signal of the rows ``e2e`` selects is e2e (their pool's EPP runs with streaming off)."""
    rows = np.concatenate([np.flatnonzero(ttft), np.flatnonzero(tpot)])
    signal = np.concatenate([np.zeros(int(ttft.sum()), dtype=np.intp), np.ones(int(tpot.sum()), dtype=np.intp)])
    keys = rows * 2 + signal  # distinct: a row has at most one event of each signal
    slots = np.full(2 * len(ttft), -1, dtype=np.intp)  # their order by a table, not a sort
    slots[keys] = np.arange(len(keys))
    order = slots[slots >= 0]
    rows, signal = rows[order], signal[order]
    if e2e is not None:
        signal = np.where((signal == 0) & e2e[rows], _E2E, signal)
    return Events(rows, signal)


@dataclass(frozen=True, slots=True)
class Comparisons:
    """Usable predictions against their actuals, per event: a quantile one's terms where ``mean`` is False, a mean
    one's where it is True (the other's are 0 there, and never read)."""

    events: Events
    mean: Mask
    covered: Mask
    ratio: Floats
    loss: Floats
    predicted: Floats
    under: Floats
    over: Floats
    squared: Floats


def usable(actual: Floats, predicted: Floats) -> Mask:
    """``accuracy._usable`` per row (NaN: missing): a finite actual >= 0 and a finite prediction > 0."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(actual) & np.isfinite(predicted) & (actual >= 0) & (predicted > 0)


def comparisons(
    actual: tuple[Floats, Floats],
    predicted: tuple[Floats, Floats],
    selected: Mask,
    quantile: Floats,
    mean: Mask,
    *,
    e2e: Mask | None = None,
) -> Comparisons:
    """:func:`compare` or :func:`compare_mean` (by ``mean``, per row) of each selected row's usable signals, at the
    row's ``quantile``; the first signal of the rows ``e2e`` selects is e2e (:func:`events`)."""
    (first, tpot), (predicted_first, predicted_tpot) = actual, predicted
    found = events(selected & usable(first, predicted_first), selected & usable(tpot, predicted_tpot), e2e)
    a, p = found.pick(actual), found.pick(predicted)
    q, is_mean = quantile[found.row], mean[found.row]
    with np.errstate(over="ignore"):  # as Python's floats do, an overflow is an infinity
        diff = a - p
        ratio = a / p
        loss = np.where(diff >= 0, q * diff, (q - 1.0) * diff)
        squared = diff * diff
    zero = np.zeros(len(found))
    return Comparisons(
        events=found,
        mean=is_mean,
        covered=~is_mean & (a <= p),
        ratio=np.where(is_mean, zero, ratio),
        loss=np.where(is_mean, zero, loss),
        predicted=np.where(is_mean, p, zero),
        under=np.where(is_mean, np.maximum(diff, 0.0), zero),
        over=np.where(is_mean, np.maximum(-diff, 0.0), zero),
        squared=np.where(is_mean, squared, zero),
    )


def tpot_headrooms(slo: Floats, predicted: Floats, buffer: float, tightest: Floats) -> Floats:
    """:func:`~sloscope.slo.headroom.tpot_headroom` per row (``tightest`` NaN: none known)."""
    budget = slo * buffer
    with np.errstate(invalid="ignore"):
        known = ~np.isnan(tightest) & (tightest > 0)
    return np.where(known, np.minimum(budget, tightest * buffer), budget) - predicted


def keys(found: Events, model: Column, pool: Column, selected: Mask, *tail: str) -> tuple[list[Labels], Groups]:
    """The selected events grouped by (model, pool, signal), each group's labels followed by ``tail``."""
    groups = group([model.codes[found.row], pool.codes[found.row], found.signal], selected)
    first = found.row[groups.first].tolist()
    signals = found.signal[groups.first].tolist()
    labels = [
        (model.values[model.codes[row]], pool.values[pool.codes[row]], SIGNALS[signal], *tail)
        for row, signal in zip(first, signals, strict=True)
    ]
    return labels, groups
