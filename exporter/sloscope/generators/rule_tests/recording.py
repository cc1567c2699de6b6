"""Tests of the ``sloscope-slo-recording`` and ``sloscope-slo-budget`` groups: exact request rates and error ratios
in every window, the traffic weighting of the compliance-period error ratio, and every budget series."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import (
    MODEL,
    POOL,
    Test,
    _counter,
    _extrapolated,
    _group,
    _num,
    _series,
)
from sloscope.generators.rules.budget import TILE
from sloscope.generators.windows import duration_seconds
from sloscope.slo.spec import SLOSpec


def _recording_tests(spec: SLOSpec) -> list[Test]:
    cls = spec.classes[0].name if spec.classes else spec.default_class
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls}
    at = 10  # minutes
    requests = {(c.ROUTING_PREDICTED, c.SLO_TTFT): 60, (c.ROUTING_DEFAULT, c.SLO_TTFT): 40}
    violations = {(c.ROUTING_PREDICTED, c.SLO_TTFT): 6, (c.ROUTING_DEFAULT, c.SLO_TTFT): 4}
    requests[(c.ROUTING_PREDICTED, c.SLO_TPOT)] = 50  # eligible for TPOT, never violated: no violations series
    series = [
        _series(c.SLO_REQUESTS.exposed_name, {**labels, c.ROUTING: routing, c.SLO: slo}, _counter(n))
        for (routing, slo), n in requests.items()
    ]
    series += [
        _series(c.SLO_VIOLATIONS.exposed_name, {**labels, c.ROUTING: routing, c.SLO: slo}, _counter(n))
        for (routing, slo), n in violations.items()
    ]
    # sampled one in ten: the estimated counts above, a tenth of them observed
    series += [
        _series(c.SAMPLED_SLO_REQUESTS.exposed_name, {**labels, c.ROUTING: routing, c.SLO: slo}, _counter(n // 10))
        for (routing, slo), n in requests.items()
    ]
    cases = []
    for window in c.RULE_WINDOWS:
        minutes = duration_seconds(window) // 60
        rate = c.slo_requests_rate_rule(window)
        ratio = c.slo_error_ratio_rule(window)
        # Counted requests in the window (all of them while the window is longer than the data) per second.
        per_second = {
            slo: float(Fraction(total * min(minutes, at), minutes * 60))
            for slo, total in ((c.SLO_TTFT, 100), (c.SLO_TPOT, 50))
        }
        cases.append(_expr_case(rate, at, {(rate, slo): value for slo, value in per_second.items()}, labels))
        sampled = c.slo_sampled_requests_rate_rule(window)
        tenth = {
            slo: float(Fraction(total * min(minutes, at), minutes * 60))
            for slo, total in ((c.SLO_TTFT, 10), (c.SLO_TPOT, 5))
        }
        cases.append(_expr_case(sampled, at, {(sampled, slo): value for slo, value in tenth.items()}, labels))
        cases.append(_expr_case(ratio, at, {(ratio, c.SLO_TTFT): 0.1, (ratio, c.SLO_TPOT): 0.0}, labels))
    return [
        _group(
            "recording rules: 10 violations in 100 requests a minute give an error ratio of 0.1, summed over "
            "routing; requests without a violation give 0; 10 of them sampled a minute, a tenth of the rate",
            series,
            promql_expr_test=cases,
        ),
        _first_miss_test(cls),
        *_period_tests(spec),
    ]


def _first_miss_test(cls: str) -> Test:
    """3 misses in 120 requests: seen when the violations series starts at 0, lost when it is born at 3.

    sloscope creates a label set's violations at 0 with its first request (docs/metrics.md); a series whose first
    sample is already 3 has no increase in any window, so its misses never reach a ratio. Requests arrive 24 a
    minute for 5 minutes, the misses in minute 3. Expected values: the requests' and the violations' ``rate()`` as
    Prometheus extrapolates them (``_extrapolated``) over 5m at minute 6, samples at minutes 2..6: the 3 misses
    against 72 requests extrapolated to the window, 1/30; the late-born series 0.
    """
    at, window = 6, 5
    requests = [0.0, 24.0, 48.0, 72.0, 96.0, 120.0, *[120.0] * 5]
    violations = [0.0, 0.0, 0.0, 3.0, 3.0, 3.0, *[3.0] * 5]
    rate_of = {
        name: _extrapolated(values, 1, at, window, counter=True, rate=True)
        for name, values in (("requests", requests), ("violations", violations))
    }
    ratio = c.slo_error_ratio_rule(f"{window}m")
    started, born = (
        {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls},
        {c.MODEL: MODEL, c.POOL: "born-late", c.SLO_CLASS: cls},
    )
    slo = {c.ROUTING: c.ROUTING_PREDICTED, c.SLO: c.SLO_TTFT}
    series = [
        _series(c.SLO_REQUESTS.exposed_name, {**labels, **slo}, " ".join(_num(v) for v in requests))
        for labels in (started, born)
    ]
    series.append(_series(c.SLO_VIOLATIONS.exposed_name, {**started, **slo}, " ".join(_num(v) for v in violations)))
    late = " ".join(["_"] * 3 + [_num(v) for v in violations[3:]])  # first sample: 3, at minute 3
    series.append(_series(c.SLO_VIOLATIONS.exposed_name, {**born, **slo}, late))
    seen = _expr_case(ratio, at, {(ratio, c.SLO_TTFT): rate_of["violations"] / rate_of["requests"]}, started)
    lost = _expr_case(ratio, at, {(ratio, c.SLO_TTFT): 0.0}, born)
    cases = [{**seen, "exp_samples": [*lost["exp_samples"], *seen["exp_samples"]]}]  # one query, both series
    return _group(
        "recording rules: the first misses of a label set count when its violations start at 0, and are lost "
        "when the series is born at its first misses",
        series,
        promql_expr_test=cases,
    )


def _expr_case(
    expr: str, minute: int, expected: Mapping[tuple[str, str], float], labels: Mapping[str, str]
) -> dict[str, Any]:
    samples = []
    for (name, slo), value in sorted(expected.items()):
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted({**labels, c.SLO: slo}.items()))
        samples.append({"labels": f"{name}{{{inner}}}", "value": value})
    return {"expr": expr, "eval_time": f"{minute}m", "exp_samples": samples}


def _period_tests(spec: SLOSpec) -> list[Test]:
    """The compliance-period ratio weighs each count by its traffic: 0% of 90/min, then 100% of 30/min is 25%.

    Every minute's count of the last 5 minutes holds each request 5 times, in requests and violations alike,
    provided ``increase()`` extrapolates every count alike (by the 5th minute its 4 sampled minutes leave out):
    the counters start at 1000, not 0, so that no count is cut short at zero, and stay flat for 10 minutes at
    both ends, so the first and the newest counts hold no traffic. Then 5 x 1800 / 5 x 7200.
    """
    if not spec.classes:
        return []
    cls = spec.classes[0]
    name = r.period_ratio_rule(spec.period_of(cls))
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls.name}
    slo = {c.ROUTING: c.ROUTING_PREDICTED, c.SLO: c.SLO_TTFT}
    series = [
        _series(c.SLO_REQUESTS.exposed_name, {**labels, **slo}, "1000x10 1090+90x59 6430+30x59 8200x10"),
        _series(c.SLO_VIOLATIONS.exposed_name, {**labels, **slo}, "1000x70 1030+30x59 2800x10"),
    ]
    case = _expr_case(name, 140, {(name, c.SLO_TTFT): 0.25}, labels)
    return [
        _group(
            "compliance-period error ratio: a busy hour without misses and a quiet hour of misses weigh by "
            "traffic (25%), not as a mean of 5-minute ratios (50%)",
            series,
            promql_expr_test=[case],
        ),
        _budget_test(spec),
    ]


def _budget_test(spec: SLOSpec) -> Test:
    """1 miss in 250 requests a minute for an hour: the budget series of the first class's TTFT SLO, by the real
    model and pool of the counters, each value computed here as Prometheus computes it in float64."""
    cls = spec.classes[0]
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls.name}
    slo = {c.ROUTING: c.ROUTING_PREDICTED, c.SLO: c.SLO_TTFT}
    series = [
        _series(c.SLO_REQUESTS.exposed_name, {**labels, **slo}, _counter(250)),
        _series(c.SLO_VIOLATIONS.exposed_name, {**labels, **slo}, _counter(1)),
    ]
    objective = cls.objectives.of(c.SLO_TTFT)
    budget = 1 - objective
    ratio = 1 / 250  # in every window and over the period
    expected = {
        c.SLO_OBJECTIVE_RULE: objective,
        c.SLO_ERROR_BUDGET_RULE: budget,
        c.SLO_CURRENT_BURN_RATE_RULE: ratio / budget,
        c.slo_requests_increase_rule(TILE): 1250.0,
        c.slo_violations_increase_rule(TILE): 5.0,
        r.period_ratio_rule(spec.period_of(cls)): ratio,
        c.SLO_PERIOD_BURN_RATE_RULE: ratio / budget,
        c.SLO_PERIOD_ERROR_BUDGET_REMAINING_RULE: 1 - ratio / budget,
    }
    cases = [_expr_case(name, 60, {(name, c.SLO_TTFT): value}, labels) for name, value in expected.items()]
    return _group(
        f"budget series: 1 miss in 250 requests against the objective {objective:.2%} burns "
        f"{ratio / budget:.4g}x, leaving {1 - ratio / budget:.2%} of the period's budget, by model and pool",
        series,
        promql_expr_test=cases,
    )
