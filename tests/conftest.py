"""Shared pytest set-up: where the shared fixtures live, and builders of realistic spans."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


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
