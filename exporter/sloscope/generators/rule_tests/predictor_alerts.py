"""Tests of the predictor alerts: calibration drift (quantile predictors), bias (mean predictors), an untrained
model, a predictor server down, a stale model, pool headroom and failing shadow predictions."""

from __future__ import annotations

import math

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import (
    MODEL,
    POOL,
    Test,
    _alert_case,
    _counter,
    _gauge,
    _group,
    _held,
    _minutes,
    _Rules,
    _series,
    _switch,
)
from sloscope.slo.spec import SLOSpec


def _predictor_tests(spec: SLOSpec, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    return [
        *_calibration_tests(rules, t),
        *_bias_tests(rules, t),
        *_untrained_tests(rules, t),
        *_predictor_down_tests(rules, t),
        *_model_stale_tests(rules, t),
        *_headroom_tests(spec, rules, t),
        *_shadow_tests(rules, t),
    ]


def _calibration_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.PREDICTOR_CALIBRATION_DRIFT, _minutes(t.calibration_for)
    quantile, limit = 0.9, t.calibration_max_deviation
    minutes = hold + 10
    which = {c.MODEL: MODEL, c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT, c.SOURCE: c.SOURCE_SHADOW}

    def predictor(covered: int, compared: int, **labels: str) -> list[dict[str, str]]:
        return [
            _series(c.PREDICTION_COVERED.exposed_name, {**which, **labels}, _counter(covered, minutes)),
            _series(c.PREDICTIONS.exposed_name, {**which, **labels}, _counter(compared, minutes)),
        ]

    quantile_series = _series(c.PREDICTOR_QUANTILE.exposed_name, {c.POOL: POOL}, _gauge(quantile, minutes))
    tests = []
    coverage = round(max(0.0, quantile - 2 * limit), 2)
    if abs(coverage - quantile) > limit:
        compared = 100
        judged_at = max(1, math.ceil(t.calibration_min_predictions / compared))
        labels = {c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT, c.SOURCE: c.SOURCE_SHADOW}
        expected = rules.expect(name, labels, coverage - quantile)
        tests.append(
            _group(
                f"{name} fires when a p90 predictor covers {coverage:.0%} of requests",
                [*predictor(round(coverage * compared), compared), quantile_series],
                alert_rule_test=_held(name, judged_at + hold, expected),
            )
        )
        tests.append(
            _group(
                f"{name} stays silent for the same coverage of a predictor of the mean",
                [
                    *predictor(round(coverage * compared), compared),
                    quantile_series,
                    *_objective(c.OBJECTIVE_MEAN, minutes),
                ],
                alert_rule_test=[_alert_case(name, judged_at + hold)],
            )
        )
    silent_at = hold + 2
    series = [*predictor(90, 100, signal=c.SIGNAL_TPOT), quantile_series]
    if t.calibration_min_predictions > silent_at:
        series += predictor(0, 1, source=c.SOURCE_SPAN)  # covers nothing, but a prediction a minute is too few
    tests.append(
        _group(
            f"{name} stays silent for a calibrated predictor and for too few predictions",
            series,
            alert_rule_test=[_alert_case(name, silent_at)],
        )
    )
    return tests


def _objective(objective: str, minutes: int) -> list[dict[str, str]]:
    """The pool's objective series: 1 for ``objective``, 0 for the other."""
    return [
        _series(
            c.PREDICTOR_OBJECTIVE.exposed_name,
            {c.POOL: POOL, c.OBJECTIVE: each},
            _gauge(int(each == objective), minutes),
        )
        for each in c.OBJECTIVES
    ]


def _bias_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.PREDICTOR_BIASED, _minutes(t.calibration_for)
    minutes = hold + 10
    which = {c.MODEL: MODEL, c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT, c.SOURCE: c.SOURCE_SHADOW}
    compared = 100
    judged_at = max(1, math.ceil(t.calibration_min_predictions / compared))
    bias = round(2 * t.bias_max_ratio, 2)  # actual latency this share above the predictions

    def predictor(error_per_request: float) -> list[dict[str, str]]:
        # 100 mean predictions a minute of 0.5 s each, off by error_per_request seconds each.
        return [
            _series(c.MEAN_PREDICTIONS.exposed_name, which, _counter(compared, minutes)),
            _series(c.MEAN_PREDICTION_PREDICTED.exposed_name, which, _counter(compared * 0.5, minutes)),
            _series(c.MEAN_PREDICTION_ERROR.exposed_name, which, _counter(compared * error_per_request, minutes)),
        ]

    labels = {c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT, c.SOURCE: c.SOURCE_SHADOW}
    biased = predictor(bias * 0.5)
    return [
        _group(
            f"{name} fires when actual latency runs {bias:.0%} above a mean predictor's predictions",
            [*biased, *_objective(c.OBJECTIVE_MEAN, minutes)],
            alert_rule_test=_held(name, judged_at + hold, rules.expect(name, labels, bias)),
        ),
        _group(
            f"{name} stays silent for an unbiased mean predictor",
            [*predictor(0.0), *_objective(c.OBJECTIVE_MEAN, minutes)],
            alert_rule_test=[_alert_case(name, judged_at + hold)],
        ),
        _group(
            f"{name} stays silent for the sums of a predictor that now predicts a quantile",
            [*biased, *_objective(c.OBJECTIVE_QUANTILE, minutes)],
            alert_rule_test=[_alert_case(name, judged_at + hold)],
        ),
    ]


def _untrained_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.PREDICTOR_UNTRAINED, _minutes(t.untrained_for)
    minutes, reset_at = hold + 20, 10
    which = {c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT}
    reset = _series(c.PREDICTOR_TRAINED.exposed_name, which, _switch(1, 0, reset_at, minutes))
    replica = _series(c.PREDICTOR_TRAINED.exposed_name, {**which, "instance": "sloscope-1:9464"}, _gauge(1, minutes))
    return [
        _group(
            f"{name} fires when a model looks reset for {t.untrained_for}",
            [reset],
            alert_rule_test=_held(name, reset_at + hold, rules.expect(name, which, 0.0)),
        ),
        _group(
            f"{name} stays silent while one sloscope replica sees the model trained",
            [reset, replica],
            alert_rule_test=[_alert_case(name, reset_at + hold)],
        ),
    ]


def _predictor_down_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.PREDICTOR_DOWN, _minutes(t.predictor_down_for)
    minutes, down_at = hold + 20, 10
    server = {c.POOL: POOL, c.SERVER: "http://predictor-0.pool-a:8001", c.ROLE: c.ROLE_PREDICTION}
    expected = rules.expect(name, server, 0.0)
    down = _series(c.PREDICTOR_UP.exposed_name, server, _switch(1, 0, down_at, minutes))
    # A second sloscope replica still sees the server ready: not down.
    replica = {**server, "instance": "sloscope-1:9464"}
    return [
        _group(
            f"{name} fires when a prediction server stays not ready for {t.predictor_down_for}",
            [down],
            alert_rule_test=_held(name, down_at + hold, expected),
        ),
        _group(
            f"{name} stays silent while one sloscope replica still sees the server ready",
            [down, _series(c.PREDICTOR_UP.exposed_name, replica, _gauge(1, minutes))],
            alert_rule_test=[_alert_case(name, down_at + hold)],
        ),
    ]


def _model_stale_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.PREDICTOR_MODEL_STALE, _minutes(t.model_stale_for)
    limit = t.model_stale_seconds
    start = max(0, limit - 600)
    stale_at = (limit - start) // 60 + 1  # first minute whose age (start + 60/min) is above the limit
    fires_at = stale_at + hold
    minutes = fires_at + 10
    which = {c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT}
    expected = rules.expect(name, which, float(start + 60 * fires_at))
    return [
        _group(
            f"{name} fires when the model is older than {limit}s for {t.model_stale_for}",
            [_series(c.PREDICTOR_MODEL_AGE_SECONDS.exposed_name, which, f"{start}+60x{minutes}")],
            alert_rule_test=_held(name, fires_at, expected),
        ),
        _group(
            f"{name} stays silent while the training server keeps writing models",
            [_series(c.PREDICTOR_MODEL_AGE_SECONDS.exposed_name, which, " ".join(["0+60x4"] * (minutes // 5 + 1)))],
            alert_rule_test=[_alert_case(name, fires_at)],
        ),
    ]


def _headroom_tests(spec: SLOSpec, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.POOL_HEADROOM_EXHAUSTED, _minutes(t.headroom_for)
    cls = spec.classes[0].name if spec.classes else spec.default_class
    minutes, short_at, pods = hold + 20, 10, 20
    with_room = max(0, math.ceil(t.headroom_min_share * pods) - 1)
    which = {c.POOL: POOL, c.SLO_CLASS: cls}
    pool = _series(c.POOL_PODS.exposed_name, {c.POOL: POOL}, _gauge(pods, minutes))
    tests = []
    if with_room / pods < t.headroom_min_share:
        expected = rules.expect(name, which, with_room / pods)
        tests.append(
            _group(
                f"{name} fires when {with_room} of {pods} pods have room for a {cls} request",
                [
                    pool,
                    _series(c.POOL_PODS_WITH_HEADROOM.exposed_name, which, _switch(pods, with_room, short_at, minutes)),
                ],
                alert_rule_test=_held(name, short_at + hold, expected),
            )
        )
    tests.append(
        _group(
            f"{name} stays silent while every pod has room",
            [pool, _series(c.POOL_PODS_WITH_HEADROOM.exposed_name, which, _gauge(pods, minutes))],
            alert_rule_test=[_alert_case(name, short_at + hold)],
        )
    )
    return tests


def _shadow_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.SHADOW_PREDICTIONS_FAILING, _minutes(t.shadow_failed_for)
    minutes = hold + 10
    requests = _series(
        c.REQUESTS.exposed_name,
        {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: "none", c.ROUTING: c.ROUTING_UNKNOWN},
        _counter(100, minutes),
    )

    def skipped(reason: str, per_minute: int) -> dict[str, str]:
        return _series(c.SHADOW_SKIPPED.exposed_name, {c.POOL: POOL, c.REASON: reason}, _counter(per_minute, minutes))

    failed = min(100, math.floor(2 * t.shadow_failed_ratio * 100))
    tests = []
    if failed / 100 > t.shadow_failed_ratio:
        expected = rules.expect(name, {c.POOL: POOL}, failed / 100)
        tests.append(
            _group(
                f"{name} fires when {failed} of 100 requests a minute lose their shadow prediction to failures",
                [requests, skipped(c.SKIP_FAILED, failed), skipped(c.SKIP_SAMPLED_OUT, 50)],
                alert_rule_test=_held(name, 1 + hold, expected),
            )
        )
    tests.append(
        _group(
            f"{name} stays silent when requests are only sampled out",
            [requests, skipped(c.SKIP_SAMPLED_OUT, 50)],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        )
    )
    return tests
