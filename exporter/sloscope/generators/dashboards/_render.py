"""From the JSON grafanalib emits to the JSON Grafana 11 stores.

grafanalib 0.7.1 writes every key its models ever had: panel ``span``/``height``/``editable`` from the
pre-8 row layout, the old heatmap's ``cards``/``xAxis``/``yBucketBound``, gauge options inside
``fieldConfig``, template ``useTags``, ``null`` for everything unset. Grafana 11 ignores or migrates
them, and the v11.6 dashboard schema rejects most. Each list below names what is removed and why, so a key
grafanalib adds in a later release shows up as a schema error in the tests instead of being dropped blindly.
"""

from __future__ import annotations

from typing import Any

GRID_WIDTH = 24

# The dashboard: import inputs and old layout switches; id and version belong to the Grafana instance.
_DASHBOARD_LEGACY = ("__inputs", "hideControls", "rows", "sharedCrosshair", "style", "gnetId", "id", "version")
# Grafana 11 offers its own range list; the schema has no time_options.
_TIMEPICKER_LEGACY = ("time_options",)
# Panels: pre-8 layout and per-type keys of the old graph, table and heatmap models.
_PANEL_LEGACY = (
    "editable",
    "error",
    "height",
    "minSpan",
    "span",
    "color",
    "columns",
    "fontSize",
    "mappings",
    "cards",
    "dataFormat",
    "heatmap",
    "hideZeroBuckets",
    "highlightCards",
    "legend",
    "reverseYBuckets",
    "tooltip",
    "xAxis",
    "xBucketNumber",
    "xBucketSize",
    "yAxis",
    "yBucketBound",
    "yBucketNumber",
    "yBucketSize",
)
# A row holds only these (grafanalib gives it every generic panel key).
_ROW_KEYS = ("type", "id", "title", "collapsed", "gridPos", "panels", "repeat")
# Queries: Graphite-era fields and the step/intervalFactor pair Grafana replaced with the panel interval.
_TARGET_LEGACY = ("query", "target", "metric", "step", "intervalFactor")
# The old gauge kept its reduce options in fieldConfig; the helpers put them in options.
_FIELD_CONFIG_LEGACY = ("showThresholdLabels", "showThresholdMarkers")
_FIELD_DEFAULTS_LEGACY = ("calcs", "title", "limit", "override", "values")
# Table cells: cellOptions replaced displayMode in Grafana 10.
_CUSTOM_LEGACY = ("displayMode",)
# Variables: tag queries were removed in Grafana 8; the auto_* keys mean something for interval variables only.
_VARIABLE_LEGACY = ("useTags", "tagsQuery", "tagValuesQuery")
_INTERVAL_ONLY = ("auto", "auto_min", "auto_count")


def finish(data: dict[str, Any], *, schema_version: int, datasource: dict[str, str]) -> dict[str, Any]:
    """The dashboard JSON without nulls and legacy keys, on ``datasource``, its panels laid out in order."""
    data = _without_none(data)
    out = _without(data, _DASHBOARD_LEGACY)
    out["schemaVersion"] = schema_version
    out["timepicker"] = _without(data.get("timepicker", {}), _TIMEPICKER_LEGACY)
    out["templating"] = {"list": [_variable(v) for v in data.get("templating", {}).get("list", [])]}
    out["panels"] = _layout([_panel(p, datasource) for p in data.get("panels", [])])
    return out


def _without(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in keys}


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_none(item) for item in value]
    return value


def _variable(variable: dict[str, Any]) -> dict[str, Any]:
    out = _without(variable, _VARIABLE_LEGACY)
    if out.get("type") != "interval":
        out = _without(out, _INTERVAL_ONLY)
    if out.get("includeAll"):
        out["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    elif "text" in out.get("current", {}):
        out["current"] = _without(out["current"], ("tags",))
    else:
        out.pop("current", None)  # Grafana picks the default data source of the type
    return out


def _panel(panel: dict[str, Any], datasource: dict[str, str]) -> dict[str, Any]:
    if panel.get("type") == "row":
        out = {key: panel[key] for key in _ROW_KEYS if key in panel}
        out["panels"] = [_panel(p, datasource) for p in panel.get("panels", [])]
        return out
    out = _without(panel, _PANEL_LEGACY)
    out["datasource"] = dict(datasource)
    out["targets"] = [_target(t, datasource) for t in panel.get("targets", [])]
    out["fieldConfig"] = _field_config(panel.get("fieldConfig", {}))
    return out


def _field_config(field_config: dict[str, Any]) -> dict[str, Any]:
    out = _without(field_config, _FIELD_CONFIG_LEGACY)
    defaults = _without(field_config.get("defaults", {}), _FIELD_DEFAULTS_LEGACY)
    if "custom" in defaults:
        defaults["custom"] = _without(defaults["custom"], _CUSTOM_LEGACY)
    if not defaults.get("thresholds", {}).get("steps"):
        defaults.pop("thresholds", None)
    out["defaults"] = defaults
    out.setdefault("overrides", [])
    return out


def _target(target: dict[str, Any], datasource: dict[str, str]) -> dict[str, Any]:
    out = _without(target, _TARGET_LEGACY)
    out["datasource"] = dict(datasource)
    for key in ("interval", "hide"):
        if not out.get(key):
            out.pop(key, None)
    return out


def _layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Grid positions in reading order: panels fill a line left to right, a row header starts a new line."""
    x = y = line_height = 0
    for panel in panels:
        width, height = panel["gridPos"]["w"], panel["gridPos"]["h"]
        is_row = panel.get("type") == "row"
        if is_row or x + width > GRID_WIDTH:
            y, x, line_height = y + line_height, 0, 0
        panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
        if is_row:
            y += height
        else:
            x += width
            line_height = max(line_height, height)
    return panels
