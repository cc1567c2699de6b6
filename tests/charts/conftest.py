"""Rendering the Helm chart with the pinned helm: once per values case and session, split into manifests."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sloscope"
RELEASE = "sloscope"
NAMESPACE = "monitoring"
KUBE_VERSION = "1.29.0"
"""The oldest Kubernetes the chart declares (Chart.yaml kubeVersion); helm template assumes 1.20 otherwise."""

CASES = ["defaults", *sorted(p.name for p in (CHART / "ci").glob("*.yaml"))]
"""The chart's default values, then every ci/*.yaml values file (what chart-testing installs)."""


@dataclass(frozen=True)
class Rendered:
    """The manifests one ``helm template`` printed."""

    case: str
    manifests: list[dict[str, Any]]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [m for m in self.all(kind) if name is None or m["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.case}: expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def maybe(self, kind: str) -> dict[str, Any] | None:
        found = self.all(kind)
        assert len(found) <= 1, f"{self.case}: more than one {kind}"
        return found[0] if found else None

    @property
    def container(self) -> dict[str, Any]:
        (container,) = self.one("Deployment")["spec"]["template"]["spec"]["containers"]
        return dict(container)


def values_args(case: str) -> list[str]:
    return [] if case == "defaults" else ["--values", str(CHART / "ci" / case)]


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)


def template(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_helm(
        helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION, *args
    )


def manifests(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="session")
def render(helm: Path) -> Callable[..., Rendered]:
    """``render(case, *extra_helm_args)``: the manifests of that values case, rendered once per session."""
    cache: dict[tuple[str, ...], Rendered] = {}

    def _render(case: str, *extra: str) -> Rendered:
        key = (case, *extra)
        if key not in cache:
            done = template(helm, *values_args(case), *extra)
            assert done.returncode == 0, f"helm template ({case}) failed:\n{done.stderr}"
            cache[key] = Rendered(case, manifests(done.stdout))
        return cache[key]

    return _render
