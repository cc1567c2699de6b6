"""Tests of the upstream-contract alerts: each fires once its check has read 0 for its hold (not on another check's 0),
and ends when the check holds again."""

from __future__ import annotations

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import (
    POOL,
    TARGET,
    Test,
    _alert_case,
    _gauge,
    _group,
    _held,
    _minutes,
    _Rules,
    _series,
    _switch,
)


def _upstream_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    hold = _minutes(t.contract_broken_for)
    minutes, broken_at = hold + 20, 5
    tests = []
    for check in c.CONTRACT_CHECKS:
        name = r.CONTRACT_ALERTS[check]
        labels = {c.POOL: POOL, c.CHECK: check}
        other = {c.POOL: POOL, c.CHECK: next(x for x in c.CONTRACT_CHECKS if x != check)}
        expected = rules.expect(name, {**TARGET, **labels}, 0.0)
        tests += [
            _group(
                f"{name} fires when check {check} reads broken for {t.contract_broken_for}",
                [
                    _series(c.UPSTREAM_CONTRACT.exposed_name, labels, _switch(1, 0, broken_at, minutes)),
                    _series(c.UPSTREAM_CONTRACT.exposed_name, other, _gauge(0, minutes)),  # another check's
                ],
                alert_rule_test=[_alert_case(name, broken_at - 1), *_held(name, broken_at + hold, expected)],
            ),
            _group(
                f"{name} ends when check {check} holds again",
                [
                    _series(c.UPSTREAM_CONTRACT.exposed_name, labels, _switch(0, 1, hold + 5, minutes)),
                ],
                alert_rule_test=[
                    _alert_case(name, hold + 3, [expected]),
                    _alert_case(name, hold + 5),
                    _alert_case(name, hold + 15),
                ],
            ),
        ]
    return tests
