"""Pieces every sloscope dashboard shares: panel helpers, units, thresholds and the final JSON.

Panels are built with grafanalib, whose output still carries keys of Grafana's pre-8 models (``span``,
``editable`` on panels, the old heatmap options, ``rows``). :func:`render` turns a grafanalib dashboard into
the JSON Grafana 11 stores: schema version 41, every panel and query on the ``$datasource`` variable, legacy
keys removed, ids and grid positions assigned in reading order. Its output validates against Grafana's v11.6
dashboard schema, which ``tests/unit/generators/test_dashboards.py`` checks.

Every helper demands a description: a panel nobody can read the meaning of is a panel nobody trusts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import grafanalib.core as gl
from grafanalib._gen import DashboardEncoder

from sloscope.generators.dashboards._render import GRID_WIDTH, finish
from sloscope.generators.dashboards.variables import DATASOURCE, TRACES_VARIABLE

SCHEMA_VERSION = 41
"""The dashboard schema version of Grafana 11.6, the one the shared JSON schema describes."""

TAG = "sloscope"

# Units (Grafana unit ids).
PERCENT = "percentunit"  # 0..1 shown as 0..100 %
SECONDS = "s"
MILLISECONDS = "ms"
REQUESTS_PER_SECOND = "reqps"
PER_SECOND = "cps"  # spans, scrapes, observations per second
SHORT = "short"
BYTES = "bytes"
NONE = "none"

# Colours (Grafana's named palette).
GREEN, YELLOW, ORANGE, RED, BLUE = "green", "yellow", "orange", "red", "blue"
TRANSPARENT = "transparent"

NO_TRAFFIC = "No traffic"
"""What a ratio panel shows where its denominator is zero (0/0 = NaN) or absent, instead of NaN or "No data"."""

FIRING_ALERTS = 'ALERTS{alertstate="firing", alertname=~"Sloscope.+"}'
"""Prometheus's own series of the generated alerts that fire now (every generated alert is named Sloscope...)."""

Format = Literal["time_series", "table", "heatmap"]
Steps = list[dict[str, Any]]


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel; ``refId`` is given by position."""

    expr: str
    legend: str = ""
    instant: bool = False
    exemplar: bool = False
    format: Format = "time_series"


def uid(service: str, file_name: str) -> str:
    """A dashboard UID from the service and the file name, as kubernetes-mixin derives its UIDs.

    Stable across builds and different for two services' copies of the same dashboard in one Grafana;
    32 hex digits, within Grafana's 40-character limit.
    """
    return hashlib.md5(f"{service}/{file_name}".encode(), usedforsecurity=False).hexdigest()


# ---------------------------------------------------------------------------------------------- thresholds


def steps(base: str, *points: tuple[float, str]) -> Steps:
    """Threshold steps: ``base`` below the first point, then each colour from its value up.

    The base step's value is a placeholder: Grafana replaces it with -Infinity when it loads the panel (the
    schema wants a number where exported JSON has null).
    """
    return [{"color": base, "value": 0}, *({"color": colour, "value": value} for value, colour in points)]


def at_least(objective: float) -> Steps:
    """Red below an objective, green at or above it: attainment against the SLO class's objective."""
    return steps(RED, (objective, GREEN))


# ------------------------------------------------------------------------------------------------- panels


def _targets(queries: Sequence[Query]) -> list[Any]:
    targets = []
    for index, query in enumerate(queries):
        target = gl.Target(
            expr=query.expr,
            legendFormat=query.legend or "__auto",
            refId=chr(ord("A") + index),
            datasource=DATASOURCE,
            instant=query.instant,
            format=query.format,
        ).to_json_data()
        target.update(range=not query.instant, editorMode="code")
        if query.exemplar:
            target["exemplar"] = True
        targets.append(target)
    return targets


def _common(title: str, description: str, queries: Sequence[Query], width: int, height: int) -> dict[str, Any]:
    if not description.strip():
        raise ValueError(f"panel {title!r} needs a description")
    if not queries:
        raise ValueError(f"panel {title!r} needs at least one query")
    if not 0 < width <= GRID_WIDTH:
        raise ValueError(f"panel {title!r}: width {width} is not within 1..{GRID_WIDTH}")
    return {
        "title": title,
        "description": description,
        "dataSource": DATASOURCE,
        "targets": _targets(queries),
        "gridPos": gl.GridPos(h=height, w=width, x=0, y=0),
        "maxDataPoints": None,
    }


def trace_link() -> dict[str, Any]:
    """A data link from an exemplar's ``trace_id`` to that trace in the ``$traces`` data source (Explore).

    Grafana shows exemplar links configured on the Prometheus data source itself (exemplarTraceIdDestinations);
    this link works without that configuration.
    """
    pane = {
        "datasource": f"${{{TRACES_VARIABLE}}}",
        "queries": [
            {
                "refId": "A",
                "datasource": {"uid": f"${{{TRACES_VARIABLE}}}"},
                "queryType": "traceql",
                "query": "${__data.fields.trace_id}",
            }
        ],
        "range": {"from": "${__from}", "to": "${__to}"},
    }
    url = "/explore?schemaVersion=1&panes=" + quote(json.dumps({"trace": pane}, sort_keys=True), safe="${}")
    return {
        "title": "Trace ${__data.fields.trace_id}",
        "url": url,
        "type": "link",
        "icon": "external link",
        "tooltip": "Open the exemplar's trace",
        "tags": [],
        "asDropdown": False,
        "targetBlank": True,
        "includeVars": False,
        "keepTime": False,
    }


def dashboard_link(title: str, dashboard_uid: str, variables: dict[str, str], tooltip: str) -> dict[str, Any]:
    """A data link to another dashboard of the service, keeping the time range, with ``variables`` set.

    Values may name the clicked series' labels (``${__field.labels.pool}``) or a table row's fields
    (``${__data.fields.pool}``); Grafana URL-encodes them.
    """
    query = "&".join(f"var-{name}={value}" for name, value in variables.items())
    return {
        "title": title,
        "url": f"/d/{dashboard_uid}?{query}&${{__url_time_range}}&${{datasource:queryparam}}",
        "type": "link",
        "icon": "dashboard",
        "tooltip": tooltip,
        "tags": [],
        "asDropdown": False,
        "targetBlank": False,
        "includeVars": False,
        "keepTime": False,
    }


def _no_traffic(defaults: dict[str, Any]) -> None:
    """Show :data:`NO_TRAFFIC` for a ratio without a denominator: no series at all, or a 0/0 = NaN value."""
    defaults["noValue"] = NO_TRAFFIC
    defaults["mappings"] = [
        *defaults.get("mappings", []),
        {"type": "special", "options": {"match": "nan", "result": {"text": NO_TRAFFIC}}},
    ]


def timeseries(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    width: int = 12,
    height: int = 8,
    thresholds: Steps | None = None,
    threshold_style: Literal["off", "line", "area", "line+area", "dashed"] = "off",
    stacked: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    trace_links: bool = False,
    links: Sequence[dict[str, Any]] = (),
    no_traffic: bool = False,
) -> Any:
    """A time series panel; ``thresholds`` drawn as ``threshold_style`` (an objective line, a red area...).

    ``no_traffic`` for a ratio: where its denominator is zero the panel says so (:data:`NO_TRAFFIC`).
    """
    defaults: dict[str, Any] = {"min": minimum, "max": maximum}
    if trace_links or links:
        defaults["links"] = [*([trace_link()] if trace_links else []), *links]
    if no_traffic:
        _no_traffic(defaults)
    return gl.TimeSeries(
        **_common(title, description, queries, width, height),
        unit=unit,
        thresholds=thresholds or steps(GREEN),
        thresholdsStyleMode=threshold_style,
        stacking={"mode": "normal", "group": "A"} if stacked else {"mode": "none", "group": "A"},
        fillOpacity=30 if stacked else 10,
        showPoints="never",
        tooltipMode="multi",
        tooltipSort="desc",
        legendDisplayMode="list",
        extraJson={"fieldConfig": {"defaults": defaults}},
    )


def stat(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    thresholds: Steps,
    width: int = 6,
    height: int = 5,
    decimals: int | None = None,
    mappings: Sequence[dict[str, Any]] = (),
    sparkline: bool = True,
    no_traffic: bool = False,
) -> Any:
    """A stat panel coloured by its thresholds, the last value shown (a sparkline of the range behind it)."""
    ratio: dict[str, Any] = {"mappings": list(mappings)}
    if no_traffic:
        _no_traffic(ratio)
    return gl.Stat(
        **_common(title, description, queries, width, height),
        format=unit,
        thresholds=thresholds,
        color={"mode": "thresholds"},
        decimals=decimals,
        mappings=ratio["mappings"],
        graphMode="area" if sparkline else "none",
        colorMode="value",
        reduceCalc="lastNotNull",
        textMode="value_and_name" if len(queries) > 1 else "auto",
        noValue=ratio.get("noValue", "No data"),
    )


def gauge(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    thresholds: Steps,
    minimum: float,
    maximum: float,
    width: int = 6,
    height: int = 6,
) -> Any:
    """A gauge of the last value between fixed bounds (a fill level: queue, share of pods)."""
    return gl.GaugePanel(
        **_common(title, description, queries, width, height),
        format=unit,
        thresholds=thresholds,
        min=minimum,
        max=maximum,
        extraJson={
            "options": {
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "orientation": "auto",
                "showThresholdLabels": False,
                "showThresholdMarkers": True,
            },
            "fieldConfig": {"defaults": {"color": {"mode": "thresholds"}}, "overrides": []},
        },
    )


def merged_columns(*names: str) -> list[dict[str, Any]]:
    """Transformations joining a table's instant queries into one row per series, one named column per query.

    The queries' values arrive as ``Value #A``, ``Value #B``, ... in query order; ``names`` renames them.
    """
    rename = {f"Value #{chr(ord('A') + i)}": name for i, name in enumerate(names)}
    return [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": rename}},
    ]


def table(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    transformations: Sequence[dict[str, Any]] = (),
    width: int = 12,
    height: int = 8,
    decimals: int | None = None,
    thresholds: Steps | None = None,
    links: Sequence[dict[str, Any]] = (),
    no_traffic: bool = False,
) -> Any:
    """A table of instant queries, shaped by Grafana transformations (join, organize).

    With ``thresholds`` the cells' text takes their colour; ``links`` open from every cell (a row's fields are
    ``${__data.fields.<column>}``).
    """
    defaults: dict[str, Any] = {
        "custom": {"cellOptions": {"type": "color-text" if thresholds else "auto"}},
        "decimals": decimals,
        "thresholds": {"mode": "absolute", "steps": thresholds or steps(GREEN)},
    }
    if links:
        defaults["links"] = list(links)
    if no_traffic:
        _no_traffic(defaults)
    return gl.Table(
        **_common(title, description, queries, width, height),
        unit=unit,
        transformations=list(transformations),
        extraJson={
            "fieldConfig": {"defaults": defaults},
            "options": {"cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}},
        },
    )


def heatmap(
    title: str,
    description: str,
    query: Query,
    *,
    y_unit: str,
    cell_unit: str,
    width: int = 12,
    height: int = 9,
    trace_links: bool = False,
) -> Any:
    """A heatmap of histogram buckets as Prometheus stores them (no re-bucketing), exemplars on top."""
    defaults: dict[str, Any] = {"custom": {"scaleDistribution": {"type": "linear"}}}
    if trace_links:
        defaults["links"] = [trace_link()]
    return gl.Heatmap(
        **_common(title, description, [query], width, height),
        extraJson={
            "options": {
                "calculate": False,
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5, "steps": 64},
                "exemplars": {"color": "rgba(255,0,255,0.7)"},
                "filterValues": {"le": 1e-9},
                "legend": {"show": True},
                "rowsFrame": {"layout": "auto"},
                "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
                "yAxis": {"axisPlacement": "left", "reverse": False, "unit": y_unit},
                "cellValues": {"unit": cell_unit},
                "showValue": "never",
            },
            "fieldConfig": {"defaults": defaults, "overrides": []},
        },
    )


def row(title: str) -> Any:
    """A row header; panels that follow it belong to it until the next row."""
    return gl.RowPanel(title=title, gridPos=gl.GridPos(h=1, w=GRID_WIDTH, x=0, y=0))


def up_down() -> list[dict[str, Any]]:
    """Value mappings for 0/1 health gauges."""
    return [{"type": "value", "options": {"0": {"text": "down", "color": RED}, "1": {"text": "up", "color": GREEN}}}]


def build(
    *,
    title: str,
    service: str,
    file_name: str,
    description: str,
    tags: Sequence[str],
    variables: Sequence[Any],
    panels: Sequence[Any],
    time_from: str = "now-6h",
) -> Any:
    """A grafanalib dashboard with sloscope's defaults, named after the service as the spec asks.

    Read-only (regenerated, never edited), shared crosshair, a link menu to the service's other sloscope
    dashboards that keeps the time range and the variables; the UID is derived from service and file name.
    """
    return gl.Dashboard(
        title=f"{service}: {title}",
        uid=uid(service, file_name),
        description=description,
        tags=[TAG, service, *tags],
        editable=False,
        graphTooltip=gl.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        refresh="1m",
        timezone="browser",
        time=gl.Time(time_from, "now"),
        templating=gl.Templating(list=list(variables)),
        annotations=gl.Annotations(list=[_builtin_annotations(), _firing_alerts_annotation()]),
        links=[
            gl.DashboardLink(title=service, type="dashboards", tags=[TAG, service], asDropdown=True, includeVars=True)
        ],
        panels=list(panels),
    )


def _builtin_annotations() -> dict[str, Any]:
    return {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }


def _firing_alerts_annotation() -> dict[str, Any]:
    """Every generated alert's firing time as a red region on each time series panel, from Prometheus's ALERTS."""
    return {
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": RED,
        "name": "Firing sloscope alerts",
        "expr": FIRING_ALERTS,
    }


# ------------------------------------------------------------------------------------------------- render


def render(dashboard: Any) -> dict[str, Any]:
    """The final JSON of a grafanalib dashboard, as Grafana 11 stores it (see the module docstring)."""
    data = json.loads(json.dumps(dashboard.auto_panel_ids().to_json_data(), cls=DashboardEncoder))
    return finish(data, schema_version=SCHEMA_VERSION, datasource=DATASOURCE)


def panel_queries(dashboard_json: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (panel title, PromQL expression) of a rendered dashboard, rows' nested panels included."""
    found = []
    for panel in _all_panels(dashboard_json.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                found.append((panel.get("title", ""), target["expr"]))
    return found


def _all_panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(_all_panels(panel.get("panels", [])))
    return out
