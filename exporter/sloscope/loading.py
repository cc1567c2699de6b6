"""Reading the two configuration files and reporting every error with its file and path.

Both files are YAML. A file with a top-level ``version`` key is an SLO spec; any other is
runtime settings. Errors come back as lines ``FILE: path.to.key: reason`` so that
``sloscope check-config`` can print all of them at once instead of stopping at the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import SettingsError

from sloscope.config import Settings, load_settings, unknown_environment
from sloscope.slo.spec import SLOSpec


class ConfigError(Exception):
    """One or more problems in configuration files; ``lines`` holds one message per problem."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Loaded:
    settings: Settings
    spec: SLOSpec


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping, not {type(data).__name__}"])
    return data


def _lines(path: Path | str, exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        reason = error["msg"]
        if error["type"] == "extra_forbidden":
            reason = "unknown key"
        lines.append(f"{path}: {where}: {reason}")
    return lines


def default_spec() -> SLOSpec:
    text = resources.files("sloscope").joinpath("defaults/slo.yaml").read_text(encoding="utf-8")
    return SLOSpec.model_validate(yaml.safe_load(text))


def load_spec(path: Path | None) -> SLOSpec:
    if path is None:
        return default_spec()
    data = read_yaml(path)
    try:
        return SLOSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_lines(path, exc)) from exc


def load(settings_path: Path | None, spec_path: Path | None = None) -> Loaded:
    """Settings (file, then environment) and the SLO spec they point to (or ``spec_path``)."""
    data = read_yaml(settings_path) if settings_path is not None else {}
    unknown = unknown_environment()
    if unknown:
        raise ConfigError([f"environment: {name}: names no setting" for name in unknown])
    try:
        settings = load_settings(settings_path, data)
    except ValidationError as exc:
        raise ConfigError(_lines(settings_path or "environment", exc)) from exc
    except SettingsError as exc:  # an environment value that is not the JSON a list or mapping needs
        raise ConfigError([f"environment: {exc}"]) from exc
    return Loaded(settings, load_spec(spec_path or settings.slo_spec))


def check_file(path: Path) -> list[str]:
    """Every problem of one file, spec or settings, as printable lines (empty when valid)."""
    try:
        data = read_yaml(path)
        if "version" in data:
            SLOSpec.model_validate(data)
        else:
            load(path)  # the same path serve takes: file, environment, and the spec it names
    except ConfigError as exc:
        return exc.lines
    except ValidationError as exc:
        return _lines(path, exc)
    return []
