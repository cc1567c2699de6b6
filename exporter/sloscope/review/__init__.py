"""``sloscope review``: the weekly SLO review, from the record store (or Prometheus) to an HTML/Markdown report.

Needs the ``review`` extra (pandas, matplotlib, duckdb): ``pip install 'sloscope[review]'``. Nothing here is imported
by ``sloscope serve``; the CLI imports :mod:`sloscope.review.main` only when ``review`` runs.

Modules, one job each:

- ``window``: the review window from ``--since`` / ``--from`` / ``--to``;
- ``queries``: every aggregation of the store's rows, as SQL;
- ``engine``: DuckDB and its limits, the window's rows as the SQL views ``requests`` and ``eligible``;
- ``load``: the window's rows (and the previous period's) from the store;
- ``analysis``: the tables, from the queries' aggregates (attainment, routing profiles compared, burn,
  worst periods and pods, causes, calibration, headroom);
- ``budget``: the period's error budget a window spends, and the error-budget policy's status;
- ``quality``: the data's gaps, join ratio, invalid values, failures, and the worst-missing requests;
- ``findings``: the summary's sentences, from the tables;
- ``prometheus``: the attainment, routing, burn and worst-pod tables from Prometheus queries instead of the store,
  and the alerts that fired and the exporter's drop counters;
- ``escape``: span text made safe for Markdown, CSV and chart labels;
- ``charts``: matplotlib (Agg) figures as PNG bytes;
- ``render``: HTML and Markdown text from the tables and charts;
- ``main``: the command: reads, analyses, renders, writes the files.
"""

MISSING_EXTRA = "sloscope review needs pandas, matplotlib and duckdb: pip install 'sloscope[review]'"


class ReviewError(Exception):
    """The review cannot be made (empty window, unreachable Prometheus); the message is one line for the user."""


class UsageError(ReviewError):
    """The options contradict each other or cannot be parsed (exit status 2)."""
