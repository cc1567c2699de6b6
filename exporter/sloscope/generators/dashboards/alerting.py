"""Panels that show the SLOs as the generated burn-rate alerts see them: their thresholds, per model and pool, and
the alerts that fire.

The alerts compare each (model, pool, class, SLO)'s recorded error ratio over a long and a short window with
factor x (1 - objective) (:mod:`sloscope.generators.windows`); in burn-rate units (error ratio over the budget)
that threshold is the factor itself, unless the ceiling ``slo_max_error_ratio`` caps it (a loose objective). The
thresholds here are computed by the rule generator's own function, with its default thresholds, so a change of
windows, factors or the ceiling moves the dashboard lines with the alerts.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from sloscope import conventions as c
from sloscope.generators import rules
from sloscope.generators.dashboards import common as d
from sloscope.generators.dashboards.promql import budget, eq, number, sel
from sloscope.generators.rules.thresholds import DEFAULT_THRESHOLDS
from sloscope.generators.windows import PAGE, TICKET, BurnWindow, burn_windows, duration_seconds
from sloscope.slo.spec import SLOClass, SLOSpec

_SEVERITY_COLOURS = {PAGE: (d.RED, "dark-red"), TICKET: (d.YELLOW, d.ORANGE)}


def burn_threshold(pair: BurnWindow, objective: float) -> float:
    """The burn rate above which ``pair`` fires for ``objective``: the rule's error-ratio threshold (capped where
    factor x budget would pass ``slo_max_error_ratio``) over the budget."""
    return float(rules.burn_threshold(pair, objective, DEFAULT_THRESHOLDS) / (1 - Fraction(repr(objective))))


def _pairs(spec: SLOSpec, cls: SLOClass) -> tuple[BurnWindow, ...]:
    return burn_windows(spec.period_of(cls))


def burn_steps(spec: SLOSpec, cls: SLOClass, objective: float) -> d.Steps:
    """Threshold steps at every alert pair's burn rate, tickets yellow and orange, pages red and dark red."""
    points: dict[float, str] = {}
    for severity, colours in _SEVERITY_COLOURS.items():
        pairs = sorted((p for p in _pairs(spec, cls) if p.severity == severity), key=lambda p: p.factor)
        for pair, colour in zip(pairs, colours, strict=False):
            points.setdefault(burn_threshold(pair, objective), colour)
    return d.steps(d.GREEN, *sorted(points.items()))


def burn_prose(spec: SLOSpec, cls: SLOClass, objective: float) -> str:
    """The alert pairs in words, as the burn-rate panels' descriptions state them."""
    return "; ".join(
        f"{pair.severity} {number(round(burn_threshold(pair, objective), 4))}x over {pair.long} and {pair.short}"
        for pair in _pairs(spec, cls)
    )


def alert_windows(spec: SLOSpec, cls: SLOClass) -> list[str]:
    """Every window an alert pair of the class reads, shortest first."""
    return sorted({w for p in _pairs(spec, cls) for w in (p.long, p.short)}, key=duration_seconds)


def burn_by_model_and_pool(spec: SLOSpec, cls: SLOClass, matchers: Sequence[str], pods_dashboard_uid: str) -> list[Any]:
    """One table per SLO of each (model, pool)'s burn rate over every alert window, coloured at that SLO's alert
    thresholds (a loose objective's page threshold is capped lower than a strict one's, so the SLOs of a class do not
    share colours).

    The pool links to the pod headroom dashboard with that pool and the class selected.
    """
    windows = alert_windows(spec, cls)
    link = d.dashboard_link(
        "Pods of pool ${__data.fields.pool}",
        pods_dashboard_uid,
        {c.POOL: "${__data.fields.pool}", c.SLO_CLASS: cls.name},
        "The pod headroom dashboard of this row's pool, for this class",
    )
    tables = []
    for slo in c.SLOS:
        objective = cls.objectives.of(slo)
        ratio = budget(objective)
        tables.append(
            d.table(
                f"{cls.name}: {slo} burn rate by model and pool, as the alerts see it",
                f"Error ratio of the {slo} SLO over its error budget {ratio} for each model and pool of the class, "
                "over every window the burn-rate alerts read (recording rules, not summed over models or pools: the "
                "alerts judge each label set alone). A pair of windows fires when both are above its threshold "
                "(cells coloured yellow and orange above a ticket's, red above a page's): "
                f"{burn_prose(spec, cls, objective)}; the alerts also need enough eligible requests in the long "
                "window. No traffic: no eligible request in the window. Click a pool for its pods.",
                [
                    d.Query(
                        f"{sel(c.slo_error_ratio_rule(window), (*matchers, eq(c.SLO, slo)))} / {ratio}",
                        window,
                        instant=True,
                        format="table",
                    )
                    for window in windows
                ],
                unit=d.SHORT,
                decimals=2,
                transformations=d.merged_columns(*windows),
                thresholds=burn_steps(spec, cls, objective),
                links=[link],
                width=8,
                no_traffic=True,
            )
        )
    return tables


def firing_alerts() -> Any:
    """The generated alerts firing now, one row per alert and label set, from Prometheus's ALERTS series."""
    return d.table(
        "Firing alerts",
        "Every sloscope alert firing now in the Prometheus data source (its ALERTS series), with the labels that say "
        "where: severity, SLO class and SLO, pool, model. Pending alerts are left out. The same alerts mark their "
        "firing time on every time series panel (the 'Firing sloscope alerts' annotation). Not filtered by pool, "
        "model or SLO class: every firing alert, sloscope's own included.",
        [d.Query(d.FIRING_ALERTS, instant=True, format="table")],
        unit=d.NONE,
        transformations=[
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True, "Value": True, "__name__": True, "alertstate": True},
                    "indexByName": {"alertname": 0, "severity": 1, c.SLO_CLASS: 2, c.SLO: 3, c.POOL: 4, c.MODEL: 5},
                },
            }
        ],
        width=24,
        height=6,
    )
