"""Every PromQL expression of the generated dashboards, parsed by the real promtool.

Grafana fills in variables before a query reaches Prometheus, so they are filled in here the same way: query
variables with a multi-value regex (what a selection of two values becomes), interval variables with their
default, Grafana's built-in ranges with durations. Each expression becomes a recording rule in one temporary
file, which ``promtool check rules`` parses with Prometheus's own parser; its report names the failing rule,
whose name leads back to the dashboard and panel.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sloscope.generators.dashboards import dashboards, panel_queries
from sloscope.loading import default_spec
from sloscope.slo.spec import SLOSpec

# Grafana's built-in variables that stand for durations, with values it could give them.
BUILT_IN = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "6h",
    "__range_s": "21600",
    "__range_ms": "21600000",
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*\w+\)$")


def substitute(expr: str, dashboard: dict[str, Any]) -> str:
    """``expr`` with every variable replaced as Grafana would before sending it."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in BUILT_IN:
            return BUILT_IN[name]
        variable = variables.get(name)
        if variable is None:
            raise AssertionError(f"{expr}: ${name} is neither a dashboard variable nor a built-in one")
        if variable["type"] == "interval":
            return str(variable["current"]["value"])
        if variable["type"] == "query":
            return "value-a|value-b"  # what a multi-value selection becomes inside =~"..."
        raise AssertionError(f"{expr}: ${name} is a {variable['type']} variable, not for use in PromQL")

    return _VARIABLE.sub(value, expr)


def queries(spec: SLOSpec) -> list[tuple[str, str]]:
    """(where, expression) of every panel query and every variable's series selector, variables filled in."""
    found = []
    for file_name, dashboard in dashboards(spec).items():
        for title, expr in panel_queries(dashboard):
            found.append((f"{file_name}: {title}", substitute(expr, dashboard)))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                match = _LABEL_VALUES.match(variable["query"])
                assert match, variable["query"]
                found.append((f"{file_name}: variable {variable['name']}", substitute(match.group(1), dashboard)))
    return found


def check(promtool: Path, tmp_path: Path, spec: SLOSpec) -> None:
    found = queries(spec)
    rules = [{"record": f"dashboard:query_{index}:check", "expr": expr} for index, (_, expr) in enumerate(found)]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, sort_keys=False))
    result = subprocess.run(
        [str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        output = result.stdout + result.stderr
        failing = sorted({int(n) for n in re.findall(r"dashboard:query_(\d+):check", output)})
        details = "\n".join(f"  {found[n][0]}:\n    {found[n][1]}" for n in failing)
        pytest.fail(f"promtool rejected dashboard queries:\n{output}\n{details}")
    assert f"{len(rules)} rules found" in result.stdout, result.stdout


def test_every_dashboard_query_parses(promtool: Path, tmp_path: Path) -> None:
    check(promtool, tmp_path, default_spec())


def test_queries_of_a_spec_with_other_classes_and_periods_parse(promtool: Path, tmp_path: Path) -> None:
    spec = SLOSpec.model_validate(
        {
            "version": "sloscope/v1",
            "service": "batch-llm",
            "compliance_period": "30d",
            "classes": [
                {"name": "gold", "objectives": {"ttft": 0.999, "tpot": 0.995, "goodput": 0.99}},
                {"name": "bronze-tier", "compliance_period": "7d", "objectives": {"goodput": 0.5}},
                {"name": "odd", "compliance_period": "36h"},
            ],
        }
    )
    check(promtool, tmp_path, spec)


def test_substitution_leaves_no_variable() -> None:
    for where, expr in queries(default_spec()):
        assert "$" not in expr, where
