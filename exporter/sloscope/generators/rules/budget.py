"""The error budget as recorded series, as Sloth's metadata rules and Pyrra's ``pyrra_objective`` record it, but
by model, pool, SLO class and SLO: real label values that join one to one with the error ratios.

Sloth (``internal/plugin/slo/core/metadata_rules_v1/plugin.go``) records ``slo:objective:ratio``,
``slo:error_budget:ratio``, ``slo:current_burn_rate:ratio`` (the 5m error ratio over the budget),
``slo:period_burn_rate:ratio`` and ``slo:period_error_budget_remaining:ratio`` (1 - the period burn rate), each
with the SLO's fixed labels. sloscope's SLO is a class and an SLO over every model and pool the class matches,
so the objective takes its label sets from the recorded series of those models and pools instead of from
fixed labels (and never from ``sloscope_slo_objective_ratio``, whose ``model`` is the class's pattern).

Two parts, in two groups:

- :func:`objective_rules` (in the ``sloscope-slo-recording`` group, every minute): objective, error budget and
  current burn rate.
- :func:`budget_rules` (the ``sloscope-slo-budget`` group, every minute too): requests and violations counted
  over the last :data:`TILE`, the compliance-period error ratio summed from those counts, the period burn rate
  and the budget remaining.

The period is read from recorded counts, never from the raw counters: a 28-day ``increase()`` needs 28 days of
raw samples at the scrape interval, which Prometheus's default retention (15d) does not keep. The ratio is the
sum of violations over the sum of requests of every recorded count in the period: each count weighs as much as
the requests it holds, the traffic weighting the objective (a share of requests) needs. Sloth's
``ratio_rate30d`` is the plain mean of 5m ratios, which gives a quiet night's 10 requests as much weight as a
peak's 10,000. A count is recorded every minute over the last 5, so each request is in 5 of them, in the
numerator and the denominator alike: the ratio is that of the requests themselves, whatever the evaluation
interval, and it follows the traffic within a minute (the newest 4 minutes weigh a little less, being in fewer
counts yet). Prometheus must keep the recorded counts for the whole period (retention at least the period, or
a remote store). Each class gets its own period ratio rule, so one query reads the counts of one class
(period / interval samples per series: 40,320 a series for 28 days) and stays far below Prometheus's
``--query.max-samples``.
"""

from __future__ import annotations

from sloscope import conventions as c
from sloscope.generators.rules.common import Matcher, Rule, _by, _num, _selector
from sloscope.generators.windows import duration_seconds
from sloscope.generators.windows import format_duration as _format_duration
from sloscope.slo.spec import SLOSpec

TILE = "5m"
"""The window each recorded count of requests and violations covers."""
BUDGET_INTERVAL = "1m"
"""Evaluation interval of the budget group: the period's ratio follows the traffic within a minute."""
CURRENT_BURN_WINDOW = "5m"
"""The error-ratio window of the current burn rate (Sloth's: the page's short window)."""


def period_ratio_rule(period_seconds: float) -> str:
    """Name of the recorded error ratio over a compliance period.

    For a period that is already a rule window (``1d``) it is that window's ratio, recorded from the counters
    directly with the same meaning; any other period must be a whole number of :data:`TILE`.
    """
    if period_seconds % duration_seconds(TILE) != 0:
        raise ValueError(
            f"a compliance period must be a whole number of {TILE} (the budget is summed from {TILE} counts)"
        )
    return c.slo_error_ratio_rule(_format_duration(period_seconds))


def _recorded_period(period_seconds: float) -> bool:
    """Whether the budget group records the period's ratio (it is not already a rule window)."""
    return _format_duration(period_seconds) not in c.RULE_WINDOWS


def objective_rules(spec: SLOSpec) -> list[Rule]:
    """Objective of each class and SLO on every label set that has requests now or a ratio over the period, then
    the error budget and the current burn rate of every label set, joined one to one on those labels."""
    rules: list[Rule] = []
    for cls in spec.classes:
        for slo in c.SLOS:
            matchers: dict[str, Matcher] = {c.SLO_CLASS: cls.name, c.SLO: slo}
            present = (
                f"{_selector(c.slo_requests_rate_rule(CURRENT_BURN_WINDOW), matchers)}\n"
                f"or\n{_selector(period_ratio_rule(spec.period_of(cls)), matchers)}"
            )
            objective = _num(cls.objectives.of(slo))
            expr = f"(\n{present}\n)\n* 0 + {objective}"
            rules.append({"record": c.SLO_OBJECTIVE_RULE, "expr": expr, "labels": dict(sorted(matchers.items()))})
    if rules:
        rules.append({"record": c.SLO_ERROR_BUDGET_RULE, "expr": f"1 - {c.SLO_OBJECTIVE_RULE}"})
        rules.append(
            {
                "record": c.SLO_CURRENT_BURN_RATE_RULE,
                "expr": f"{c.slo_error_ratio_rule(CURRENT_BURN_WINDOW)}\n/\n{c.SLO_ERROR_BUDGET_RULE}",
            }
        )
    return rules


def _count(metric: str, record: str, fallback: str | None = None) -> Rule:
    expr = f"sum by ({_by(c.RULE_LABELS)}) (increase({metric}[{TILE}]))"
    # A violations series may still be missing (a label set created before every sibling started at 0): "or
    # requests * 0" counts it as no violation instead of leaving the count out of the period.
    return {"record": record, "expr": expr if fallback is None else f"{expr}\nor\n{fallback} * 0"}


def _period_ratio_expr(period: str, cls: str) -> str:
    """Violations over requests summed over the period's counts; a label set without requests has no ratio."""
    matchers: dict[str, Matcher] = {c.SLO_CLASS: cls}
    violations = _selector(c.slo_violations_increase_rule(TILE), matchers)
    requests = _selector(c.slo_requests_increase_rule(TILE), matchers)
    return f"sum_over_time({violations}[{period}])\n/\n(sum_over_time({requests}[{period}]) > 0)"


def budget_rules(spec: SLOSpec) -> list[Rule]:
    """Counts over :data:`TILE`, each class's ratio over its compliance period, the period burn rate and the budget
    remaining."""
    if not spec.classes:
        return []
    requests = c.slo_requests_increase_rule(TILE)
    rules = [
        _count(c.SLO_REQUESTS.exposed_name, requests),
        _count(c.SLO_VIOLATIONS.exposed_name, c.slo_violations_increase_rule(TILE), requests),
    ]
    for cls in spec.classes:
        period = spec.period_of(cls)
        if _recorded_period(period):
            expr = _period_ratio_expr(_format_duration(period), cls.name)
            rules.append({"record": period_ratio_rule(period), "expr": expr, "labels": {c.SLO_CLASS: cls.name}})
    for cls in spec.classes:
        ratio = _selector(period_ratio_rule(spec.period_of(cls)), {c.SLO_CLASS: cls.name})
        expr = f"{ratio}\n/\n{c.SLO_ERROR_BUDGET_RULE}"
        rules.append({"record": c.SLO_PERIOD_BURN_RATE_RULE, "expr": expr, "labels": {c.SLO_CLASS: cls.name}})
    rules.append({"record": c.SLO_PERIOD_ERROR_BUDGET_REMAINING_RULE, "expr": f"1 - {c.SLO_PERIOD_BURN_RATE_RULE}"})
    return rules
