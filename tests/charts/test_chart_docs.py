"""docs/deploy.md and the chart's README against the chart: values table, ci/ table, links, and the examples
rendered with helm and checked by sloscope; the custom-spec workflow of deploy.md, run for real."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sloscope.generators import RULES_FILE
from sloscope.generators.build import CHART_FILES, build
from sloscope.slo.spec import SLOSpec
from tests.charts.conftest import CHART, RELEASE, ROOT, Rendered, manifests, run_helm

DEPLOY = ROOT / "docs" / "deploy.md"
README = CHART / "README.md"
SLOSCOPE = Path(sys.executable).with_name("sloscope")


def _documented_values() -> dict[str, Any]:
    """Keys of values.yaml that carry a ``# --`` comment, with their defaults."""
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    documented: dict[str, Any] = {}
    path: list[str] = []
    commented = False
    for line in text.splitlines():
        if not line.strip():
            commented = False
            continue
        if line.strip().startswith("#"):
            commented = commented or line.strip().startswith("# --")
            continue
        match = re.match(r"^(\s*)(\w+):", line)
        if not match:
            continue
        path = [*path[: len(match.group(1)) // 2], match.group(2)]
        if commented:
            value = values
            for key in path:
                value = value[key]
            documented[".".join(path)] = value
        commented = False
    return documented


def _table(text: str, header: str) -> list[list[str]]:
    """Cells of the markdown table whose header row starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_the_values_table_lists_every_documented_value_with_its_default() -> None:
    rows = _table(README.read_text(encoding="utf-8"), "key")
    table = {row[0].strip("`"): json.loads(row[1].strip("`")) for row in rows}
    assert table == _documented_values()


def test_every_ci_file_is_described() -> None:
    rows = _table(README.read_text(encoding="utf-8"), "`ci/` values file")
    assert sorted(row[0].strip("`") for row in rows) == sorted(p.name for p in (CHART / "ci").glob("*.yaml"))


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", [DEPLOY, README, ROOT / "charts" / "README.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", doc.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name}: broken link to {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"{doc.name}: no heading #{anchor} in {target}"


def _sloscope_value_blocks() -> list[dict[str, Any]]:
    """The YAML blocks of deploy.md that are values of this chart (they start with a comment saying so)."""
    blocks = re.findall(r"```yaml\n(# sloscope[- ]values.*?)```", DEPLOY.read_text(encoding="utf-8"), re.DOTALL)
    return [yaml.safe_load(block) for block in blocks]


def test_deploy_md_has_value_examples() -> None:
    assert len(_sloscope_value_blocks()) == 3


@pytest.mark.parametrize("index", range(3))
def test_the_value_examples_of_deploy_md_render_and_pass_check_config(
    render: Callable[..., Rendered], tmp_path: Path, index: int
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(_sloscope_value_blocks()[index]), encoding="utf-8")
    rendered = render("defaults", "--values", str(values))
    for name in (f"{RELEASE}-settings", f"{RELEASE}-slo-spec"):
        for file, text in rendered.one("ConfigMap", name)["data"].items():
            (tmp_path / file).write_text(text, encoding="utf-8")
    done = subprocess.run(
        [str(SLOSCOPE), "check-config", str(tmp_path / "settings.yaml")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


CUSTOM_SPEC = {
    "version": "sloscope/v1",
    "service": "chat",
    "compliance_period": "7d",
    "classes": [
        {"name": "realtime", "match": {"ttft_ms": {"max": 300}}, "objectives": {"ttft": 0.999, "tpot": 0.99}},
        {"name": "batch", "match": {"has_slo": True}, "objectives": {"ttft": 0.9}},
    ],
}


def test_a_chart_copy_built_from_ones_own_spec_carries_its_dashboards_rules_and_spec(
    helm: Path, tmp_path: Path
) -> None:
    """The workflow of deploy.md: sloscope build --slo-spec into a copy of the chart, then install that copy."""
    spec = SLOSpec.model_validate(CUSTOM_SPEC)
    build(spec, tmp_path / "build")
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "files")
    shutil.copytree(tmp_path / "build" / CHART_FILES, chart / "files")
    done = run_helm(
        helm, "template", RELEASE, str(chart), "--kube-version", "1.29.0", "--set", "prometheusRule.enabled=true"
    )
    assert done.returncode == 0, done.stderr
    rendered = Rendered("custom spec", manifests(done.stdout))
    own_rules = yaml.safe_load((tmp_path / "build" / "alerts" / RULES_FILE).read_text(encoding="utf-8"))
    assert rendered.one("PrometheusRule")["spec"]["groups"] == own_rules["groups"]
    built_in_rules = yaml.safe_load((ROOT / "alerts" / RULES_FILE).read_text(encoding="utf-8"))
    assert own_rules["groups"] != built_in_rules["groups"]
    spec_text = rendered.one("ConfigMap", f"{RELEASE}-slo-spec")["data"]["slo.yaml"]
    assert SLOSpec.model_validate(yaml.safe_load(spec_text)) == spec
    dashboards = {
        name: text
        for m in rendered.all("ConfigMap")
        if "grafana_dashboard" in m["metadata"]["labels"]
        for name, text in m["data"].items()
    }
    assert dashboards == {
        p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "build" / "dashboards").glob("*.json")
    }
    assert any("chat" in text for text in dashboards.values()), "the dashboards are named after the spec's service"
