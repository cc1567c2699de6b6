"""Is a pool's predictor trained, or was it reset to its default models? Pure functions.

A training server restarted without its model files starts from ``_create_default_model``: one fit on a
single sample whose target is 10 ms (``training/training_server.py`` of the llm-d latency predictor at
b5d19f1, lines 794-832, called from ``load_models`` at :1486 and :1499), answers ready at once, and its
prediction servers load those models: every prediction is then the same, whatever the features. Two
markers say so, per signal; either makes the signal untrained:

- ``no_samples``: the training server holds no training sample for the signal (its samples live in memory
  and are lost with the restart; ``training_samples_count`` lines all 0);
- ``constant``: two probe requests with very different features got the same prediction.

The queue-gated ensemble is **not** a marker. Its models exist only once each of four sample splits (TTFT and
TPOT, with and without a queue) holds ``LATENCY_MIN_SAMPLES_FOR_ENSEMBLE_SPLIT`` (200) samples
(training_server.py:1014-1075 at b5d19f1; the same code in GIE v1.5.0's ``latencypredictor/``): a pool that
rarely queues, or whose EPP runs with streaming off and so sends no TPOT sample at all, never builds it, and its
single models are trained all the same. ``ensemble_active 0`` and absent gated models in ``/status`` say only that.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from sloscope import conventions as c
from sloscope.predictor.features import Features

__all__ = [
    "MARKER_CONSTANT",
    "MARKER_NO_SAMPLES",
    "PROBE",
    "constant_signals",
    "untrained_markers",
]

MARKER_NO_SAMPLES = "no_samples"
MARKER_CONSTANT = "constant"

PROBE = (
    Features(
        kv_cache_percentage=0.05,
        input_token_length=50,
        num_request_waiting=0,
        num_request_running=1,
        num_tokens_generated=1,
        prefix_cache_score=0.0,
    ),
    Features(
        kv_cache_percentage=0.9,
        input_token_length=4000,
        num_request_waiting=20,
        num_request_running=60,
        num_tokens_generated=200,
        prefix_cache_score=0.0,
    ),
)
"""Two requests a trained model cannot predict alike: an idle pod and a loaded one."""


def constant_signals(predictions: Sequence[tuple[float, float]]) -> set[str]:
    """The signals whose (ttft_ms, tpot_ms) predictions for the :data:`PROBE` requests are all the same."""
    out: set[str] = set()
    for index, signal in enumerate(c.SIGNALS):
        values = [p[index] for p in predictions]
        if len(values) > 1 and all(math.isclose(v, values[0], rel_tol=1e-9, abs_tol=1e-9) for v in values):
            out.add(signal)
    return out


def untrained_markers(
    *,
    samples: Mapping[str, float],
    constant: Iterable[str],
    known: Iterable[str],
) -> dict[str, tuple[str, ...]]:
    """Per signal in ``known`` (a source said something about it), the markers found; empty: trained.

    ``samples`` are the training server's per-signal counts, ``constant`` the signals the probe found constant.
    """
    flat = set(constant)
    out: dict[str, tuple[str, ...]] = {}
    for signal in sorted(set(known)):
        markers = []
        if samples.get(signal) == 0:
            markers.append(MARKER_NO_SAMPLES)
        if signal in flat:
            markers.append(MARKER_CONSTANT)
        out[signal] = tuple(markers)
    return out
