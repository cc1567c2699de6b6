"""The ``sloscope-slo-recording`` group: per window of :data:`~sloscope.conventions.RULE_WINDOWS`, the
eligible-request rate (estimated, and as sampled) and the error ratio by model, pool, SLO class and SLO, then the
objective, error budget and current burn rate of each (:mod:`.budget`; the compliance period is counted in the
``sloscope-slo-budget`` group)."""

from __future__ import annotations

from collections.abc import Mapping

from sloscope import conventions as c
from sloscope.generators.rules.budget import objective_rules
from sloscope.generators.rules.common import Matcher, Rule, _by, _selector
from sloscope.slo.spec import SLOSpec

RECORDING_INTERVAL = "1m"
"""Evaluation interval of the recording group. The 3d windows read days of samples; once a minute bounds that
cost whatever the server's global interval, and a minute is well below the shortest alert window (5m)."""


def _sum_rate(metric: str, window: str, matchers: Mapping[str, Matcher] | None = None) -> str:
    return f"sum by ({_by(c.RULE_LABELS)}) (rate({_selector(metric, matchers)}[{window}]))"


def _error_ratio_expr(window: str) -> str:
    # A violations series appears with its first violation: "or requests * 0" gives the label sets that have
    # eligible requests but no violation yet an error ratio of 0 instead of no data.
    requests = _sum_rate(c.SLO_REQUESTS.exposed_name, window)
    violations = _sum_rate(c.SLO_VIOLATIONS.exposed_name, window)
    return f"(\n  {violations}\n  or\n  {requests} * 0\n)\n/\n{requests}"


def recording_rules(spec: SLOSpec) -> list[Rule]:
    """Request rate and error ratio per window, then the objective, error budget and current burn rate."""
    rules: list[Rule] = []
    for window in c.RULE_WINDOWS:
        rules.append(
            {
                "record": c.slo_requests_rate_rule(window),
                "expr": _sum_rate(c.SLO_REQUESTS.exposed_name, window),
            }
        )
        rules.append(
            {
                "record": c.slo_sampled_requests_rate_rule(window),
                "expr": _sum_rate(c.SAMPLED_SLO_REQUESTS.exposed_name, window),
            }
        )
        rules.append({"record": c.slo_error_ratio_rule(window), "expr": _error_ratio_expr(window)})
    rules += objective_rules(spec)
    return rules
