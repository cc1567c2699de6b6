"""What the receivers hand their data to: the consumer interfaces the stages above them implement.

A receiver knows the interface it delivers to, never the component behind it (the Collector's ``consumer``
package): the span intake offers batches to a :class:`SpanConsumer` (the processors' bounded queue), the
pod scraper records each page's state in a :class:`PodStateConsumer` (the processors' pod history) and its
histograms in an :class:`EngineLatencyConsumer` (the engine-latency publisher), the EPP scraper keeps its
in-flight counts in an :class:`InflightConsumer`. So the import arrows run up from here only through these
protocols, and the layering test (tests/unit/test_layers.py) keeps it that way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from sloscope._native import SpanBatch
from sloscope.receivers.discovery import Target
from sloscope.receivers.engine_latency import EngineHistogram, HistogramKey
from sloscope.receivers.epp_inflight import InflightPage
from sloscope.receivers.exposition import Sample
from sloscope.receivers.protocols import PodState
from sloscope.records import Span

__all__ = ["Batch", "EngineLatencyConsumer", "InflightConsumer", "PodKey", "PodStateConsumer", "SpanConsumer"]

Batch = list[Span] | SpanBatch
"""Spans as a decoder gives them: the Python decoder's list, or the native decoder's batch in native memory."""
PodKey = tuple[str, str]
"""(pool, pod)."""


class SpanConsumer(Protocol):
    """Takes decoded span batches. ``offer`` runs on the receivers' event loop: it never blocks and never raises;
    False refuses the batch whole (the receiver answers 429 / RESOURCE_EXHAUSTED)."""

    capacity: int  # spans; a batch larger than this can never be taken

    @property
    def closed(self) -> bool: ...

    def offer(self, batch: Batch) -> bool: ...


class PodStateConsumer(Protocol):
    """Keeps what the pod scraper learns: which pods exist, and each scrape's state (None: the scrape failed)."""

    def track(self, target: Target) -> None: ...

    def vanish(self, key: PodKey, now: float) -> None: ...

    def record(self, key: PodKey, at: float, state: PodState | None) -> None: ...

    def expire(self, now: float) -> list[PodKey]: ...


class EngineLatencyConsumer(Protocol):
    """Takes each scrape's cumulative engine-latency histograms of one pod's endpoint, and forgets a pod."""

    def observe(
        self,
        pod: PodKey,
        protocol: str,
        histograms: Mapping[HistogramKey, EngineHistogram],
        default_model: str | None,
        *,
        rank: int = 0,
    ) -> None: ...

    def forget(self, pod: PodKey) -> None: ...


class InflightConsumer(Protocol):
    """Reads the EPP's in-flight counts from a page's samples, and keeps each good page's."""

    def read(self, samples: Sequence[Sample]) -> InflightPage: ...

    def keep(self, pool: str, page: InflightPage) -> None: ...
