"""The engines' own request-latency histograms on one page, summed per model and signal.

vLLM, SGLang and trtllm-serve observe every request they serve into histograms of queue time, TTFT,
inter-token latency, per-request time per output token and end-to-end latency. sloscope's own
TTFT/TPOT distributions come from spans, which the EPP samples (10 % of traces by default), so the
engines' histograms are an unsampled cross-check. :func:`engine_histograms` is pure: one page's
samples in, cumulative histograms out, summed over everything but the model (data-parallel engines,
SGLang's ``is_streaming``, ...). A family whose buckets are malformed is left out, never raised.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from sloscope.receivers.exposition import Sample
from sloscope.receivers.protocols import Protocol

__all__ = ["EngineHistogram", "HistogramKey", "engine_histograms"]

HistogramKey = tuple[str, str]  # (model, signal); model "" when the server names none


@dataclass(frozen=True)
class EngineHistogram:
    """Cumulative bucket counts at the engine's upper bounds (the last is +Inf), and the sum of observations."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    total: float

    @property
    def count(self) -> float:
        return self.counts[-1]


def engine_histograms(
    protocol: Protocol, samples: Iterable[Sample], model: str | None
) -> dict[HistogramKey, EngineHistogram]:
    """The protocol's latency histograms on the page, for ``model`` only when given, summed per (model, signal)."""
    signal_of = {family: signal for signal, family in protocol.latency}
    buckets: dict[HistogramKey, dict[float, float]] = {}
    sums: dict[HistogramKey, float] = {}
    broken: set[HistogramKey] = set()
    for sample in samples:
        signal = signal_of.get(sample.family)
        if signal is None or not protocol.carries_model(sample, model):
            continue
        label = protocol.model_label
        key = (sample.labels.get(label, "") if label is not None else "", signal)
        if not math.isfinite(sample.value) or sample.value < 0:
            broken.add(key)
        elif sample.name == sample.family + "_bucket":
            bound = _bound(sample.labels.get("le"))
            if bound is None:
                broken.add(key)
            else:
                per_bound = buckets.setdefault(key, {})
                per_bound[bound] = per_bound.get(bound, 0.0) + sample.value
        elif sample.name == sample.family + "_sum":
            sums[key] = sums.get(key, 0.0) + sample.value
    out = {}
    for key, per_bound in buckets.items():
        bounds = tuple(sorted(per_bound))
        counts = tuple(per_bound[b] for b in bounds)
        cumulative = all(a <= b for a, b in itertools.pairwise(counts))
        if key in broken or bounds[-1] != math.inf or not cumulative:
            continue
        out[key] = EngineHistogram(bounds, counts, sums.get(key, 0.0))
    return out


def _bound(text: str | None) -> float | None:
    try:
        bound = float(text) if text is not None else None
    except ValueError:
        return None
    return bound if bound is not None and not math.isnan(bound) else None
