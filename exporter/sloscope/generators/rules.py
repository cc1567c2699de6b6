"""Prometheus recording and alerting rules generated from the SLO spec.

Four groups, as Sloth splits SLI recording rules from alert rules and kubernetes-mixin splits alerts by subject:

- ``sloscope-slo-recording``: per window of :data:`~sloscope.conventions.RULE_WINDOWS`, the eligible-request
  rate and the error ratio by model, pool, SLO class and SLO (the routing label is summed away, and so are
  replicas: each request is counted by exactly one), plus the error ratio over each class's compliance period.
- ``sloscope-slo-alerts``: multi-window multi-burn-rate alerts per SLO class and SLO, with the class's own
  objective and compliance period (:mod:`sloscope.generators.windows`).
- ``sloscope-predictor-alerts``: calibration, availability and freshness of the latency predictor, pod headroom,
  shadow predictions.
- ``sloscope-pipeline-alerts``: sloscope's own health (spans in, queue, drops, joins, scrapes).

Every series name comes from :mod:`sloscope.conventions`, every objective and period from the spec, every
threshold from :class:`AlertThresholds`. Every alert carries ``severity`` (``page`` or ``ticket``), a
``summary``, a ``description`` templated with the alert's labels and value, and a ``runbook_url``
``<runbook_base>/<AlertName>.md`` (the runbooks are in ``docs/runbooks/``).

The functions return plain data in a stable order; the caller writes the YAML.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from sloscope import conventions as c
from sloscope.generators.windows import PAGE, TICKET, BurnWindow, Severity, burn_windows, duration_seconds
from sloscope.generators.windows import format_duration as _format_duration
from sloscope.slo.spec import SLOClass, SLOSpec

__all__ = [
    "ALERT_NAMES",
    "DEFAULT_THRESHOLDS",
    "ERROR_BUDGET_BURN_PAGE",
    "ERROR_BUDGET_BURN_TICKET",
    "GROUP_PIPELINE_ALERTS",
    "GROUP_PREDICTOR_ALERTS",
    "GROUP_SLO_ALERTS",
    "GROUP_SLO_RECORDING",
    "AlertThresholds",
    "groups",
    "period_ratio_rule",
    "prometheus_rule",
    "rule_file",
]

Rule = dict[str, Any]
Group = dict[str, Any]

GROUP_SLO_RECORDING = "sloscope-slo-recording"
GROUP_SLO_ALERTS = "sloscope-slo-alerts"
GROUP_PREDICTOR_ALERTS = "sloscope-predictor-alerts"
GROUP_PIPELINE_ALERTS = "sloscope-pipeline-alerts"

RECORDING_INTERVAL = "1m"
"""Evaluation interval of the recording group. The 3d windows and the compliance-period ratio read days of
samples; once a minute bounds that cost whatever the server's global interval, and a minute is well below
the shortest alert window (5m)."""

SEVERITY = "severity"

# Alert names: public (runbooks, silences and routes refer to them).
ERROR_BUDGET_BURN_PAGE = "SloscopeErrorBudgetBurnPage"
ERROR_BUDGET_BURN_TICKET = "SloscopeErrorBudgetBurnTicket"
PREDICTOR_CALIBRATION_DRIFT = "SloscopePredictorCalibrationDrift"
PREDICTOR_DOWN = "SloscopePredictorDown"
PREDICTOR_MODEL_STALE = "SloscopePredictorModelStale"
POOL_HEADROOM_EXHAUSTED = "SloscopePoolHeadroomExhausted"
SHADOW_PREDICTIONS_FAILING = "SloscopeShadowPredictionsFailing"
NO_SPANS = "SloscopeNoSpans"
QUEUE_NEARLY_FULL = "SloscopeQueueNearlyFull"
REFUSING_SPANS = "SloscopeRefusingSpans"
SPANS_DROPPED = "SloscopeSpansDropped"
EVICTING_TRACES = "SloscopeEvictingTraces"
JOIN_RATIO_LOW = "SloscopeJoinRatioLow"
INVALID_VALUES = "SloscopeInvalidValues"
LABEL_VALUES_FOLDED = "SloscopeLabelValuesFolded"
SCRAPES_FAILING = "SloscopeScrapesFailing"
RECORDS_LOST = "SloscopeRecordsLost"

ALERT_NAMES = (
    ERROR_BUDGET_BURN_PAGE,
    ERROR_BUDGET_BURN_TICKET,
    PREDICTOR_CALIBRATION_DRIFT,
    PREDICTOR_DOWN,
    PREDICTOR_MODEL_STALE,
    POOL_HEADROOM_EXHAUSTED,
    SHADOW_PREDICTIONS_FAILING,
    NO_SPANS,
    QUEUE_NEARLY_FULL,
    REFUSING_SPANS,
    SPANS_DROPPED,
    EVICTING_TRACES,
    JOIN_RATIO_LOW,
    INVALID_VALUES,
    LABEL_VALUES_FOLDED,
    SCRAPES_FAILING,
    RECORDS_LOST,
)
"""Every alert the generated rules can contain (the SLO alerts only when the spec lists a class)."""

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


# ---- PromQL and template helpers ----------------------------------------------------------------------


def _num(value: float | Fraction) -> str:
    """The shortest PromQL literal for a number: ``100``, ``0.144``."""
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


def _pct(value: float | Fraction) -> str:
    """A share as a percentage for prose: ``1%``, ``99.9%``."""
    return f"{float(value) * 100:.4g}%"


def _text_num(value: float | Fraction) -> str:
    return f"{float(value):.4g}"


@dataclass(frozen=True)
class _OneOf:
    """A ``=~`` matcher of exactly these values (label values here are plain names, regex-safe)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class _Not:
    """A ``!=`` matcher."""

    value: str


Matcher = str | _OneOf | _Not


def _one_of(values: Iterable[str]) -> _OneOf:
    return _OneOf(tuple(sorted(values)))


def _selector(metric: str, matchers: Mapping[str, Matcher] | None = None) -> str:
    """``metric{a="x",b=~"y|z",c!="w"}``, matchers sorted by label name."""
    parts = []
    for name, matcher in sorted((matchers or {}).items()):
        if isinstance(matcher, _OneOf):
            parts.append(f'{name}=~"{"|".join(matcher.values)}"')
        elif isinstance(matcher, _Not):
            parts.append(f'{name}!="{matcher.value}"')
        else:
            parts.append(f'{name}="{matcher}"')
    return f"{metric}{{{','.join(parts)}}}" if parts else metric


def _by(labels: Sequence[str]) -> str:
    return ", ".join(labels)


def _label(name: str) -> str:
    return "{{ $labels.%s }}" % name  # noqa: UP031 - Go template braces would need quadruple braces in an f-string


VALUE_PERCENT = "{{ $value | humanizePercentage }}"
VALUE_DURATION = "{{ $value | humanizeDuration }}"
VALUE_NUMBER = "{{ $value | humanize }}"
INSTANCE = _label("instance")


def _alert(
    name: str,
    expr: str,
    *,
    severity: Severity,
    summary: str,
    description: str,
    runbook_base: str,
    hold: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Rule:
    rule: Rule = {"alert": name, "expr": expr}
    if hold is not None and duration_seconds(hold) > 0:
        rule["for"] = hold
    rule["labels"] = dict(sorted({**(labels or {}), SEVERITY: severity}.items()))
    rule["annotations"] = {
        "description": description,
        "runbook_url": f"{runbook_base.rstrip('/')}/{name}.md",
        "summary": summary,
    }
    return rule


# ---- recording rules ------------------------------------------------------------------------------------


def _sum_rate(metric: str, window: str, matchers: Mapping[str, Matcher] | None = None) -> str:
    return f"sum by ({_by(c.RULE_LABELS)}) (rate({_selector(metric, matchers)}[{window}]))"


def _error_ratio_expr(window: str) -> str:
    # A violations series appears with its first violation: "or requests * 0" gives the label sets that have
    # eligible requests but no violation yet an error ratio of 0 instead of no data.
    requests = _sum_rate(c.SLO_REQUESTS.exposed_name, window)
    violations = _sum_rate(c.SLO_VIOLATIONS.exposed_name, window)
    return f"(\n  {violations}\n  or\n  {requests} * 0\n)\n/\n{requests}"


def period_ratio_rule(period_seconds: float) -> str | None:
    """Name of the recorded error ratio over a compliance period, or None when none is recorded for it.

    None for a period that is not a whole number of hours (the ratio is summed from hourly windows) and for
    one that is already a rule window (``1d``: :func:`~sloscope.conventions.slo_error_ratio_rule` of it is
    recorded from the counters directly, with the same meaning).
    """
    if period_seconds % 3600 != 0:
        return None
    window = _format_duration(period_seconds)
    return None if window in c.RULE_WINDOWS else c.slo_error_ratio_rule(window)


def _period_ratio_expr(period: str, classes: Sequence[str]) -> str:
    """Traffic-weighted error ratio over ``period``: the sum of hourly violation rates over the sum of hourly
    request rates, both read from the 1h rules at aligned hourly steps (which tile the period exactly).

    Sloth records ``ratio_rate30d`` as the plain mean of its 5m ratios (``avg_over_time``), which gives a quiet
    night hour with 10 requests as much weight as a peak hour with 10,000. The objective is a share of
    *requests*, so the budget must be counted in requests: weighting each hour by its traffic does that, and
    equals violations / requests over the period up to the rate extrapolation at window edges. An hour with no
    eligible request contributes nothing (its 0/0 ratio is filtered out instead of poisoning the sum). Reading
    hourly recorded samples keeps the cost at one point per series per hour of the period, instead of every raw
    sample of 28 days.
    """
    matchers: dict[str, Matcher] = {c.SLO_CLASS: _one_of(classes) if len(classes) > 1 else classes[0]}
    ratio = _selector(c.slo_error_ratio_rule("1h"), matchers)
    requests = _selector(c.slo_requests_rate_rule("1h"), matchers)
    return (
        f"sum_over_time(\n  (\n    {ratio}\n    * ({requests} > 0)\n  )[{period}:1h]\n)\n"
        f"/\n"
        f"sum_over_time({requests}[{period}:1h])"
    )


def recording_rules(spec: SLOSpec) -> list[Rule]:
    """Request rate and error ratio per window, then the error ratio over each distinct compliance period."""
    rules: list[Rule] = []
    for window in c.RULE_WINDOWS:
        rules.append(
            {
                "record": c.slo_requests_rate_rule(window),
                "expr": _sum_rate(c.SLO_REQUESTS.exposed_name, window),
            }
        )
        rules.append({"record": c.slo_error_ratio_rule(window), "expr": _error_ratio_expr(window)})
    by_period: dict[float, list[str]] = {}
    for cls in spec.classes:
        by_period.setdefault(spec.period_of(cls), []).append(cls.name)
    for period in sorted(by_period):
        name = period_ratio_rule(period)
        if name is not None:
            rules.append({"record": name, "expr": _period_ratio_expr(_format_duration(period), by_period[period])})
    return rules


# ---- SLO burn-rate alerts ----------------------------------------------------------------------------


def _burn_expr(cls: str, slo: str, objective: float, pairs: Sequence[BurnWindow], min_requests: int) -> str:
    """Alert when both windows of any pair burn faster than its factor; the value is the long-window ratio."""
    matchers: dict[str, Matcher] = {c.SLO_CLASS: cls, c.SLO: slo}
    branches = []
    for pair in pairs:
        threshold = _num(pair.exact_threshold(objective))
        conditions = [
            f"{_selector(c.slo_error_ratio_rule(pair.long), matchers)} > {threshold}",
            f"and {_selector(c.slo_error_ratio_rule(pair.short), matchers)} > {threshold}",
        ]
        if min_requests > 0:
            # rate x window length: the eligible requests counted in the long window.
            requests = _selector(c.slo_requests_rate_rule(pair.long), matchers)
            conditions.append(f"and {requests} * {pair.long_seconds} >= {min_requests}")
        branches.append("(\n  " + "\n  ".join(conditions) + "\n)")
    return "\nor\n".join(branches)


def _pairs_prose(pairs: Sequence[BurnWindow]) -> str:
    return " or ".join(
        f"{_text_num(p.factor)}x over {p.long} and {p.short} ({_pct(p.budget_share)} of the budget in {p.long})"
        for p in pairs
    )


def _burn_alert(
    spec: SLOSpec,
    cls: SLOClass,
    slo: str,
    *,
    severity: Severity,
    thresholds: AlertThresholds,
    runbook_base: str,
) -> Rule:
    period = spec.period_of(cls)
    pairs = [p for p in burn_windows(period) if p.severity == severity]
    objective = cls.objectives.of(slo)
    budget = 1 - Fraction(repr(objective))
    name = ERROR_BUDGET_BURN_PAGE if severity == PAGE else ERROR_BUDGET_BURN_TICKET
    speed = "Fast" if severity == PAGE else "Sustained"
    guard = (
        f" Needs at least {thresholds.slo_min_requests} eligible requests in the long window."
        if thresholds.slo_min_requests > 0
        else ""
    )
    description = (
        f"Model {_label(c.MODEL)} in pool {_label(c.POOL)}: {VALUE_PERCENT} of the requests of class {cls.name} "
        f"eligible for the {slo} SLO missed it over the alert's long window, against an error budget of "
        f"{_pct(budget)} (objective {_pct(objective)} over {_format_duration(period)}). "
        f"Fires when the budget burns {_pairs_prose(pairs)}.{guard}"
    )
    return _alert(
        name,
        _burn_expr(cls.name, slo, objective, pairs, thresholds.slo_min_requests),
        severity=severity,
        summary=f"{speed} burn of the {slo} error budget of SLO class {cls.name}.",
        description=description,
        runbook_base=runbook_base,
        labels={c.SLO_CLASS: cls.name, c.SLO: slo},
    )


def slo_alerts(spec: SLOSpec, thresholds: AlertThresholds, runbook_base: str) -> list[Rule]:
    """A page and a ticket per class (spec order) and SLO, each with the class's objective and period."""
    return [
        _burn_alert(spec, cls, slo, severity=severity, thresholds=thresholds, runbook_base=runbook_base)
        for severity in (PAGE, TICKET)
        for cls in spec.classes
        for slo in c.SLOS
    ]


# ---- predictor alerts ---------------------------------------------------------------------------------


def _calibration_drift(t: AlertThresholds, runbook_base: str) -> Rule:
    by = _by((c.POOL, c.SIGNAL, c.SOURCE))
    sources = {c.SOURCE: _one_of(c.SOURCES)}
    window = t.calibration_window
    covered = f"sum by ({by}) (rate({_selector(c.PREDICTION_COVERED.exposed_name, sources)}[{window}]))"
    compared = f"sum by ({by}) (rate({_selector(c.PREDICTIONS.exposed_name, sources)}[{window}]))"
    quantile = f"max by ({c.POOL}) ({c.PREDICTOR_QUANTILE.exposed_name})"
    # Signed: coverage minus quantile, so the value says which way the predictor is wrong.
    deviation = f"(\n    {covered}\n    / {compared}\n    - on ({c.POOL}) group_left {quantile}\n  )"
    count = f"sum by ({by}) (increase({_selector(c.PREDICTIONS.exposed_name, sources)}[{window}]))"
    limit = _num(t.calibration_max_deviation)
    expr = (
        f"(\n  {deviation} > {limit}\n  or\n  {deviation} < -{limit}\n)\n"
        f"and on ({by})\n{count} >= {t.calibration_min_predictions}"
    )
    return _alert(
        PREDICTOR_CALIBRATION_DRIFT,
        expr,
        severity=TICKET,
        hold=t.calibration_for,
        summary="Online coverage of the latency predictor is far from its quantile.",
        description=(
            f"Over the last {window}, the online coverage of the {_label(c.SIGNAL)} predictions of pool "
            f"{_label(c.POOL)} (source {_label(c.SOURCE)}) differed from the predictor's quantile by {VALUE_PERCENT} "
            f"(coverage minus quantile; negative: optimistic, the EPP sends requests to pods that then miss their "
            f"SLO; positive: pessimistic, it refuses pods that had room). Alerts beyond "
            f"{_pct(t.calibration_max_deviation)} with at least {t.calibration_min_predictions} predictions."
        ),
        runbook_base=runbook_base,
    )


def _predictor_down(t: AlertThresholds, runbook_base: str) -> Rule:
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
        runbook_base=runbook_base,
    )


def _model_stale(t: AlertThresholds, runbook_base: str) -> Rule:
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
        runbook_base=runbook_base,
    )


def _headroom_exhausted(t: AlertThresholds, runbook_base: str) -> Rule:
    # max over sloscope replicas, which all compute the same pool state; it also keeps the match one-to-one.
    with_room = f"max by ({_by((c.POOL, c.SLO_CLASS))}) ({c.POOL_PODS_WITH_HEADROOM.exposed_name})"
    pods = f"max by ({c.POOL}) ({c.POOL_PODS.exposed_name})"
    expr = f"{with_room}\n  / on ({c.POOL}) group_left\n{pods}\n< {_num(t.headroom_min_share)}"
    return _alert(
        POOL_HEADROOM_EXHAUSTED,
        expr,
        severity=PAGE,
        hold=t.headroom_for,
        summary="Few pods of the pool have room for another request of the class.",
        description=(
            f"Only {VALUE_PERCENT} of the pods of pool {_label(c.POOL)} could take one more request of class "
            f"{_label(c.SLO_CLASS)} without a predicted SLO miss (threshold {_pct(t.headroom_min_share)}). With no "
            f"pod left the EPP routes to the least bad one and requests miss their SLOs: add capacity."
        ),
        runbook_base=runbook_base,
    )


def _shadow_failing(t: AlertThresholds, runbook_base: str) -> Rule:
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
        runbook_base=runbook_base,
    )


def predictor_alerts(thresholds: AlertThresholds, runbook_base: str) -> list[Rule]:
    return [
        _calibration_drift(thresholds, runbook_base),
        _predictor_down(thresholds, runbook_base),
        _model_stale(thresholds, runbook_base),
        _headroom_exhausted(thresholds, runbook_base),
        _shadow_failing(thresholds, runbook_base),
    ]


# ---- pipeline alerts ------------------------------------------------------------------------------------
# Per sloscope replica: "sum without (...)" keeps the target labels (instance, job, pod, ...) whatever the
# deployment names them, so a single broken replica is visible as such.


def _no_spans(t: AlertThresholds, runbook_base: str) -> Rule:
    expr = f"sum without ({c.TRANSPORT}) (rate({c.SPANS_RECEIVED.exposed_name}[{NO_SPANS_WINDOW}])) == 0"
    return _alert(
        NO_SPANS,
        expr,
        severity=TICKET,
        hold=t.no_spans_for,
        summary="sloscope receives no spans.",
        description=(
            f"sloscope {INSTANCE} has accepted no span for at least {t.no_spans_for}: no traffic, or the gateway, "
            f"the model servers or the collector in front no longer export traces to it. SLO series stop moving."
        ),
        runbook_base=runbook_base,
    )


def _queue_nearly_full(t: AlertThresholds, runbook_base: str) -> Rule:
    expr = f"{c.QUEUE_SPANS.exposed_name} / {c.QUEUE_CAPACITY_SPANS.exposed_name} > {_num(t.queue_full_ratio)}"
    return _alert(
        QUEUE_NEARLY_FULL,
        expr,
        severity=TICKET,
        hold=t.queue_full_for,
        summary="sloscope's span queue is nearly full.",
        description=(
            f"The receiver-to-assembler queue of sloscope {INSTANCE} is {VALUE_PERCENT} full (threshold "
            f"{_pct(t.queue_full_ratio)}): the worker cannot keep up, and refusals follow."
        ),
        runbook_base=runbook_base,
    )


def _refusing_spans(t: AlertThresholds, runbook_base: str) -> Rule:
    refused = _selector(c.SPANS_DROPPED.exposed_name, {c.REASON: c.DROP_QUEUE_FULL})
    expr = f"sum without ({c.REASON}) (rate({refused}[{REFUSING_WINDOW}])) > 0"
    return _alert(
        REFUSING_SPANS,
        expr,
        severity=TICKET,
        hold=t.refusing_for,
        summary="sloscope is refusing spans because its queue is full.",
        description=(
            f"sloscope {INSTANCE} refuses {VALUE_NUMBER} spans/s with a retryable 429 / RESOURCE_EXHAUSTED. "
            f"Exporters retry, but sustained refusals exhaust their buffers and then spans are lost."
        ),
        runbook_base=runbook_base,
    )


def _spans_dropped(t: AlertThresholds, runbook_base: str) -> Rule:
    dropped = _selector(c.SPANS_DROPPED.exposed_name, {c.REASON: _one_of(LOST_SPAN_REASONS)})
    expr = (
        f"rate({dropped}[{PIPELINE_WINDOW}])\n"
        f"  / ignoring ({c.REASON}) group_left\n"
        f"sum without ({c.TRANSPORT}) (rate({c.SPANS_RECEIVED.exposed_name}[{PIPELINE_WINDOW}]))\n"
        f"> {_num(t.spans_dropped_ratio)}"
    )
    return _alert(
        SPANS_DROPPED,
        expr,
        severity=TICKET,
        hold=t.spans_dropped_for,
        summary="sloscope is discarding spans.",
        description=(
            f"sloscope {INSTANCE} discards spans for reason {_label(c.REASON)} at {VALUE_PERCENT} of the spans it "
            f"receives (threshold {_pct(t.spans_dropped_ratio)} over {PIPELINE_WINDOW}). Those spans are lost: "
            f"the requests they belong to are counted without them, or not at all."
        ),
        runbook_base=runbook_base,
    )


def _evicting_traces(t: AlertThresholds, runbook_base: str) -> Rule:
    evicted = _selector(c.TRACES_JOINED.exposed_name, {c.OUTCOME: c.OUTCOME_EVICTED})
    expr = f"sum without ({c.OUTCOME}) (rate({evicted}[{PIPELINE_WINDOW}])) > 0"
    return _alert(
        EVICTING_TRACES,
        expr,
        severity=TICKET,
        hold=t.evicting_for,
        summary="sloscope evicts traces before their join window ends.",
        description=(
            f"sloscope {INSTANCE} emits {VALUE_NUMBER} requests/s early because the pending-trace cap is reached: "
            f"their gateway spans may arrive after the emission, and those requests lose their SLO targets."
        ),
        runbook_base=runbook_base,
    )


def _join_ratio_low(t: AlertThresholds, runbook_base: str) -> Rule:
    joined = _selector(c.TRACES_JOINED.exposed_name, {c.OUTCOME: _one_of(JOINED_OUTCOMES)})
    emitted = _selector(c.TRACES_JOINED.exposed_name, {c.OUTCOME: _Not(c.OUTCOME_NO_ANCHOR)})
    expr = (
        f"sum without ({c.OUTCOME}) (rate({joined}[{PIPELINE_WINDOW}]))\n"
        f"  / sum without ({c.OUTCOME}) (rate({emitted}[{PIPELINE_WINDOW}]))\n"
        f"< {_num(t.join_ratio_min)}"
    )
    return _alert(
        JOIN_RATIO_LOW,
        expr,
        severity=TICKET,
        hold=t.join_ratio_for,
        summary="Few requests are joined with their gateway span.",
        description=(
            f"Only {VALUE_PERCENT} of the requests sloscope {INSTANCE} emitted over the last {PIPELINE_WINDOW} "
            f"found their gateway span (threshold {_pct(t.join_ratio_min)}). The others carry no SLO headers and "
            f"routing label: they are published without SLOs."
        ),
        runbook_base=runbook_base,
    )


def _invalid_values(t: AlertThresholds, runbook_base: str) -> Rule:
    request_labels = _by((c.MODEL, c.POOL, c.SLO_CLASS, c.ROUTING))
    expr = (
        f"rate({c.INVALID_VALUES.exposed_name}[{PIPELINE_WINDOW}])\n"
        f"  / ignoring ({c.FIELD}) group_left\n"
        f"sum without ({request_labels}) (rate({c.REQUESTS.exposed_name}[{PIPELINE_WINDOW}]))\n"
        f"> {_num(t.invalid_values_ratio)}"
    )
    return _alert(
        INVALID_VALUES,
        expr,
        severity=TICKET,
        hold=t.invalid_values_for,
        summary="Model-server spans carry unusable latency or token values.",
        description=(
            f"{VALUE_PERCENT} of the requests sloscope {INSTANCE} evaluated over the last {PIPELINE_WINDOW} had "
            f"no valid {_label(c.FIELD)} (threshold {_pct(t.invalid_values_ratio)}); they are not eligible for "
            f"the SLOs that need it, which biases attainment."
        ),
        runbook_base=runbook_base,
    )


def _label_values_folded(t: AlertThresholds, runbook_base: str) -> Rule:
    del t  # no threshold: any folded value hides a label value from every panel and alert
    expr = f"increase({c.LABEL_VALUES_FOLDED.exposed_name}[{FOLDED_WINDOW}]) > 0"
    return _alert(
        LABEL_VALUES_FOLDED,
        expr,
        severity=TICKET,
        summary="A label's value cap is reached; new values are published as __other__.",
        description=(
            f"sloscope {INSTANCE} folded {VALUE_NUMBER} observations of label {_label(c.LABEL)} into "
            f'"{c.OTHER}" over the last {FOLDED_WINDOW}: series of new values are merged and cannot be told apart.'
        ),
        runbook_base=runbook_base,
    )


def _scrapes_failing(t: AlertThresholds, runbook_base: str) -> Rule:
    failed = _selector(c.SCRAPES.exposed_name, {c.RESULT: _Not(c.RESULT_SUCCESS)})
    expr = (
        f"sum without ({c.RESULT}) (rate({failed}[{PIPELINE_WINDOW}]))\n"
        f"  / sum without ({c.RESULT}) (rate({c.SCRAPES.exposed_name}[{PIPELINE_WINDOW}]))\n"
        f"> {_num(t.scrape_failure_ratio)}"
    )
    return _alert(
        SCRAPES_FAILING,
        expr,
        severity=TICKET,
        hold=t.scrape_failure_for,
        summary="sloscope's scrapes of a kind of target are failing.",
        description=(
            f"{VALUE_PERCENT} of sloscope {INSTANCE}'s {_label(c.KIND)} scrapes failed over the last "
            f"{PIPELINE_WINDOW} (threshold {_pct(t.scrape_failure_ratio)}). Model-server failures blind shadow "
            f"predictions and headroom; EPP failures freeze the EPP series; predictor failures the health series."
        ),
        runbook_base=runbook_base,
    )


def _records_lost(t: AlertThresholds, runbook_base: str) -> Rule:
    lost = _selector(c.RECORDS.exposed_name, {c.RESULT: _one_of((c.RECORD_DROPPED, c.RECORD_FAILED))})
    expr = (
        f"sum without ({c.RESULT}) (rate({lost}[{PIPELINE_WINDOW}]))\n"
        f"  / sum without ({c.RESULT}) (rate({c.RECORDS.exposed_name}[{PIPELINE_WINDOW}]))\n"
        f"> {_num(t.records_lost_ratio)}"
    )
    return _alert(
        RECORDS_LOST,
        expr,
        severity=TICKET,
        hold=t.records_lost_for,
        summary="A record sink is losing request records.",
        description=(
            f"sloscope {INSTANCE}'s {_label(c.SINK)} sink dropped or failed to write {VALUE_PERCENT} of the request "
            f"records it got over the last {PIPELINE_WINDOW} (threshold {_pct(t.records_lost_ratio)}). The record "
            f"store (and every SLO review built on it) or the trace backend misses those requests; the Prometheus "
            f"series are unaffected."
        ),
        runbook_base=runbook_base,
    )


def pipeline_alerts(thresholds: AlertThresholds, runbook_base: str) -> list[Rule]:
    return [
        _no_spans(thresholds, runbook_base),
        _queue_nearly_full(thresholds, runbook_base),
        _refusing_spans(thresholds, runbook_base),
        _spans_dropped(thresholds, runbook_base),
        _evicting_traces(thresholds, runbook_base),
        _join_ratio_low(thresholds, runbook_base),
        _invalid_values(thresholds, runbook_base),
        _label_values_folded(thresholds, runbook_base),
        _scrapes_failing(thresholds, runbook_base),
        _records_lost(thresholds, runbook_base),
    ]


# ---- assembly -------------------------------------------------------------------------------------------


def groups(
    spec: SLOSpec, *, thresholds: AlertThresholds = DEFAULT_THRESHOLDS, runbook_base: str = "docs/runbooks"
) -> list[Group]:
    """The rule groups, in evaluation-independent but fixed order; a spec without classes has no SLO alerts."""
    out: list[Group] = [
        {"name": GROUP_SLO_RECORDING, "interval": RECORDING_INTERVAL, "rules": recording_rules(spec)},
    ]
    if spec.classes:
        out.append({"name": GROUP_SLO_ALERTS, "rules": slo_alerts(spec, thresholds, runbook_base)})
    out.append({"name": GROUP_PREDICTOR_ALERTS, "rules": predictor_alerts(thresholds, runbook_base)})
    out.append({"name": GROUP_PIPELINE_ALERTS, "rules": pipeline_alerts(thresholds, runbook_base)})
    return out


def rule_file(
    spec: SLOSpec, *, thresholds: AlertThresholds = DEFAULT_THRESHOLDS, runbook_base: str = "docs/runbooks"
) -> dict[str, Any]:
    """A Prometheus rule file (``rule_files:`` in prometheus.yml; ``promtool check rules`` accepts it)."""
    return {"groups": groups(spec, thresholds=thresholds, runbook_base=runbook_base)}


def prometheus_rule(
    spec: SLOSpec,
    *,
    name: str = "sloscope",
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    runbook_base: str = "docs/runbooks",
) -> dict[str, Any]:
    """The same groups as a prometheus-operator ``PrometheusRule`` (``monitoring.coreos.com/v1``).

    ``labels`` go on the object's metadata: the Prometheus resource's ``ruleSelector`` usually matches on them.
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": groups(spec, thresholds=thresholds, runbook_base=runbook_base)},
    }
