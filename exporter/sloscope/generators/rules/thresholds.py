"""What the generated alerts compare against: :class:`AlertThresholds`, tunable per deployment, and the fixed
rate windows and reason sets of the alerts that have no threshold field."""

from __future__ import annotations

from dataclasses import dataclass, fields

from sloscope import conventions as c
from sloscope.generators.windows import duration_seconds

# Rate windows of the alerts that have no threshold field: long enough to smooth scrape jitter, short enough
# that ``for`` dominates the detection time.
PIPELINE_WINDOW = "15m"
NO_SPANS_WINDOW = "10m"
REFUSING_WINDOW = "5m"
FOLDED_WINDOW = "1h"

# Drop reasons that lose data for good. queue_full is a refusal the client retries (SloscopeRefusingSpans),
# duplicate a harmless exporter retry, shutdown expected during a restart.
LOST_SPAN_REASONS = (c.DROP_INVALID, c.DROP_LATE, c.DROP_PENDING_CAP, c.DROP_TRACE_TOO_LARGE)
# Why a request got no shadow prediction, when the cause is a failure rather than configuration (sampled_out,
# rate_limited, no_predictor) or the request itself (no_features).
FAILED_SHADOW_REASONS = (c.SKIP_FAILED, c.SKIP_NO_POD_STATE, c.SKIP_QUEUE_FULL)
JOINED_OUTCOMES = (c.OUTCOME_JOINED, c.OUTCOME_JOINED_BY_REQUEST_ID)
ANCHORED_OUTCOMES = (*JOINED_OUTCOMES, c.OUTCOME_ANCHOR_ONLY, c.OUTCOME_EVICTED)  # emitted with a model-server span


@dataclass(frozen=True)
class AlertThresholds:
    """Thresholds and hold durations (``for``) of the generated alerts; defaults suit a production fleet.

    Durations are one-unit Prometheus durations (``30m``); the generated promtool tests assume whole minutes.
    The burn-rate windows and factors are not here: they follow from each class's objective and compliance
    period (:mod:`sloscope.generators.windows`).
    """

    slo_min_requests: int = 100
    """Burn-rate alerts fire only with at least this many eligible (sampled) requests in the long window, so
    that a few failed requests in a quiet hour do not page. At 100 and a 99% objective, the 1h page needs ~14
    misses; 0 turns the guard off."""
    calibration_max_deviation: float = 0.1
    """Online coverage may differ from the predictor's quantile by this much (0.1: a p90 model covering
    below 80% or above 100%)."""
    calibration_window: str = "1h"
    """Window over which online coverage is measured."""
    calibration_min_predictions: int = 200
    """Predictions needed in the window before coverage is judged: at 200 a calibrated p90 model has a standard
    deviation of 2 points, so 0.1 is five of them."""
    calibration_for: str = "30m"
    bias_max_ratio: float = 0.2
    """A mean predictor's bias (actual minus predicted) may reach this share of its mean prediction (0.2: actual
    latency 20% above or below the predictions), over ``calibration_window`` with ``calibration_min_predictions``,
    for ``calibration_for``."""
    untrained_for: str = "10m"
    """How long a model may look reset to its default before it alerts: a restarted training server refits
    within a few retrain intervals once the EPP sends it samples again."""
    predictor_down_for: str = "5m"
    model_stale_seconds: int = 7200
    """Age of a signal's model above which training is considered stopped (the training server retrains
    continuously, every few minutes)."""
    model_stale_for: str = "15m"
    headroom_min_share: float = 0.25
    """Share of a pool's pods that must have room for one more request of a class; below it, pages."""
    headroom_for: str = "10m"
    shadow_failed_ratio: float = 0.1
    """Share of requests that may lose their shadow prediction to a failure (per pool, over 15m)."""
    shadow_failed_for: str = "30m"
    no_spans_for: str = "15m"
    queue_full_ratio: float = 0.8
    """Fill of the receiver-to-assembler queue above which the worker is falling behind."""
    queue_full_for: str = "5m"
    refusing_for: str = "10m"
    spans_dropped_ratio: float = 0.01
    """Spans lost for good (invalid, late, pending_cap, trace_too_large), as a share of spans received."""
    spans_dropped_for: str = "15m"
    evicting_for: str = "15m"
    join_ratio_min: float = 0.9
    """Share of emitted requests that must have found their gateway span; 0 turns the alert off (for gateways
    that emit no spans)."""
    join_ratio_for: str = "30m"
    invalid_values_ratio: float = 0.01
    """Invalid request values (per field) as a share of evaluated requests."""
    invalid_values_for: str = "30m"
    scrape_failure_ratio: float = 0.1
    """Share of failed scrapes, per kind (model_server, epp, training_server, prediction_server)."""
    scrape_failure_for: str = "15m"
    records_lost_ratio: float = 0.001
    """Records a sink (the record store, the OTLP export) dropped or failed to write, as a share of those it got."""
    records_lost_for: str = "15m"

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name.endswith(("_for", "_window")):
                duration_seconds(value)  # raises on a malformed duration
            elif value < 0:
                raise ValueError(f"{field.name} must not be negative, not {value!r}")


DEFAULT_THRESHOLDS = AlertThresholds()
