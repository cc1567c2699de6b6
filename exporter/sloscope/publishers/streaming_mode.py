"""``sloscope_epp_streaming_mode``: the streaming mode each pool's predictions are read under, and what it rests on.

Rendered at collect time from :class:`~sloscope.processors.streaming_modes.StreamingModes`, so the series always
says what the comparisons made at that moment assume.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sloscope import conventions as c
from sloscope.processors.streaming_modes import StreamingModes

__all__ = ["StreamingModeCollector"]


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(c.EPP_STREAMING_MODE.name, c.EPP_STREAMING_MODE.help, labels=c.EPP_STREAMING_MODE.labels)


class StreamingModeCollector(Collector):
    def __init__(self, modes: StreamingModes) -> None:
        self._modes = modes

    def describe(self) -> Iterator[Metric]:
        yield _family()

    def collect(self) -> Iterator[Metric]:
        family = _family()
        for pool, mode in sorted(self._modes.modes().items()):
            family.add_metric([pool, mode.basis], 1.0 if mode.streaming else 0.0)
        yield family
