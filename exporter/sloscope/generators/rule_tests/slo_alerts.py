"""Tests of the burn-rate alerts, per class and SLO: traffic that pages, traffic between the ticket and the page
thresholds, and traffic that must stay silent (no violation, too few requests)."""

from __future__ import annotations

import math

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import MODEL, POOL, Test, _alert_case, _counter, _group, _Rules, _series
from sloscope.generators.windows import PAGE, TICKET, burn_windows
from sloscope.slo.spec import SLOClass, SLOSpec


def _traffic(low: float, high: float, min_requests: int) -> tuple[int, int] | None:
    """(requests, violations) a minute whose ratio lies strictly between ``low`` and ``high``, near the middle;
    at least 100 requests a minute and ``min_requests`` in 10 minutes. None when no ratio fits."""
    high = min(high, 1.0)
    if not low < high:
        return None
    middle = (low + high) / 2
    total = max(100, math.ceil(min_requests / 10))
    total = 10 ** math.ceil(math.log10(total))
    for _ in range(8):
        missed = round(middle * total)
        if low < missed / total < high and missed > 0:
            return total, missed
        total *= 10
    return None


def _burn_tests(spec: SLOSpec, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    tests = []
    for cls in spec.classes:
        for slo in c.SLOS:
            tests += _burn_tests_of(spec, cls, slo, rules, t)
    return tests


def _burn_tests_of(spec: SLOSpec, cls: SLOClass, slo: str, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    objective = cls.objectives.of(slo)
    pairs = burn_windows(spec.period_of(cls))
    page = [float(p.exact_threshold(objective)) for p in pairs if p.severity == PAGE]
    ticket = [float(p.exact_threshold(objective)) for p in pairs if p.severity == TICKET]
    at = 10
    which = {c.SLO_CLASS: cls.name, c.SLO: slo}
    alert_labels = {c.MODEL: MODEL, c.POOL: POOL, **which}

    def slo_series(model: str, total: int, missed: int) -> list[dict[str, str]]:
        labels = {c.MODEL: model, c.POOL: POOL, c.ROUTING: c.ROUTING_PREDICTED, **which}
        out = [_series(c.SLO_REQUESTS.exposed_name, labels, _counter(total, 30))]
        if missed:
            out.append(_series(c.SLO_VIOLATIONS.exposed_name, labels, _counter(missed, 30)))
        return out

    tests: list[Test] = []
    fast = _traffic(min(page), 1.0, t.slo_min_requests)
    if fast is not None:
        total, missed = fast
        expected = rules.expect(r.ERROR_BUDGET_BURN_PAGE, alert_labels, missed / total, **which)
        tests.append(
            _group(
                f"{r.ERROR_BUDGET_BURN_PAGE} fires for {cls.name} {slo} when {missed} of {total} requests a minute "
                f"miss (objective {objective})",
                slo_series(MODEL, total, missed),
                alert_rule_test=[_alert_case(r.ERROR_BUDGET_BURN_PAGE, at, [expected])],
            )
        )
    slow = _traffic(max(ticket) if max(ticket) < min(page) else min(ticket), min(page), t.slo_min_requests)
    if slow is not None:
        total, missed = slow
        expected = rules.expect(r.ERROR_BUDGET_BURN_TICKET, alert_labels, missed / total, **which)
        tests.append(
            _group(
                f"{r.ERROR_BUDGET_BURN_TICKET} fires and {r.ERROR_BUDGET_BURN_PAGE} stays silent for {cls.name} "
                f"{slo} when {missed} of {total} requests a minute miss (objective {objective})",
                slo_series(MODEL, total, missed),
                alert_rule_test=[
                    _alert_case(r.ERROR_BUDGET_BURN_TICKET, at, [expected]),
                    _alert_case(r.ERROR_BUDGET_BURN_PAGE, at),
                ],
            )
        )
    # Silent: a model with traffic and no violation at all (no violations series), and, when the traffic
    # guard is on, a quiet model whose every request misses but too few requests were counted.
    series = slo_series("healthy-model", 100, 0)
    quiet_at = min(t.slo_min_requests - 1, 30)
    if quiet_at >= 1:
        series += slo_series("quiet-model", 1, 1)
    silent_at = quiet_at if quiet_at >= 1 else at
    tests.append(
        _group(
            f"burn-rate alerts stay silent for {cls.name} {slo} without violations"
            + (f" and with fewer than {t.slo_min_requests} requests" if quiet_at >= 1 else ""),
            series,
            alert_rule_test=[
                _alert_case(r.ERROR_BUDGET_BURN_PAGE, silent_at),
                _alert_case(r.ERROR_BUDGET_BURN_TICKET, silent_at),
            ],
        )
    )
    return tests
