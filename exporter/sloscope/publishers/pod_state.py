"""The scraped state of every pod as gauges, read from :class:`PodHistory` at scrape time.

Rendering at collect time (a custom Collector, not Gauge objects set by the scrape loop) means a
pod that discovery forgot has no series to leave behind: its series end when its record is expired,
and ``sloscope_pod_scrape_age_seconds`` is exact at the moment Prometheus reads it.

A sleeping pod (vLLM's sleep mode) publishes near-empty queues and cache, which would read as the
best pod of the pool: ``sloscope_pod_sleeping`` marks it and ``sloscope_pool_pods`` leaves it out, so
the pool's share of pods with headroom is a share of the pods that can serve.

The servers' own prefix-cache and preemption counters are passed through per pod with the pool's label, so
the dashboards can show them beside the pod's headroom whatever the engine calls them. A counter's series
starts at the server's value when sloscope first scrapes it, as any scraped counter's does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sloscope import conventions as c
from sloscope.conventions import MetricDef
from sloscope.processors.pod_history import PodHistory

__all__ = ["PodStateCollector"]


def _family(definition: MetricDef) -> GaugeMetricFamily:
    return GaugeMetricFamily(definition.name, definition.help, labels=definition.labels)


def _counter(definition: MetricDef) -> CounterMetricFamily:
    return CounterMetricFamily(definition.name, definition.help, labels=definition.labels)


_COUNTERS: tuple[tuple[MetricDef, str], ...] = (
    (c.POD_PREFIX_CACHE_HITS, "prefix_cache_hits"),
    (c.POD_PREFIX_CACHE_QUERIES, "prefix_cache_queries"),
    (c.POD_PREEMPTIONS, "preemptions"),
)
"""Each passed-through counter and its :class:`~sloscope.receivers.protocols.PodCounters` field."""


class PodStateCollector(Collector):
    def __init__(self, history: PodHistory, pools: list[str], clock: Callable[[], float] = time.time) -> None:
        self._history = history
        self._pools = pools
        self._clock = clock

    def describe(self) -> Iterator[Metric]:
        for definition in (
            c.POD_UP,
            c.POD_SCRAPE_AGE_SECONDS,
            c.POD_KV_CACHE_UTILIZATION,
            c.POD_REQUESTS_WAITING,
            c.POD_REQUESTS_RUNNING,
            c.POD_SLEEPING,
            c.POOL_PODS,
        ):
            yield _family(definition)
        for definition, _ in _COUNTERS:
            yield _counter(definition)

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        up, age = _family(c.POD_UP), _family(c.POD_SCRAPE_AGE_SECONDS)
        kv, waiting, running = (
            _family(c.POD_KV_CACHE_UTILIZATION),
            _family(c.POD_REQUESTS_WAITING),
            _family(c.POD_REQUESTS_RUNNING),
        )
        sleeping = _family(c.POD_SLEEPING)
        counters = [(_counter(definition), field) for definition, field in _COUNTERS]
        fresh = dict.fromkeys(self._pools, 0)
        for record in self._history.snapshot():
            latest = record.latest
            asleep = latest is not None and latest.state.sleeping is True
            if record.target.pool in fresh and self._history.is_fresh(record, now) and not asleep:
                fresh[record.target.pool] += 1
            if record.last_attempt is None:
                continue  # discovered, never scraped yet: nothing is known
            labels = [record.target.pool, record.target.pod]
            up.add_metric(labels, 1.0 if record.up else 0.0)
            if latest is None:
                continue
            age.add_metric(labels, max(now - latest.at, 0.0))
            for family, value in (
                (kv, latest.state.kv_cache_utilization),
                (waiting, latest.state.waiting),
                (running, latest.state.running),
                (sleeping, None if latest.state.sleeping is None else float(latest.state.sleeping)),
            ):
                if value is not None:
                    family.add_metric(labels, value)
            for counter, field in counters:
                if (total := getattr(latest.state.counters, field)) is not None:
                    counter.add_metric(labels, total)
        pods = _family(c.POOL_PODS)
        for pool, count in fresh.items():
            pods.add_metric([pool], float(count))
        yield from (up, age, kv, waiting, running, sleeping, pods)
        yield from (counter for counter, _ in counters)
