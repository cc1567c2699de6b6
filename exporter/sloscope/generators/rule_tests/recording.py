"""Tests of the ``sloscope-slo-recording`` group: exact request rates and error ratios in every window, and the
traffic weighting of the compliance-period error ratio."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import MODEL, POOL, Test, _counter, _group, _series
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
        cases.append(_expr_case(ratio, at, {(ratio, c.SLO_TTFT): 0.1, (ratio, c.SLO_TPOT): 0.0}, labels))
    return [
        _group(
            "recording rules: 10 violations in 100 requests a minute give an error ratio of 0.1, summed over "
            "routing; requests without a violation give 0",
            series,
            promql_expr_test=cases,
        ),
        *_period_tests(spec),
    ]


def _expr_case(
    expr: str, minute: int, expected: Mapping[tuple[str, str], float], labels: Mapping[str, str]
) -> dict[str, Any]:
    samples = []
    for (name, slo), value in sorted(expected.items()):
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted({**labels, c.SLO: slo}.items()))
        samples.append({"labels": f"{name}{{{inner}}}", "value": value})
    return {"expr": expr, "eval_time": f"{minute}m", "exp_samples": samples}


def _period_tests(spec: SLOSpec) -> list[Test]:
    """The compliance-period ratio weighs each hour by its traffic: 0% of 90/min, then 100% of 30/min is 25%."""
    if not spec.classes:
        return []
    cls = spec.classes[0]
    name = r.period_ratio_rule(spec.period_of(cls))
    if name is None:
        return []
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls.name}
    slo = {c.ROUTING: c.ROUTING_PREDICTED, c.SLO: c.SLO_TTFT}
    series = [
        _series(c.SLO_REQUESTS.exposed_name, {**labels, **slo}, "0+90x60 5430+30x59"),
        _series(c.SLO_VIOLATIONS.exposed_name, {**labels, **slo}, "0x60 30+30x59"),
    ]
    case = _expr_case(name, 120, {(name, c.SLO_TTFT): 0.25}, labels)
    return [
        _group(
            "compliance-period error ratio: a busy hour without misses and a quiet hour of misses weigh by "
            "traffic (25%), not as a mean of hourly ratios (50%)",
            series,
            promql_expr_test=[case],
        )
    ]
