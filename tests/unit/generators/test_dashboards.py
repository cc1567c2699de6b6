"""The generated Grafana dashboards: valid for Grafana 11.6, every panel readable, every series one sloscope writes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError

from sloscope import conventions as c
from sloscope.generators.dashboards import dashboards, panel_queries
from sloscope.generators.dashboards import self_monitoring as self_dashboard
from sloscope.generators.rules import DEFAULT_THRESHOLDS, burn_threshold, rule_file
from sloscope.generators.windows import burn_windows, duration_seconds
from sloscope.loading import default_spec
from sloscope.slo.spec import SLOSpec

FILES = ("slo-overview.json", "prediction-accuracy.json", "pod-headroom.json", "sloscope-itself.json")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Variables each dashboard must offer (beyond the data source).
VARIABLES = {
    "slo-overview.json": {c.POOL, c.MODEL, c.SLO_CLASS, "traces"},
    "prediction-accuracy.json": {c.POOL, c.MODEL, "window", "traces"},
    "pod-headroom.json": {c.POOL, c.POD, c.SLO_CLASS},
    "sloscope-itself.json": {"job", "instance"},
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return dashboards(default_spec())


@pytest.fixture(scope="module")
def validator(shared: Path) -> Draft7Validator:
    schema = json.loads((shared / "schemas" / "grafana-dashboard-v11.6.jsonschema.json").read_text())
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema)


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data (rows excluded, their nested panels included)."""
    found = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            found.extend(panel["panels"])
        else:
            found.append(panel)
    return found


def spec_with(**classes: dict[str, Any]) -> SLOSpec:
    return SLOSpec.model_validate(
        {"version": "sloscope/v1", "service": "chat", "classes": [{"name": n, **v} for n, v in classes.items()]}
    )


# ---- series names in PromQL ------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "inf", "nan"}
_LABEL_VALUES = re.compile(r"^label_values\(([A-Za-z_:][\w:]*)")


def series_names(expr: str) -> set[str]:
    """Series names in a PromQL expression: identifiers that are neither functions, keywords nor labels."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    return {m.group(1) for m in _IDENTIFIER.finditer(text) if not m.group(2) and m.group(1) not in _KEYWORDS}


def known_series() -> set[str]:
    names: set[str] = set()
    for metric in c.ALL_METRICS:
        if metric.type == "histogram":
            names |= {f"{metric.name}_bucket", f"{metric.name}_sum", f"{metric.name}_count"}
        else:
            names.add(metric.exposed_name)
    # Observations can be negative, so prometheus_client publishes no _sum or _count (docs/metrics.md).
    names -= {f"{c.HEADROOM_SECONDS.name}_sum", f"{c.HEADROOM_SECONDS.name}_count"}
    # And every series the generated rules record.
    names |= {
        rule["record"] for group in rule_file(default_spec())["groups"] for rule in group["rules"] if "record" in rule
    }
    names.add("ALERTS")  # Prometheus's own series of the alerts its rules evaluate
    return names


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param(
            'sum by (pool, le) (rate(sloscope_ttft_seconds_bucket{pool=~"$pool", le="1.0"}[$__rate_interval]))',
            {"sloscope_ttft_seconds_bucket"},
            id="labels, matchers and the range are not series",
        ),
        pytest.param(
            "a / on (pool) group_left max by (pool) (b) - 1e-9 or c * 0",
            {"a", "b", "c"},
            id="keywords, grouping and numbers are not series",
        ),
        pytest.param(
            'histogram_quantile(0.9, x{l="sum(y)"})',
            {"x"},
            id="a quoted label value is not a series",
        ),
    ],
)
def test_series_names_of_an_expression(expr: str, expected: set[str]) -> None:
    assert series_names(expr) == expected


# ---- the dashboards ---------------------------------------------------------------------------------------


def test_one_file_per_dashboard(rendered: dict[str, dict[str, Any]]) -> None:
    assert tuple(rendered) == FILES


@pytest.mark.parametrize("name", FILES)
def test_valid_against_the_grafana_11_6_schema(
    name: str, rendered: dict[str, dict[str, Any]], validator: Draft7Validator
) -> None:
    errors = sorted(validator.iter_errors(rendered[name]), key=lambda e: list(map(str, e.absolute_path)))
    report = "\n".join(line for error in errors for line in describe(error))
    assert not errors, f"{len(errors)} schema errors in {name}:\n{report}"


def describe(error: ValidationError) -> list[str]:
    """Readable lines for one schema error; for a oneOf (panel or row), the errors of the closest branch."""
    if not error.context:
        return [f"{'/'.join(map(str, error.absolute_path)) or '(top)'}: {error.message[:300]}"]
    branches: dict[Any, list[ValidationError]] = {}
    for inner in error.context:
        branches.setdefault(inner.relative_schema_path[0], []).append(inner)
    closest = min(branches.values(), key=len)
    return [line for inner in closest for line in describe(inner)]


@pytest.mark.parametrize("name", FILES)
def test_current_schema_version_and_read_only(name: str, rendered: dict[str, dict[str, Any]]) -> None:
    dashboard = rendered[name]
    assert dashboard["schemaVersion"] == 41
    assert dashboard["editable"] is False  # regenerated by sloscope build, never edited
    assert {"rows", "style", "hideControls", "sharedCrosshair", "__inputs"}.isdisjoint(dashboard)


@pytest.mark.parametrize("name", FILES)
def test_every_panel_explains_itself_and_queries_the_datasource(name: str, rendered: dict[str, dict[str, Any]]) -> None:
    for panel in panels(rendered[name]):
        title = panel.get("title", "")
        assert title, panel
        assert len(panel.get("description", "")) > 30, f"{title}: no real description"
        assert panel["datasource"] == DATASOURCE, title
        assert panel["targets"], f"{title}: no query"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, title
            assert target["expr"].strip(), title
            assert {"query", "target", "intervalFactor", "step"}.isdisjoint(target), title
        assert {"span", "height", "editable", "error"}.isdisjoint(panel), title


@pytest.mark.parametrize("name", FILES)
def test_every_series_queried_is_published(name: str, rendered: dict[str, dict[str, Any]]) -> None:
    known = known_series()
    unknown = []
    for title, expr in panel_queries(rendered[name]):
        for series in series_names(expr):
            if series not in known and not (name == "sloscope-itself.json" and series in self_dashboard.PROCESS_SERIES):
                unknown.append(f"{title}: {series}")
    for variable in rendered[name]["templating"]["list"]:
        if variable["type"] == "query":
            match = _LABEL_VALUES.match(variable["query"])
            assert match, variable["query"]
            if match.group(1) not in known:
                unknown.append(f"variable {variable['name']}: {match.group(1)}")
    assert not unknown, "\n".join(unknown)


def test_every_query_is_listed(rendered: dict[str, dict[str, Any]]) -> None:
    for dashboard in rendered.values():
        targets = sum(len(panel["targets"]) for panel in panels(dashboard))
        assert len(panel_queries(dashboard)) == targets


@pytest.mark.parametrize("name", FILES)
def test_variables(name: str, rendered: dict[str, dict[str, Any]]) -> None:
    variables = {v["name"]: v for v in rendered[name]["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert VARIABLES[name] <= set(variables)
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["multi"] and variable["includeAll"], variable["name"]
            assert variable["allValue"] == ".+"
            assert variable["datasource"] == DATASOURCE
            assert variable["refresh"] == 2, "values must follow the time range (pods come and go)"
    if "traces" in variables:
        assert variables["traces"]["type"] == "datasource"


_NOT_FILTERED = re.compile(r"not filtered by ([^.:;]*)", re.IGNORECASE)


def ignored_silently(panel: dict[str, Any], variables: list[dict[str, Any]]) -> list[str]:
    """The variables (by name) a panel neither uses in every query nor says, in its description, it is not filtered
    by: "not filtered by <the variable's title>"."""
    exprs = [target["expr"] for target in panel["targets"]]
    declared = " ".join(_NOT_FILTERED.findall(panel["description"])).lower()
    return [
        variable["name"]
        for variable in variables
        if not all(re.search(rf'=~"\${variable["name"]}"', expr) for expr in exprs)
        and variable["label"].lower() not in declared
    ]


@pytest.mark.parametrize("name", FILES)
def test_every_panel_honours_every_variable_or_says_why_not(name: str, rendered: dict[str, dict[str, Any]]) -> None:
    """Each label variable appears in every query of every panel (a matcher or a join on it), unless the panel's
    description says "not filtered by <the variable's title>" and why: a filter the viewer set must never be
    silently ignored."""
    variables = [v for v in rendered[name]["templating"]["list"] if v["type"] == "query"]
    ignored = [f"{p['title']}: ${v}" for p in panels(rendered[name]) for v in ignored_silently(p, variables)]
    assert ignored == []


def test_the_variable_check_catches_a_panel_that_ignores_one() -> None:
    """The check itself, on the pod dashboard's real panel and variables: its KV-cache panel filters by pool and
    pod and says it is not filtered by SLO class; without that sentence, or without its pod matcher, it is caught."""
    dashboard = dashboards(default_spec())["pod-headroom.json"]
    variables = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    panel = next(p for p in panels(dashboard) if p["title"] == "KV cache utilization")
    assert ignored_silently(panel, variables) == []
    silent = {**panel, "description": re.sub("(?i)not filtered by", "unrelated to", panel["description"])}
    assert ignored_silently(silent, variables) == [c.SLO_CLASS]
    expr = panel["targets"][0]["expr"].replace('pod=~"$pod"', 'pod=~".+"')
    unfiltered = {**panel, "targets": [{**panel["targets"][0], "expr": expr}]}
    assert ignored_silently(unfiltered, variables) == [c.POD]


@pytest.mark.parametrize("name", FILES)
def test_ids_and_grid_positions(name: str, rendered: dict[str, dict[str, Any]]) -> None:
    top = rendered[name]["panels"]
    ids = [panel["id"] for panel in top]
    assert len(ids) == len(set(ids))
    assert ids == sorted(ids)
    cells = set()
    for panel in top:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def test_uids_are_stable_unique_and_per_service(rendered: dict[str, dict[str, Any]]) -> None:
    uids = [dashboard["uid"] for dashboard in rendered.values()]
    assert len(set(uids)) == len(uids)
    assert all(0 < len(uid) <= 40 and re.fullmatch(r"[A-Za-z0-9_-]+", uid) for uid in uids)
    assert uids == [d["uid"] for d in dashboards(default_spec()).values()]
    other = dashboards(spec_with(interactive={}))
    assert set(uids).isdisjoint(d["uid"] for d in other.values()), "another service gets its own dashboards"


def test_output_is_deterministic(rendered: dict[str, dict[str, Any]]) -> None:
    again = dashboards(default_spec())
    assert json.dumps(again, sort_keys=True) == json.dumps(rendered, sort_keys=True)


# ---- the spec drives the SLO overview ------------------------------------------------------------------


def test_objectives_and_periods_come_from_the_spec() -> None:
    spec = spec_with(
        batch={"objectives": {"ttft": 0.9, "tpot": 0.97, "goodput": 0.8}, "compliance_period": "7d"},
        premium={"objectives": {"ttft": 0.999}},
    )
    overview = dashboards(spec)["slo-overview.json"]
    by_title = {panel["title"]: panel for panel in panels(overview)}
    attainment = by_title["batch: TTFT attainment (1h)"]
    assert [s["value"] for s in attainment["fieldConfig"]["defaults"]["thresholds"]["steps"]][1:] == [0.9]
    budget = by_title["batch: error budget remaining (7d)"]
    exprs = [t["expr"] for t in budget["targets"]]
    # The recorded budget series of the class, by real model and pool labels: never a raw increase over 7 days.
    assert all(c.SLO_PERIOD_ERROR_BUDGET_REMAINING_RULE in e and 'slo_class="batch"' in e for e in exprs)
    assert not any("increase(" in e or "[7d]" in e for e in exprs)
    assert "premium: error budget remaining (28d)" in by_title
    burn = by_title["premium: TTFT burn rate"]
    assert all(t["expr"].endswith("/ (1 - 0.999)") for t in burn["targets"])
    assert [t["legendFormat"] for t in burn["targets"]] == ["5m", "1h", "6h"]
    # The 7-day period's alert factors: 2% of the budget in 1h is 3.36x, 5% in 6h 1.4x, 10% in 1d 0.7x, in 3d 0.2333x
    lines = [s["value"] for s in by_title["batch: TTFT burn rate"]["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert lines[1:] == [pytest.approx(7 / 30), 0.7, 1.4, 3.36]
    # batch's goodput (80%, budget 20%): 3.36 x 20% > the rules' 50% ceiling, so both pages fire at an error ratio
    # of 0.5, a burn of 2.5 (and the 6h one, 1.4 x 20% = 28%, stays): the lines move with the capped rules
    goodput = by_title["batch: Goodput burn rate"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in goodput][1:] == [pytest.approx(7 / 30), 0.7, 1.4, 2.5]
    rows = [panel["title"] for panel in overview["panels"] if panel["type"] == "row"]
    assert any(r.startswith("Class batch:") and r.endswith("over 7d") for r in rows)
    assert not any("interactive" in title for title in by_title), "only the spec's classes"


def test_a_class_row_follows_the_class_variable() -> None:
    overview = dashboards(default_spec())["slo-overview.json"]
    for title, expr in panel_queries(overview):
        if title.startswith("interactive:"):
            assert 'slo_class="interactive", slo_class=~"$slo_class"' in expr, title


def test_burn_rates_and_attainment_read_the_recording_rules() -> None:
    overview = dashboards(default_spec())["slo-overview.json"]
    queries = dict(panel_queries(overview))
    for window in ("5m", "1h", "6h"):
        assert any(c.slo_error_ratio_rule(window) in e for t, e in panel_queries(overview) if "burn rate" in t)
    assert c.slo_requests_rate_rule("1h") in queries["interactive: TTFT attainment (1h)"]
    routing = queries["TTFT attainment by routing (1h)"]
    assert 'routing=~"predicted|default"' in routing and c.SLO_VIOLATIONS.exposed_name in routing


# ---- prediction accuracy ------------------------------------------------------------------------------------


def test_ratio_heatmaps_carry_exemplars_linked_to_the_traces_datasource() -> None:
    accuracy = dashboards(default_spec())["prediction-accuracy.json"]
    heatmaps = [p for p in panels(accuracy) if p["type"] == "heatmap"]
    assert len(heatmaps) == 2
    for panel in heatmaps:
        (target,) = panel["targets"]
        assert target["exemplar"] is True and target["format"] == "heatmap"
        assert f"{c.PREDICTION_RATIO.name}_bucket" in target["expr"]
        (link,) = panel["fieldConfig"]["defaults"]["links"]
        assert "${traces}" in link["url"] and "${__data.fields.trace_id}" in link["url"]


def test_coverage_is_drawn_against_the_quantile() -> None:
    accuracy = dashboards(default_spec())["prediction-accuracy.json"]
    panel = next(p for p in panels(accuracy) if p["title"] == "Coverage by pool, signal and source")
    exprs = [t["expr"] for t in panel["targets"]]
    assert c.PREDICTION_COVERED.exposed_name in exprs[0] and c.PREDICTIONS.exposed_name in exprs[0]
    assert c.PREDICTOR_QUANTILE.exposed_name in exprs[1]
    by_model = next(p for p in panels(accuracy) if p["title"] == "Coverage by model")
    assert "no pod label" in by_model["description"]


def test_headroom_at_routing_uses_the_inf_bucket_as_its_count() -> None:
    headroom = dashboards(default_spec())["pod-headroom.json"]
    (expr,) = [e for t, e in panel_queries(headroom) if t == "Requests routed with no headroom"]
    assert 'le="0.0"' in expr and 'le="+Inf"' in expr
    assert f"{c.HEADROOM_SECONDS.name}_count" not in expr


# ---- what the alerts see ------------------------------------------------------------------------------------


def test_burn_rate_lines_are_the_alert_thresholds_from_the_windows() -> None:
    spec = default_spec()
    overview = dashboards(spec)["slo-overview.json"]
    by_title = {panel["title"]: panel for panel in panels(overview)}
    cls = spec.classes[0]
    pairs = burn_windows(spec.period_of(cls))
    expected = sorted(p.factor for p in pairs)
    burn = by_title[f"{cls.name}: TTFT burn rate"]
    steps = burn["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps][1:] == pytest.approx(expected)
    assert [s["color"] for s in steps][1:] == ["yellow", "orange", "red", "dark-red"]
    assert burn["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
    assert "13.44x over 1h and 5m" in burn["description"]  # the built-in 28 days


def test_burn_by_model_and_pool_reads_the_alerts_series_and_links_to_the_pools_pods() -> None:
    spec = default_spec()
    rendered = dashboards(spec)
    overview = rendered["slo-overview.json"]
    cls = spec.classes[0]
    windows = sorted({w for p in burn_windows(spec.period_of(cls)) for w in (p.long, p.short)}, key=duration_seconds)
    for slo in c.SLOS:
        title = f"{cls.name}: {slo} burn rate by model and pool, as the alerts see it"
        table = next(p for p in panels(overview) if p["title"] == title)
        assert [t["legendFormat"] for t in table["targets"]] == windows
        for target, window in zip(table["targets"], windows, strict=True):
            assert target["instant"] and "sum" not in target["expr"], "one value per model and pool, as the alerts"
            ratio = f'{c.slo_error_ratio_rule(window)}{{slo_class="{cls.name}", '
            assert ratio in target["expr"] and f'slo="{slo}"}} / (1 - {cls.objectives.of(slo)})' in target["expr"]
        # Each SLO's cells are coloured at its own thresholds: goodput's 95% objective caps its page lower.
        steps = [s["value"] for s in table["fieldConfig"]["defaults"]["thresholds"]["steps"]][1:]
        objective = cls.objectives.of(slo)
        pairs = burn_windows(spec.period_of(cls))
        expected = sorted(float(burn_threshold(p, objective, DEFAULT_THRESHOLDS)) / (1 - objective) for p in pairs)
        assert steps == pytest.approx(expected), slo
        (link,) = table["fieldConfig"]["defaults"]["links"]
        assert link["url"].startswith(f"/d/{rendered['pod-headroom.json']['uid']}?var-pool=${{__data.fields.pool}}")
        assert f"var-slo_class={cls.name}" in link["url"] and "${__url_time_range}" in link["url"]
    counted = "Requests counted from spans against those the engines finished"
    crosscheck = next(p for p in panels(overview) if p["title"] == counted)
    (link,) = crosscheck["fieldConfig"]["defaults"]["links"]
    assert "var-pool=${__field.labels.pool}" in link["url"]
    # the estimate (histogram counts hold adjusted counts) and the sample, each over the engines' own count
    estimated, sampled, epp = (target["expr"] for target in crosscheck["targets"])
    assert "sloscope_e2e_seconds_count" in estimated and "sloscope_sampled_requests_total" in sampled
    assert all("sloscope_engine_latency_seconds_count" in expr for expr in (estimated, sampled))
    # per pool, the requests the EPP scheduled over its own unsampled count: routing="none" never reached it
    assert 'routing!="none"' in epp and "/ sum by (pool) (rate(sloscope_epp_requests_total" in epp


def test_ratios_without_a_denominator_say_no_traffic() -> None:
    overview = dashboards(default_spec())["slo-overview.json"]
    by_title = {panel["title"]: panel for panel in panels(overview)}
    for title in ("interactive: TTFT attainment (1h)", "interactive: TTFT burn rate", "Failure share by reason"):
        defaults = by_title[title]["fieldConfig"]["defaults"]
        assert defaults["noValue"] == "No traffic", title
        assert {"type": "special", "options": {"match": "nan", "result": {"text": "No traffic"}}} in defaults[
            "mappings"
        ], title


def test_firing_alerts_are_annotations_and_a_table() -> None:
    for dashboard in dashboards(default_spec()).values():
        annotation = next(a for a in dashboard["annotations"]["list"] if a.get("expr"))
        assert annotation["expr"] == 'ALERTS{alertstate="firing", alertname=~"Sloscope.+"}'
        assert annotation["datasource"] == DATASOURCE and annotation["enable"]
    overview = dashboards(default_spec())["slo-overview.json"]
    (target,) = next(p for p in panels(overview) if p["title"] == "Firing alerts")["targets"]
    assert target["expr"] == annotation["expr"] and target["instant"]


def test_failures_tokens_and_e2e_have_panels() -> None:
    queries = dict(panel_queries(dashboards(default_spec())["slo-overview.json"]))
    assert f"sum by (reason) (rate({c.REQUESTS_FAILED.exposed_name}" in queries["Failed requests by reason"]
    throughput = [e for t, e in panel_queries(dashboards(default_spec())["slo-overview.json"]) if t.startswith("Token")]
    assert [f"{m.name}_sum" in e for m, e in zip((c.PROMPT_TOKENS, c.COMPLETION_TOKENS), throughput, strict=True)] == [
        True,
        True,
    ]
    assert f"{c.COMPLETION_TOKENS.name}_bucket" in queries["Output length percentiles by class"]
    assert f"{c.PROMPT_TOKENS.name}_bucket" in queries["Prompt length percentiles by class"]
    assert f"{c.E2E_SECONDS.name}_bucket" in queries["E2E percentiles by class"]
