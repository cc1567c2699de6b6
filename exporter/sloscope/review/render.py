"""The report as text: a self-contained HTML page (charts embedded as base64 PNG data URIs) and Markdown.

Both show the same sections and tables. Rendering is pure: it takes a :class:`Report` and returns a string;
:mod:`sloscope.review.main` writes the files. Numbers are rounded for reading (4 decimals); the CSV tables
beside the report keep full precision. Every text, the report's own and the spans', is escaped for the format
(:mod:`sloscope.review.escape`): a model named ``| <script>`` is a model name in both.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd

from sloscope.review.escape import markdown

__all__ = ["Chart", "Report", "Section", "cell", "render_html", "render_markdown"]


@dataclass(frozen=True)
class Chart:
    name: str  # file stem of the PNG beside the Markdown report
    title: str
    png: bytes


@dataclass(frozen=True)
class Section:
    heading: str
    text: str
    charts: list[Chart] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # (name of the CSV, table)
    csv_only: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # too long to read: written as CSV only


@dataclass(frozen=True)
class Report:
    title: str
    facts: list[tuple[str, str]]  # (label, value): the window, the source, the spec
    summary: list[str]  # one line per SLO: the verdict
    sections: list[Section]


def cell(value: object) -> str:
    """One table value for reading: 4 decimals, times in UTC, booleans as yes/no, missing as an em dash."""
    if value is None or value is pd.NA or value is pd.NaT:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, pd.Timestamp | datetime):
        return pd.Timestamp(value).tz_convert("UTC").strftime("%Y-%m-%d %H:%M:%SZ")
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4f}"
    return str(value)


def _rows(table: pd.DataFrame) -> list[list[str]]:
    return [[cell(value) for value in row] for row in table.astype(object).itertuples(index=False, name=None)]


def _html_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "<p><em>No rows.</em></p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in _rows(table))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; }
.summary li { margin: 0.2em 0; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1em; }
dt { font-weight: bold; }
"""


def render_html(report: Report) -> str:
    title = html.escape(report.title)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{title}</h1>",
        "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in report.facts) + "</dl>",
        "<h2>Summary</h2>",
        '<ul class="summary">' + "".join(f"<li>{html.escape(line)}</li>" for line in report.summary) + "</ul>",
    ]
    for section in report.sections:
        parts.append(f"<h2>{html.escape(section.heading)}</h2>")
        parts.append(f"<p>{html.escape(section.text)}</p>")
        for chart in section.charts:
            data = base64.b64encode(chart.png).decode("ascii")
            parts.append(f'<img alt="{html.escape(chart.title)}" src="data:image/png;base64,{data}">')
        for name, table in section.tables:
            parts.append(f"<h3>{html.escape(name)}</h3>")
            parts.append(_html_table(table))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _markdown_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "_No rows._\n"

    def line(values: list[str]) -> str:
        return "| " + " | ".join(markdown(v) for v in values) + " |"

    lines = [line([str(c) for c in table.columns]), "|" + "---|" * len(table.columns)]
    lines += [line(row) for row in _rows(table)]
    return "\n".join(lines) + "\n"


def render_markdown(report: Report, chart_folder: str) -> str:
    """Markdown with the charts as images at ``<chart_folder>/<name>.png`` (relative to the Markdown file)."""
    parts = [f"# {markdown(report.title)}\n"]
    parts += [f"- **{markdown(label)}**: {markdown(value)}" for label, value in report.facts]
    parts.append("\n## Summary\n")
    parts += [f"- {markdown(line)}" for line in report.summary]
    for section in report.sections:
        parts.append(f"\n## {markdown(section.heading)}\n")
        parts.append(markdown(section.text) + "\n")
        for chart in section.charts:
            parts.append(f"![{markdown(chart.title)}]({chart_folder}/{chart.name}.png)\n")
        for name, table in section.tables:
            parts.append(f"### {markdown(name)}\n")
            parts.append(_markdown_table(table))
    return "\n".join(parts).rstrip("\n") + "\n"
