"""The budget series: objective, error budget, burn rates and budget remaining by real labels, and the
compliance period counted from recorded counts (the values themselves are proven by the generated promtool
cases, tests/integration/test_rules_promtool.py)."""

from __future__ import annotations

from typing import Any

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.loading import default_spec
from tests.unit.generators.test_rules import custom_spec


def _group(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return next(g["rules"] for g in data["groups"] if g["name"] == name)


def test_objectives_come_from_the_spec_on_the_label_sets_of_the_recorded_series() -> None:
    rules = _group(r.rule_file(custom_spec()), r.GROUP_SLO_RECORDING)
    objectives = [rule["expr"] for rule in rules if rule["record"] == c.SLO_OBJECTIVE_RULE]
    assert len(objectives) == 2 * len(c.SLOS)  # premium and batch
    premium = next(e for e in objectives if 'slo="ttft",slo_class="premium"' in e)
    assert premium.endswith("* 0 + 0.999")
    assert 'sloscope:slo_requests:rate5m{slo="ttft",slo_class="premium"}' in premium
    assert 'sloscope:slo_error_ratio:rate30d{slo="ttft",slo_class="premium"}' in premium


def test_no_budget_series_reads_a_pattern_or_the_raw_counters_over_the_period() -> None:
    data = r.rule_file(default_spec())
    budget = _group(data, r.GROUP_SLO_BUDGET) + [
        rule for rule in _group(data, r.GROUP_SLO_RECORDING) if rule["record"].endswith(":ratio")
    ]
    for rule in budget:
        assert c.SLO_OBJECTIVE_RATIO.name not in rule["expr"], rule["record"]
        assert "*" not in rule["expr"].replace("* 0", ""), rule["record"]
        assert "[28d]" not in rule["expr"] or "_total" not in rule["expr"], rule["record"]
    by_name = {rule["record"]: rule["expr"] for rule in budget}
    assert by_name[c.SLO_ERROR_BUDGET_RULE] == f"1 - {c.SLO_OBJECTIVE_RULE}"
    assert by_name[c.SLO_PERIOD_ERROR_BUDGET_REMAINING_RULE] == f"1 - {c.SLO_PERIOD_BURN_RATE_RULE}"
    assert by_name[c.SLO_CURRENT_BURN_RATE_RULE].startswith(c.slo_error_ratio_rule("5m"))


def test_the_period_ratio_sums_recorded_counts_per_class() -> None:
    rules = _group(r.rule_file(default_spec()), r.GROUP_SLO_BUDGET)
    ratios = [rule["expr"] for rule in rules if rule["record"] == c.slo_error_ratio_rule("28d")]
    assert len(ratios) == 2  # interactive and standard, one query each
    interactive = next(e for e in ratios if 'slo_class="interactive"' in e)
    assert interactive == (
        'sum_over_time(sloscope:slo_violations:increase5m{slo_class="interactive"}[28d])\n/\n'
        '(sum_over_time(sloscope:slo_requests:increase5m{slo_class="interactive"}[28d]) > 0)'
    )
    assert "avg_over_time" not in interactive


def test_the_budget_group_is_evaluated_every_minute() -> None:
    data = r.rule_file(default_spec())
    (group,) = [g for g in data["groups"] if g["name"] == r.GROUP_SLO_BUDGET]
    assert group["interval"] == "1m"
