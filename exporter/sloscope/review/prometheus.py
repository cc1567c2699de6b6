"""``--prometheus URL``: the attainment, burn, routing and worst-pod tables from Prometheus, when no record store
is at hand.

Queries through the HTTP API (``/api/v1/query`` and ``/api/v1/query_range``)::

    sum by (slo_class, model, slo) (increase(sloscope_slo_requests_total[<window>]))     at the window's end
    sum by (slo_class, slo) (increase(sloscope_slo_requests_total[<bin>]))               every bin, as a range
    sum by (slo_class, slo, routing) (increase(sloscope_slo_requests_total[<window>]))   at the window's end

and the same for ``sloscope_slo_violations_total``; then per pod::

    sum by (pool, pod) (increase(sloscope_pod_requests_total[<window>]))
    sum by (pool, pod, slo) (increase(sloscope_pod_slo_violations_total[<window>]))

``increase()`` extrapolates to the edges of its range, so the counts are estimates, not integers; eligible and
violations of one series set share the same samples, so their ratio (the attainment) is exact. Each point of
the range query covers the bin that ends at it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import httpx
import pandas as pd

from sloscope.conventions import (
    MODEL,
    POD,
    POD_REQUESTS,
    POD_SLO_VIOLATIONS,
    POOL,
    ROUTING,
    SLO,
    SLO_CLASS,
    SLO_REQUESTS,
    SLO_VIOLATIONS,
)
from sloscope.review import ReviewError
from sloscope.review.analysis import (
    attainment_from_counts,
    burn_from_counts,
    routing_from_counts,
    worst_pods_from_counts,
)
from sloscope.review.window import Window

__all__ = ["Tables", "query_tables"]


class Tables(NamedTuple):
    attainment: pd.DataFrame
    burn: pd.DataFrame
    routing: pd.DataFrame
    pods: pd.DataFrame


_TIMEOUT_SECONDS = 30.0


def _get(client: httpx.Client, url: str, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
    try:
        response = client.get(f"{url.rstrip('/')}{path}", params=params)
    except httpx.HTTPError as exc:
        raise ReviewError(f"cannot reach Prometheus at {url}: {exc or type(exc).__name__}") from None
    try:
        body = response.json()
    except ValueError:
        raise ReviewError(
            f"Prometheus at {url} answered {path} with HTTP {response.status_code} and no JSON (is it Prometheus?)"
        ) from None
    if response.status_code != httpx.codes.OK or body.get("status") != "success":
        reason = body.get("error") or f"HTTP {response.status_code}"
        raise ReviewError(f"Prometheus at {url} refused the query {params['query']!r}: {reason}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _increase(name: str, labels: tuple[str, ...], seconds: int) -> str:
    return f"sum by ({', '.join(labels)}) (increase({name}[{seconds}s]))"


def _instant(
    client: httpx.Client, url: str, name: str, labels: tuple[str, ...], window: Window, *, column: str
) -> pd.DataFrame:
    """``sum by (labels) (increase(name[window]))`` at the window's end: one row per label set."""
    query = _increase(name, labels, round(window.seconds))
    rows = []
    for series in _get(client, url, "/api/v1/query", {"query": query, "time": f"{window.end.timestamp():.3f}"}):
        row: dict[str, object] = {label: series["metric"].get(label, "") for label in labels}
        row[column] = float(series["value"][1])
        rows.append(row)
    return pd.DataFrame(rows, columns=[*labels, column])


def _range(client: httpx.Client, url: str, query: str, window: Window, step: int, *, column: str) -> pd.DataFrame:
    params = {
        "query": query,
        "start": f"{window.start.timestamp() + step:.3f}",
        "end": f"{window.end.timestamp():.3f}",
        "step": f"{step}s",
    }
    rows = []
    for series in _get(client, url, "/api/v1/query_range", params):
        for at, value in series["values"]:
            rows.append(
                {
                    SLO: series["metric"].get(SLO, ""),
                    SLO_CLASS: series["metric"].get(SLO_CLASS, ""),
                    "bin_start": pd.Timestamp(float(at) - step, unit="s", tz="UTC"),
                    column: float(value),
                }
            )
    return pd.DataFrame(rows, columns=[SLO, SLO_CLASS, "bin_start", column])


def _joined(eligible: pd.DataFrame, missed: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Eligible counts with their violations beside them; a label set without a violation series missed none."""
    return eligible.merge(missed, on=keys, how="left").fillna({"violations": 0.0})


def query_tables(url: str, window: Window, targets: pd.DataFrame, bin_seconds: int) -> Tables:
    """The attainment, burn, routing and worst-pod tables over ``window``, as :mod:`sloscope.review.analysis`
    gives them from counts (the worst pods with violations per request: eligible per pod is not published)."""
    seconds = round(window.seconds)
    if bin_seconds >= seconds:
        raise ReviewError(f"the review window ({seconds} s) must be longer than a bin ({bin_seconds} s)")
    requests, violations = SLO_REQUESTS.exposed_name, SLO_VIOLATIONS.exposed_name
    by_model, by_routing, per_bin = (SLO_CLASS, MODEL, SLO), (SLO_CLASS, SLO, ROUTING), (SLO_CLASS, SLO)
    with httpx.Client(timeout=_TIMEOUT_SECONDS) as client:

        def counts(labels: tuple[str, ...]) -> pd.DataFrame:
            """Eligible and violations per ``labels`` over the window (no violation series: 0)."""
            eligible = _instant(client, url, requests, labels, window, column="eligible")
            missed = _instant(client, url, violations, labels, window, column="violations")
            return _joined(eligible, missed, list(labels))

        by_model_counts, routing = counts(by_model), counts(by_routing)
        eligible_bins = _range(
            client, url, _increase(requests, per_bin, bin_seconds), window, bin_seconds, column="eligible"
        )
        missed_bins = _range(
            client, url, _increase(violations, per_bin, bin_seconds), window, bin_seconds, column="violations"
        )
        pod_requests = _instant(client, url, POD_REQUESTS.exposed_name, (POOL, POD), window, column="requests")
        pod_violations = _instant(
            client, url, POD_SLO_VIOLATIONS.exposed_name, (SLO, POOL, POD), window, column="violations"
        )
    if by_model_counts.empty:
        raise ReviewError(f"Prometheus at {url} has no {requests} samples between {window}")
    return Tables(
        attainment_from_counts(by_model_counts, targets),
        burn_from_counts(_joined(eligible_bins, missed_bins, [SLO, SLO_CLASS, "bin_start"]), targets),
        routing_from_counts(routing, targets),
        worst_pods_from_counts(pod_requests, pod_violations),
    )
