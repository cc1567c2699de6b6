"""The real fleet (tests/support/fleet): the pinned binaries of ``make tools``, and a fleet per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import tool

FLEET_BINARIES = ("epp", "kube-apiserver", "etcd", "llm-d-inference-sim", "fleet-gateway")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.fleet)


@pytest.fixture(scope="session")
def fleet_tools() -> Iterator[Path]:
    """The folder of the fleet's binaries; a missing one fails under CI=true and skips elsewhere."""
    for name in FLEET_BINARIES:
        tool(name)
    crds = tool("epp").parent / "fleet-crds"
    if not any(crds.glob("*.yaml")):
        tool("fleet-crds/inference.networking.k8s.io_inferencepools.yaml")
    yield crds.parent
