"""The ``sloscope-slo-alerts`` group: multi-window multi-burn-rate alerts per SLO class and SLO, with the
class's own objective and compliance period (:mod:`sloscope.generators.windows`).

A window whose factor x budget would exceed ``AlertThresholds.slo_max_error_ratio`` (a loose objective: 13.44 x
10% is above 100%) gets the ceiling as its threshold instead, and its description says so: a rule that can
never fire is never emitted (:func:`~sloscope.generators.rules.thresholds.burn_threshold`)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from sloscope import conventions as c
from sloscope.generators.rules.common import (
    VALUE_PERCENT,
    Matcher,
    Rule,
    _alert,
    _label,
    _num,
    _pct,
    _selector,
    _text_num,
)
from sloscope.generators.rules.names import ERROR_BUDGET_BURN_PAGE, ERROR_BUDGET_BURN_TICKET
from sloscope.generators.rules.thresholds import AlertThresholds, burn_threshold, is_capped
from sloscope.generators.windows import PAGE, TICKET, BurnWindow, Severity, burn_windows
from sloscope.generators.windows import format_duration as _format_duration
from sloscope.slo.spec import SLOClass, SLOSpec


def _burn_expr(cls: str, slo: str, objective: float, pairs: Sequence[BurnWindow], t: AlertThresholds) -> str:
    """Alert when both windows of any pair burn faster than its factor; the value is the long-window ratio."""
    matchers: dict[str, Matcher] = {c.SLO_CLASS: cls, c.SLO: slo}
    min_requests = t.slo_min_requests
    branches = []
    for pair in pairs:
        threshold = _num(burn_threshold(pair, objective, t))
        conditions = [
            f"{_selector(c.slo_error_ratio_rule(pair.long), matchers)} > {threshold}",
            f"and {_selector(c.slo_error_ratio_rule(pair.short), matchers)} > {threshold}",
        ]
        if min_requests > 0:
            # rate x window length: the eligible requests sampled in the long window (each once, not the estimate
            # they stand for: a page needs that many observed requests, whatever the sampling ratio).
            requests = _selector(c.slo_sampled_requests_rate_rule(pair.long), matchers)
            conditions.append(f"and {requests} * {pair.long_seconds} >= {min_requests}")
        branches.append("(\n  " + "\n  ".join(conditions) + "\n)")
    return "\nor\n".join(branches)


def _pairs_prose(pairs: Sequence[BurnWindow], objective: float, t: AlertThresholds) -> str:
    def one(p: BurnWindow) -> str:
        if is_capped(p, objective, t):
            return (
                f"{_pct(burn_threshold(p, objective, t))} of requests miss over {p.long} and {p.short} (the "
                f"ceiling: {_text_num(p.factor)}x the budget would be {_pct(p.exact_threshold(objective))})"
            )
        return (
            f"the budget burns {_text_num(p.factor)}x over {p.long} and {p.short} ({_pct(p.budget_share)} of the "
            f"budget in {p.long})"
        )

    return " or ".join(one(p) for p in pairs)


def _burn_alert(
    spec: SLOSpec,
    cls: SLOClass,
    slo: str,
    *,
    severity: Severity,
    thresholds: AlertThresholds,
) -> Rule:
    period = spec.period_of(cls)
    pairs = [p for p in burn_windows(period) if p.severity == severity]
    objective = cls.objectives.of(slo)
    budget = 1 - Fraction(repr(objective))
    name = ERROR_BUDGET_BURN_PAGE if severity == PAGE else ERROR_BUDGET_BURN_TICKET
    speed = "Fast" if severity == PAGE else "Sustained"
    guard = (
        f" Needs at least {thresholds.slo_min_requests} eligible requests sampled in the long window."
        if thresholds.slo_min_requests > 0
        else ""
    )
    description = (
        f"Model {_label(c.MODEL)} in pool {_label(c.POOL)}: {VALUE_PERCENT} of the requests of class {cls.name} "
        f"eligible for the {slo} SLO missed it over the alert's long window, against an error budget of "
        f"{_pct(budget)} (objective {_pct(objective)} over {_format_duration(period)}). "
        f"Fires when {_pairs_prose(pairs, objective, thresholds)}.{guard}"
    )
    return _alert(
        name,
        _burn_expr(cls.name, slo, objective, pairs, thresholds),
        severity=severity,
        summary=f"{speed} burn of the {slo} error budget of SLO class {cls.name}.",
        description=description,
        labels={c.SLO_CLASS: cls.name, c.SLO: slo},
    )


def slo_alerts(spec: SLOSpec, thresholds: AlertThresholds) -> list[Rule]:
    """A page and a ticket per class (spec order) and SLO, each with the class's objective and period."""
    return [
        _burn_alert(spec, cls, slo, severity=severity, thresholds=thresholds)
        for severity in (PAGE, TICKET)
        for cls in spec.classes
        for slo in c.SLOS
    ]
