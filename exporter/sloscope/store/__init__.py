"""The record store: one Parquet row per evaluated request, in hourly partitions.

``schema`` defines the columns, ``files`` the directory layout, atomic writes and retention;
the writer is the publisher :mod:`sloscope.publishers.record_store`, the reader
:mod:`sloscope.store.read`. docs/record-store.md describes the format for pandas and DuckDB users.
"""
