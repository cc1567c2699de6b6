"""PromQL building blocks for the dashboards: series names taken from the MetricDefs, never retyped.

A renamed series in :mod:`sloscope.conventions` changes every panel that reads it, and a series that does
not exist cannot be written here by accident: :func:`series` only accepts a :class:`MetricDef` and the
recording-rule names come from :func:`~sloscope.conventions.slo_error_ratio_rule` and
:func:`~sloscope.conventions.slo_requests_rate_rule`. The few shapes that recur (the ``or ... * 0`` that
keeps classes without violations, the traffic-weighted ratio over recording rules) live here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from prometheus_client.utils import floatToGoString

from sloscope import conventions as c
from sloscope.conventions import MetricDef

RATE_INTERVAL = "$__rate_interval"
"""Grafana's window for rate(): at least four scrape intervals, so a rate never spans fewer than two samples."""

_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def series(metric: MetricDef, part: str = "") -> str:
    """The name a query uses: counters with ``_total``, a histogram only through one of its parts.

    A histogram has no series of its own name, so asking for one without ``part`` is a mistake caught here
    rather than a panel that silently shows nothing.
    """
    if metric.type == "histogram":
        if part not in _HISTOGRAM_PARTS:
            raise ValueError(f"{metric.name} is a histogram: name one of {', '.join(_HISTOGRAM_PARTS)}")
        return f"{metric.name}{part}"
    if part:
        raise ValueError(f"{metric.name} is a {metric.type}, it has no {part} series")
    return metric.exposed_name


def eq(label: str, value: str) -> str:
    """An exact label matcher."""
    return f'{label}="{value}"'


def ne(label: str, value: str) -> str:
    """A negative label matcher."""
    return f'{label}!="{value}"'


def le(bound: float, buckets: Sequence[float]) -> str:
    """A matcher on one bucket of a histogram, which must be one of its ``buckets``.

    Spelt as the exposition writes it (``0.0``, ``1.25``, ``2.0``): ``le="2"`` would match nothing.
    """
    if bound not in buckets:
        raise ValueError(f"{bound} is not a bucket boundary (boundaries: {', '.join(map(str, buckets))})")
    return eq("le", str(floatToGoString(bound)))  # type: ignore[no-untyped-call]


LE_INF = 'le="+Inf"'
"""The bucket every observation falls in: a histogram's count, also where it has no ``_count`` series."""


def regex(label: str, pattern: str) -> str:
    """A regular-expression label matcher (anchored by Prometheus at both ends)."""
    return f'{label}=~"{pattern}"'


def var(label: str) -> str:
    """A matcher on the dashboard variable named after the label (``pool=~"$pool"``).

    ``=~`` because the variables are multi-value: Grafana expands a selection to ``(a|b)`` and All to ``.+``.
    """
    return regex(label, f"${label}")


def sel(name: str, matchers: Sequence[str] = ()) -> str:
    """A series selector: the name and its matchers."""
    return f"{name}{{{', '.join(matchers)}}}" if matchers else name


def rate(name: str, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    return f"rate({sel(name, matchers)}[{window}])"


def increase(name: str, matchers: Sequence[str] = (), window: str = RATE_INTERVAL) -> str:
    return f"increase({sel(name, matchers)}[{window}])"


def agg(op: str, by: Sequence[str], expr: str) -> str:
    """``op by (labels) (expr)``, or ``op(expr)`` when nothing is kept."""
    return f"{op} by ({', '.join(by)}) ({expr})" if by else f"{op}({expr})"


def sum_by(by: Sequence[str], expr: str) -> str:
    return agg("sum", by, expr)


def min_by(by: Sequence[str], expr: str) -> str:
    return agg("min", by, expr)


def max_by(by: Sequence[str], expr: str) -> str:
    """For gauges every sloscope replica publishes alike (pod state, the spec): one value, not their sum."""
    return agg("max", by, expr)


def missed_share(violations: str, eligible: str, by: Sequence[str]) -> str:
    """Violations over eligible requests, both already ``rate``/``increase`` expressions, summed ``by``.

    A label set appears in the violation counter only with its first violation, so a class that never missed
    would have no ratio at all; ``or <eligible> * 0`` gives it an explicit zero (as docs/metrics.md shows).
    """
    missed = f"({sum_by(by, violations)} or {sum_by(by, eligible)} * 0)"
    return f"{missed} / {sum_by(by, eligible)}"


def slo_missed_share(window: str, by: Sequence[str], matchers: Sequence[str]) -> str:
    """Share of eligible requests that missed their SLO over ``window``, from the raw counters."""
    return missed_share(
        rate(series(c.SLO_VIOLATIONS), matchers, window),
        rate(series(c.SLO_REQUESTS), matchers, window),
        by,
    )


def rule_error_ratio(window: str, by: Sequence[str], matchers: Sequence[str]) -> str:
    """The error ratio over ``window`` from the recording rules, re-aggregated ``by`` fewer labels.

    The rules hold one ratio per (model, pool, slo_class, slo); a coarser ratio is their mean weighted by
    eligible traffic, sum(ratio x rate) / sum(rate), never a plain average of ratios. ``rate > 0`` leaves out
    label sets without eligible requests in the window, whose ratio is 0/0 = NaN and would poison the sum; a
    label set without a ratio series counts as no error, whether the rules write zeros or leave them out.
    """
    ratio = sel(c.slo_error_ratio_rule(window), matchers)
    requests = sel(c.slo_requests_rate_rule(window), matchers)
    return missed_share(f"{ratio} * ({requests} > 0)", requests, by)


def number(value: float) -> str:
    """A float as PromQL reads it, without binary noise (0.99, not 0.98999999)."""
    return format(Decimal(repr(value)).normalize(), "f")


def budget(objective: float) -> str:
    """The error budget ``1 - objective`` as a literal sub-expression, so a reader sees the objective itself."""
    return f"(1 - {number(objective)})"


def duration(seconds: float) -> str:
    """Seconds as a Prometheus duration in the largest whole unit (2419200 -> ``28d``)."""
    whole = int(seconds)
    if whole != seconds or whole <= 0:
        raise ValueError(f"not a whole positive number of seconds: {seconds}")
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"
