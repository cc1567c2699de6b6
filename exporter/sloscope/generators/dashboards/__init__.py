"""Grafana dashboards generated from the SLO spec: one module per dashboard, one shared toolkit.

Each dashboard module has a ``FILE_NAME`` and a ``dashboard(spec)`` returning a grafanalib ``Dashboard``;
:func:`dashboards` renders them all to the JSON Grafana 11 stores (see :mod:`.common`), keyed by file name,
for ``sloscope build`` to write. Nothing here reads the clock or the environment: the same spec gives the
same bytes.
"""

from __future__ import annotations

from typing import Any

from sloscope.generators.dashboards import pod_headroom, prediction_accuracy, self_monitoring, slo_overview
from sloscope.generators.dashboards.common import panel_queries, render
from sloscope.slo.spec import SLOSpec

__all__ = ["MODULES", "dashboards", "panel_queries", "render"]

MODULES = (slo_overview, prediction_accuracy, pod_headroom, self_monitoring)
"""Every dashboard, in the order the files are listed."""


def dashboards(spec: SLOSpec) -> dict[str, dict[str, Any]]:
    """Every dashboard of ``spec`` as final JSON, keyed by file name (``slo-overview.json``, ...)."""
    return {module.FILE_NAME: render(module.dashboard(spec)) for module in MODULES}
