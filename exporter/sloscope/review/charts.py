"""The review's charts: matplotlib figures drawn with the Agg canvas (no display, no pyplot state), as PNG bytes.

Each function takes the table the analysis made (or the requests, for the histogram, counted by SQL) and returns
PNG bytes, or None when the table is empty. PNGs are written without the timestamp and software metadata, so the same
tables give the same bytes. Every label that may come from a span (class, pod, source) goes through
:func:`~sloscope.review.escape.plain`, and ``text.usetex`` is off: span text is never parsed as a formula.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import ParamSpec

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sloscope.conventions import ROUTING_DEFAULT, ROUTING_PREDICTED, SIGNALS, SLOS
from sloscope.review import queries
from sloscope.review.analysis import CAUSES, wilson_interval
from sloscope.review.engine import Requests
from sloscope.review.engine import rows as sql_rows
from sloscope.review.escape import plain

__all__ = [
    "burn_chart",
    "causes_chart",
    "headroom_chart",
    "headroom_histogram",
    "pods_chart",
    "reliability_chart",
    "routing_chart",
]

_DPI = 80
HISTOGRAM_BINS = 40
_COLORS = {"failed": "#e7298a", "queueing": "#d95f02", "prefill": "#7570b3", "decode": "#1b9e77", "unknown": "#999999"}


_P = ParamSpec("_P")


def _without_tex(draw: Callable[_P, bytes | None]) -> Callable[_P, bytes | None]:
    """Draws with ``text.usetex`` off whatever the user's matplotlibrc says: LaTeX would run on span text."""

    @functools.wraps(draw)
    def drawn(*args: _P.args, **kwargs: _P.kwargs) -> bytes | None:
        with matplotlib.rc_context({"text.usetex": False}):
            return draw(*args, **kwargs)

    return drawn


def _png(figure: Figure) -> bytes:
    """The figure as a 128-colour palette PNG: a third of the size of the full-colour one, which keeps the
    self-contained HTML small; line charts lose nothing visible."""
    from PIL import Image

    FigureCanvasAgg(figure)
    figure.tight_layout()
    drawn = io.BytesIO()
    figure.savefig(drawn, format="png", dpi=_DPI)
    drawn.seek(0)
    with Image.open(drawn) as image:
        buffer = io.BytesIO()
        image.convert("RGB").quantize(colors=128).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


@_without_tex
def burn_chart(burn: pd.DataFrame) -> bytes | None:
    """Per SLO, one panel: the share of the window's error budget spent over time, one line per class."""
    table = burn.dropna(subset=["objective"])
    slos = [slo for slo in SLOS if slo in set(table["slo"])]
    if not slos:
        return None
    figure = Figure(figsize=(9, 2.4 * len(slos)))
    for i, slo in enumerate(slos, start=1):
        axes = figure.add_subplot(len(slos), 1, i)
        for slo_class, rows in table[table["slo"] == slo].groupby("slo_class", sort=True):
            axes.step(rows["bin_start"], rows["budget_consumed_cumulative"], where="post", label=plain(slo_class))
        axes.axhline(1.0, color="#c00", linewidth=1, linestyle="--", label="the period's whole budget")
        axes.set_title(f"{slo}: share of the compliance period's error budget consumed so far")
        axes.set_ylabel("share of budget")
        axes.legend(loc="upper left", fontsize="small")
        axes.grid(alpha=0.3)
    return _png(figure)


@_without_tex
def pods_chart(pods: pd.DataFrame, ratio: str = "error_ratio", label: str = "violations / eligible") -> bytes | None:
    """The ``ratio`` column per pod (the error ratio; violations per request from Prometheus), one group of bars
    per pod, one bar per SLO."""
    if pods.empty:
        return None
    pivot = pods.pivot_table(index="pod", columns="slo", values=ratio, aggfunc="max").fillna(0.0)
    pivot = pivot[[slo for slo in SLOS if slo in pivot.columns]]
    figure = Figure(figsize=(9, 0.4 * len(pivot) + 1.5))
    axes = figure.add_subplot(1, 1, 1)
    height = 0.8 / max(len(pivot.columns), 1)
    positions = range(len(pivot))
    for j, slo in enumerate(pivot.columns):
        axes.barh([p + j * height for p in positions], pivot[slo], height=height, label=plain(slo))
    axes.set_yticks([p + height * (len(pivot.columns) - 1) / 2 for p in positions], [plain(p) for p in pivot.index])
    axes.invert_yaxis()
    axes.set_xlabel(f"{ratio.replace('_', ' ')} ({label})")
    axes.set_title(f"{ratio.replace('_', ' ').capitalize()} per pod")
    axes.legend(fontsize="small")
    axes.grid(axis="x", alpha=0.3)
    return _png(figure)


@_without_tex
def routing_chart(routing: pd.DataFrame) -> bytes | None:
    """Per SLO, one panel: each class's attainment under prediction-based and default routing, with 95% Wilson
    intervals, and the class's objective as a tick. Rows without both profiles are left out."""
    both = routing[(routing[f"{ROUTING_PREDICTED}_eligible"] > 0) & (routing[f"{ROUTING_DEFAULT}_eligible"] > 0)]
    slos = [slo for slo in SLOS if slo in set(both["slo"])]
    if not slos:
        return None
    classes = sorted(set(both["slo_class"]))
    figure = Figure(figsize=(9, (0.45 * len(classes) + 1.1) * len(slos)))
    for i, slo in enumerate(slos, start=1):
        axes = figure.add_subplot(len(slos), 1, i)
        rows = both[both["slo"] == slo].set_index("slo_class").reindex(classes)
        for j, (profile, marker) in enumerate(((ROUTING_PREDICTED, "o"), (ROUTING_DEFAULT, "s"))):
            attained = rows[f"{profile}_attainment"].astype(float)
            bounds = [
                wilson_interval(float(v), float(n))
                for v, n in zip(
                    rows[f"{profile}_violations"].fillna(0), rows[f"{profile}_eligible"].fillna(0), strict=True
                )
            ]
            # clipped at 0: at 0 or all violations one bound equals the attainment, give or take a rounding
            low = (attained - pd.Series([b[0] for b in bounds], index=rows.index)).clip(lower=0.0)
            high = (pd.Series([b[1] for b in bounds], index=rows.index) - attained).clip(lower=0.0)
            positions = [k + (0.15 if j else -0.15) for k in range(len(classes))]
            axes.errorbar(attained, positions, xerr=[low, high], fmt=marker, capsize=3, label=profile)
        objective = rows["objective"].astype(float)
        axes.scatter(objective, range(len(classes)), marker="|", s=300, color="#c00", label="objective")
        axes.set_yticks(range(len(classes)), [plain(c) for c in classes])
        axes.invert_yaxis()
        axes.set_title(f"{slo}: attainment by routing profile (95% Wilson intervals)")
        axes.set_xlabel("attainment")
        axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
        axes.grid(axis="x", alpha=0.3)
    return _png(figure)


@_without_tex
def causes_chart(causes: pd.DataFrame) -> bytes | None:
    """Violating requests per class, stacked by cause."""
    if causes.empty:
        return None
    pivot = causes.pivot_table(index="slo_class", columns="cause", values="requests", aggfunc="sum").fillna(0)
    figure = Figure(figsize=(9, 0.5 * len(pivot) + 1.5))
    axes = figure.add_subplot(1, 1, 1)
    left = pd.Series(0.0, index=pivot.index)
    positions = list(range(len(pivot)))
    for cause in CAUSES:
        if cause not in pivot.columns:
            continue
        axes.barh(positions, pivot[cause], left=left, label=cause, color=_COLORS.get(cause, "#444444"))
        left = left + pivot[cause]
    axes.set_yticks(positions, [plain(c) for c in pivot.index])
    axes.invert_yaxis()
    axes.set_xlabel("violating requests")
    axes.set_title("Violations by cause")
    axes.legend(fontsize="small")
    return _png(figure)


@_without_tex
def reliability_chart(reliability: pd.DataFrame) -> bytes | None:
    """Per signal: the q-quantile of actual against the median prediction per bin, with the diagonal."""
    signals = [s for s in SIGNALS if s in set(reliability["signal"])]
    if not signals:
        return None
    figure = Figure(figsize=(4.5 * len(signals), 4))
    for i, signal in enumerate(signals, start=1):
        axes = figure.add_subplot(1, len(signals), i)
        rows = reliability[reliability["signal"] == signal]
        for source, group in rows.groupby("source", sort=True):
            axes.plot(group["predicted_median"], group["actual_quantile"], marker="o", label=plain(source))
        low = float(min(rows["predicted_median"].min(), rows["actual_quantile"].min()))
        high = float(max(rows["predicted_median"].max(), rows["actual_quantile"].max()))
        axes.plot([low, high], [low, high], color="#555", linestyle="--", linewidth=1, label="calibrated")
        quantile = float(rows["quantile"].iloc[0])
        axes.set_title(f"{signal.upper()}: p{quantile * 100:g} of actual vs predicted")
        axes.set_xlabel("predicted (bin median), s")
        axes.set_ylabel(f"actual p{quantile * 100:g}, s")
        axes.legend(fontsize="small")
        axes.grid(alpha=0.3)
    return _png(figure)


def headroom_histogram(requests: Requests, signal: str, bins: int = HISTOGRAM_BINS) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) of ``np.histogram(headroom, bins)`` for one signal, counted by SQL
    (:data:`~sloscope.review.queries.HEADROOM_HISTOGRAM`): the range from SQL, the edges from numpy."""
    found = sql_rows(requests)
    ranges = found.table(queries.HEADROOM_RANGE).set_index("signal")
    first, last = float(ranges["low"][signal]), float(ranges["high"][signal])
    if first == last:  # numpy's _get_outer_edges
        first, last = first - 0.5, last + 0.5
    edges = np.linspace(first, last, bins + 1)
    counted = found.table(
        queries.HEADROOM_HISTOGRAM, signal=signal, first=first, last=last, bins=bins, edges=[float(e) for e in edges]
    )
    counts = np.zeros(bins, dtype=np.int64)
    counts[counted["bin"].to_numpy(dtype=np.int64)] = counted["requests"].to_numpy(dtype=np.int64)
    return edges, counts


@_without_tex
def headroom_chart(requests: Requests) -> bytes | None:
    """Per signal, a histogram of the headroom at routing (target - predicted); left of 0 predicted a miss."""
    found = sql_rows(requests)
    known = set(found.table(queries.HEADROOM_RANGE)["signal"])
    columns = [s for s in SIGNALS if s in known]
    if not columns:
        return None
    figure = Figure(figsize=(4.5 * len(columns), 3.2))
    for i, signal in enumerate(columns, start=1):
        axes = figure.add_subplot(1, len(columns), i)
        edges, counts = headroom_histogram(found, signal)
        axes.hist(edges[:-1], bins=list(edges), weights=counts, color="#4c72b0")  # each left edge in its own bin
        axes.axvline(0.0, color="#c00", linewidth=1)
        axes.set_title(f"{signal.upper()} headroom at routing")
        axes.set_xlabel("target - predicted, s")
        axes.set_ylabel("requests")
    return _png(figure)
