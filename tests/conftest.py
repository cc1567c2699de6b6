"""Shared pytest set-up: where the shared fixtures live, and builders of realistic spans."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOOLS = Path(__file__).resolve().parents[1] / ".tools" / "bin"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fuzz-examples",
        type=int,
        default=None,
        help="examples per fuzz target in tests/fuzz (default 200, derandomized); more runs random inputs",
    )


def tool(name: str) -> Path:
    """A pinned binary that ``make tools`` installs in .tools/bin; missing, a failure in CI and a skip elsewhere."""
    path = TOOLS / name
    if path.is_file():
        return path
    message = f"{path} is missing: run `make tools` (make test does it first)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def promtool() -> Path:
    return tool("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    return tool("prometheus")


@pytest.fixture(scope="session")
def helm() -> Path:
    return tool("helm")


@pytest.fixture(scope="session")
def otelcol() -> Path:
    """The OpenTelemetry Collector built with the Collector builder (tools/collector/builder-config.yaml)."""
    return tool("otelcol-sloscope")


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: tests read ../shared beside the clone")
    return SHARED


@pytest.fixture(autouse=True)
def _no_sloscope_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read SLOSCOPE_* variables; a developer's shell must not change test outcomes."""
    for name in list(os.environ):
        if name.startswith("SLOSCOPE_"):
            monkeypatch.delenv(name)
