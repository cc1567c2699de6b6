"""``--prometheus URL``: the attainment and burn tables from Prometheus, when no record store is at hand.

Two queries per counter, through the HTTP API (``/api/v1/query`` and ``/api/v1/query_range``)::

    sum by (slo_class, model, slo) (increase(sloscope_slo_requests_total[<window>]))     at the window's end
    sum by (slo_class, slo) (increase(sloscope_slo_requests_total[<bin>]))               every bin, as a range

and the same for ``sloscope_slo_violations_total``. ``increase()`` extrapolates to the edges of its range,
so the counts are estimates, not integers; eligible and violations of one series set share the same samples,
so their ratio (the attainment) is exact. Each point of the range query covers the bin that ends at it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pandas as pd

from sloscope.conventions import MODEL, SLO, SLO_CLASS, SLO_REQUESTS, SLO_VIOLATIONS
from sloscope.review import ReviewError
from sloscope.review.analysis import attainment_from_counts, burn_from_counts
from sloscope.review.window import Window

__all__ = ["query_tables"]

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


def _instant(client: httpx.Client, url: str, query: str, at: float, column: str) -> pd.DataFrame:
    rows = []
    for series in _get(client, url, "/api/v1/query", {"query": query, "time": f"{at:.3f}"}):
        labels = series["metric"]
        rows.append({SLO: labels.get(SLO, ""), SLO_CLASS: labels.get(SLO_CLASS, ""), MODEL: labels.get(MODEL, "")})
        rows[-1][column] = float(series["value"][1])
    return pd.DataFrame(rows, columns=[SLO, SLO_CLASS, MODEL, column])


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


def query_tables(
    url: str, window: Window, targets: pd.DataFrame, bin_seconds: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(attainment, burn) over ``window``, as :func:`sloscope.review.analysis.attainment` and ``burn`` give them."""
    seconds = round(window.seconds)
    if bin_seconds >= seconds:
        raise ReviewError(f"the review window ({seconds} s) must be longer than a bin ({bin_seconds} s)")
    end = window.end.timestamp()
    requests, violations = SLO_REQUESTS.exposed_name, SLO_VIOLATIONS.exposed_name
    by_model = (SLO_CLASS, MODEL, SLO)
    with httpx.Client(timeout=_TIMEOUT_SECONDS) as client:
        eligible = _instant(client, url, _increase(requests, by_model, seconds), end, "eligible")
        missed = _instant(client, url, _increase(violations, by_model, seconds), end, "violations")
        per_bin = (SLO_CLASS, SLO)
        eligible_bins = _range(
            client, url, _increase(requests, per_bin, bin_seconds), window, bin_seconds, column="eligible"
        )
        missed_bins = _range(
            client, url, _increase(violations, per_bin, bin_seconds), window, bin_seconds, column="violations"
        )
    if eligible.empty:
        raise ReviewError(f"Prometheus at {url} has no {requests} samples between {window}")
    counts = eligible.merge(missed, on=[SLO, SLO_CLASS, MODEL], how="left").fillna({"violations": 0.0})
    bins = eligible_bins.merge(missed_bins, on=[SLO, SLO_CLASS, "bin_start"], how="left").fillna({"violations": 0.0})
    return attainment_from_counts(counts, targets), burn_from_counts(bins, targets)
