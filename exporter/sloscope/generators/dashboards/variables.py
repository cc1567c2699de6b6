"""Dashboard variables: the data sources, and label filters with multi-select and All.

Every panel refers to its data source through ``$datasource``, so one generated file serves any Grafana; the
label variables are named after the label they filter (``pool=~"$pool"``), which
:func:`~sloscope.generators.dashboards.promql.var` relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grafanalib.core as gl

from sloscope import conventions as c
from sloscope.conventions import MetricDef
from sloscope.generators.dashboards.promql import regex, sel, series

DATASOURCE_VARIABLE = "datasource"
TRACES_VARIABLE = "traces"
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": f"${{{DATASOURCE_VARIABLE}}}"}
"""How every panel and query names its data source: through the variable, so one file serves any Grafana."""

ALL = ".+"
"""Value of "All" in a variable: a regex every present label value matches, instead of a long alternation."""


def datasource_variable() -> Any:
    """The Prometheus data source, chosen by the viewer; every panel refers to it by ``${datasource}``."""
    return gl.Template(
        name=DATASOURCE_VARIABLE, label="Data source", query="prometheus", type="datasource", sort=0, refresh=1
    )


def traces_variable() -> Any:
    """The traces data source that the exemplar links (``trace_id``) open; Tempo by type, any traces one works."""
    return gl.Template(
        name=TRACES_VARIABLE, label="Traces data source", query="tempo", type="datasource", sort=0, refresh=1
    )


def label_variable(label: str, source: MetricDef, title: str, *, narrowed_by: Sequence[str] = ()) -> Any:
    """A multi-select variable with All over the values of ``label`` on ``source``.

    ``narrowed_by`` names earlier variables whose selection narrows this one's choices (model by pool, ...).
    Values refresh when the time range changes, so pods that came and went show up.
    """
    query = f"label_values({sel(series(source), [regex(v, f'${v}') for v in narrowed_by])}, {label})"
    return gl.Template(
        name=label,
        label=title,
        query=query,
        dataSource=DATASOURCE,
        type="query",
        includeAll=True,
        multi=True,
        allValue=ALL,
        refresh=gl.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=gl.SORT_ALPHA_ASC,
    )


def interval_variable(name: str, title: str, choices: Sequence[str], default: str) -> Any:
    """A window chooser (``[$window]``) for ratios that need more requests than ``$__rate_interval`` holds."""
    return gl.Template(name=name, label=title, query=",".join(choices), type="interval", default=default)


def slo_variables() -> list[Any]:
    """Data source, pool, model and SLO class, each narrowing the next: the filters of the SLO overview."""
    return [
        datasource_variable(),
        label_variable(c.POOL, c.REQUESTS, "Pool"),
        label_variable(c.MODEL, c.REQUESTS, "Model", narrowed_by=(c.POOL,)),
        label_variable(c.SLO_CLASS, c.REQUESTS, "SLO class", narrowed_by=(c.POOL, c.MODEL)),
    ]
