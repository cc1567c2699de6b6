"""Tests of the predictor alerts: calibration drift (quantile predictors), bias (mean predictors), an untrained
model, a predictor server down, a stale model, pool headroom and failing shadow predictions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import (
    MODEL,
    POOL,
    Test,
    _accumulated,
    _alert_case,
    _counter,
    _extrapolated,
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


@dataclass(frozen=True)
class _Volume:
    """Predictions of one test volume: ``per_sample`` every ``every`` minutes (n = 200 an hour as 10 every 3m)."""

    name: str
    per_sample: int
    every: int

    @property
    def per_hour(self) -> int:
        return self.per_sample * 60 // self.every


VOLUMES = (_Volume("low", 10, 3), _Volume("high", 200, 1))
QUANTILE = 0.9


def _first_held(holds: Callable[[int], bool], horizon: int) -> int | None:
    """The first minute from which ``holds`` stays true up to ``horizon``, or None."""
    start = None
    for minute in range(1, horizon + 1):
        start = (minute if start is None else start) if holds(minute) else None
    return start


def _calibration_state(
    t: r.AlertThresholds, volume: _Volume, coverage: float, minutes: int
) -> tuple[Callable[[int], bool], Callable[[int], float], list[float], list[float]]:
    """The alert's condition and value per minute, as Prometheus computes them, and the two counters fed to it."""
    compared = _accumulated(0, volume.per_sample, minutes // volume.every)
    covered = _accumulated(0, volume.per_sample * coverage, minutes // volume.every)
    window = _minutes(t.calibration_window)

    def at(minute: int) -> tuple[float, float]:
        def rate(values: list[float], rate: bool = True) -> float:
            return _extrapolated(values, volume.every, minute, window, counter=True, rate=rate)

        ratio = (1 - rate(covered) / rate(compared)) / (1 - QUANTILE)
        n = rate(compared, rate=False)
        tolerance = max(
            t.calibration_sigmas * math.sqrt((1 / n) * (QUANTILE / (1 - QUANTILE))), t.calibration_tolerance
        )
        return ratio, (tolerance if n >= t.calibration_min_predictions else math.inf)

    def holds(minute: int) -> bool:
        ratio, tolerance = at(minute)
        return ratio > 1 + tolerance or ratio < 1 - tolerance

    return holds, lambda minute: at(minute)[0], covered, compared


def _calibration_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    """Too optimistic and too pessimistic predictors at n = 200 and n = 12,000 predictions an hour, a miss rate the
    tolerance accepts at the low volume and not at the high one, a calibrated predictor, a mean one, too few."""
    name, hold = r.PREDICTOR_CALIBRATION_DRIFT, _minutes(t.calibration_for)
    window = _minutes(t.calibration_window)
    minutes = window + hold + 10
    which = {c.MODEL: MODEL, c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT, c.SOURCE: c.SOURCE_SHADOW}
    labels = {c.POOL: POOL, c.SIGNAL: c.SIGNAL_TTFT, c.SOURCE: c.SOURCE_SHADOW}
    quantile_series = _series(c.PREDICTOR_QUANTILE.exposed_name, {c.POOL: POOL}, _gauge(QUANTILE, minutes))
    expected_misses = 1 - QUANTILE

    def group(title: str, volume: _Volume, coverage: float, fires: bool, extra: Sequence[dict[str, str]] = ()) -> Test:
        holds, value, _covered, _compared = _calibration_state(t, volume, coverage, minutes)
        samples = minutes // volume.every
        series = [
            _series(c.PREDICTION_COVERED.exposed_name, which, _counter(volume.per_sample * coverage, samples)),
            _series(c.PREDICTIONS.exposed_name, which, _counter(volume.per_sample, samples)),
            quantile_series,
            *extra,
        ]
        start = _first_held(holds, minutes - 1)
        every = f"{volume.every}m"
        title = f"{name} {title} at {volume.per_hour} predictions an hour (coverage {coverage:.4g} of a p90 model)"
        if fires and not extra:
            if start is None or start + hold > minutes - 1:
                raise AssertionError(f"{title}: the alert cannot fire with these thresholds")
            expected = rules.expect(name, labels, value(start + hold))
            return _group(title, series, interval=every, alert_rule_test=_held(name, start + hold, expected))
        return _group(title, series, interval=every, alert_rule_test=[_alert_case(name, minutes - 1)])

    def tolerance(volume: _Volume) -> float:
        spread = math.sqrt(QUANTILE / ((1 - QUANTILE) * volume.per_hour))
        return max(t.calibration_sigmas * spread, t.calibration_tolerance)

    tests = []
    for volume in VOLUMES:
        tol = tolerance(volume)
        optimistic = min(round(1 + 1.5 * tol, 1), 1 / expected_misses)  # miss rate as a multiple of 1 - q
        tests.append(group("fires for a too optimistic predictor", volume, 1 - optimistic * expected_misses, True))
        if tol < 1:
            pessimistic = round((1 - tol) / 2, 2)
            tests.append(
                group("fires for a too pessimistic predictor", volume, 1 - pessimistic * expected_misses, True)
            )
        tests.append(group("stays silent for a calibrated predictor", volume, QUANTILE, False))
    low, high = (tolerance(v) for v in VOLUMES)
    if high < low:
        between = round(1 + (low + high) / 2, 2)
        for volume, fires in zip(VOLUMES, (False, True), strict=True):
            verb = "fires" if fires else "stays silent"
            tests.append(
                group(f"{verb} for misses at {between:.3g}x 1 - q", volume, 1 - between * expected_misses, fires)
            )
    tests.append(
        group(
            "stays silent for a predictor of the mean",
            VOLUMES[1],
            0.5,
            False,
            _objective(c.OBJECTIVE_MEAN, minutes),
        )
    )
    few = _Volume("few", 1, 1)
    if few.per_hour < t.calibration_min_predictions:
        tests.append(group("stays silent for too few predictions", few, 0.0, False))
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
    """Latency above and below a mean predictor's predictions at both volumes, with requests off both ways (two
    counters that both grow, the net going either way); an unbiased one; the sums of one that now predicts a
    quantile."""
    name, hold = r.PREDICTOR_BIASED, _minutes(t.calibration_for)
    minutes = _minutes(t.calibration_window) + hold + 10
    window = _minutes(t.calibration_window)
    bias = round(2 * t.bias_max_ratio, 2)  # actual latency this share above (or below) the predictions

    def group(title: str, volume: _Volume, signed_bias: float, objective: str, signal: str = c.SIGNAL_TTFT) -> Test:
        # Mean predictions of 0.5 s each, off by `bias` x 0.5 s both ways on average (the spread), plus signed_bias x
        # 0.5 s in the direction of its sign: under - over is the net error, under + over the absolute one.
        which = {c.MODEL: MODEL, c.POOL: POOL, c.SIGNAL: signal, c.SOURCE: c.SOURCE_SHADOW}
        labels = {c.POOL: POOL, c.SIGNAL: signal, c.SOURCE: c.SOURCE_SHADOW}
        samples = minutes // volume.every
        predicted_step = volume.per_sample * 0.5
        under_step = predicted_step * (bias + max(signed_bias, 0.0))
        over_step = predicted_step * (bias + max(-signed_bias, 0.0))
        series = [
            _series(c.MEAN_PREDICTIONS.exposed_name, which, _counter(volume.per_sample, samples)),
            _series(c.MEAN_PREDICTION_PREDICTED.exposed_name, which, _counter(predicted_step, samples)),
            _series(c.MEAN_PREDICTION_UNDERESTIMATE.exposed_name, which, _counter(under_step, samples)),
            _series(c.MEAN_PREDICTION_OVERESTIMATE.exposed_name, which, _counter(over_step, samples)),
            *_objective(objective, minutes),
        ]
        every = f"{volume.every}m"
        title = f"{name} {title} at {volume.per_hour} predictions an hour"
        if signed_bias == 0 or objective != c.OBJECTIVE_MEAN:
            return _group(title, series, interval=every, alert_rule_test=[_alert_case(name, minutes - 1)])
        counts, predicted, under, over = (
            _accumulated(0, step, samples) for step in (volume.per_sample, predicted_step, under_step, over_step)
        )

        def rate(values: list[float], minute: int) -> float:
            return _extrapolated(values, volume.every, minute, window, counter=True, rate=True)

        def value(minute: int) -> float:
            return (rate(under, minute) - rate(over, minute)) / rate(predicted, minute)

        def holds(minute: int) -> bool:
            counted = _extrapolated(counts, volume.every, minute, window, counter=True, rate=False)
            return counted >= t.calibration_min_predictions and abs(value(minute)) > t.bias_max_ratio

        start = _first_held(holds, minutes - 1)
        if start is None or start + hold > minutes - 1:
            raise AssertionError(f"{title}: the alert cannot fire with these thresholds")
        expected = rules.expect(name, labels, value(start + hold))
        return _group(title, series, interval=every, alert_rule_test=_held(name, start + hold, expected))

    tests = []
    for volume in VOLUMES:
        tests.append(
            group(f"fires when actual latency runs {bias:.0%} above the predictions", volume, bias, c.OBJECTIVE_MEAN)
        )
        tests.append(
            group(f"fires when actual latency runs {bias:.0%} below the predictions", volume, -bias, c.OBJECTIVE_MEAN)
        )
    tests.append(
        group("stays silent for an unbiased mean predictor off both ways alike", VOLUMES[1], 0.0, c.OBJECTIVE_MEAN)
    )
    tests.append(  # the EPP's streaming off, its default: the predicted "TTFT" is judged as end-to-end latency
        group(
            f"fires when end-to-end latency runs {bias:.0%} above the predictions (streaming off)",
            VOLUMES[1],
            bias,
            c.OBJECTIVE_MEAN,
            c.SIGNAL_E2E,
        )
    )
    tests.append(
        group(
            "stays silent for the sums of a predictor that now predicts a quantile",
            VOLUMES[1],
            bias,
            c.OBJECTIVE_QUANTILE,
        )
    )
    return tests


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
    """A ticket when few pods have room, whether or not an SLO burn alert of the pool fires (that one pages)."""
    name, hold = r.POOL_HEADROOM_EXHAUSTED, _minutes(t.headroom_for)
    cls = spec.classes[0].name if spec.classes else spec.default_class
    minutes, short_at, pods = hold + 20, 10, 20
    with_room = max(0, math.ceil(t.headroom_min_share * pods) - 1)
    which = {c.POOL: POOL, c.SLO_CLASS: cls}
    pool = _series(c.POOL_PODS.exposed_name, {c.POOL: POOL}, _gauge(pods, minutes))

    def burning(pool_name: str) -> dict[str, str]:
        # The ALERTS series Prometheus keeps for a firing SLO alert (no target labels: it is not scraped).
        labels = {
            "alertname": r.ERROR_BUDGET_BURN_PAGE,
            "alertstate": "firing",
            c.MODEL: MODEL,
            c.POOL: pool_name,
            c.SLO_CLASS: cls,
            c.SLO: c.SLO_TTFT,
            "severity": "page",
        }
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {"series": f"ALERTS{{{inner}}}", "values": _gauge(1, minutes)}

    tests = []
    if with_room / pods < t.headroom_min_share:
        short = _series(c.POOL_PODS_WITH_HEADROOM.exposed_name, which, _switch(pods, with_room, short_at, minutes))
        expected = rules.expect(name, which, with_room / pods)
        for extra, where in (([], "while no SLO alert fires"), ([burning(POOL)], "while the pool's SLO burn pages")):
            tests.append(
                _group(
                    f"{name} is a ticket when {with_room} of {pods} pods have room for a {cls} request {where}",
                    [pool, short, *extra],
                    alert_rule_test=_held(name, short_at + hold, expected),
                )
            )
    tests.append(
        _group(
            f"{name} stays silent while every pod has room",
            [pool, _series(c.POOL_PODS_WITH_HEADROOM.exposed_name, which, _gauge(pods, minutes)), burning(POOL)],
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
