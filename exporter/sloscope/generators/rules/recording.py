"""The ``sloscope-slo-recording`` group: per window of :data:`~sloscope.conventions.RULE_WINDOWS`, the
eligible-request rate and the error ratio by model, pool, SLO class and SLO, plus the error ratio over each
class's compliance period."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sloscope import conventions as c
from sloscope.generators.rules.common import Matcher, Rule, _by, _one_of, _selector
from sloscope.generators.windows import format_duration as _format_duration
from sloscope.slo.spec import SLOSpec

RECORDING_INTERVAL = "1m"
"""Evaluation interval of the recording group. The 3d windows and the compliance-period ratio read days of
samples; once a minute bounds that cost whatever the server's global interval, and a minute is well below
the shortest alert window (5m)."""


def _sum_rate(metric: str, window: str, matchers: Mapping[str, Matcher] | None = None) -> str:
    return f"sum by ({_by(c.RULE_LABELS)}) (rate({_selector(metric, matchers)}[{window}]))"


def _error_ratio_expr(window: str) -> str:
    # A violations series appears with its first violation: "or requests * 0" gives the label sets that have
    # eligible requests but no violation yet an error ratio of 0 instead of no data.
    requests = _sum_rate(c.SLO_REQUESTS.exposed_name, window)
    violations = _sum_rate(c.SLO_VIOLATIONS.exposed_name, window)
    return f"(\n  {violations}\n  or\n  {requests} * 0\n)\n/\n{requests}"


def period_ratio_rule(period_seconds: float) -> str | None:
    """Name of the recorded error ratio over a compliance period, or None when none is recorded for it.

    None for a period that is not a whole number of hours (the ratio is summed from hourly windows) and for
    one that is already a rule window (``1d``: :func:`~sloscope.conventions.slo_error_ratio_rule` of it is
    recorded from the counters directly, with the same meaning).
    """
    if period_seconds % 3600 != 0:
        return None
    window = _format_duration(period_seconds)
    return None if window in c.RULE_WINDOWS else c.slo_error_ratio_rule(window)


def _period_ratio_expr(period: str, classes: Sequence[str]) -> str:
    """Traffic-weighted error ratio over ``period``: the sum of hourly violation rates over the sum of hourly
    request rates, both read from the 1h rules at aligned hourly steps (which tile the period exactly).

    Sloth records ``ratio_rate30d`` as the plain mean of its 5m ratios (``avg_over_time``), which gives a quiet
    night hour with 10 requests as much weight as a peak hour with 10,000. The objective is a share of
    *requests*, so the budget must be counted in requests: weighting each hour by its traffic does that, and
    equals violations / requests over the period up to the rate extrapolation at window edges. An hour with no
    eligible request contributes nothing (its 0/0 ratio is filtered out instead of poisoning the sum). Reading
    hourly recorded samples keeps the cost at one point per series per hour of the period, instead of every raw
    sample of 28 days.
    """
    matchers: dict[str, Matcher] = {c.SLO_CLASS: _one_of(classes) if len(classes) > 1 else classes[0]}
    ratio = _selector(c.slo_error_ratio_rule("1h"), matchers)
    requests = _selector(c.slo_requests_rate_rule("1h"), matchers)
    return (
        f"sum_over_time(\n  (\n    {ratio}\n    * ({requests} > 0)\n  )[{period}:1h]\n)\n"
        f"/\n"
        f"sum_over_time({requests}[{period}:1h])"
    )


def recording_rules(spec: SLOSpec) -> list[Rule]:
    """Request rate and error ratio per window, then the error ratio over each distinct compliance period."""
    rules: list[Rule] = []
    for window in c.RULE_WINDOWS:
        rules.append(
            {
                "record": c.slo_requests_rate_rule(window),
                "expr": _sum_rate(c.SLO_REQUESTS.exposed_name, window),
            }
        )
        rules.append({"record": c.slo_error_ratio_rule(window), "expr": _error_ratio_expr(window)})
    by_period: dict[float, list[str]] = {}
    for cls in spec.classes:
        by_period.setdefault(spec.period_of(cls), []).append(cls.name)
    for period in sorted(by_period):
        name = period_ratio_rule(period)
        if name is not None:
            rules.append({"record": name, "expr": _period_ratio_expr(_format_duration(period), by_period[period])})
    return rules
