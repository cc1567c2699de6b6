"""What the generated alerts compare against: :class:`AlertThresholds`, tunable per deployment, and the fixed
rate windows and reason sets of the alerts that have no threshold field."""

from __future__ import annotations

from dataclasses import dataclass, fields
from fractions import Fraction

from sloscope import conventions as c
from sloscope.generators.windows import BurnWindow, duration_seconds

# Rate windows of the alerts that have no threshold field: long enough to smooth scrape jitter, short enough
# that ``for`` dominates the detection time.
PIPELINE_WINDOW = "15m"
NO_SPANS_WINDOW = "10m"
REFUSING_WINDOW = "5m"
FOLDED_WINDOW = "1h"
WITHOUT_POOL_WINDOW = "1h"

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
    """Burn-rate alerts fire only when the alert's *long* window (1h, 6h, 1d or 3d) counted at least this many
    eligible (sampled) requests (its request rate times its length), so that a few failed requests in a quiet
    hour do not page; the short window has no such guard. At 100 requests in the hour and a 99% objective over
    28 days, the 1h page needs 14 misses (13.44% of 100); 0 turns the guard off."""
    slo_max_error_ratio: float = 0.5
    """Ceiling of every burn-rate threshold. factor x (1 - objective) exceeds 1 for loose objectives (13.44 x
    10% for a 90% objective over 28 days), and an error ratio never does: such a window could never fire. Above
    the ceiling the threshold is the ceiling, so total failure pages within ceiling x the long window (30
    minutes for the 1h page), at a lower burn rate than the window's budget share (5x, not 13.44x, for 90%).
    Strictly between 0 and 1."""
    calibration_tolerance: float = 0.5
    """Floor of the tolerance of the calibration alert, as a share of the expected miss rate 1 - q: a p90 model
    (1 - q = 10%) may miss its prediction for 5% to 15% of requests. Strictly between 0 and 1, so that a
    predictor too pessimistic (missing too rarely) can fire as well as one too optimistic."""
    calibration_sigmas: float = 3.0
    """The tolerance is at least this many binomial standard deviations of the miss rate of n predictions,
    sqrt(q (1 - q) / n): it shrinks with the number of predictions down to ``calibration_tolerance``. At n = 200
    an hour a calibrated p90 model misses 10% +- 2.1 points, so 3 sigmas are 6.4 points (64% of 1 - q)."""
    calibration_window: str = "1h"
    """Window over which online coverage (and a mean predictor's bias) is measured."""
    calibration_min_predictions: int = 100
    """Predictions needed in the window before a predictor is judged at all."""
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
    """Share of a pool's pods that must have room for one more request of a class; below it, a ticket, or a
    page while an SLO alert fires in the same pool."""
    headroom_for: str = "10m"
    shadow_failed_ratio: float = 0.1
    """Share of requests that may lose their shadow prediction to a failure (per pool, over 15m)."""
    shadow_failed_for: str = "30m"
    no_spans_for: str = "15m"
    eligible_min_requests: int = 100
    """SloscopeEligibleTrafficVanished watches a pool's class only when it counted at least this many SLO-eligible
    requests in the ``eligible_history_window`` before the last ``eligible_vanished_window``."""
    eligible_history_window: str = "6h"
    eligible_vanished_window: str = "30m"
    eligible_vanished_for: str = "15m"
    without_pool_ratio: float = 0.01
    """Share of a replica's requests that may fail before any pod with no pool told for them (kept out of every
    budget), over the last hour, before SloscopeFailuresWithoutPool opens a ticket."""
    without_pool_min_requests: int = 10
    """...and only when at least this many did in that hour: one lost request in a quiet hour is no ticket."""
    without_pool_for: str = "30m"
    aborts_window: str = "30m"
    """SloscopeAbortsRising compares a pool's share of aborted requests over this window..."""
    aborts_baseline_window: str = "1d"
    """...with its share over this window before it, and fires when it is ``aborts_jump_factor`` times that and
    at least ``aborts_min_share``, with ``aborts_min_requests`` aborted requests in the window, for ``aborts_for``."""
    aborts_jump_factor: float = 3.0
    aborts_min_share: float = 0.05
    aborts_min_requests: int = 20
    aborts_for: str = "15m"
    not_scraped_for: str = "5m"
    not_scraped_window: str = "1d"
    """How long a target is remembered as sloscope's after it last served sloscope's own series (whatever its job
    label: a scrape config's ``job_name``, prometheus-operator's ``<namespace>/<monitor>``): the not-scraped alert
    fires for such a target while it fails its scrapes, up to this long; with no sloscope series left at all it
    fires anyway."""
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
    contract_broken_for: str = "10m"
    """How long an upstream-contract check must read broken before its alert fires: the span checks judge the last
    10 minutes, the EPP and predictor checks each scrape or poll, so a single odd page does not alert."""

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name.endswith(("_for", "_window")):
                duration_seconds(value)  # raises on a malformed duration
            elif isinstance(value, str):
                if not value or '"' in value or "\\" in value:
                    raise ValueError(f"{field.name} must be a non-empty label value without quotes, not {value!r}")
            elif value < 0:
                raise ValueError(f"{field.name} must not be negative, not {value!r}")
        for name in ("slo_max_error_ratio", "calibration_tolerance"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must lie strictly between 0 and 1, not {getattr(self, name)!r}")


def burn_threshold(pair: BurnWindow, objective: float, thresholds: AlertThresholds) -> Fraction:
    """The error ratio above which ``pair`` fires for ``objective``: factor x (1 - objective), at most the ceiling
    ``slo_max_error_ratio`` (exact; the rules render it as the shortest decimal). Dashboards draw these lines."""
    return min(pair.exact_threshold(objective), Fraction(repr(thresholds.slo_max_error_ratio)))


def is_capped(pair: BurnWindow, objective: float, thresholds: AlertThresholds) -> bool:
    """Whether the ceiling, not the window's budget share, sets ``pair``'s threshold for ``objective``."""
    return burn_threshold(pair, objective, thresholds) < pair.exact_threshold(objective)


DEFAULT_THRESHOLDS = AlertThresholds()
