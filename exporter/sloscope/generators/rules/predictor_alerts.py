"""The ``sloscope-predictor-alerts`` group: calibration (quantile predictors) or bias (mean predictors),
training, availability and freshness of the latency predictor, pod headroom, shadow predictions."""

from __future__ import annotations

from sloscope import conventions as c
from sloscope.generators.rules.common import (
    VALUE_DURATION,
    VALUE_PERCENT,
    Rule,
    _alert,
    _by,
    _label,
    _num,
    _one_of,
    _pct,
    _selector,
)
from sloscope.generators.rules.names import (
    POOL_HEADROOM_EXHAUSTED,
    PREDICTOR_BIASED,
    PREDICTOR_CALIBRATION_DRIFT,
    PREDICTOR_DOWN,
    PREDICTOR_MODEL_STALE,
    PREDICTOR_UNTRAINED,
    SHADOW_PREDICTIONS_FAILING,
)
from sloscope.generators.rules.thresholds import FAILED_SHADOW_REASONS, PIPELINE_WINDOW, AlertThresholds
from sloscope.generators.windows import TICKET
from sloscope.generators.windows import format_duration as _format_duration

_ACCURACY_BY = _by((c.POOL, c.SIGNAL, c.SOURCE))


def _accuracy_sum(definition: c.MetricDef, window: str, fn: str = "rate") -> str:
    """``fn`` of a prediction counter over ``window``, per pool, signal and source (span and shadow predictions)."""
    selector = _selector(definition.exposed_name, {c.SOURCE: _one_of(c.SOURCES)})
    return f"sum by ({_ACCURACY_BY}) ({fn}({selector}[{window}]))"


def _outside(value: str, low: str, high: str) -> str:
    """``value`` below ``low`` or above ``high``: an alert on a drift either way."""
    return f"(\n  (\n  {value}\n  > {high}\n  )\n  or\n  (\n  {value}\n  < {low}\n  )\n)\n"


def _calibration_drift(t: AlertThresholds) -> Rule:
    by = _ACCURACY_BY
    window = t.calibration_window

    def summed(definition: c.MetricDef, fn: str = "rate") -> str:
        return _accuracy_sum(definition, window, fn)

    quantile = f"max by ({c.POOL}) ({c.PREDICTOR_QUANTILE.exposed_name})"
    count = summed(c.PREDICTIONS, "increase")
    # The miss rate against the one the quantile promises, 1 - q: 1 when calibrated, 2 when twice as many requests
    # miss their prediction (optimistic), 0 when none does (pessimistic). A difference of coverages could not be
    # symmetric: a p90 model can cover at most 10 points more than q, but 90 points less.
    ratio = (
        f"(\n    1 - {summed(c.PREDICTION_COVERED)}\n    / {summed(c.PREDICTIONS)}\n  )\n"
        f"  / on ({c.POOL}) group_left ()\n  (1 - {quantile})"
    )
    # The binomial standard deviation of that ratio over n predictions is sqrt(q / ((1 - q) n)): the tolerance
    # shrinks with traffic down to a floor, so a quiet pool is not judged on noise and a busy one not held to
    # a precision no predictor has.
    spread = f"(1 / {count})\n    * on ({c.POOL}) group_left ()\n    ({quantile} / (1 - {quantile}))"
    tolerance = (
        f"clamp_min(\n    {_num(t.calibration_sigmas)} * sqrt(\n    {spread}\n    ),\n    "
        f"{_num(t.calibration_tolerance)}\n  )"
    )
    # Not for a predictor of the mean: half its requests exceed their prediction by design. A pool whose
    # objective is unknown (no predictor polled) is judged as a quantile one, the late-2025 predictor's.
    expr = (
        f"{_outside(ratio, f'1 - {tolerance}', f'1 + {tolerance}')}"
        f"and on ({by})\n{count} >= {t.calibration_min_predictions}\n"
        f"unless on ({c.POOL})\n{_objective_is(c.OBJECTIVE_MEAN)}"
    )
    return _alert(
        PREDICTOR_CALIBRATION_DRIFT,
        expr,
        severity=TICKET,
        hold=t.calibration_for,
        summary="The latency predictor misses its predictions far more or far less often than its quantile says.",
        description=(
            f"Over the last {window}, the {_label(c.SIGNAL)} predictions of pool {_label(c.POOL)} (source "
            f"{_label(c.SOURCE)}) were exceeded at {VALUE_PERCENT} of the rate 1 - q a calibrated quantile-q "
            f"predictor would be (100%: calibrated; above: optimistic, the EPP sends requests to pods that then miss "
            f"their SLO; below: pessimistic, it refuses pods that had room). Alerts beyond "
            f"{t.calibration_sigmas:g} binomial standard deviations of that rate, and never within "
            f"{_pct(t.calibration_tolerance)} of it, with at least {t.calibration_min_predictions} predictions."
        ),
    )


def _objective_is(objective: str) -> str:
    """Pools whose predictor now predicts ``objective`` (max over sloscope replicas)."""
    selector = _selector(c.PREDICTOR_OBJECTIVE.exposed_name, {c.OBJECTIVE: objective})
    return f"max by ({c.POOL}) ({selector}) == 1"


def _bias(t: AlertThresholds) -> Rule:
    by = _ACCURACY_BY
    window = t.calibration_window

    def summed(definition: c.MetricDef, fn: str) -> str:
        return _accuracy_sum(definition, window, fn)

    # Relative: the bias over the mean prediction, so one threshold serves TTFT (s) and TPOT (ms) alike. The error
    # is two sums that only grow (underestimates, overestimates), so rate() of each is right, across restarts too.
    under, over = summed(c.MEAN_PREDICTION_UNDERESTIMATE, "rate"), summed(c.MEAN_PREDICTION_OVERESTIMATE, "rate")
    bias = f"(\n    (\n      {under}\n      - {over}\n    )\n    / {summed(c.MEAN_PREDICTION_PREDICTED, 'rate')}\n  )"
    limit = _num(t.bias_max_ratio)
    expr = (
        f"{_outside(bias, f'-{limit}', limit)}"
        f"and on ({by})\n{summed(c.MEAN_PREDICTIONS, 'increase')} >= {t.calibration_min_predictions}\n"
        f"unless on ({c.POOL})\n{_objective_is(c.OBJECTIVE_QUANTILE)}"
    )
    return _alert(
        PREDICTOR_BIASED,
        expr,
        severity=TICKET,
        hold=t.calibration_for,
        summary="A mean latency predictor predicts too low or too high on average.",
        description=(
            f"Over the last {window}, the {_label(c.SIGNAL)} predictions of the mean-objective predictor of pool "
            f"{_label(c.POOL)} (source {_label(c.SOURCE)}) were off by {VALUE_PERCENT} of the mean prediction on "
            f"average (actual minus predicted; positive: it predicts too low, the EPP sends requests to pods that "
            f"then miss their SLO; negative: too high, it refuses pods that had room). Alerts beyond "
            f"{_pct(t.bias_max_ratio)} with at least {t.calibration_min_predictions} predictions."
        ),
    )


def _untrained(t: AlertThresholds) -> Rule:
    # max over sloscope replicas: one replica seeing a trained model is enough.
    expr = f"max by ({_by((c.POOL, c.SIGNAL))}) ({c.PREDICTOR_TRAINED.exposed_name}) == 0"
    return _alert(
        PREDICTOR_UNTRAINED,
        expr,
        severity=TICKET,
        hold=t.untrained_for,
        summary="The latency predictor looks reset to its default model.",
        description=(
            f"The {_label(c.SIGNAL)} model of pool {_label(c.POOL)} has looked untrained for {t.untrained_for}: "
            f"the training server holds no samples, or the prediction servers predict the same latency for very "
            f"different requests. The servers answer ready, but the EPP routes on a constant."
        ),
    )


def _predictor_down(t: AlertThresholds) -> Rule:
    # Ticket, not page: a predictor outage is a cause, not a symptom. Requests keep being routed, and if they
    # start missing their SLOs because of it, the burn-rate alerts page on exactly that; paging on the cause as
    # well would wake someone twice, or for an outage users never felt (a training server down for 5 minutes
    # only delays retraining). max over sloscope replicas: one replica seeing the server ready is enough.
    expr = f"max by ({_by((c.POOL, c.SERVER, c.ROLE))}) ({c.PREDICTOR_UP.exposed_name}) == 0"
    return _alert(
        PREDICTOR_DOWN,
        expr,
        severity=TICKET,
        hold=t.predictor_down_for,
        summary="A latency predictor server is down or not ready.",
        description=(
            f"The {_label(c.ROLE)} server {_label(c.SERVER)} of pool {_label(c.POOL)} has not answered ready "
            f"for {t.predictor_down_for}. A prediction server down costs the EPP its predictions and sloscope its "
            f"shadow predictions and live headroom; a training server down stops retraining."
        ),
    )


def _model_stale(t: AlertThresholds) -> Rule:
    age = c.PREDICTOR_MODEL_AGE_SECONDS.exposed_name
    expr = f"min by ({_by((c.POOL, c.SIGNAL))}) ({age}) > {t.model_stale_seconds}"
    return _alert(
        PREDICTOR_MODEL_STALE,
        expr,
        severity=TICKET,
        hold=t.model_stale_for,
        summary="The latency predictor has stopped retraining.",
        description=(
            f"The {_label(c.SIGNAL)} model of pool {_label(c.POOL)} was last written {VALUE_DURATION} ago "
            f"(threshold {_format_duration(t.model_stale_seconds)}): the training server no longer retrains, so "
            f"predictions stop following the traffic."
        ),
    )


def _headroom_exhausted(t: AlertThresholds) -> Rule:
    """A ticket, always: few pods with room is a cause (capacity). Users feel it only as an SLO burn, which pages on
    its own; a page here too would be a second page for one symptom, or one for a symptom nobody felt. An
    Alertmanager inhibition can hold this ticket back while its pool and class page (docs/dashboards-and-alerts.md)."""
    # max over sloscope replicas, which all compute the same pool state; it also keeps the match one-to-one.
    with_room = f"max by ({_by((c.POOL, c.SLO_CLASS))}) ({c.POOL_PODS_WITH_HEADROOM.exposed_name})"
    pods = f"max by ({c.POOL}) ({c.POOL_PODS.exposed_name})"
    return _alert(
        POOL_HEADROOM_EXHAUSTED,
        f"{with_room}\n  / on ({c.POOL}) group_left\n{pods}\n< {_num(t.headroom_min_share)}",
        severity=TICKET,
        hold=t.headroom_for,
        summary="Few pods of the pool have room for another request of the class.",
        description=(
            f"Only {VALUE_PERCENT} of the pods of pool {_label(c.POOL)} could take one more request of class "
            f"{_label(c.SLO_CLASS)} without a predicted SLO miss (threshold {_pct(t.headroom_min_share)}). With no "
            f"pod left the EPP routes to the least bad one and requests miss their SLOs: add capacity."
        ),
    )


def _shadow_failing(t: AlertThresholds) -> Rule:
    skipped = _selector(c.SHADOW_SKIPPED.exposed_name, {c.REASON: _one_of(FAILED_SHADOW_REASONS)})
    expr = (
        f"sum by ({c.POOL}) (rate({skipped}[{PIPELINE_WINDOW}]))\n"
        f"  / sum by ({c.POOL}) (rate({c.REQUESTS.exposed_name}[{PIPELINE_WINDOW}]))\n"
        f"> {_num(t.shadow_failed_ratio)}"
    )
    return _alert(
        SHADOW_PREDICTIONS_FAILING,
        expr,
        severity=TICKET,
        hold=t.shadow_failed_for,
        summary="Requests are losing their shadow predictions to failures.",
        description=(
            f"{VALUE_PERCENT} of the requests of pool {_label(c.POOL)} got no shadow prediction over the last "
            f"{PIPELINE_WINDOW} because a prediction call failed, the pod's state was unknown or the shadow queue "
            f"was full (threshold {_pct(t.shadow_failed_ratio)}). Prediction accuracy for the pool is judged on "
            f"fewer, possibly biased, requests."
        ),
    )


def predictor_alerts(thresholds: AlertThresholds) -> list[Rule]:
    return [
        _calibration_drift(thresholds),
        _bias(thresholds),
        _untrained(thresholds),
        _predictor_down(thresholds),
        _model_stale(thresholds),
        _headroom_exhausted(thresholds),
        _shadow_failing(thresholds),
    ]
