"""Settings and SLO spec: defaults without files, unknown keys rejected, every error reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sloscope.cli import main
from sloscope.config import Pool, Settings
from sloscope.loading import ConfigError, check_file, default_spec, load


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_everything_works_with_no_file_at_all() -> None:
    loaded = load(None)
    assert loaded.settings == Settings()
    assert loaded.settings.listeners.otlp_grpc_port == 4317
    assert loaded.settings.listeners.otlp_http_port == 4318
    assert loaded.settings.listeners.metrics_port == 9464
    assert [c.name for c in loaded.spec.classes] == ["interactive", "standard"]
    assert loaded.spec.compliance_period == 28 * 86400
    assert all(cls.defaults.ttft_ms is None and cls.defaults.tpot_ms is None for cls in loaded.spec.classes)


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "settings.yaml", "listeners: {metrics_port: 9000, otlp_http_port: 5000}\n")
    monkeypatch.setenv("SLOSCOPE_LISTENERS__METRICS_PORT", "9100")
    settings = load(path).settings
    assert settings.listeners.metrics_port == 9100
    assert settings.listeners.otlp_http_port == 5000


def test_slo_spec_path_is_relative_to_the_settings_file(tmp_path: Path) -> None:
    write(tmp_path, "team-slo.yaml", "version: sloscope/v1\nclasses: [{name: chat}]\ndefault_class: rest\n")
    path = write(tmp_path, "settings.yaml", "slo_spec: team-slo.yaml\n")
    loaded = load(path)
    assert [c.name for c in loaded.spec.classes] == ["chat"]
    assert loaded.spec.default_class == "rest"


def test_check_config_reports_every_error_with_file_and_path(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "settings.yaml",
        "listeners: {metrics_prot: 1}\nlimits: {queue_spans: -1}\njoin: {window_seconds: 60}\n",
    )
    assert check_file(path) == [
        f"{path}: listeners.metrics_prot: unknown key",
        f"{path}: limits.queue_spans: Input should be greater than 0",
    ]


def test_check_config_on_a_spec(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "slo.yaml",
        "version: sloscope/v1\ncompliance_period: 4 weeks\nclasses:\n"
        "  - {name: a, objectives: {ttft: 1.5}}\n  - {name: a, match: {ttft_ms: {min: 5, max: 1}}}\n",
    )
    assert check_file(path) == [
        f"{path}: compliance_period: Value error, not a duration: '4 weeks' (use a number and one of s, m, h, d, w, "
        "like 28d)",
        f"{path}: classes.0.objectives.ttft: Input should be less than 1",
        f"{path}: classes.1.match.ttft_ms: Value error, min 5.0 is greater than max 1.0",
    ]


def test_cross_field_rule_window_within_ttl(tmp_path: Path) -> None:
    path = write(tmp_path, "settings.yaml", "join: {window_seconds: 60, trace_ttl_seconds: 30}\n")
    assert check_file(path) == [
        f"{path}: (top level): Value error, join.window_seconds must not exceed join.trace_ttl_seconds"
    ]


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    assert check_file(missing)[0].startswith(f"{missing}: cannot read")
    listing = write(tmp_path, "list.yaml", "- a\n- b\n")
    assert check_file(listing) == [f"{listing}: the top level must be a mapping, not list"]
    broken = write(tmp_path, "broken.yaml", "a: [\n")
    assert check_file(broken)[0].startswith(f"{broken}: not valid YAML")


def test_serve_refuses_a_bad_spec_before_starting(tmp_path: Path) -> None:
    spec = write(tmp_path, "slo.yaml", "version: sloscope/v2\n")
    with pytest.raises(ConfigError) as raised:
        load(None, spec)
    assert raised.value.lines == [f"{spec}: version: Input should be 'sloscope/v1'"]


def test_check_config_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.yaml", "listeners: {metrics_port: 9000}\n")
    bad = write(tmp_path, "bad.yaml", "nope: 1\n")
    assert main(["check-config", str(good)]) == 0
    assert main(["check-config", str(good), str(bad)]) == 1
    out, err = capsys.readouterr()
    assert f"{good}: ok" in out
    assert err.strip() == f"{bad}: nope: unknown key"


def test_shipped_spec_file_is_the_default_spec() -> None:
    path = Path(__file__).resolve().parents[2] / "exporter" / "sloscope" / "defaults" / "slo.yaml"
    assert check_file(path) == []
    assert default_spec().classes[0].match.ttft_ms is not None


def test_unknown_environment_variables_are_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOSCOPE_LISTENER__METRICS_PORT", "1")
    with pytest.raises(ConfigError) as raised:
        load(None)
    assert raised.value.lines == ["environment: SLOSCOPE_LISTENER__METRICS_PORT: names no setting"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "join: {request_id_pattern: '(unclosed'}\n",
            "join.request_id_pattern: Value error, not a regular expression: missing ), unterminated subpattern at "
            "position 0",
            id="invalid regex",
        ),
        pytest.param(
            "join: {request_id_pattern: '^chatcmpl-(.+)$'}\n",
            "join.request_id_pattern: Value error, must have a named group 'id', like ^(?:chatcmpl-)?(?P<id>.+)$",
            id="no id group",
        ),
        pytest.param(
            "limits: {max_label_values: {modle: 5}}\n",
            "limits.max_label_values: Value error, unknown label(s) modle; capped labels are model, pool, slo_class, "
            "pod",
            id="misspelled label cap",
        ),
    ],
)
def test_settings_that_would_fail_at_run_time_fail_the_check(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "settings.yaml", text)
    assert check_file(path) == [f"{path}: {message}"]


def test_a_partial_label_cap_keeps_the_other_defaults() -> None:
    caps = Settings(limits={"max_label_values": {"model": 5}}).limits.max_label_values
    assert caps == {"model": 5, "pool": 50, "slo_class": 20, "pod": 2000}


def test_environment_names_are_matched_without_regard_to_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("sloscope_log_level", "DEBUG")
    assert load(None).settings.log_level == "DEBUG"
    monkeypatch.setenv("Sloscope_Nope", "1")
    with pytest.raises(ConfigError) as raised:
        load(None)
    assert raised.value.lines == ["environment: Sloscope_Nope: names no setting"]


def test_an_environment_mapping_that_is_not_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOSCOPE_LIMITS__MAX_LABEL_VALUES", "{model: 5")
    with pytest.raises(ConfigError) as raised:
        load(None)
    assert raised.value.lines[0].startswith('environment: error parsing value for field "limits"')


def test_check_config_also_sees_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "settings.yaml", "log_level: INFO\n")
    monkeypatch.setenv("SLOSCOPE_TYPO", "1")
    assert check_file(path) == ["environment: SLOSCOPE_TYPO: names no setting"]


def test_a_pools_gateways_must_be_regular_expressions() -> None:
    assert Pool(name="a", gateways=["team-a-epp-.*"]).gateways == ["team-a-epp-.*"]
    with pytest.raises(ValidationError, match=r"gateways: 'team-\(a' is not a regular expression"):
        Pool(name="a", gateways=["team-(a"])


def test_a_pools_trace_sampling_probability_overrides_the_assumed_one() -> None:
    settings = Settings(
        pools=[{"name": "llama", "trace_sampling_probability": 0.1}, {"name": "qwen"}],
        trace_sampling={"assumed_probability": 0.5},
    )
    assert settings.assumed_sampling_probability("llama") == 0.1
    assert settings.assumed_sampling_probability("qwen") == 0.5
    assert settings.assumed_sampling_probability("unknown") == 0.5
    assert Settings().assumed_sampling_probability("llama") == 1.0  # every trace kept: each request counts once
    for wrong in (0, 1.5):
        with pytest.raises(ValidationError, match="trace_sampling_probability"):
            Pool(name="a", trace_sampling_probability=wrong)
        with pytest.raises(ValidationError, match="assumed_probability"):
            Settings(trace_sampling={"assumed_probability": wrong})
