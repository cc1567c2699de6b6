"""The fuzz targets' budget comes from ``--fuzz-examples`` (declared in tests/conftest.py) or ``FUZZ_EXAMPLES``."""

from __future__ import annotations

import pytest

from tests.fuzz import budget


def pytest_configure(config: pytest.Config) -> None:
    budget.configure(config.getoption("fuzz_examples", None))
