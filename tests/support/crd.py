"""JSON schemas of custom resources from their CustomResourceDefinitions (the prometheus-operator CRDs in ../shared)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml


def _python_patterns(node: Any) -> Any:
    """The schema's Go (RE2) patterns in Python syntax: RE2 takes ``^(?i)x``, Python wants the flag first."""
    if isinstance(node, dict):
        return {
            key: re.sub(r"^\^\(\?i\)", "(?i)^", value) if key == "pattern" else _python_patterns(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_python_patterns(item) for item in node]
    return node


def _closed(node: Any) -> Any:
    """Unknown fields refused wherever the API server would prune them (an object with ``properties``, not marked
    ``x-kubernetes-preserve-unknown-fields``): what ``kubectl apply --validate=strict`` reports as errors."""
    if isinstance(node, dict):
        out = {key: _closed(value) for key, value in node.items()}
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_closed(item) for item in node]
    return node


def crd_schema(path: Path, version: str = "v1", *, strict: bool = False) -> dict[str, Any]:
    """The OpenAPI v3 schema of one version of the CRD in ``path``, usable with :mod:`jsonschema`.

    ``strict`` also refuses unknown fields (the CRD schemas leave them open because the API server prunes them).
    """
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = _python_patterns(found["schema"]["openAPIV3Schema"])
    return _closed(schema) if strict else schema
