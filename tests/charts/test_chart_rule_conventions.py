"""The chart renders its PrometheusRule from its values (severities, extra alert labels, runbook base URL), exactly as
``sloscope build`` renders the rules with the same conventions, and the promtool tests hold for what it renders with
its default values."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from sloscope.generators import RULES_FILE
from sloscope.generators.rules import Conventions, rule_file
from sloscope.loading import default_spec

from .conftest import ROOT, Rendered, template

CUSTOM = (
    "--set", "prometheusRule.enabled=true",
    "--set", "prometheusRule.severities.page=P1",
    "--set", "prometheusRule.severities.ticket=P3",
    "--set", "prometheusRule.alertLabels.team=inference",
    "--set", "prometheusRule.runbookBaseURL=https://runbooks.example.org/sloscope/",
)  # fmt: skip


def alerts(groups: list[dict[str, object]]) -> list[dict[str, object]]:
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]  # type: ignore[attr-defined]


def test_the_rules_the_chart_renders_by_default_pass_the_promtool_tests(
    render: Callable[..., Rendered], promtool: Path, tmp_path: Path
) -> None:
    groups = render("defaults", "--set", "prometheusRule.enabled=true").one("PrometheusRule")["spec"]["groups"]
    assert {rule["labels"]["severity"] for rule in alerts(groups)} == {"critical", "warning"}
    (tmp_path / "rendered-rules.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    tests = yaml.safe_load((ROOT / "alerts" / "tests" / "sloscope-rules.test.yaml").read_text(encoding="utf-8"))
    tests["rule_files"] = ["rendered-rules.yaml"]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    done = subprocess.run(
        [str(promtool), "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "SUCCESS" in done.stdout


def test_the_chart_renders_its_values_conventions_as_sloscope_build_does(helm: Path) -> None:
    done = template(helm, *CUSTOM)
    assert done.returncode == 0, done.stderr
    [rule] = [doc for doc in yaml.safe_load_all(done.stdout) if doc and doc["kind"] == "PrometheusRule"]
    conventions = Conventions(
        {"page": "P1", "ticket": "P3"}, {"team": "inference"}, "https://runbooks.example.org/sloscope"
    )
    assert rule["spec"]["groups"] == rule_file(default_spec(), conventions=conventions)["groups"]
    rendered = alerts(rule["spec"]["groups"])
    page = [r for r in rendered if r["alert"] == "SloscopeErrorBudgetBurnPage"]
    assert page and all(r["labels"]["severity"] == "P1" for r in page)
    assert {r["labels"]["severity"] for r in rendered} == {"P1", "P3"}
    assert all(r["labels"]["team"] == "inference" for r in rendered)
    assert (
        rendered[0]["annotations"]["runbook_url"] == f"https://runbooks.example.org/sloscope/{rendered[0]['alert']}.md"
    )


def test_the_chart_refuses_an_alert_label_named_severity_and_a_relative_runbook_base(helm: Path) -> None:
    for setting in ("prometheusRule.alertLabels.severity=low", "prometheusRule.runbookBaseURL=docs/runbooks"):
        done = template(helm, "--set", "prometheusRule.enabled=true", "--set", setting)
        assert done.returncode != 0, setting
        assert "values don't meet the specifications of the schema" in done.stderr, done.stderr


def test_the_committed_rule_file_is_the_default_conventions(tmp_path: Path) -> None:
    committed = yaml.safe_load((ROOT / "alerts" / RULES_FILE).read_text(encoding="utf-8"))
    assert committed == rule_file(default_spec())
