"""The committed dashboards/, alerts/ and the chart's copies are what `sloscope build` makes from the built-in spec."""

from __future__ import annotations

from pathlib import Path

import yaml

from sloscope.generators import RULES_FILE
from sloscope.generators.build import CHART_FILES, build
from sloscope.generators.rules import CLASSES, DEFAULT_CONVENTIONS, render, rule_file
from sloscope.loading import default_spec, load_spec

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ("dashboards", "alerts", CHART_FILES)


def test_committed_generated_files_are_fresh(tmp_path: Path) -> None:
    written = build(default_spec(), tmp_path)
    assert written, "build wrote nothing"
    fresh = {p.relative_to(tmp_path) for p in written}
    committed = {p.relative_to(ROOT) for folder in GENERATED for p in (ROOT / folder).rglob("*") if p.is_file()}
    assert committed == fresh, f"{', '.join(GENERATED)} hold other files than a build makes: run make generate"
    stale = sorted(str(rel) for rel in fresh if (ROOT / rel).read_bytes() != (tmp_path / rel).read_bytes())
    assert not stale, f"stale generated files (run make generate and commit): {stale}"


def test_the_chart_carries_the_same_dashboards_and_rules_left_in_severity_classes(tmp_path: Path) -> None:
    """Dashboards byte for byte; the rules as the top-level file with the severity classes (page, ticket) left for
    the chart's template to render from its values: the same rules once rendered with the default conventions."""
    build(default_spec(), tmp_path)
    chart = tmp_path / CHART_FILES
    dashboards = sorted(p.name for p in (tmp_path / "dashboards").glob("*.json"))
    assert dashboards
    assert sorted(p.name for p in (chart / "dashboards").iterdir()) == dashboards
    for name in dashboards:
        assert (chart / "dashboards" / name).read_bytes() == (tmp_path / "dashboards" / name).read_bytes()
    chart_rules = yaml.safe_load((chart / "rules" / RULES_FILE).read_text(encoding="utf-8"))
    top_level = yaml.safe_load((tmp_path / "alerts" / RULES_FILE).read_text(encoding="utf-8"))
    assert chart_rules == rule_file(default_spec(), conventions=CLASSES)
    assert render(chart_rules["groups"], DEFAULT_CONVENTIONS) == top_level["groups"]


def test_the_chart_spec_reads_back_as_the_spec_it_was_built_from(tmp_path: Path) -> None:
    spec = default_spec()
    build(spec, tmp_path)
    assert load_spec(tmp_path / CHART_FILES / "slo.yaml") == spec


def test_the_preview_lists_every_panel_of_every_dashboard() -> None:
    from sloscope.generators.dashboards import dashboards
    from sloscope.generators.preview import preview

    rendered = dashboards(default_spec())
    text = preview(rendered)
    for name, dashboard in rendered.items():
        assert f"(`{name}`, uid `{dashboard['uid']}`)" in text
        for panel in dashboard["panels"]:
            title = panel["title"].replace("|", "\\|")
            assert (f"| **{title}** | row |" if panel["type"] == "row" else f"| {title} | {panel['type']} |") in text
