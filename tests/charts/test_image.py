"""The Dockerfile cannot be built here (no container runtime); these checks hold it to what the chart assumes."""

from __future__ import annotations

import re

import yaml

from tests.charts.conftest import CHART, ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def _instructions(name: str) -> list[str]:
    text = DOCKERFILE.replace("\\\n", " ")
    return [line.split(None, 1)[1] for line in text.splitlines() if line.split(None, 1)[:1] == [name]]


def test_both_stages_use_one_base_pinned_by_tag_and_digest() -> None:
    base, rust = _instructions("ARG")
    assert re.fullmatch(r"BASE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base)
    assert _instructions("FROM") == ["${RUST} AS rust", "${BASE} AS build", "${BASE} AS runtime"]
    # The toolchain of the native core, pinned to an exact release; only the build stage copies from it.
    assert re.fullmatch(r"RUST=rust:\d+\.\d+\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", rust)
    assert [line.split()[0] for line in _instructions("COPY") if line.startswith("--from")] == [
        "--from=rust",
        "--from=rust",
        "--from=build",
    ]


def test_the_image_runs_as_the_non_root_user_the_chart_expects() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    uid = values["podSecurityContext"]["runAsUser"]
    assert _instructions("USER") == [f"{uid}:{values['podSecurityContext']['runAsGroup']}"]
    assert uid != 0


def test_the_image_exposes_the_chart_ports_and_serves() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert _instructions("EXPOSE") == [" ".join(str(values["ports"][k]) for k in ("otlpGrpc", "otlpHttp", "metrics"))]
    assert _instructions("ENTRYPOINT") == ['["sloscope", "serve"]']


def test_the_build_context_leaves_local_state_out() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    ignored = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    for path in (".git", ".venv", ".tools", "tests"):
        assert path in ignored
    copied = {src for line in _instructions("COPY") if not line.startswith("--from") for src in line.split()[:-1]}
    assert copied == {"pyproject.toml", "constraints.txt", "README.md", "exporter", "native"}
    assert not copied & ignored
