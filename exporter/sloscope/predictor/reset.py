"""Is a pool's predictor trained, or was it reset to its default models? Pure functions.

A training server restarted without its model files starts from ``_create_default_model``: one fit on a
single sample whose target is 10 ms (``training/training_server.py`` of the llm-d latency predictor at
b5d19f1, lines 794-832, called from ``load_models`` at :1486 and :1499), answers ready at once, and its
prediction servers load those models: every prediction is then the same, whatever the features. Three
markers say so, per signal; any one of them makes the signal untrained:

- ``no_samples``: the training server holds no training sample for the signal (its samples live in memory
  and are lost with the restart; ``training_samples_count`` lines all 0);
- ``default_models``: ensemble mode is on but its queue-gated models are not active, on the training
  server's ``/metrics`` (``ensemble_active{} 0`` with ``ensemble_mode{} 1``) or on a prediction server's
  ``/status`` (``models_exist.<signal>_gated`` false; ``prediction/prediction_server.py:966-995``): the
  gated models are fitted by the first real retrain only (training_server.py:1111-1116);
- ``constant``: two probe requests with very different features got the same prediction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from sloscope import conventions as c
from sloscope.predictor.features import Features

__all__ = [
    "MARKER_CONSTANT",
    "MARKER_DEFAULT_MODELS",
    "MARKER_NO_SAMPLES",
    "PROBE",
    "constant_signals",
    "untrained_markers",
]

MARKER_NO_SAMPLES = "no_samples"
MARKER_DEFAULT_MODELS = "default_models"
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
    training_default: bool,
    gated_absent: Iterable[str],
    constant: Iterable[str],
    known: Iterable[str],
) -> dict[str, tuple[str, ...]]:
    """Per signal in ``known`` (a source said something about it), the markers found; empty: trained.

    ``samples`` are the training server's per-signal counts, ``training_default`` its ensemble marker,
    ``gated_absent`` the signals whose gated model a prediction server's ``/status`` reports missing,
    ``constant`` those the probe found constant.
    """
    absent, flat = set(gated_absent), set(constant)
    out: dict[str, tuple[str, ...]] = {}
    for signal in sorted(set(known)):
        markers = []
        if samples.get(signal) == 0:
            markers.append(MARKER_NO_SAMPLES)
        if training_default or signal in absent:
            markers.append(MARKER_DEFAULT_MODELS)
        if signal in flat:
            markers.append(MARKER_CONSTANT)
        out[signal] = tuple(markers)
    return out
