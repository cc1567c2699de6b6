"""promtool unit tests of the generated rules (``promtool test rules``), generated beside them.

For every alert: a test group where it fires, with its exact labels and annotations, and one where it must
stay silent (``exp_alerts: []``); alerts with a ``for`` are also checked one evaluation before they fire, as
kubernetes-mixin's tests do (14m silent, 15m firing). The recording rules get ``promql_expr_test`` cases with
exact expected values: 10 violations in 100 requests a minute give an error ratio of 0.1 in every window.

The scenarios derive their inputs from the spec and the :class:`~sloscope.generators.rules.AlertThresholds`
(an error ratio between the ticket and the page thresholds of a class, a coverage beyond the allowed
deviation...), so the tests follow a custom spec. The expected annotations are the rules' own templates
rendered the way Prometheus renders them (``humanize``, ``humanizePercentage``, ``humanizeDuration``): promtool
compares them with what Prometheus itself produced, so a wrong template or a wrong value fails.

Expected values are the mathematically exact ones; ``fuzzy_compare`` lets promtool accept the last-bit
rounding of ``rate()``'s extrapolation (one unit in the last place).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.windows import PAGE, TICKET, burn_windows, duration_seconds
from sloscope.slo.spec import SLOClass, SLOSpec

__all__ = ["render_template", "rule_tests"]

Test = dict[str, Any]

EVALUATION_INTERVAL = "1m"
MODEL = "llama-3-8b"
POOL = "pool-a"
# The target labels Prometheus adds when it scrapes sloscope; per-replica alerts keep them.
TARGET = {"instance": "sloscope-0:9464", "job": "sloscope"}
TIME_SERIES_MINUTES = 60  # input series are written for this long unless a scenario needs more


# ---- rendering the annotation templates as Prometheus does ----------------------------------------------


def _go_g4(value: float) -> str:
    """Go's ``%.4g`` (Python's matches it for finite values)."""
    if not math.isfinite(value):
        raise ValueError(f"no rendering of a non-finite value {value!r} is expected in a test")
    return f"{value:.4g}"


def _humanize(value: float) -> str:
    """Prometheus' ``humanize``: SI prefixes (k, M, ... and m, u, ...) with four significant digits."""
    if value == 0:
        return _go_g4(value)
    prefix = ""
    if abs(value) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(value) < 1000:
                break
            prefix, value = p, value / 1000
    else:
        for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
            if abs(value) >= 1:
                break
            prefix, value = p, value * 1000
    return f"{_go_g4(value)}{prefix}"


def _humanize_percentage(value: float) -> str:
    return f"{_go_g4(value * 100)}%"


def _humanize_duration(value: float) -> str:
    """Prometheus' ``humanizeDuration`` for whole durations of a second or more (the only ones tests render)."""
    if value < 1:
        raise ValueError(f"sub-second durations are not rendered in these tests: {value!r}")
    whole = int(value)
    seconds, minutes, hours, days = whole % 60, whole // 60 % 60, whole // 3600 % 24, whole // 86400
    if days:
        return f"{days}d {hours}h {minutes}m {seconds}s"
    if hours:
        return f"{hours}h {minutes}m {seconds}s"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{_go_g4(value)}s"


_HUMANIZERS = {
    "humanize": _humanize,
    "humanizePercentage": _humanize_percentage,
    "humanizeDuration": _humanize_duration,
}
_ACTION = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_LABEL = re.compile(r"^\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)$")
_VALUE = re.compile(r"^\$value(?:\s*\|\s*([a-zA-Z]+))?$")


def render_template(template: str, labels: Mapping[str, str], value: float) -> str:
    """Render the template forms the generated annotations use: ``$labels.x`` and ``$value`` (piped to a humanizer).

    Anything else raises: a template this function cannot render is a template the tests cannot check.
    """

    def action(match: re.Match[str]) -> str:
        body = match.group(1)
        if label := _LABEL.match(body):
            return labels[label.group(1)]
        if value_action := _VALUE.match(body):
            humanizer = value_action.group(1)
            return _go_g4(value) if humanizer is None else _HUMANIZERS[humanizer](value)
        raise ValueError(f"cannot render template action {{{{ {body} }}}}")

    return _ACTION.sub(action, template)


# ---- building blocks ----------------------------------------------------------------------------------


def _series(metric: str, labels: Mapping[str, str], values: str) -> dict[str, str]:
    """One ``input_series`` entry; labels written sorted, values in promtool's expanding notation."""
    inner = ", ".join(f'{name}="{value}"' for name, value in sorted({**TARGET, **labels}.items()))
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _counter(per_minute: float, minutes: int = TIME_SERIES_MINUTES) -> str:
    """A counter from 0 growing by ``per_minute`` every minute, for ``minutes`` minutes."""
    return f"0+{_num(per_minute)}x{minutes}"


def _gauge(value: float, minutes: int = TIME_SERIES_MINUTES) -> str:
    return f"{_num(value)}x{minutes}"


def _switch(before: float, after: float, at: int, minutes: int = TIME_SERIES_MINUTES) -> str:
    """A gauge at ``before`` until minute ``at`` - 1, then at ``after`` from minute ``at`` on."""
    return f"{_num(before)}x{at - 1} {_num(after)}x{minutes - at}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _minutes(duration: str) -> int:
    seconds = duration_seconds(duration)
    if seconds % 60:
        raise ValueError(f"the generated tests evaluate once a minute; {duration!r} is not whole minutes")
    return seconds // 60


def _group(name: str, series: Sequence[dict[str, str]], **cases: list[dict[str, Any]]) -> Test:
    return {"name": name, "interval": EVALUATION_INTERVAL, "input_series": list(series), **cases}


@dataclass(frozen=True)
class _Rules:
    """The generated alerting rules, to render their annotations in the expected alerts."""

    alerts: Sequence[dict[str, Any]]

    def find(self, name: str, **labels: str) -> dict[str, Any]:
        for rule in self.alerts:
            if rule["alert"] == name and all(rule["labels"].get(k) == v for k, v in labels.items()):
                return rule
        raise KeyError(f"no generated alert {name} with labels {labels}")

    def expect(self, name: str, labels: Mapping[str, str], value: float, **rule_labels: str) -> dict[str, Any]:
        """An ``exp_alerts`` entry: the rule's own labels plus ``labels``, its annotations rendered."""
        rule = self.find(name, **rule_labels)
        all_labels = {**labels, **rule["labels"]}
        annotations = {k: render_template(v, all_labels, value) for k, v in rule["annotations"].items()}
        return {"exp_labels": dict(sorted(all_labels.items())), "exp_annotations": annotations}


def _alert_case(name: str, minute: int, alerts: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"eval_time": f"{minute}m", "alertname": name, "exp_alerts": list(alerts)}


def _held(name: str, fires_at: int, expected: dict[str, Any]) -> list[dict[str, Any]]:
    """Silent one evaluation before ``fires_at``, firing at it (for alerts with a ``for``)."""
    return [_alert_case(name, fires_at - 1), _alert_case(name, fires_at, [expected])]


# ---- recording rules ----------------------------------------------------------------------------------


def _recording_tests(spec: SLOSpec) -> list[Test]:
    cls = spec.classes[0].name if spec.classes else spec.default_class
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls}
    at = 10  # minutes
    requests = {(c.ROUTING_PREDICTED, c.SLO_TTFT): 60, (c.ROUTING_DEFAULT, c.SLO_TTFT): 40}
    violations = {(c.ROUTING_PREDICTED, c.SLO_TTFT): 6, (c.ROUTING_DEFAULT, c.SLO_TTFT): 4}
    requests[(c.ROUTING_PREDICTED, c.SLO_TPOT)] = 50  # eligible for TPOT, never violated: no violations series
    series = [
        _series(c.SLO_REQUESTS.exposed_name, {**labels, c.ROUTING: routing, c.SLO: slo}, _counter(n))
        for (routing, slo), n in requests.items()
    ]
    series += [
        _series(c.SLO_VIOLATIONS.exposed_name, {**labels, c.ROUTING: routing, c.SLO: slo}, _counter(n))
        for (routing, slo), n in violations.items()
    ]
    cases = []
    for window in c.RULE_WINDOWS:
        minutes = duration_seconds(window) // 60
        rate = c.slo_requests_rate_rule(window)
        ratio = c.slo_error_ratio_rule(window)
        # Counted requests in the window (all of them while the window is longer than the data) per second.
        per_second = {
            slo: float(Fraction(total * min(minutes, at), minutes * 60))
            for slo, total in ((c.SLO_TTFT, 100), (c.SLO_TPOT, 50))
        }
        cases.append(_expr_case(rate, at, {(rate, slo): value for slo, value in per_second.items()}, labels))
        cases.append(_expr_case(ratio, at, {(ratio, c.SLO_TTFT): 0.1, (ratio, c.SLO_TPOT): 0.0}, labels))
    return [
        _group(
            "recording rules: 10 violations in 100 requests a minute give an error ratio of 0.1, summed over "
            "routing; requests without a violation give 0",
            series,
            promql_expr_test=cases,
        ),
        *_period_tests(spec),
    ]


def _expr_case(
    expr: str, minute: int, expected: Mapping[tuple[str, str], float], labels: Mapping[str, str]
) -> dict[str, Any]:
    samples = []
    for (name, slo), value in sorted(expected.items()):
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted({**labels, c.SLO: slo}.items()))
        samples.append({"labels": f"{name}{{{inner}}}", "value": value})
    return {"expr": expr, "eval_time": f"{minute}m", "exp_samples": samples}


def _period_tests(spec: SLOSpec) -> list[Test]:
    """The compliance-period ratio weighs each hour by its traffic: 0% of 90/min, then 100% of 30/min is 25%."""
    if not spec.classes:
        return []
    cls = spec.classes[0]
    name = r.period_ratio_rule(spec.period_of(cls))
    if name is None:
        return []
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: cls.name}
    slo = {c.ROUTING: c.ROUTING_PREDICTED, c.SLO: c.SLO_TTFT}
    series = [
        _series(c.SLO_REQUESTS.exposed_name, {**labels, **slo}, "0+90x60 5430+30x59"),
        _series(c.SLO_VIOLATIONS.exposed_name, {**labels, **slo}, "0x60 30+30x59"),
    ]
    case = _expr_case(name, 120, {(name, c.SLO_TTFT): 0.25}, labels)
    return [
        _group(
            "compliance-period error ratio: a busy hour without misses and a quiet hour of misses weigh by "
            "traffic (25%), not as a mean of hourly ratios (50%)",
            series,
            promql_expr_test=[case],
        )
    ]


# ---- SLO burn-rate alerts -----------------------------------------------------------------------------


def _traffic(low: float, high: float, min_requests: int) -> tuple[int, int] | None:
    """(requests, violations) a minute whose ratio lies strictly between ``low`` and ``high``, near the middle;
    at least 100 requests a minute and ``min_requests`` in 10 minutes. None when no ratio fits."""
    high = min(high, 1.0)
    if not low < high:
        return None
    middle = (low + high) / 2
    total = max(100, math.ceil(min_requests / 10))
    total = 10 ** math.ceil(math.log10(total))
    for _ in range(8):
        missed = round(middle * total)
        if low < missed / total < high and missed > 0:
            return total, missed
        total *= 10
    return None


def _burn_tests(spec: SLOSpec, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    tests = []
    for cls in spec.classes:
        for slo in c.SLOS:
            tests += _burn_tests_of(spec, cls, slo, rules, t)
    return tests


def _burn_tests_of(spec: SLOSpec, cls: SLOClass, slo: str, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    objective = cls.objectives.of(slo)
    pairs = burn_windows(spec.period_of(cls))
    page = [float(p.exact_threshold(objective)) for p in pairs if p.severity == PAGE]
    ticket = [float(p.exact_threshold(objective)) for p in pairs if p.severity == TICKET]
    at = 10
    which = {c.SLO_CLASS: cls.name, c.SLO: slo}
    alert_labels = {c.MODEL: MODEL, c.POOL: POOL, **which}

    def slo_series(model: str, total: int, missed: int) -> list[dict[str, str]]:
        labels = {c.MODEL: model, c.POOL: POOL, c.ROUTING: c.ROUTING_PREDICTED, **which}
        out = [_series(c.SLO_REQUESTS.exposed_name, labels, _counter(total, 30))]
        if missed:
            out.append(_series(c.SLO_VIOLATIONS.exposed_name, labels, _counter(missed, 30)))
        return out

    tests: list[Test] = []
    fast = _traffic(min(page), 1.0, t.slo_min_requests)
    if fast is not None:
        total, missed = fast
        expected = rules.expect(r.ERROR_BUDGET_BURN_PAGE, alert_labels, missed / total, **which)
        tests.append(
            _group(
                f"{r.ERROR_BUDGET_BURN_PAGE} fires for {cls.name} {slo} when {missed} of {total} requests a minute "
                f"miss (objective {objective})",
                slo_series(MODEL, total, missed),
                alert_rule_test=[_alert_case(r.ERROR_BUDGET_BURN_PAGE, at, [expected])],
            )
        )
    slow = _traffic(max(ticket) if max(ticket) < min(page) else min(ticket), min(page), t.slo_min_requests)
    if slow is not None:
        total, missed = slow
        expected = rules.expect(r.ERROR_BUDGET_BURN_TICKET, alert_labels, missed / total, **which)
        tests.append(
            _group(
                f"{r.ERROR_BUDGET_BURN_TICKET} fires and {r.ERROR_BUDGET_BURN_PAGE} stays silent for {cls.name} "
                f"{slo} when {missed} of {total} requests a minute miss (objective {objective})",
                slo_series(MODEL, total, missed),
                alert_rule_test=[
                    _alert_case(r.ERROR_BUDGET_BURN_TICKET, at, [expected]),
                    _alert_case(r.ERROR_BUDGET_BURN_PAGE, at),
                ],
            )
        )
    # Silent: a model with traffic and no violation at all (no violations series), and, when the traffic
    # guard is on, a quiet model whose every request misses but too few requests were counted.
    series = slo_series("healthy-model", 100, 0)
    quiet_at = min(t.slo_min_requests - 1, 30)
    if quiet_at >= 1:
        series += slo_series("quiet-model", 1, 1)
    silent_at = quiet_at if quiet_at >= 1 else at
    tests.append(
        _group(
            f"burn-rate alerts stay silent for {cls.name} {slo} without violations"
            + (f" and with fewer than {t.slo_min_requests} requests" if quiet_at >= 1 else ""),
            series,
            alert_rule_test=[
                _alert_case(r.ERROR_BUDGET_BURN_PAGE, silent_at),
                _alert_case(r.ERROR_BUDGET_BURN_TICKET, silent_at),
            ],
        )
    )
    return tests


# ---- predictor alerts -----------------------------------------------------------------------------------


def _predictor_tests(spec: SLOSpec, rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    return [
        *_calibration_tests(rules, t),
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


# ---- pipeline alerts ----------------------------------------------------------------------------------
# Rates exist from minute 1 (two samples), so a condition on them holds from minute 1 and a `for` of F
# minutes fires at minute 1 + F.


def _pipeline_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    return [
        *_no_spans_tests(rules, t),
        *_queue_tests(rules, t),
        *_refusing_tests(rules, t),
        *_dropped_tests(rules, t),
        *_records_lost_tests(rules, t),
        *_evicting_tests(rules, t),
        *_join_tests(rules, t),
        *_invalid_tests(rules, t),
        *_folded_tests(rules),
        *_scrape_tests(rules, t),
    ]


def _no_spans_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.NO_SPANS, _minutes(t.no_spans_for)
    minutes = hold + 10

    def received(transport: str, values: str) -> dict[str, str]:
        return _series(c.SPANS_RECEIVED.exposed_name, {c.TRANSPORT: transport}, values)

    return [
        _group(
            f"{name} fires when no span arrives on any transport",
            [received("grpc", _gauge(500, minutes)), received("http", _gauge(0, minutes))],
            alert_rule_test=_held(name, 1 + hold, rules.expect(name, TARGET, 0.0)),
        ),
        _group(
            f"{name} stays silent while spans arrive on one transport",
            [received("grpc", _counter(100, minutes)), received("http", _gauge(0, minutes))],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        ),
    ]


def _queue_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.QUEUE_NEARLY_FULL, _minutes(t.queue_full_for)
    minutes, full_at, capacity = hold + 20, 10, 10000
    fill = round((1 + t.queue_full_ratio) / 2 * capacity)
    calm = math.floor(t.queue_full_ratio / 2 * capacity)
    cap = _series(c.QUEUE_CAPACITY_SPANS.exposed_name, {}, _gauge(capacity, minutes))
    tests = []
    if t.queue_full_ratio < 1:
        tests.append(
            _group(
                f"{name} fires when the queue stays {fill / capacity:.0%} full",
                [cap, _series(c.QUEUE_SPANS.exposed_name, {}, _switch(100, fill, full_at, minutes))],
                alert_rule_test=_held(name, full_at + hold, rules.expect(name, TARGET, fill / capacity)),
            )
        )
    tests.append(
        _group(
            f"{name} stays silent while the queue is {calm / capacity:.0%} full",
            [cap, _series(c.QUEUE_SPANS.exposed_name, {}, _gauge(calm, minutes))],
            alert_rule_test=[_alert_case(name, full_at + hold)],
        )
    )
    return tests


def _refusing_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.REFUSING_SPANS, _minutes(t.refusing_for)
    minutes = hold + 10

    def dropped(reason: str, values: str) -> dict[str, str]:
        return _series(c.SPANS_DROPPED.exposed_name, {c.REASON: reason}, values)

    return [
        _group(
            f"{name} fires while spans are refused because the queue is full",
            [dropped(c.DROP_QUEUE_FULL, _counter(600, minutes))],
            alert_rule_test=_held(name, 1 + hold, rules.expect(name, TARGET, 10.0)),
        ),
        _group(
            f"{name} stays silent when only duplicates are dropped",
            [dropped(c.DROP_QUEUE_FULL, _gauge(0, minutes)), dropped(c.DROP_DUPLICATE, _counter(600, minutes))],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        ),
    ]


def _dropped_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.SPANS_DROPPED, _minutes(t.spans_dropped_for)
    minutes, received = hold + 10, 1000
    lost = max(1, round(5 * t.spans_dropped_ratio * received))
    harmless = math.floor(t.spans_dropped_ratio / 5 * received)

    def dropped(reason: str, per_minute: int) -> dict[str, str]:
        return _series(c.SPANS_DROPPED.exposed_name, {c.REASON: reason}, _counter(per_minute, minutes))

    spans = _series(c.SPANS_RECEIVED.exposed_name, {c.TRANSPORT: "grpc"}, _counter(received, minutes))
    tests = []
    if lost / received > t.spans_dropped_ratio:
        expected = rules.expect(name, {**TARGET, c.REASON: c.DROP_LATE}, lost / received)
        tests.append(
            _group(
                f"{name} fires when {lost} of {received} spans a minute arrive too late",
                [spans, dropped(c.DROP_LATE, lost)],
                alert_rule_test=_held(name, 1 + hold, expected),
            )
        )
    tests.append(
        _group(
            f"{name} stays silent for duplicates and a few late spans",
            [spans, dropped(c.DROP_DUPLICATE, received // 2), dropped(c.DROP_LATE, harmless)],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        )
    )
    return tests


def _records_lost_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.RECORDS_LOST, _minutes(t.records_lost_for)
    minutes, handed = hold + 10, 1000
    lost = max(1, math.ceil(5 * t.records_lost_ratio * handed))

    def records(sink: str, result: str, per_minute: int) -> dict[str, str]:
        return _series(c.RECORDS.exposed_name, {c.SINK: sink, c.RESULT: result}, _counter(per_minute, minutes))

    expected = rules.expect(name, {**TARGET, c.SINK: c.SINK_STORE}, lost / handed)
    return [
        _group(
            f"{name} fires when the record store drops {lost} of {handed} records a minute",
            [
                records(c.SINK_STORE, c.RECORD_WRITTEN, handed - lost),
                records(c.SINK_STORE, c.RECORD_DROPPED, lost),
                records(c.SINK_OTLP, c.RECORD_WRITTEN, handed),
            ],
            alert_rule_test=_held(name, 1 + hold, expected),
        ),
        _group(
            f"{name} stays silent when records are only written or filtered",
            [
                records(c.SINK_STORE, c.RECORD_WRITTEN, handed),
                records(c.SINK_OTLP, c.RECORD_FILTERED, handed),
                records(c.SINK_OTLP, c.RECORD_WRITTEN, 10),
            ],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        ),
    ]


def _evicting_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.EVICTING_TRACES, _minutes(t.evicting_for)
    minutes = hold + 10

    def joined(outcome: str, values: str) -> dict[str, str]:
        return _series(c.TRACES_JOINED.exposed_name, {c.OUTCOME: outcome}, values)

    return [
        _group(
            f"{name} fires while traces are evicted by the pending-trace cap",
            [joined(c.OUTCOME_JOINED, _counter(600, minutes)), joined(c.OUTCOME_EVICTED, _counter(120, minutes))],
            alert_rule_test=_held(name, 1 + hold, rules.expect(name, TARGET, 2.0)),
        ),
        _group(
            f"{name} stays silent when no trace is evicted",
            [joined(c.OUTCOME_JOINED, _counter(600, minutes)), joined(c.OUTCOME_EVICTED, _gauge(0, minutes))],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        ),
    ]


def _join_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.JOIN_RATIO_LOW, _minutes(t.join_ratio_for)
    minutes = hold + 10
    low = math.floor(t.join_ratio_min / 2 * 100)
    high = math.ceil((1 + t.join_ratio_min) / 2 * 100)

    def outcomes(joined_share: int) -> list[dict[str, str]]:
        return [
            _series(c.TRACES_JOINED.exposed_name, {c.OUTCOME: c.OUTCOME_JOINED}, _counter(joined_share, minutes)),
            _series(
                c.TRACES_JOINED.exposed_name, {c.OUTCOME: c.OUTCOME_ANCHOR_ONLY}, _counter(100 - joined_share, minutes)
            ),
            # Traces without a model-server span are not requests: they do not count against the ratio.
            _series(c.TRACES_JOINED.exposed_name, {c.OUTCOME: c.OUTCOME_NO_ANCHOR}, _counter(500, minutes)),
        ]

    tests = []
    if low / 100 < t.join_ratio_min:
        tests.append(
            _group(
                f"{name} fires when {low} of 100 requests find their gateway span",
                outcomes(low),
                alert_rule_test=_held(name, 1 + hold, rules.expect(name, TARGET, low / 100)),
            )
        )
    tests.append(
        _group(
            f"{name} stays silent when {high} of 100 requests find their gateway span",
            outcomes(high),
            alert_rule_test=[_alert_case(name, 1 + hold)],
        )
    )
    return tests


def _invalid_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.INVALID_VALUES, _minutes(t.invalid_values_for)
    minutes, evaluated = hold + 10, 1000
    bad = max(1, round(5 * t.invalid_values_ratio * evaluated))
    few = math.floor(t.invalid_values_ratio / 5 * evaluated)
    requests = _series(
        c.REQUESTS.exposed_name,
        {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: "none", c.ROUTING: c.ROUTING_UNKNOWN},
        _counter(evaluated, minutes),
    )

    def invalid(per_minute: int) -> dict[str, str]:
        return _series(c.INVALID_VALUES.exposed_name, {c.FIELD: "ttft_seconds"}, _counter(per_minute, minutes))

    tests = []
    if bad / evaluated > t.invalid_values_ratio:
        expected = rules.expect(name, {**TARGET, c.FIELD: "ttft_seconds"}, bad / evaluated)
        tests.append(
            _group(
                f"{name} fires when {bad} of {evaluated} requests a minute have no valid TTFT",
                [requests, invalid(bad)],
                alert_rule_test=_held(name, 1 + hold, expected),
            )
        )
    tests.append(
        _group(
            f"{name} stays silent when {few} of {evaluated} requests a minute have no valid TTFT",
            [requests, invalid(few)],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        )
    )
    return tests


def _folded_tests(rules: _Rules) -> list[Test]:
    name, folded_at = r.LABEL_VALUES_FOLDED, 11
    labels = {c.LABEL: c.MODEL}
    expected = rules.expect(name, {**TARGET, **labels}, 5.0)
    return [
        _group(
            f"{name} fires as soon as observations are folded into {c.OTHER}",
            [_series(c.LABEL_VALUES_FOLDED.exposed_name, labels, f"0x{folded_at - 1} 5x20")],
            alert_rule_test=[_alert_case(name, folded_at - 1), _alert_case(name, folded_at, [expected])],
        ),
        _group(
            f"{name} stays silent while nothing is folded",
            [_series(c.LABEL_VALUES_FOLDED.exposed_name, labels, _gauge(0, 30))],
            alert_rule_test=[_alert_case(name, folded_at)],
        ),
    ]


def _scrape_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.SCRAPES_FAILING, _minutes(t.scrape_failure_for)
    minutes = hold + 10
    failing = min(100, math.floor(2 * t.scrape_failure_ratio * 100))
    few = math.floor(t.scrape_failure_ratio / 2 * 100)

    def scrapes(kind: str, result: str, per_minute: int) -> dict[str, str]:
        return _series(c.SCRAPES.exposed_name, {c.KIND: kind, c.RESULT: result}, _counter(per_minute, minutes))

    # The EPP is scraped without failure meanwhile: only the failing kind alerts.
    epp = [scrapes(c.KIND_EPP, c.RESULT_SUCCESS, 4), scrapes(c.KIND_EPP, c.RESULT_HTTP_ERROR, 0)]
    tests = []
    if failing / 100 > t.scrape_failure_ratio:
        expected = rules.expect(name, {**TARGET, c.KIND: c.KIND_MODEL_SERVER}, failing / 100)
        tests.append(
            _group(
                f"{name} fires for model servers when {failing} of 100 scrapes a minute time out",
                [
                    scrapes(c.KIND_MODEL_SERVER, c.RESULT_SUCCESS, 100 - failing),
                    scrapes(c.KIND_MODEL_SERVER, c.RESULT_TIMEOUT, failing),
                    *epp,
                ],
                alert_rule_test=_held(name, 1 + hold, expected),
            )
        )
    tests.append(
        _group(
            f"{name} stays silent when {few} of 100 scrapes a minute time out",
            [
                scrapes(c.KIND_MODEL_SERVER, c.RESULT_SUCCESS, 100 - few),
                scrapes(c.KIND_MODEL_SERVER, c.RESULT_TIMEOUT, few),
                *epp,
            ],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        )
    )
    return tests


# ---- assembly -------------------------------------------------------------------------------------------


def rule_tests(
    spec: SLOSpec,
    rule_file_name: str,
    *,
    thresholds: r.AlertThresholds = r.DEFAULT_THRESHOLDS,
    runbook_base: str = "docs/runbooks",
) -> dict[str, Any]:
    """A promtool test file for the rules :func:`~sloscope.generators.rules.rule_file` generates with the same
    spec, thresholds and runbook base; ``rule_file_name`` is the rule file's path relative to the test file."""
    groups = r.groups(spec, thresholds=thresholds, runbook_base=runbook_base)
    rules = _Rules([rule for group in groups for rule in group["rules"] if "alert" in rule])
    tests = [
        *_recording_tests(spec),
        *_burn_tests(spec, rules, thresholds),
        *_predictor_tests(spec, rules, thresholds),
        *_pipeline_tests(rules, thresholds),
    ]
    return {
        "rule_files": [rule_file_name],
        "evaluation_interval": EVALUATION_INTERVAL,
        "fuzzy_compare": True,
        # Alerts read the recording rules: evaluate those first at every step, as one rule group would.
        "group_eval_order": [group["name"] for group in groups],
        "tests": tests,
    }
