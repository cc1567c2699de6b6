"""The user docs against the code: settings example, configuration keys, metric names, links."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from sloscope import conventions as c
from sloscope.config import Settings
from sloscope.slo.spec import SLOClass, SLOSpec

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLE = DOCS / "examples" / "settings.yaml"
OWNED = (
    "configuration.md",
    "metrics.md",
    "sending-traces.md",
    "operations.md",
    "predictions.md",
    "discovery.md",
    "demo.md",
    "dashboards-and-alerts.md",
    "record-store.md",
    "review.md",
    "otlp-export.md",
    "deploy.md",
)

_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_BACKTICKED = re.compile(r"`([^`]+)`")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SLOSCOPE_* variable (names are case-insensitive for pydantic-settings)."""
    for name in list(os.environ):
        if name.upper().startswith("SLOSCOPE_"):
            monkeypatch.delenv(name)


def _text(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted paths of every field, descending into nested settings sections."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _model_keys(annotation, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


_MAPPING_VALUES = {"limits.max_label_values", "export.headers"}  # settings whose value is a mapping, not a section


def _yaml_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, value in data.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict) and path not in _MAPPING_VALUES:
            keys |= _yaml_keys(value, f"{path}.")
        else:
            keys.add(path)
    return keys


def _rows(text: str) -> list[list[str]]:
    """Cells of every markdown table row (escaped pipes stay inside their cell)."""
    rows = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            rows.append([cell.strip() for cell in _CELL_SPLIT.split(stripped)[1:-1]])
    return rows


# ---- docs/examples/settings.yaml ---------------------------------------------------------------


def test_example_settings_load_into_the_defaults(clean_env: None) -> None:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert Settings(**data) == Settings()


def test_example_settings_list_every_key_explicitly() -> None:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert _yaml_keys(data) == _model_keys(Settings)


def test_example_settings_comment_every_key() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if re.match(r"^\s*[a-z_]+:", line) and not line.strip().startswith("#"):
            parent_of_mapping = line.rstrip().endswith(":")
            inside_label_caps = re.match(r"^\s{4}[a-z_]+: \d+$", line) is not None
            if parent_of_mapping or inside_label_caps:
                continue
            assert number > 0 and lines[number - 1].strip().startswith("#"), f"no comment above: {line!r}"


# ---- docs/configuration.md ---------------------------------------------------------------------


def test_configuration_reference_lists_every_settings_key_with_its_default(clean_env: None) -> None:
    rows = {row[0].strip("`"): row for row in _rows(_text("configuration.md")) if row and row[0].startswith("`")}
    defaults = Settings()
    for key in sorted(_model_keys(Settings)):
        assert key in rows, f"settings key {key} is not in the configuration reference"
        value: Any = defaults
        for part in key.split("."):
            value = getattr(value, part)
        default_cell = rows[key][2]
        if isinstance(value, list):
            expected = "[" + ", ".join(value) + "]"
            assert expected in default_cell, f"{key}: default {expected} not in {default_cell!r}"
        elif isinstance(value, bool):
            assert f"`{str(value).lower()}`" in default_cell, key
        elif value is None:
            assert "`null`" in default_cell, key
        elif isinstance(value, str):
            assert value.replace("|", "\\|") in default_cell, key


def test_configuration_reference_lists_every_slo_spec_key() -> None:
    text = _text("configuration.md")
    keys = {k for k in SLOSpec.model_fields}
    for name, field in SLOClass.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= {f"classes[].{name}.{sub}" for sub in annotation.model_fields}
        else:
            keys.add(f"classes[].{name}")
    for key in sorted(keys):
        assert f"`{key}`" in text, f"SLO spec key {key} is not in the configuration reference"


# ---- docs/metrics.md ---------------------------------------------------------------------------


def test_every_metric_has_a_row_with_its_type_and_labels() -> None:
    rows = _rows(_text("metrics.md"))
    for metric in c.ALL_METRICS:
        matching = [row for row in rows if row and row[0] == f"`{metric.exposed_name}`"]
        assert len(matching) == 1, f"{metric.exposed_name}: expected one table row, found {len(matching)}"
        row = matching[0]
        assert row[1] == metric.type, f"{metric.exposed_name}: type {row[1]!r}, expected {metric.type!r}"
        assert set(_BACKTICKED.findall(row[2])) == set(metric.labels), f"{metric.exposed_name}: labels {row[2]!r}"


def _known_series_names() -> set[str]:
    names = set()
    for metric in c.ALL_METRICS:
        names.add(metric.exposed_name)
        if metric.type == "counter":
            names.add(f"{metric.name}_created")
        if metric.type == "histogram":
            names |= {f"{metric.name}{suffix}" for suffix in ("_bucket", "_count", "_sum", "_created")}
    return names


@pytest.mark.parametrize("doc", OWNED)
def test_every_series_name_mentioned_exists(doc: str) -> None:
    known = _known_series_names()
    mentioned = set(re.findall(r"\bsloscope_[a-z0-9_]+", _text(doc)))
    if doc == "metrics.md":
        assert mentioned, "metrics.md mentions no series"
    unknown = sorted(mentioned - known)
    assert not unknown, f"{doc} mentions series that do not exist: {unknown}"


def test_metrics_reference_explains_every_fixed_label_value() -> None:
    text = _text("metrics.md")
    values = (*c.SLOS, c.ROUTING_PREDICTED, c.ROUTING_DEFAULT, c.ROUTING_UNKNOWN, *c.OUTCOMES, *c.DROP_REASONS, c.OTHER)
    for value in values:
        assert f"`{value}`" in text, f"label value {value} is not explained in metrics.md"


# ---- links between the docs --------------------------------------------------------------------


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(name: str) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", _text(name), re.MULTILINE)}


@pytest.mark.parametrize("doc", OWNED)
def test_links_between_these_docs_resolve(doc: str) -> None:
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", _text(doc)):
        if target.startswith(("http://", "https://")):
            continue
        name = target or doc
        if name not in (*OWNED, "examples/settings.yaml"):
            continue  # documents owned elsewhere (performance.md) are checked by their own tests
        assert (DOCS / name).is_file(), f"{doc}: broken link to {name}"
        if anchor:
            assert anchor in _anchors(name), f"{doc}: no heading #{anchor} in {name}"


# ---- docs/record-store.md ----------------------------------------------------------------------


def test_the_record_store_schema_table_is_the_column_list() -> None:
    from sloscope.store.schema import COLUMNS

    rows = [row for row in _rows(_text("record-store.md")) if len(row) == 3 and row[0].startswith("`")]
    documented = [(row[0].strip("`"), row[1].strip("`"), row[2]) for row in rows]
    assert documented == [(column.name, str(column.type), column.description) for column in COLUMNS]
