"""The hot-path series families render exactly what prometheus_client's own instruments would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from sloscope.columnar.series import SeriesCollector
from sloscope.conventions import MetricDef

HIST = MetricDef("demo_seconds", "histogram", ("model",), "Demo.")
COUNTER = MetricDef("demo_requests", "counter", ("model", "slo"), "Demo.")


def test_histogram_matches_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    series = SeriesCollector()
    histogram = series.histogram(HIST, (0.1, 0.25, 1.0))
    ours.register(series)
    reference = Histogram("demo_seconds", "Demo.", ("model",), buckets=(0.1, 0.25, 1.0), registry=theirs)
    for value in (0.05, 0.1, 0.2, 0.25, 0.9, 3.0):
        histogram.observe(("m",), value)
        reference.labels("m").observe(value)
    ours_text = generate_latest(ours).decode().splitlines()
    theirs_text = [line for line in generate_latest(theirs).decode().splitlines() if "_created" not in line]
    assert ours_text == theirs_text


def test_counter_values_and_exemplars_in_openmetrics() -> None:
    registry = CollectorRegistry()
    series = SeriesCollector()
    counter = series.counter(COUNTER)
    histogram = series.histogram(HIST, (1.0,))
    registry.register(series)
    counter.inc(("m", "ttft"))
    counter.inc(("m", "ttft"), 2)
    histogram.observe(("m",), 0.5, "0af7651916cd43dd8448eb211c80319c")
    assert registry.get_sample_value("demo_requests_total", {"model": "m", "slo": "ttft"}) == 3
    text = generate_openmetrics(registry).decode()
    assert 'demo_seconds_bucket{le="1.0",model="m"} 1.0 # {trace_id="0af7651916cd43dd8448eb211c80319c"} 0.5 ' in text


def test_a_counter_refuses_to_fall() -> None:
    """rate() and increase() read every fall of a counter as a reset: a decrement would show as a large increase."""
    counter = SeriesCollector().counter(COUNTER)
    counter.inc(("m", "ttft"), 2)
    with pytest.raises(ValueError, match="can only grow"):
        counter.inc(("m", "ttft"), -0.5)
    assert counter.values == {("m", "ttft"): 2}


def test_names_are_known_to_the_registry_so_duplicates_are_caught() -> None:
    registry = CollectorRegistry()
    first, second = SeriesCollector(), SeriesCollector()
    first.counter(COUNTER)
    second.counter(COUNTER)
    registry.register(first)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(second)


def test_buckets_must_increase() -> None:
    with pytest.raises(ValueError, match="distinct and increasing"):
        SeriesCollector().histogram(HIST, (1.0, 0.5))
