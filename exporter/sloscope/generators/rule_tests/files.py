"""The promtool test file: every test group, recording rules first, then the alerts group by group."""

from __future__ import annotations

from typing import Any

from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import EVALUATION_INTERVAL, _Rules
from sloscope.generators.rule_tests.pipeline_alerts import _pipeline_tests
from sloscope.generators.rule_tests.predictor_alerts import _predictor_tests
from sloscope.generators.rule_tests.recording import _recording_tests
from sloscope.generators.rule_tests.slo_alerts import _burn_tests
from sloscope.generators.rule_tests.upstream_alerts import _upstream_tests
from sloscope.slo.spec import SLOSpec


def rule_tests(
    spec: SLOSpec,
    rule_file_name: str,
    *,
    thresholds: r.AlertThresholds = r.DEFAULT_THRESHOLDS,
    conventions: r.Conventions = r.DEFAULT_CONVENTIONS,
) -> dict[str, Any]:
    """A promtool test file for the rules :func:`~sloscope.generators.rules.rule_file` generates with the same
    spec, thresholds and conventions; ``rule_file_name`` is the rule file's path relative to the test file."""
    groups = r.groups(spec, thresholds=thresholds, conventions=conventions)
    rules = _Rules([rule for group in groups for rule in group["rules"] if "alert" in rule])
    tests = [
        *_recording_tests(spec),
        *_burn_tests(spec, rules, thresholds),
        *_predictor_tests(spec, rules, thresholds),
        *_pipeline_tests(rules, thresholds),
        *_upstream_tests(rules, thresholds),
    ]
    return {
        "rule_files": [rule_file_name],
        "evaluation_interval": EVALUATION_INTERVAL,
        "fuzzy_compare": True,
        # Alerts read the recording rules: evaluate those first at every step, as one rule group would.
        "group_eval_order": [group["name"] for group in groups],
        "tests": tests,
    }
