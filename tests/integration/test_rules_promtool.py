"""The generated rules and their generated tests, run by the real promtool: check rules, then test rules."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sloscope.generators.rule_tests import rule_tests
from sloscope.generators.rules import AlertThresholds, Conventions, rule_file
from sloscope.loading import default_spec
from sloscope.slo.spec import SLOSpec

pytestmark = pytest.mark.integration


def custom_spec() -> SLOSpec:
    """Objectives and a compliance period other than the built-in ones, so thresholds and windows move."""
    return SLOSpec.model_validate(
        {
            "version": "sloscope/v1",
            "compliance_period": "28d",
            "classes": [
                {
                    "name": "premium",
                    "match": {"ttft_ms": {"max": 500}},
                    "objectives": {"ttft": 0.999, "tpot": 0.995, "goodput": 0.99},
                    "compliance_period": "30d",
                },
                {"name": "batch", "match": {"has_slo": True}, "objectives": {"goodput": 0.8}},
            ],
        }
    )


CASES = [
    pytest.param(default_spec(), AlertThresholds(), id="built-in spec"),
    pytest.param(custom_spec(), AlertThresholds(), id="custom objectives and periods"),
    pytest.param(
        default_spec(),
        AlertThresholds(
            slo_min_requests=0,
            calibration_tolerance=0.3,
            calibration_min_predictions=50,
            calibration_for="10m",
            model_stale_seconds=1800,
            headroom_min_share=0.5,
            queue_full_ratio=0.5,
            join_ratio_min=0.99,
            scrape_failure_ratio=0.3,
        ),
        id="custom thresholds, no traffic guard",
    ),
]


def run(promtool: Path, *args: str, cwd: Path) -> str:
    result = subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=240, check=False)
    output = f"$ promtool {' '.join(args)}\n{result.stdout}{result.stderr}"
    assert result.returncode == 0, output
    return output


def write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120), encoding="utf-8")


@pytest.mark.parametrize(("spec", "thresholds"), CASES)
def test_promtool_checks_the_rules_and_passes_the_generated_tests(
    promtool: Path, tmp_path: Path, spec: SLOSpec, thresholds: AlertThresholds
) -> None:
    # Conventions of another stack: the tests follow the rules' severities, labels and runbook URLs.
    conventions = Conventions({"page": "P1", "ticket": "P3"}, {"team": "inference"}, "https://runbooks.internal")
    write(tmp_path / "rules.yaml", rule_file(spec, thresholds=thresholds, conventions=conventions))
    tests = rule_tests(spec, "rules.yaml", thresholds=thresholds, conventions=conventions)
    write(tmp_path / "rules.test.yaml", tests)

    checked = run(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert "SUCCESS" in checked, checked
    tested = run(promtool, "test", "rules", "rules.test.yaml", cwd=tmp_path)
    assert "SUCCESS" in tested, tested


def test_promtool_fails_the_generated_tests_when_a_threshold_drifts(promtool: Path, tmp_path: Path) -> None:
    """The generated tests have teeth: rules whose page threshold moved no longer pass them."""
    spec = default_spec()
    rules = rule_file(spec)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "SloscopeErrorBudgetBurnPage":
                rule["expr"] = rule["expr"].replace(" > 0.", " > 0.9")
    write(tmp_path / "rules.yaml", rules)
    write(tmp_path / "rules.test.yaml", rule_tests(spec, "rules.yaml"))
    result = subprocess.run(
        [str(promtool), "test", "rules", "rules.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    assert "SloscopeErrorBudgetBurnPage" in result.stdout + result.stderr
