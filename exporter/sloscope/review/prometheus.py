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

With a record store too, Prometheus gives what the store cannot know: the alerts that fired
(:func:`fired_alerts`) and the exporter's own counts of what it dropped (:func:`quality`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import httpx
import pandas as pd

from sloscope.conventions import (
    FIELD,
    INVALID_VALUES,
    MODEL,
    OUTCOME,
    POD,
    POD_REQUESTS,
    POD_SLO_VIOLATIONS,
    POOL,
    REASON,
    RECORD_DROPPED,
    RECORD_FAILED,
    RECORDS,
    REQUESTS,
    REQUESTS_FAILED,
    RESULT,
    ROUTING,
    SINK,
    SLO,
    SLO_CLASS,
    SLO_REQUESTS,
    SLO_VIOLATIONS,
    SPANS_DROPPED,
    SPANS_RECEIVED,
    TRACES_JOINED,
)
from sloscope.review import ReviewError
from sloscope.review.analysis import (
    attainment_from_counts,
    burn_from_counts,
    routing_from_counts,
    worst_pods_from_counts,
)
from sloscope.review.window import Window

__all__ = ["ALERT_COLUMNS", "Tables", "alert_step", "fired_alerts", "quality", "query_tables"]


class Tables(NamedTuple):
    attainment: pd.DataFrame
    burn: pd.DataFrame
    routing: pd.DataFrame
    pods: pd.DataFrame
    counts: pd.DataFrame  # eligible and violations per (slo_class, model, slo): for the policy table


_TIMEOUT_SECONDS = 30.0


def _client() -> httpx.Client:
    return httpx.Client(timeout=_TIMEOUT_SECONDS)


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
    with _client() as client:

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
        attainment_from_counts(by_model_counts, targets, window.seconds),
        burn_from_counts(_joined(eligible_bins, missed_bins, [SLO, SLO_CLASS, "bin_start"]), targets, window.seconds),
        routing_from_counts(routing, targets),
        worst_pods_from_counts(pod_requests, pod_violations),
        by_model_counts,
    )


ALERT_COLUMNS = ["alertname", "severity", "labels", "first_firing", "last_firing", "firing_seconds"]
_MAX_POINTS = 10_000  # Prometheus refuses a range query of more than 11,000 points per series


def alert_step(window: Window) -> int:
    """The step of the alerts query: 15 s, or longer when the window would need more than 10,000 points."""
    return max(15, -(-round(window.seconds) // _MAX_POINTS))


def fired_alerts(url: str, window: Window) -> pd.DataFrame:
    """Every alert that was firing at some time in ``window``, from Prometheus's ``ALERTS`` series::

        max_over_time(ALERTS{alertstate="firing"}[<step>])     a range query over the window, step = <step>

    Each point covers the step before it, so an alert firing for less than a step between two evaluations is
    still seen; the last point is at the window's end, the first covers the window's start (and up to a step
    before it, when the window is not a whole number of steps). ``first_firing`` is the start of the first step
    it fired in, ``last_firing`` the end of the last, ``firing_seconds`` = steps it fired in x step (an upper
    bound at the step's resolution); ``labels`` are its other labels, ``k=v`` joined by ``, ``. One row per
    alert's label set, the earliest first.
    """
    step = alert_step(window)
    points = -(-round(window.seconds) // step)  # the last point at the window's end: an alert firing now counts
    params = {
        "query": f'max_over_time(ALERTS{{alertstate="firing"}}[{step}s])',
        "start": f"{window.end.timestamp() - (points - 1) * step:.3f}",
        "end": f"{window.end.timestamp():.3f}",
        "step": f"{step}s",
    }
    with _client() as client:
        result = _get(client, url, "/api/v1/query_range", params)
    rows = []
    for series in result:
        metric = dict(series["metric"])
        times = [float(at) for at, _ in series["values"]]
        name, severity = metric.pop("alertname", ""), metric.pop("severity", "")
        metric.pop("alertstate", None)
        rows.append(
            {
                "alertname": name,
                "severity": severity,
                "labels": ", ".join(f"{k}={v}" for k, v in sorted(metric.items())),
                "first_firing": pd.Timestamp(min(times) - step, unit="s", tz="UTC"),
                "last_firing": pd.Timestamp(max(times), unit="s", tz="UTC"),
                "firing_seconds": float(len(times) * step),
            }
        )
    table = pd.DataFrame(rows, columns=ALERT_COLUMNS)
    return table.sort_values(["first_firing", "alertname", "labels"]).reset_index(drop=True)


def quality(url: str, window: Window) -> pd.DataFrame:
    """The exporter's own counts over ``window`` (``increase()``, summed over replicas), as rows of the data
    quality table (source ``prometheus``): spans dropped by reason (share: of the spans received), records not
    written by sink and result (share: of the sink's records), join outcomes (share: of all outcomes), invalid
    values by field and failed requests by reason (share: of the evaluated requests)."""
    with _client() as client:

        def one(name: str, labels: tuple[str, ...]) -> pd.DataFrame:
            return _instant(client, url, name, labels, window, column="count")

        received = one(SPANS_RECEIVED.exposed_name, ())
        dropped = one(SPANS_DROPPED.exposed_name, (REASON,))
        records = one(RECORDS.exposed_name, (SINK, RESULT))
        joined = one(TRACES_JOINED.exposed_name, (OUTCOME,))
        invalid = one(INVALID_VALUES.exposed_name, (FIELD,))
        failed = one(REQUESTS_FAILED.exposed_name, (REASON,))
        evaluated = one(REQUESTS.exposed_name, ())

    def total(table: pd.DataFrame) -> float:
        return float(table["count"].sum())

    lost = records[records[RESULT].isin((RECORD_DROPPED, RECORD_FAILED))].copy()
    lost["key"] = lost[SINK] + "/" + lost[RESULT]
    lost["share"] = lost["count"] / lost[SINK].map(records.groupby(SINK)["count"].sum())
    parts = [
        dropped.assign(measure="spans dropped", key=dropped[REASON], share=dropped["count"] / total(received)),
        lost.assign(measure="records not written"),
        joined.assign(measure="join outcome", key=joined[OUTCOME], share=joined["count"] / total(joined)),
        invalid.assign(measure="invalid value", key=invalid[FIELD], share=invalid["count"] / total(evaluated)),
        failed.assign(measure="failed request", key=failed[REASON], share=failed["count"] / total(evaluated)),
    ]
    table = pd.concat([p.reindex(columns=["measure", "key", "count", "share"]) for p in parts], ignore_index=True)
    table = table.sort_values(["measure", "key"], kind="stable").reset_index(drop=True)
    table.insert(0, "source", "prometheus")
    return table
