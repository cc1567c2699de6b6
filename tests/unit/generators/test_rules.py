"""Generated rules: structure, series names against the conventions, objectives from the spec, the CRD schema."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests import render_template, rule_tests, time_to_page, time_to_page_table
from sloscope.generators.windows import burn_windows
from sloscope.loading import default_spec
from sloscope.slo.spec import SLOSpec
from tests.support.crd import crd_schema as _crd_schema

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks"

CRITICAL, WARNING = r.DEFAULT_CONVENTIONS.severities["page"], r.DEFAULT_CONVENTIONS.severities["ticket"]


def base_spec(**changes: Any) -> SLOSpec:
    """The built-in spec as data, with top-level keys replaced."""
    data = default_spec().model_dump(mode="json")
    data.update(changes)
    return SLOSpec.model_validate(data)


def custom_spec() -> SLOSpec:
    """Two classes with their own objectives; one overrides the compliance period."""
    return base_spec(
        compliance_period="28d",
        classes=[
            {
                "name": "premium",
                "match": {"ttft_ms": {"max": 500}},
                "objectives": {"ttft": 0.999, "tpot": 0.995, "goodput": 0.99},
                "compliance_period": "30d",
            },
            {"name": "batch", "match": {"has_slo": True}, "objectives": {"ttft": 0.9, "tpot": 0.9, "goodput": 0.8}},
        ],
    )


def alerts(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]


def records(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in data["groups"] for rule in group["rules"] if "record" in rule]


def burn_alert(data: dict[str, Any], name: str, cls: str, slo: str) -> dict[str, Any]:
    (rule,) = [
        a for a in alerts(data) if a["alert"] == name and a["labels"]["slo_class"] == cls and a["labels"]["slo"] == slo
    ]
    return rule


# ---- series names in PromQL --------------------------------------------------------------------------

_STRING = re.compile(r'"[^"]*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}


def series_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers that are neither functions, keywords nor label names."""
    text = _GROUPING.sub(" ", _RANGE.sub(" ", _MATCHERS.sub(" ", _STRING.sub(" ", expr))))
    return {m.group(1) for m in _IDENTIFIER.finditer(text) if m.group(2) is None and m.group(1) not in _KEYWORDS}


def test_series_names_reads_selectors_and_skips_labels_and_functions() -> None:
    expr = 'sum by (pool) (rate(a_total{reason=~"x|y"}[5m])) / on (pool) group_left max(b) > 1e-05 and c:d:rate5m'
    assert series_names(expr) == {"a_total", "b", "c:d:rate5m"}


def published_names() -> set[str]:
    names = set()
    for metric in c.ALL_METRICS:
        names.add(metric.exposed_name)
        if metric.type == "histogram":
            names |= {f"{metric.name}_bucket", f"{metric.name}_sum", f"{metric.name}_count"}
    return names


@pytest.mark.parametrize("spec", [default_spec(), custom_spec()], ids=["built-in spec", "custom spec"])
def test_every_series_in_an_expression_is_published_or_recorded_here(spec: SLOSpec) -> None:
    data = r.rule_file(spec)
    recorded = {rule["record"] for rule in records(data)}
    # Prometheus's own: the scrape health of sloscope's targets and the series of firing alerts.
    allowed = published_names() | recorded | {"up", "ALERTS"}
    used: set[str] = set()
    for rule in [*records(data), *alerts(data)]:
        names = series_names(rule["expr"])
        assert names, rule
        assert names <= allowed, (rule.get("alert") or rule["record"], names - allowed)
        used |= names
    assert {c.SLO_REQUESTS.exposed_name, c.SLO_VIOLATIONS.exposed_name, c.PREDICTOR_UP.exposed_name} <= used
    # Every window's error ratio serves an alert (the short-window request rates serve dashboards).
    assert {c.slo_error_ratio_rule(w) for w in c.RULE_WINDOWS} <= used


# ---- structure -----------------------------------------------------------------------------------------


def test_the_rule_file_has_the_six_groups_in_order() -> None:
    data = r.rule_file(default_spec())
    assert [g["name"] for g in data["groups"]] == [
        "sloscope-slo-recording",
        "sloscope-slo-budget",
        "sloscope-slo-alerts",
        "sloscope-predictor-alerts",
        "sloscope-pipeline-alerts",
        "sloscope-upstream-alerts",
    ]
    assert data["groups"][0]["interval"] == "1m"


def test_every_alert_has_severity_summary_description_and_runbook() -> None:
    for alert in alerts(r.rule_file(default_spec())):
        assert alert["labels"]["severity"] in (CRITICAL, WARNING), alert["alert"]
        assert set(alert["annotations"]) == {"summary", "description", "runbook_url"}, alert["alert"]
        assert alert["annotations"]["summary"].endswith("."), alert["alert"]
        assert "{{" in alert["annotations"]["description"], alert["alert"]
        assert alert["annotations"]["runbook_url"] == f"docs/runbooks/{alert['alert']}.md"


def test_the_built_in_spec_generates_every_alert_name() -> None:
    assert {a["alert"] for a in alerts(r.rule_file(default_spec()))} == set(r.ALERT_NAMES)


@pytest.mark.parametrize("name", r.ALERT_NAMES)
def test_every_alert_has_a_runbook_listed_in_the_index(name: str) -> None:
    runbook = RUNBOOKS / f"{name}.md"
    assert runbook.is_file()
    text = runbook.read_text(encoding="utf-8")
    assert text.startswith(f"# {name}\n")
    for section in ("## Meaning", "## Impact", "## Check first", "## What to do", "## Escalate"):
        assert section in text, (name, section)
    assert f"({name}.md)" in (RUNBOOKS / "README.md").read_text(encoding="utf-8")


def test_the_runbook_folder_holds_only_indexed_alerts() -> None:
    assert {p.stem for p in RUNBOOKS.glob("*.md")} == {*r.ALERT_NAMES, "README"}


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", sorted(p.name for p in RUNBOOKS.glob("*.md")))
def test_runbook_links_resolve(page: str) -> None:
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", (RUNBOOKS / page).read_text("utf-8")):
        assert not target.startswith(("http://", "https://")), f"{page}: runbooks link only to the docs"
        path = (RUNBOOKS / (target or page)).resolve()
        assert path.is_file(), f"{page}: broken link to {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text("utf-8"), re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"{page}: no heading #{anchor} in {target}"


def test_sloscope_build_takes_the_runbook_base_url(tmp_path: Path) -> None:
    from sloscope.cli import main

    assert main(["build", "--out", str(tmp_path), "--runbook-base-url", "https://example.org/rb/"]) == 0
    data = yaml.safe_load((tmp_path / "alerts" / "sloscope-rules.yaml").read_text(encoding="utf-8"))
    for alert in alerts(data):
        assert alert["annotations"]["runbook_url"] == f"https://example.org/rb/{alert['alert']}.md"
    tests = yaml.safe_load((tmp_path / "alerts" / "tests" / "sloscope-rules.test.yaml").read_text(encoding="utf-8"))
    assert "https://example.org/rb/SloscopeNotScraped.md" in yaml.safe_dump(tests)


def test_sloscope_build_takes_the_conventions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sloscope.cli import main

    options = ["--severity", "page=P1", "--alert-label", "team=inference", "--rule-label", "release=kps"]
    assert main(["build", "--out", str(tmp_path), *options]) == 0
    data = yaml.safe_load((tmp_path / "alerts" / "sloscope-rules.yaml").read_text(encoding="utf-8"))
    assert {a["labels"]["severity"] for a in alerts(data)} == {"P1", WARNING}  # ticket keeps its default
    assert all(a["labels"]["team"] == "inference" for a in alerts(data))
    operator = yaml.safe_load((tmp_path / "alerts" / "sloscope-prometheusrule.yaml").read_text(encoding="utf-8"))
    assert operator["metadata"]["labels"] == {"release": "kps"}
    chart = yaml.safe_load((tmp_path / "charts/sloscope/files/rules/sloscope-rules.yaml").read_text(encoding="utf-8"))
    assert {a["labels"]["severity"] for a in alerts(chart)} == {"page", "ticket"}  # the chart renders them itself
    assert main(["build", "--out", str(tmp_path), "--alert-label", "team"]) == 2
    assert "--alert-label 'team': expected NAME=VALUE" in capsys.readouterr().err


def test_the_conventions_are_parameters() -> None:
    conventions = r.Conventions({"page": "P1", "ticket": "P3"}, {"team": "inference", "slo": "never-wins"},
                                "https://runbooks.internal/sloscope/")  # fmt: skip
    data = r.rule_file(default_spec(), conventions=conventions)
    for alert in alerts(data):
        assert alert["annotations"]["runbook_url"] == f"https://runbooks.internal/sloscope/{alert['alert']}.md"
        assert alert["labels"]["team"] == "inference"
        assert alert["labels"]["severity"] == ("P1" if alert["alert"] == r.ERROR_BUDGET_BURN_PAGE else "P3")
    burn = burn_alert(data, r.ERROR_BUDGET_BURN_PAGE, "interactive", "ttft")
    assert burn["labels"]["slo"] == "ttft"  # an alert's own labels win over the extra ones
    plain = [a for a in alerts(r.rule_file(default_spec())) if a["alert"] == r.NOT_SCRAPED]
    assert next(a for a in alerts(data) if a["alert"] == r.NOT_SCRAPED)["expr"] == plain[0]["expr"]


def test_a_convention_without_a_class_value_or_setting_severity_is_refused() -> None:
    with pytest.raises(ValueError, match="no label value for ticket"):
        r.Conventions({"page": "critical"})
    with pytest.raises(ValueError, match="severity is set by severities"):
        r.Conventions(alert_labels={"severity": "low"})


def test_only_the_burn_rate_alerts_page() -> None:
    """The SRE workbook's rule: page on what users feel (an SLO burning), ticket the causes (headroom and the rest)."""
    pages = {a["alert"] for a in alerts(r.rule_file(default_spec())) if a["labels"]["severity"] == CRITICAL}
    assert pages == {r.ERROR_BUDGET_BURN_PAGE}


def test_headroom_is_one_ticket_that_reads_no_other_alert() -> None:
    [headroom] = [a for a in alerts(r.rule_file(default_spec())) if a["alert"] == r.POOL_HEADROOM_EXHAUSTED]
    assert headroom["labels"]["severity"] == WARNING
    assert "ALERTS" not in headroom["expr"]


# ---- burn thresholds that can be reached -----------------------------------------------------------------


def test_no_burn_threshold_reaches_an_error_ratio_of_one() -> None:
    """13.44 x 10% = 1.344 for the 90% goodput objective of the built-in spec: capped, never emitted as is."""
    for alert in alerts(r.rule_file(default_spec())):
        if alert["alert"] in (r.ERROR_BUDGET_BURN_PAGE, r.ERROR_BUDGET_BURN_TICKET):
            for threshold in re.findall(r"slo_error_ratio:rate\w+\{[^}]*\} > ([0-9.e-]+)", alert["expr"]):
                assert 0 < float(threshold) <= 0.5, (alert["labels"], threshold)


def test_a_loose_objective_is_capped_and_says_so() -> None:
    page = next(
        a
        for a in alerts(r.rule_file(default_spec()))
        if a["alert"] == r.ERROR_BUDGET_BURN_PAGE
        and a["labels"] == {"severity": CRITICAL, "slo": "goodput", "slo_class": "standard"}
    )
    assert 'rate1h{slo="goodput",slo_class="standard"} > 0.5\n' in page["expr"]
    assert "(the ceiling: 13.44x the budget would be 134.4%)" in page["annotations"]["description"]
    pair = burn_windows(28 * 86400)[0]
    assert r.burn_threshold(pair, 0.9, r.DEFAULT_THRESHOLDS) == Fraction(1, 2)
    assert r.is_capped(pair, 0.9, r.DEFAULT_THRESHOLDS)
    assert r.burn_threshold(pair, 0.99, r.DEFAULT_THRESHOLDS) == Fraction(1344, 10000)
    assert not r.is_capped(pair, 0.99, r.DEFAULT_THRESHOLDS)


def test_time_to_page_of_the_built_in_spec() -> None:
    """Healthy, then every request missing: the 99% SLOs page after 9 minutes (1h ratio 9/60 > 13.44%), the
    others after 31 (30/60 is exactly the 50% ceiling, not above it)."""
    spec = default_spec()
    delays = {
        (cls.name, slo): time_to_page(spec, cls, slo, r.DEFAULT_THRESHOLDS).minutes
        for cls in spec.classes
        for slo in c.SLOS
    }
    assert delays == {
        ("interactive", "ttft"): 9,
        ("interactive", "tpot"): 9,
        ("interactive", "goodput"): 31,
        ("standard", "ttft"): 31,
        ("standard", "tpot"): 31,
        ("standard", "goodput"): 31,
    }


def test_the_docs_state_the_time_to_page_of_each_objective() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "dashboards-and-alerts.md").read_text(encoding="utf-8")
    assert time_to_page_table(default_spec()) in text


def test_each_slo_has_a_time_to_page_case() -> None:
    tests = rule_tests(default_spec(), "rules.yaml")["tests"]
    for cls in default_spec().classes:
        for slo in c.SLOS:
            delay = time_to_page(default_spec(), cls, slo, r.DEFAULT_THRESHOLDS)
            group = next(
                g
                for g in tests
                if g["name"].startswith(
                    f"{r.ERROR_BUDGET_BURN_PAGE} for {cls.name} {slo} fires {delay.minutes} minutes"
                )
            )
            silent, firing = group["alert_rule_test"]
            fires_at = delay.healthy_minutes + delay.minutes
            assert (silent["eval_time"], silent["exp_alerts"]) == (f"{fires_at - 1}m", [])
            assert firing["eval_time"] == f"{fires_at}m" and len(firing["exp_alerts"]) == 1


def test_output_is_deterministic() -> None:
    first, second = r.rule_file(custom_spec()), r.rule_file(custom_spec())
    assert first == second
    assert yaml.safe_dump(first, sort_keys=False) == yaml.safe_dump(second, sort_keys=False)
    assert yaml.safe_dump(rule_tests(custom_spec(), "r.yaml")) == yaml.safe_dump(rule_tests(custom_spec(), "r.yaml"))


# ---- recording rules -----------------------------------------------------------------------------------


def test_recording_rules_cover_every_window_by_the_rule_labels() -> None:
    data = r.rule_file(default_spec())
    by_name = {rule["record"]: rule["expr"] for rule in records(data)}
    for window in c.RULE_WINDOWS:
        requests = by_name[c.slo_requests_rate_rule(window)]
        assert requests == f"sum by (model, pool, slo_class, slo) (rate(sloscope_slo_requests_total[{window}]))"
        ratio = by_name[c.slo_error_ratio_rule(window)]
        # No violation yet gives 0, not no data.
        assert f"or\n  {requests} * 0\n)" in ratio
        assert ratio.endswith(f"/\n{requests}")


def test_each_distinct_period_gets_its_own_ratio() -> None:
    by_name = {rule["record"]: rule["expr"] for rule in records(r.rule_file(custom_spec()))}
    assert 'slo_class="premium"' in by_name[c.slo_error_ratio_rule("30d")]
    assert 'slo_class="batch"' in by_name[c.slo_error_ratio_rule("28d")]


def test_a_period_that_is_already_a_rule_window_is_not_recorded_twice() -> None:
    spec = base_spec(compliance_period="1d")
    names = [rule["record"] for rule in records(r.rule_file(spec)) if "sloscope:slo_error_ratio:" in rule["record"]]
    assert len(names) == len(set(names)) == len(c.RULE_WINDOWS)
    assert r.period_ratio_rule(86400) == c.slo_error_ratio_rule("1d")
    assert r.period_ratio_rule(5400) == c.slo_error_ratio_rule("90m")
    with pytest.raises(ValueError, match="whole number of 5m"):
        r.period_ratio_rule(5430)


# ---- SLO alerts ----------------------------------------------------------------------------------------


def test_burn_alerts_use_each_class_objective_and_period() -> None:
    data = r.rule_file(custom_spec())
    premium_ttft = burn_alert(data, r.ERROR_BUDGET_BURN_PAGE, "premium", "ttft")["expr"]
    # 30d period, objective 99.9%: 14.4 x 0.1% and 6 x 0.1%.
    assert 'sloscope:slo_error_ratio:rate1h{slo="ttft",slo_class="premium"} > 0.0144' in premium_ttft
    assert 'sloscope:slo_error_ratio:rate5m{slo="ttft",slo_class="premium"} > 0.0144' in premium_ttft
    assert 'sloscope:slo_error_ratio:rate6h{slo="ttft",slo_class="premium"} > 0.006' in premium_ttft
    premium_tpot = burn_alert(data, r.ERROR_BUDGET_BURN_TICKET, "premium", "tpot")["expr"]
    assert 'sloscope:slo_error_ratio:rate1d{slo="tpot",slo_class="premium"} > 0.015' in premium_tpot
    assert 'sloscope:slo_error_ratio:rate3d{slo="tpot",slo_class="premium"} > 0.005' in premium_tpot
    # The spec's 28d period, objective 80%: 13.44 x 20% = 2.688 no error ratio reaches, capped at the 0.5 ceiling;
    # 0.9333... x 20% as it is.
    batch_goodput = burn_alert(data, r.ERROR_BUDGET_BURN_PAGE, "batch", "goodput")["expr"]
    assert 'rate1h{slo="goodput",slo_class="batch"} > 0.5\n' in batch_goodput
    batch_ticket = burn_alert(data, r.ERROR_BUDGET_BURN_TICKET, "batch", "goodput")["expr"]
    assert 'rate3d{slo="goodput",slo_class="batch"} > 0.18666666666666668' in batch_ticket


def test_one_page_and_one_ticket_per_class_and_slo_labelled_with_both() -> None:
    data = r.rule_file(custom_spec())
    burns = [a for a in alerts(data) if a["alert"] in (r.ERROR_BUDGET_BURN_PAGE, r.ERROR_BUDGET_BURN_TICKET)]
    keys = sorted((a["alert"], a["labels"]["slo_class"], a["labels"]["slo"]) for a in burns)
    assert keys == sorted(
        (name, cls, slo)
        for name in (r.ERROR_BUDGET_BURN_PAGE, r.ERROR_BUDGET_BURN_TICKET)
        for cls in ("premium", "batch")
        for slo in c.SLOS
    )
    page = burn_alert(data, r.ERROR_BUDGET_BURN_PAGE, "premium", "ttft")
    assert page["labels"] == {"severity": CRITICAL, "slo": "ttft", "slo_class": "premium"}
    assert "for" not in page  # the short window does the debouncing, as in the workbook and Sloth
    assert "objective 99.9% over 30d" in page["annotations"]["description"]


def test_the_traffic_guard_counts_requests_sampled_in_the_long_window() -> None:
    page = burn_alert(r.rule_file(default_spec()), r.ERROR_BUDGET_BURN_PAGE, "interactive", "ttft")["expr"]
    assert 'and sloscope:slo_sampled_requests:rate1h{slo="ttft",slo_class="interactive"} * 3600 >= 100' in page
    assert 'and sloscope:slo_sampled_requests:rate6h{slo="ttft",slo_class="interactive"} * 21600 >= 100' in page
    unguarded = r.rule_file(default_spec(), thresholds=r.AlertThresholds(slo_min_requests=0))
    assert "sloscope:slo_requests" not in burn_alert(unguarded, r.ERROR_BUDGET_BURN_PAGE, "interactive", "ttft")["expr"]


def test_a_spec_without_classes_has_recording_rules_but_no_slo_alerts() -> None:
    data = r.rule_file(base_spec(classes=[]))
    assert "sloscope-slo-alerts" not in [g["name"] for g in data["groups"]]
    assert "sloscope-slo-budget" not in [g["name"] for g in data["groups"]]
    assert len(records(data)) == 3 * len(c.RULE_WINDOWS)  # estimated and sampled eligible rates, error ratio


# ---- thresholds ----------------------------------------------------------------------------------------


def test_thresholds_reach_the_expressions_and_holds() -> None:
    thresholds = r.AlertThresholds(
        headroom_min_share=0.5,
        headroom_for="20m",
        model_stale_seconds=3600,
        calibration_tolerance=0.3,
        calibration_sigmas=2.5,
        not_scraped_window="6h",
    )
    by_name = {a["alert"]: a for a in alerts(r.rule_file(default_spec(), thresholds=thresholds))}
    assert by_name[r.POOL_HEADROOM_EXHAUSTED]["expr"].endswith("\n< 0.5")
    assert by_name[r.POOL_HEADROOM_EXHAUSTED]["for"] == "20m"
    assert by_name[r.PREDICTOR_MODEL_STALE]["expr"].endswith("> 3600")
    assert by_name[r.PREDICTOR_CALIBRATION_DRIFT]["expr"].count("2.5 * sqrt(") == 2
    assert by_name[r.PREDICTOR_CALIBRATION_DRIFT]["expr"].count("    0.3\n  )") == 2
    assert by_name[r.NOT_SCRAPED]["expr"] == (
        "up == 0 and on (job, instance) last_over_time(sloscope_build_info[6h])\nor\nabsent(sloscope_build_info)"
    )


def test_default_thresholds() -> None:
    t = r.AlertThresholds()
    assert (t.calibration_tolerance, t.calibration_sigmas, t.calibration_min_predictions) == (0.5, 3.0, 100)
    assert (t.calibration_window, t.calibration_for) == ("1h", "30m")
    assert (t.slo_max_error_ratio, t.not_scraped_window, t.not_scraped_for) == (0.5, "1d", "5m")
    assert (t.predictor_down_for, t.model_stale_seconds, t.model_stale_for) == ("5m", 7200, "15m")
    assert (t.headroom_min_share, t.headroom_for) == (0.25, "10m")


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"headroom_for": "10 minutes"}, id="a malformed hold"),
        pytest.param({"calibration_window": "1h30m"}, id="a two-unit window"),
        pytest.param({"spans_dropped_ratio": -0.1}, id="a negative ratio"),
        pytest.param({"slo_max_error_ratio": 1.0}, id="a ceiling no error ratio exceeds"),
        pytest.param({"calibration_tolerance": 1.0}, id="a tolerance that hides pessimistic predictors"),
        pytest.param({"not_scraped_window": "a day"}, id="a malformed memory of sloscope's targets"),
    ],
)
def test_bad_thresholds_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"duration|negative|between 0 and 1|label value"):
        r.AlertThresholds(**changes)


# ---- the PrometheusRule --------------------------------------------------------------------------------


def crd_schema(shared: Path) -> dict[str, Any]:
    return _crd_schema(shared / "schemas" / "crd-prometheusrules.yaml")


@pytest.mark.parametrize("spec", [default_spec(), custom_spec()], ids=["built-in spec", "custom spec"])
def test_the_prometheus_rule_validates_against_the_crd_schema(shared: Path, spec: SLOSpec) -> None:
    rule = r.prometheus_rule(spec, namespace="monitoring", labels={"release": "kube-prometheus-stack"})
    jsonschema.validate(rule, crd_schema(shared))
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"] == {
        "name": "sloscope",
        "namespace": "monitoring",
        "labels": {"release": "kube-prometheus-stack"},
    }
    assert rule["spec"]["groups"] == r.rule_file(spec)["groups"]


def test_the_crd_schema_catches_a_broken_rule(shared: Path) -> None:
    rule = r.prometheus_rule(default_spec())
    rule["spec"]["groups"][0]["interval"] = "one minute"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rule, crd_schema(shared))


def test_the_prometheus_rule_leaves_out_unset_metadata() -> None:
    assert r.prometheus_rule(default_spec(), name="slo")["metadata"] == {"name": "slo"}


# ---- the generated promtool tests ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", [default_spec(), custom_spec()], ids=["built-in spec", "custom spec"])
def test_every_alert_has_a_firing_and_a_silent_case(spec: SLOSpec) -> None:
    tests = rule_tests(spec, "rules.yaml")
    assert tests["rule_files"] == ["rules.yaml"]
    assert tests["group_eval_order"] == [g["name"] for g in r.rule_file(spec)["groups"]]
    cases = [case for group in tests["tests"] for case in group.get("alert_rule_test", [])]
    for name in {a["alert"] for a in alerts(r.rule_file(spec))}:
        assert any(case["alertname"] == name and case["exp_alerts"] for case in cases), name
        assert any(case["alertname"] == name and case["exp_alerts"] == [] for case in cases), name
    exprs = {case["expr"] for group in tests["tests"] for case in group.get("promql_expr_test", [])}
    assert {c.slo_error_ratio_rule(w) for w in c.RULE_WINDOWS} <= exprs
    assert {c.slo_requests_rate_rule(w) for w in c.RULE_WINDOWS} <= exprs


def test_each_class_and_slo_has_its_own_burn_cases() -> None:
    names = [group["name"] for group in rule_tests(custom_spec(), "rules.yaml")["tests"]]
    for cls in ("premium", "batch"):
        for slo in c.SLOS:
            assert any(f"{cls} {slo}" in name and r.ERROR_BUDGET_BURN_TICKET in name for name in names), (cls, slo)
            assert any(f"silent for {cls} {slo}" in name for name in names), (cls, slo)


@pytest.mark.parametrize(
    ("template", "value", "rendered"),
    [
        pytest.param("{{ $value | humanizePercentage }}", 0.1234, "12.34%", id="percentage"),
        pytest.param("{{ $value | humanizePercentage }}", -0.20000000000000007, "-20%", id="negative percentage"),
        pytest.param("{{ $value | humanize }}", 1234567.0, "1.235M", id="mega"),
        pytest.param("{{ $value | humanize }}", 0.0123, "12.3m", id="milli"),
        pytest.param("{{ $value | humanize }}", 0.9999999999999999, "1000m", id="just below one is milli"),
        pytest.param("{{ $value | humanize }}", 0.0, "0", id="zero"),
        pytest.param("{{ $value | humanizeDuration }}", 93784.0, "1d 2h 3m 4s", id="days"),
        pytest.param("{{ $value | humanizeDuration }}", 8160.0, "2h 16m 0s", id="hours"),
        pytest.param("{{ $value | humanizeDuration }}", 60.0, "1m 0s", id="minutes"),
        pytest.param("{{ $value | humanizeDuration }}", 1.5, "1.5s", id="seconds"),
        pytest.param("{{ $value }}", 0.25, "0.25", id="bare value"),
        pytest.param("pool {{ $labels.pool }} ({{$labels.slo}})", 0.0, "pool a (ttft)", id="labels"),
    ],
)
def test_templates_render_as_prometheus_renders_them(template: str, value: float, rendered: str) -> None:
    assert render_template(template, {"pool": "a", "slo": "ttft"}, value) == rendered


def test_a_template_the_tests_cannot_render_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot render"):
        render_template("{{ $value | printf `%.2f` }}", {}, 1.0)
