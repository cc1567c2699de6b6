"""Every aggregation of the store review as SQL, in one place, over two views of the record store.

``requests``: the window's rows, one per request, in the store's schema (docs/record-store.md) with the label
columns model, pool, pod, slo_class, routing and prediction_source read as ``unknown`` where null.
``eligible``: the long form, one row per (request, SLO it was eligible for), :data:`ELIGIBLE`.

The queries are plain SQL (SELECT, GROUP BY, UNION ALL, window functions) run by DuckDB over the Parquet files;
the few DuckDB spellings (``epoch_ns``, ``$name`` parameters, ``fsum``) and their Trino and Spark equivalents are
in docs/review.md, "Running the queries elsewhere". ``python -m sloscope.review.queries`` prints them all.

Quantiles are computed from order statistics (the distinct values with their counts, ranked by a running sum)
with numpy's linear interpolation, so the numbers equal those pandas gave for the same rows, and the memory a
quantile takes is bounded by the engine's limit rather than by the rows of its group.
"""

from __future__ import annotations

import sys

from sloscope.conventions import SIGNALS, SLOS, SOURCES

__all__ = ["ALL", "COUNTS", "COUNT_COLUMNS", "COUNT_KEYS", "ELIGIBLE", "QCUT_PROBES", "counts"]


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


def _pick(key: str, names: tuple[str, ...], column: str) -> str:
    """The column of the row's ``key`` (an SLO or a signal): ``column`` with ``{}`` for the name."""
    cases = " ".join(f"WHEN '{name}' THEN {column.format(name)}" for name in names)
    return f"CASE {key} {cases} END"


def _each(name: str, values: tuple[str, ...]) -> str:
    """A one-column table of ``values``: crossed with the requests, one scan gives a row per request and value."""
    return f"(VALUES {', '.join(f'({_quote(v)})' for v in values)}) AS {name}s({name})"


def _quote(value: str) -> str:
    return f"'{value}'"


_MET = _pick("slo", SLOS, "{}_met")
ELIGIBLE = f"""SELECT end_time, slo_class, model, pool, pod, routing, slo, NOT {_MET} AS violated
FROM requests CROSS JOIN {_each("slo", SLOS)} WHERE {_MET} IS NOT NULL"""
"""The long form: one row per request and SLO it was eligible for (its ``*_met`` not null)."""

_VIOLATIONS = "CAST(SUM(CASE WHEN violated THEN 1 ELSE 0 END) AS BIGINT) AS violations"


def counts(*keys: str) -> str:
    """Eligible requests and violations per ``keys`` of the long form (``bin_start``: the burn table's bins)."""
    named = ["epoch_ns(end_time) // ($bin_ns) * ($bin_ns) AS bin_start" if k == "bin_start" else k for k in keys]
    return (
        f"SELECT {', '.join(named)}, COUNT(*) AS eligible, {_VIOLATIONS}\n"
        f"FROM eligible GROUP BY {', '.join(keys)} ORDER BY {', '.join(keys)}"
    )


COUNT_KEYS: tuple[tuple[str, ...], ...] = (
    ("slo", "slo_class", "model"),
    ("slo", "slo_class"),
    ("slo", "slo_class", "pool", "model"),
    ("slo", "slo_class", "bin_start"),
    ("slo", "slo_class", "routing"),
    ("slo", "pool", "pod"),
)
"""The keys the report counts by: attainment, policy and trend, breakdown, burn, routing, worst pods."""
COUNT_COLUMNS = ("slo", "slo_class", "model", "pool", "pod", "routing", "bin_start")
_SETS = ", ".join(f"({', '.join(keys)})" for keys in COUNT_KEYS)
COUNTS = f"""SELECT grouping_set, {", ".join(COUNT_COLUMNS[:-1])}, COALESCE(bin_start, 0) AS bin_start, eligible,
  violations FROM (
  SELECT GROUPING({", ".join(COUNT_COLUMNS)}) AS grouping_set, {", ".join(COUNT_COLUMNS)}, COUNT(*) AS eligible,
    {_VIOLATIONS}
  FROM (SELECT *, epoch_ns(end_time) // ($bin_ns) * ($bin_ns) AS bin_start FROM eligible)
  GROUP BY GROUPING SETS ({_SETS}))"""
"""Every count of :data:`COUNT_KEYS` in one scan of the requests: ``grouping_set`` says which keys a row is of
(a bit per column of :data:`COUNT_COLUMNS`, the first the highest, set where the row sums over that column)."""


def _lerp(a: str, b: str, t: str) -> str:
    """numpy's linear interpolation (numpy/lib/_function_base_impl.py ``_lerp``): from b down when t >= 0.5."""
    return f"CASE WHEN {t} >= 0.5 THEN {b} - ({b} - {a}) * (1 - {t}) ELSE {a} + ({b} - {a}) * {t} END"


def _values(source: str, keys: tuple[str, ...], value: str, count: str | None = None) -> str:
    """The distinct values of ``value`` per ``keys`` with their counts ``c`` and the 0-based rank of their first
    row ``first_i``: the rows in order, as a sort would rank them, in as many rows as there are distinct values
    (a few thousand for latencies in milliseconds, however many requests). ``count``: a column of ``source``
    that counts its rows already (one row per value and count, from an earlier GROUP BY)."""
    partition = ", ".join(keys)
    counted = f"SUM({count})" if count else "COUNT(*)"
    return (
        f"SELECT {partition}, value, c, SUM(c) OVER (PARTITION BY {partition} ORDER BY value ROWS UNBOUNDED "
        f"PRECEDING) - c AS first_i FROM (SELECT {partition}, {value} AS value, {counted} AS c FROM {source} "
        f"GROUP BY {partition}, {value})"
    )


def _order_statistic(ranked: str, probes: str, keys: tuple[str, ...], combine: str) -> str:
    """Joins each probe (keys, name, lo, hi, t) with the values ranked lo and hi (0-based) in its group of
    ``ranked`` (:func:`_values`)."""
    a = " AND ".join(f"a.{k} = p.{k}" for k in keys)
    b = " AND ".join(f"b.{k} = p.{k}" for k in keys)
    return (
        f"SELECT {', '.join(f'p.{k}' for k in keys)}, p.name, {combine} AS value\n"
        f"FROM {probes} p JOIN {ranked} a ON {a} AND a.first_i <= p.lo AND p.lo < a.first_i + a.c\n"
        f"JOIN {ranked} b ON {b} AND b.first_i <= p.hi AND p.hi < b.first_i + b.c"
    )


def _linear_probe(n: str = "n", q: str = "q") -> str:
    """numpy's ``quantile(method='linear')``: virtual index (n - 1) q, its floor and the next; past the end the
    last value."""
    h = f"({n} - 1) * {q}"
    last = f"{h} >= {n} - 1"
    return (
        f"CASE WHEN {last} THEN {n} - 1 ELSE CAST(floor({h}) AS BIGINT) END AS lo, "
        f"CASE WHEN {last} THEN {n} - 1 ELSE CAST(floor({h}) AS BIGINT) + 1 END AS hi, {h} - floor({h}) AS t"
    )


_MEDIAN_PROBE = "(n - 1) // 2 AS lo, n // 2 AS hi"
"""numpy's ``median``: the middle value, or the mean of the two middle ones."""
_MEAN_OF_TWO = "(a.value + b.value) / 2"


_ACTUAL, _PREDICTED = _pick("signal", SIGNALS, "{}_seconds"), _pick("signal", SIGNALS, "predicted_{}_seconds")
COMPARED = f"""SELECT signal, source, pool, quantile, objective, actual, predicted, actual <= predicted AS covered
FROM (
  SELECT signal, prediction_source AS source, pool, prediction_quantile AS quantile,
    COALESCE(prediction_objective, 'quantile') AS objective, {_ACTUAL} AS actual, {_PREDICTED} AS predicted
  FROM requests CROSS JOIN {_each("signal", SIGNALS)} WHERE prediction_source IN ({_quoted(SOURCES)}))
WHERE actual IS NOT NULL AND predicted IS NOT NULL"""
"""Requests with a prediction (span or shadow) and an actual, per signal; rows without an objective are quantile."""

COVERAGE = f"""WITH compared AS ({COMPARED})
SELECT signal, source, pool, COALESCE(quantile, 0.9) AS quantile, COUNT(*) AS compared,
  CAST(SUM(CASE WHEN covered THEN 1 ELSE 0 END) AS BIGINT) AS covered
FROM compared WHERE objective = 'quantile'
GROUP BY signal, source, pool, COALESCE(quantile, 0.9) ORDER BY signal, source, pool, quantile"""
"""Quantile predictions compared and covered (actual <= predicted) per signal, source, pool and quantile."""

MEAN_ERROR = f"""WITH compared AS ({COMPARED})
SELECT signal, source, pool, COUNT(*) AS compared, fsum(actual - predicted) / COUNT(*) AS bias,
  fsum(predicted) / COUNT(*) AS predicted, fsum(abs(actual - predicted)) / COUNT(*) AS mae,
  fsum((actual - predicted) * (actual - predicted)) / COUNT(*) AS mse
FROM compared WHERE objective = 'mean' GROUP BY signal, source, pool ORDER BY signal, source, pool"""
"""Mean predictions per signal, source and pool: count, mean error, mean prediction, mean absolute and squared error."""

QCUT_PROBES = "$edges"
"""The probabilities of ``pd.qcut``'s bin edges (np.linspace(0, 1, bins + 1), nudged up where not exact)."""

_KEYS = ("signal", "source")
_BIN_KEYS = ("signal", "source", "code")
_EDGES = _order_statistic("by_predicted", "edge_probes", _KEYS, _lerp("a.value", "b.value", "p.t"))
_Q = _order_statistic(
    "by_quantile", f"(SELECT signal, source, 'q' AS name, {_MEDIAN_PROBE} FROM sizes)", _KEYS, _MEAN_OF_TWO
)
_MEDIANS = _order_statistic(
    "by_bin_predicted",
    f"(SELECT signal, source, code, 'median' AS name, {_MEDIAN_PROBE} FROM bins)",
    _BIN_KEYS,
    _MEAN_OF_TWO,
)
_ACTUALS = _order_statistic(
    "by_bin_actual",
    f"(SELECT signal, source, code, 'actual' AS name, {_linear_probe('n', 'q')} FROM bins)",
    _BIN_KEYS,
    _lerp("a.value", "b.value", "p.t"),
)

RELIABILITY = f"""WITH compared AS (SELECT signal, source, predicted, actual, covered,
  COALESCE(quantile, 0.9) AS quantile FROM ({COMPARED}) WHERE objective = 'quantile'),
pairs AS (SELECT signal, source, predicted, quantile, COUNT(*) AS n FROM compared
  GROUP BY signal, source, predicted, quantile),
by_predicted AS ({_values("pairs", _KEYS, "predicted", "n")}),
by_quantile AS ({_values("pairs", _KEYS, "quantile", "n")}),
sizes AS (SELECT signal, source, CAST(SUM(c) AS BIGINT) AS n FROM by_predicted GROUP BY signal, source),
edge_probes AS (SELECT signal, source, 'edge' AS name, {_linear_probe()}
  FROM sizes CROSS JOIN (SELECT unnest({QCUT_PROBES}) AS q)),
edges AS (SELECT DISTINCT signal, source, value AS edge FROM ({_EDGES})),
bounds AS (SELECT signal, source, row_number() OVER (PARTITION BY signal, source ORDER BY edge) - 2 AS code,
  lag(edge) OVER (PARTITION BY signal, source ORDER BY edge) AS low, edge AS high FROM edges),
cuts AS (SELECT signal, source, code, CASE WHEN code = 0 THEN NULL ELSE low END AS low, high FROM bounds
  WHERE code >= 0),
codes AS (SELECT v.signal, v.source, k.code, v.value AS predicted, v.c FROM by_predicted v
  JOIN cuts k ON k.signal = v.signal AND k.source = v.source
  AND (k.low IS NULL OR v.value > k.low) AND v.value <= k.high),
binned AS (SELECT c.signal, c.source, k.code, c.actual, c.covered FROM compared c
  JOIN codes k ON k.signal = c.signal AND k.source = c.source AND k.predicted = c.predicted),
q AS ({_Q}),
bins AS (SELECT k.signal, k.source, k.code, CAST(SUM(k.c) AS BIGINT) AS n, MIN(k.predicted) AS predicted_low,
  MAX(k.predicted) AS predicted_high, MIN(q.value) AS q
  FROM codes k JOIN q ON q.signal = k.signal AND q.source = k.source GROUP BY k.signal, k.source, k.code),
actual_values AS (SELECT signal, source, code, actual, COUNT(*) AS n,
  SUM(CASE WHEN covered THEN 1 ELSE 0 END) AS covered FROM binned GROUP BY signal, source, code, actual),
covered AS (SELECT signal, source, code, CAST(SUM(covered) AS DOUBLE) AS covered FROM actual_values
  GROUP BY signal, source, code),
by_bin_predicted AS (SELECT signal, source, code, predicted AS value, c, SUM(c) OVER (PARTITION BY signal, source,
  code ORDER BY predicted ROWS UNBOUNDED PRECEDING) - c AS first_i FROM codes),
by_bin_actual AS ({_values("actual_values", _BIN_KEYS, "actual", "n")}),
medians AS ({_MEDIANS}),
actuals AS ({_ACTUALS})
SELECT bins.signal, bins.source, bins.code + 1 AS bin, bins.n AS requests, bins.predicted_low, bins.predicted_high,
  medians.value AS predicted_median, bins.q AS quantile, actuals.value AS actual_quantile,
  covered.covered / bins.n AS coverage
FROM bins JOIN medians USING (signal, source, code) JOIN actuals USING (signal, source, code)
  JOIN covered USING (signal, source, code)
ORDER BY signal, source, bin"""
"""``pd.qcut`` of the predictions per signal and source into equal-count bins (edges: quantiles of the predicted
values, duplicates dropped; a bin is (low, high], the first [low, high]); per bin its size, predicted range and
median, the q-quantile of the actual values (q: the median of the rows' quantiles) and the coverage."""

_HEADROOM = _pick("signal", SIGNALS, "{}_headroom_seconds")
HEADROOM = f"""SELECT signal, slo_class, value FROM (
  SELECT signal, slo_class, {_HEADROOM} AS value FROM requests CROSS JOIN {_each("signal", SIGNALS)})
WHERE value IS NOT NULL"""
"""The headroom at routing per signal and class, where it is known."""

HEADROOM_TABLE = f"""WITH headroom AS ({HEADROOM}),
ranked AS ({_values("headroom", ("signal", "slo_class"), "value")}),
sizes AS (SELECT signal, slo_class, CAST(SUM(c) AS BIGINT) AS n,
  CAST(SUM(CASE WHEN value < 0 THEN c ELSE 0 END) AS DOUBLE) / SUM(c) AS negative_share
  FROM ranked GROUP BY signal, slo_class),
probes AS (SELECT signal, slo_class, name, {_linear_probe()}
  FROM sizes CROSS JOIN (SELECT unnest($names) AS name, unnest($percentiles) AS q)),
percentiles AS ({_order_statistic("ranked", "probes", ("signal", "slo_class"), _lerp("a.value", "b.value", "p.t"))})
SELECT s.signal, s.slo_class, CAST(s.n AS BIGINT) AS requests, s.negative_share, p.name, p.value
FROM sizes s JOIN percentiles p USING (signal, slo_class) ORDER BY s.signal, s.slo_class, p.name"""
"""Per signal and class: requests with a headroom, the share below zero, and the percentiles (long form)."""

HEADROOM_RANGE = f"""WITH headroom AS ({HEADROOM})
SELECT signal, COUNT(*) AS requests, CAST(SUM(CASE WHEN value < 0 THEN 1 ELSE 0 END) AS BIGINT) AS negative,
  MIN(value) AS low, MAX(value) AS high FROM headroom GROUP BY signal"""
"""Per signal, over every class: requests with a headroom, how many negative, and the range (for the histogram)."""

HEADROOM_HISTOGRAM = f"""WITH headroom AS (SELECT value FROM ({HEADROOM}) WHERE signal = $signal),
guess AS (SELECT value, LEAST(CAST(floor((value - $first) / ($last - $first) * $bins) AS BIGINT), $bins - 1) AS i
  FROM headroom),
corrected AS (SELECT CASE WHEN value < $edges[i + 1] THEN i - 1
  WHEN value >= $edges[i + 2] AND i != $bins - 1 THEN i + 1 ELSE i END AS bin FROM guess)
SELECT bin, COUNT(*) AS requests FROM corrected GROUP BY bin ORDER BY bin"""
"""numpy's histogram of one signal's headroom in ``$bins`` equal bins from ``$first`` to ``$last`` (``$edges``: the
bin edges, np.linspace): numpy's index, (value - first) / (last - first) x bins, corrected by one against the
edges (numpy/lib/_histograms_impl.py), so every count is numpy's."""

_CAUSE = """CASE
  WHEN failure_reason IS NOT NULL AND (ttft_met = false OR tpot_met = false) THEN 'failed'
  WHEN ttft_met = false AND tpot_met IS DISTINCT FROM false THEN
    CASE WHEN queue_seconds IS NULL OR prefill_seconds IS NULL THEN 'unknown'
    WHEN queue_seconds >= prefill_seconds THEN 'queueing' ELSE 'prefill' END
  WHEN tpot_met = false AND ttft_met IS DISTINCT FROM false THEN 'decode'
  WHEN ttft_met = false AND tpot_met = false THEN
    CASE WHEN queue_share IS NULL OR prefill_share IS NULL OR decode_share IS NULL
      OR isinf(queue_share) OR isinf(prefill_share) OR isinf(decode_share)
      OR isnan(queue_share) OR isnan(prefill_share) OR isnan(decode_share) THEN 'unknown'
    WHEN queue_share >= prefill_share AND queue_share >= decode_share THEN 'queueing'
    WHEN prefill_share >= decode_share THEN 'prefill' ELSE 'decode' END
END"""

CAUSE_ROWS = f"""SELECT slo_class, ttft_met, tpot_met, {_CAUSE} AS cause FROM (
  SELECT *, queue_seconds / ttft_target_seconds AS queue_share, prefill_seconds / ttft_target_seconds AS prefill_share,
    decode_seconds / (tpot_target_seconds * (CAST(completion_tokens AS DOUBLE) - 1.0)) AS decode_share
  FROM requests)"""
"""Each request's violation cause (null where it met every SLO it was eligible for); docs/review.md, "Violations by
cause", gives the rule."""

CAUSES = f"""WITH causes AS ({CAUSE_ROWS})
SELECT slo_class, CASE WHEN ttft_met = false AND tpot_met = false THEN 'both'
  WHEN ttft_met = false THEN 'ttft' ELSE 'tpot' END AS missed, cause, COUNT(*) AS requests
FROM causes WHERE cause IS NOT NULL GROUP BY slo_class, missed, cause ORDER BY slo_class, missed, cause"""
"""Violating requests per class, the SLOs they missed (ttft, tpot, both) and cause."""

OFFENDERS = "\nUNION ALL\n".join(
    f"""(SELECT '{signal}' AS signal, trace_id, request_id, epoch_ns(end_time) AS end_time, model, pool, pod,
  slo_class, routing, {signal}_seconds AS actual_seconds, {signal}_target_seconds AS target_seconds,
  {signal}_seconds / {signal}_target_seconds AS over_target, failure_reason
FROM requests WHERE {signal}_met = false AND {signal}_seconds IS NOT NULL AND {signal}_target_seconds > 0
ORDER BY over_target DESC, end_time LIMIT $limit)"""
    for signal in SIGNALS
)
"""Per signal, the requests that missed their target by the largest factor (ties: the earlier first)."""

SPAN = """SELECT COUNT(*) AS requests, epoch_ns(MIN(end_time)) AS first, epoch_ns(MAX(end_time)) AS last,
  COUNT(join_outcome) AS outcomes,
  CAST(SUM(CASE WHEN join_outcome IN ($joined, $by_request_id) THEN 1 ELSE 0 END) AS BIGINT) AS joined
FROM requests"""
"""The window's requests, the first and last end time, and the join outcomes (all, and joined)."""

BINS_SEEN = """SELECT DISTINCT epoch_ns(end_time) // ($bin_ns) * ($bin_ns) AS bin_start FROM requests
ORDER BY bin_start"""
"""The bins (as the burn table's) with at least one request: the report's gaps are the bins between them."""

DATA_QUALITY = """SELECT 'join outcome' AS measure, join_outcome AS key, COUNT(*) AS count
FROM requests WHERE join_outcome IS NOT NULL GROUP BY join_outcome
UNION ALL
SELECT 'invalid value', field, COUNT(*) FROM (
  SELECT unnest(list_distinct(invalid_fields)) AS field FROM requests WHERE invalid_fields IS NOT NULL)
WHERE field IS NOT NULL GROUP BY field
UNION ALL
SELECT 'failed request', failure_reason, COUNT(*) FROM requests WHERE failure_reason IS NOT NULL GROUP BY failure_reason
UNION ALL
SELECT 'prediction skipped', prediction_skipped, COUNT(*) FROM requests
WHERE prediction_skipped IS NOT NULL GROUP BY prediction_skipped"""
"""Requests per join outcome, invalid field (once per request), failure reason and skipped-prediction reason."""

ALL: dict[str, str] = {
    "eligible (view)": ELIGIBLE,
    "counts (attainment, policy, trend, breakdown, burn, routing, worst pods)": COUNTS,
    "policy and trend counts": counts("slo", "slo_class"),
    "causes": CAUSES,
    "coverage": COVERAGE,
    "mean error": MEAN_ERROR,
    "reliability": RELIABILITY,
    "headroom": HEADROOM_TABLE,
    "headroom range": HEADROOM_RANGE,
    "headroom histogram": HEADROOM_HISTOGRAM,
    "offenders": OFFENDERS,
    "span and join ratio": SPAN,
    "bins with requests": BINS_SEEN,
    "data quality": DATA_QUALITY,
}
"""Every query the store review runs, by what it computes (docs/review.md lists them)."""


def main() -> None:
    for name, sql in ALL.items():
        sys.stdout.write(f"-- {name}\n{sql};\n\n")


if __name__ == "__main__":
    main()
