"""The committed dashboards/ and alerts/ are exactly what `sloscope build` makes from the built-in spec."""

from __future__ import annotations

from pathlib import Path

from sloscope.generators.build import build
from sloscope.loading import default_spec

ROOT = Path(__file__).resolve().parents[2]


def test_committed_generated_files_are_fresh(tmp_path: Path) -> None:
    written = build(default_spec(), tmp_path)
    assert written, "build wrote nothing"
    fresh = {p.relative_to(tmp_path) for p in written}
    committed = {
        p.relative_to(ROOT) for folder in ("dashboards", "alerts") for p in (ROOT / folder).rglob("*") if p.is_file()
    }
    assert committed == fresh, "dashboards/ or alerts/ hold other files than a build makes: run make generate"
    stale = sorted(str(rel) for rel in fresh if (ROOT / rel).read_bytes() != (tmp_path / rel).read_bytes())
    assert not stale, f"stale generated files (run make generate and commit): {stale}"


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
