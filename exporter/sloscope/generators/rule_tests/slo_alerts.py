"""Tests of the burn-rate alerts, per class and SLO: traffic that pages, traffic between the ticket and the page
thresholds, traffic that must stay silent (no violation, too few requests), and the time to page: how many
minutes after every request starts missing the page fires (:func:`time_to_page`, also the table in
docs/dashboards-and-alerts.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import (
    MODEL,
    POOL,
    TARGET,
    Test,
    _accumulated,
    _alert_case,
    _counter,
    _extrapolated,
    _group,
    _minutes,
    _num,
    _Rules,
    _series,
)
from sloscope.generators.rule_tests.recording import _expr_case
from sloscope.generators.windows import PAGE, TICKET, BurnWindow, burn_windows
from sloscope.slo.spec import SLOClass, SLOSpec


@dataclass(frozen=True)
class TimeToPage:
    """How soon the page of one class and SLO fires once every request misses, at a steady request rate."""

    minutes: int
    """Minutes after the last healthy sample at which the page fires (silent one minute before)."""
    pair: BurnWindow
    """The window pair that fires first."""
    value: float
    """The alert's value then: the error ratio over that pair's long window."""
    healthy_minutes: int
    """Minutes of healthy traffic before the failure, enough to fill the longest page window."""
    per_minute: int
    """Eligible requests a minute."""


def time_to_page(spec: SLOSpec, cls: SLOClass, slo: str, t: r.AlertThresholds) -> TimeToPage:
    """Healthy traffic for the longest page window, then 100% misses: the first minute the page holds.

    Computed with Prometheus's own ``rate()`` arithmetic (:func:`~.common._extrapolated`) on the series the test
    feeds promtool, and the rules' thresholds and traffic guard, so the generated promtool case proves it.
    """
    objective = cls.objectives.of(slo)
    pairs = [p for p in burn_windows(spec.period_of(cls)) if p.severity == PAGE]
    per_minute = max(100, math.ceil(t.slo_min_requests / 60))
    healthy = max(p.long_seconds for p in pairs) // 60
    horizon = 2 * healthy + 1
    requests = _accumulated(0, per_minute, horizon)
    violations = [0.0] * (healthy + 1) + _accumulated(per_minute, per_minute, horizon - healthy - 1)

    def ratio(minute: int, seconds: int) -> tuple[float, float]:
        window = seconds // 60
        total = _extrapolated(requests, 1, minute, window, counter=True, rate=True)
        return _extrapolated(violations, 1, minute, window, counter=True, rate=True) / total, total

    for minute in range(healthy + 1, horizon + 1):
        for pair in pairs:
            threshold = float(r.burn_threshold(pair, objective, t))
            long_ratio, long_rate = ratio(minute, pair.long_seconds)
            short_ratio, _ = ratio(minute, pair.short_seconds)
            counted = long_rate * pair.long_seconds >= t.slo_min_requests
            if long_ratio > threshold and short_ratio > threshold and counted:
                return TimeToPage(minute - healthy, pair, long_ratio, healthy, per_minute)
    raise AssertionError(f"the {slo} page of class {cls.name} never fires on total failure: a rule that cannot fire")


def time_to_page_table(spec: SLOSpec, t: r.AlertThresholds = r.DEFAULT_THRESHOLDS) -> str:
    """The Markdown table of :func:`time_to_page` per class and SLO (docs/dashboards-and-alerts.md carries it)."""
    lines = [
        "| class | SLO | objective | 1h page threshold | page fires after | first window pair |",
        "|---|---|---|---|---|---|",
    ]
    for cls in spec.classes:
        for slo in c.SLOS:
            objective = cls.objectives.of(slo)
            first = burn_windows(spec.period_of(cls))[0]
            threshold = f"{float(r.burn_threshold(first, objective, t)):.4g}"
            if r.is_capped(first, objective, t):
                threshold += f" (capped; {float(first.exact_threshold(objective)):.4g} uncapped)"
            delay = time_to_page(spec, cls, slo, t)
            lines.append(
                f"| {cls.name} | {slo} | {objective:g} | {threshold} | {delay.minutes} min | "
                f"{delay.pair.long} and {delay.pair.short} |"
            )
    return "\n".join(lines) + "\n"


def _time_to_page_test(spec: SLOSpec, cls: SLOClass, slo: str, rules: _Rules, t: r.AlertThresholds) -> Test:
    delay = time_to_page(spec, cls, slo, t)
    healthy, total = delay.healthy_minutes, delay.per_minute
    which = {c.SLO_CLASS: cls.name, c.SLO: slo}
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.ROUTING: c.ROUTING_PREDICTED, **which}
    minutes = healthy + delay.minutes + 5
    fires_at = healthy + delay.minutes
    expected = rules.expect(r.ERROR_BUDGET_BURN_PAGE, {c.MODEL: MODEL, c.POOL: POOL, **which}, delay.value, **which)
    return _group(
        f"{r.ERROR_BUDGET_BURN_PAGE} for {cls.name} {slo} fires {delay.minutes} minutes after {total} requests a "
        f"minute go from no miss to all missing (objective {cls.objectives.of(slo)}; {delay.pair.long} window)",
        [
            *_eligible(labels, _counter(total, minutes)),
            # The violations counter exists at 0 from the start, as sloscope publishes it with its requests.
            _series(
                c.SLO_VIOLATIONS.exposed_name,
                labels,
                f"0x{healthy} {_num(total)}+{_num(total)}x{minutes - healthy - 1}",
            ),
        ],
        alert_rule_test=[
            _alert_case(r.ERROR_BUDGET_BURN_PAGE, fires_at - 1),
            _alert_case(r.ERROR_BUDGET_BURN_PAGE, fires_at, [expected]),
        ],
    )


def _eligible(labels: dict[str, str], values: str, sampled: str | None = None) -> list[dict[str, str]]:
    """The eligible-request counter and its sampled twin (the same values when every trace is kept)."""
    return [
        _series(c.SLO_REQUESTS.exposed_name, labels, values),
        _series(c.SAMPLED_SLO_REQUESTS.exposed_name, labels, values if sampled is None else sampled),
    ]


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
    if spec.classes:
        tests += _placement_tests(spec, spec.classes[0], rules, t)
    return tests


def _placement_tests(spec: SLOSpec, cls: SLOClass, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    """10,000 answered requests and 150 failures before any pod an hour (processors/placement.py): failures no pool
    could be told for burn no budget and page nothing (a ticket of their own says so); the same failures placed in
    the pool are bad events of its budget (150 of 10,150)."""
    answered, failed = 10_000 / 60, 150 / 60  # a minute
    minutes, at = 90, 65  # the 1h windows full
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls.name, c.ROUTING: c.ROUTING_PREDICTED}

    def slo_series(total: float, missed: float) -> list[dict[str, str]]:
        out = []
        for slo in c.SLOS:
            out += _eligible({**labels, c.SLO: slo}, _counter(total, minutes))
            out.append(_series(c.SLO_VIOLATIONS.exposed_name, {**labels, c.SLO: slo}, _counter(missed, minutes)))
        return out

    requests = _series(c.REQUESTS.exposed_name, labels, _counter(answered, minutes))
    without = _series(c.REQUESTS_WITHOUT_POOL.exposed_name, {c.REASON: c.FAILURE_SHED}, _counter(failed, minutes))
    silent = [_alert_case(name, at) for name in (r.ERROR_BUDGET_BURN_PAGE, r.ERROR_BUDGET_BURN_TICKET)]
    ratio = c.slo_error_ratio_rule("1h")
    pool_labels = {k: v for k, v in labels.items() if k != c.ROUTING}
    rates = [
        _extrapolated(_accumulated(0, per_minute, minutes + 1), 1, at, 60, counter=True, rate=True)
        for per_minute in (failed, answered + failed)
    ]
    burn = rates[0] / rates[1]  # as Prometheus computes it: 150 / 10,150 but for the last bits
    burnt = _expr_case(ratio, at, {(ratio, slo): burn for slo in c.SLOS}, pool_labels)

    def burning(name: str, severity: str, value: float) -> dict[str, object]:
        """The case of alert ``name`` at ``at``: firing for every SLO whose objective leaves a ``severity`` pair's
        threshold under the error ratio ``value``."""
        firing = [
            rules.expect(name, {**pool_labels, c.SLO: slo}, value, slo_class=cls.name, slo=slo)
            for slo in c.SLOS
            if any(
                value > r.burn_threshold(p, cls.objectives.of(slo), t)
                for p in burn_windows(spec.period_of(cls))
                if p.severity == severity
            )
        ]
        return _alert_case(name, at, firing)

    unburnt = _expr_case(ratio, at, {(ratio, slo): 0.0 for slo in c.SLOS}, pool_labels)
    ticket = rules.expect(r.FAILURES_WITHOUT_POOL, TARGET, 150 / 10_150)
    hold = _minutes(t.without_pool_for)
    return [
        _group(
            f"failures no pool could be told for (150 an hour beside 10,000 answered requests) page nothing and "
            f"burn no budget; {r.FAILURES_WITHOUT_POOL} opens a ticket",
            [*slo_series(answered, 0), requests, without],
            alert_rule_test=[*silent, _alert_case(r.FAILURES_WITHOUT_POOL, at, [ticket])],
            promql_expr_test=[unburnt],
        ),
        _group(
            "aborted requests whose clients left before any deadline passed are failures, not misses: 30 of 100 "
            "requests a minute page nothing",
            [
                *slo_series(100, 0),
                _series(c.REQUESTS_FAILED.exposed_name, {**labels, c.REASON: c.FAILURE_ABORTED}, _counter(30, minutes)),
            ],
            alert_rule_test=silent,
        ),
        _group(
            "aborted requests whose clients left after the TTFT target are misses: 30 of 100 requests a minute burn "
            "the budget",
            [*slo_series(100, 30)],
            alert_rule_test=[
                burning(r.ERROR_BUDGET_BURN_PAGE, PAGE, 0.3),
                burning(r.ERROR_BUDGET_BURN_TICKET, TICKET, 0.3),
            ],
        ),
        _group(
            "the same failures placed in their pool burn its budget: 150 bad events in 10,150 an hour",
            [*slo_series(answered + failed, failed), requests],
            alert_rule_test=[
                burning(r.ERROR_BUDGET_BURN_PAGE, PAGE, burn),
                burning(r.ERROR_BUDGET_BURN_TICKET, TICKET, burn),
                _alert_case(r.FAILURES_WITHOUT_POOL, 4 + hold),
            ],
            promql_expr_test=[burnt],
        ),
    ]


def _burn_tests_of(spec: SLOSpec, cls: SLOClass, slo: str, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    objective = cls.objectives.of(slo)
    pairs = burn_windows(spec.period_of(cls))
    page = [float(r.burn_threshold(p, objective, t)) for p in pairs if p.severity == PAGE]
    ticket = [float(r.burn_threshold(p, objective, t)) for p in pairs if p.severity == TICKET]
    at = 10
    which = {c.SLO_CLASS: cls.name, c.SLO: slo}
    alert_labels = {c.MODEL: MODEL, c.POOL: POOL, **which}

    def slo_series(model: str, total: int, missed: int, sampled: int | None = None) -> list[dict[str, str]]:
        """A minute's ``total`` eligible requests, ``missed`` of them missed; ``sampled`` of them sampled (every
        one when None), the rest estimated from their adjusted counts."""
        labels = {c.MODEL: model, c.POOL: POOL, c.ROUTING: c.ROUTING_PREDICTED, **which}
        out = _eligible(labels, _counter(total, 30), _counter(total if sampled is None else sampled, 30))
        if missed:
            out.append(_series(c.SLO_VIOLATIONS.exposed_name, labels, _counter(missed, 30)))
        return out

    tests: list[Test] = [_time_to_page_test(spec, cls, slo, rules, t)]
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
    # guard is on, a quiet model whose every request misses but too few requests were counted, and one whose
    # estimated requests (1 in 10 sampled) clear the guard while those sampled do not.
    series = slo_series("healthy-model", 100, 0)
    quiet_at = min(t.slo_min_requests - 1, 30)
    if quiet_at >= 1:
        series += slo_series("quiet-model", 1, 1)
        if 10 * quiet_at >= t.slo_min_requests:
            series += slo_series("sampled-model", 10, 10, sampled=1)
    silent_at = quiet_at if quiet_at >= 1 else at
    tests.append(
        _group(
            f"burn-rate alerts stay silent for {cls.name} {slo} without violations"
            + (f" and with fewer than {t.slo_min_requests} requests sampled" if quiet_at >= 1 else ""),
            series,
            alert_rule_test=[
                _alert_case(r.ERROR_BUDGET_BURN_PAGE, silent_at),
                _alert_case(r.ERROR_BUDGET_BURN_TICKET, silent_at),
            ],
        )
    )
    return tests
