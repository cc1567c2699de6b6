"""The ``sloscope-pipeline-alerts`` group: sloscope's own health (spans in, queue, drops, joins, invalid values,
folded label values and series, scrapes, record sinks)."""

from __future__ import annotations

from sloscope import conventions as c
from sloscope.generators.rules.common import (
    INSTANCE,
    VALUE_NUMBER,
    VALUE_PERCENT,
    Rule,
    _alert,
    _by,
    _label,
    _Not,
    _num,
    _one_of,
    _pct,
    _selector,
)
from sloscope.generators.rules.names import (
    ABORTS_RISING,
    ELIGIBLE_TRAFFIC_VANISHED,
    EVICTING_TRACES,
    FAILURES_WITHOUT_POOL,
    INVALID_VALUES,
    JOIN_RATIO_LOW,
    LABEL_VALUES_FOLDED,
    NO_SPANS,
    NOT_SCRAPED,
    QUEUE_NEARLY_FULL,
    RECORDS_LOST,
    REFUSING_SPANS,
    SCRAPES_FAILING,
    SERIES_FOLDED,
    SPANS_DROPPED,
)
from sloscope.generators.rules.thresholds import (
    ANCHORED_OUTCOMES,
    FOLDED_WINDOW,
    JOINED_OUTCOMES,
    LOST_SPAN_REASONS,
    NO_SPANS_WINDOW,
    PIPELINE_WINDOW,
    REFUSING_WINDOW,
    WITHOUT_POOL_WINDOW,
    AlertThresholds,
)
from sloscope.generators.windows import TICKET

# Per sloscope replica: "sum without (...)" keeps the target labels (instance, job, pod, ...) whatever the
# deployment names them, so a single broken replica is visible as such.


def _no_spans(t: AlertThresholds) -> Rule:
    # Only while the same replica sees traffic it should have traced: requests running on the pools' pods (as it
    # last scraped them), or the EPP scheduling requests. A quiet night with no request is not an alert.
    target = _by(("job", "instance"))
    running = f"sum by ({target}) ({c.POD_REQUESTS_RUNNING.exposed_name}) > 0"
    scheduling = f"sum by ({target}) (rate({c.EPP_SCHEDULER_ATTEMPTS.exposed_name}[{NO_SPANS_WINDOW}])) > 0"
    expr = (
        f"sum without ({c.TRANSPORT}) (rate({c.SPANS_RECEIVED.exposed_name}[{NO_SPANS_WINDOW}])) == 0\n"
        f"and on ({target})\n(\n  {running}\n  or\n  {scheduling}\n)"
    )
    return _alert(
        NO_SPANS,
        expr,
        severity=TICKET,
        hold=t.no_spans_for,
        summary="sloscope receives no spans while the pools serve requests.",
        description=(
            f"sloscope {INSTANCE} has accepted no span for at least {t.no_spans_for} while the pods it scrapes run "
            f"requests or the EPP schedules them: the gateway, the model servers or the collector in front no longer "
            f"export traces to it. SLO series stop moving and the SLO alerts cannot fire."
        ),
    )


def _not_scraped(t: AlertThresholds) -> Rule:
    """Keyed on sloscope's own series, not on a job name: prometheus-operator names a PodMonitor's job
    ``<namespace>/<name>``, and a scrape config whatever its author chose."""
    info = c.BUILD_INFO.exposed_name
    expr = f"up == 0 and on (job, instance) last_over_time({info}[{t.not_scraped_window}])\nor\nabsent({info})"
    return _alert(
        NOT_SCRAPED,
        expr,
        severity=TICKET,
        hold=t.not_scraped_for,
        summary="Prometheus does not scrape sloscope.",
        description=(
            f"Prometheus has not scraped sloscope for {t.not_scraped_for} (value {VALUE_NUMBER}: 0 for a target that "
            f"served sloscope's series and fails its scrapes, its job and instance the alert's labels; 1 when no "
            f"sloscope series is left at all, with no labels). Stale sloscope series: the SLO, predictor and "
            f"pipeline alerts cannot fire, and the dashboards go empty."
        ),
    )


def _queue_nearly_full(t: AlertThresholds) -> Rule:
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
    )


def _refusing_spans(t: AlertThresholds) -> Rule:
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
    )


def _spans_dropped(t: AlertThresholds) -> Rule:
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
    )


def _evicting_traces(t: AlertThresholds) -> Rule:
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
    )


def _join_ratio_low(t: AlertThresholds) -> Rule:
    joined = _selector(c.TRACES_JOINED.exposed_name, {c.OUTCOME: _one_of(JOINED_OUTCOMES)})
    # Requests with a model-server span: a trace without one (no_anchor) or a failed request joins nothing.
    emitted = _selector(c.TRACES_JOINED.exposed_name, {c.OUTCOME: _one_of(ANCHORED_OUTCOMES)})
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
    )


def _invalid_values(t: AlertThresholds) -> Rule:
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
    )


def _label_values_folded(t: AlertThresholds) -> Rule:
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
    )


def _series_folded(t: AlertThresholds) -> Rule:
    del t  # no threshold: like a folded value, any folded label set hides its series from every panel and alert
    expr = f"increase({c.SERIES_FOLDED.exposed_name}[{FOLDED_WINDOW}]) > 0"
    return _alert(
        SERIES_FOLDED,
        expr,
        severity=TICKET,
        summary="A family's series cap is reached; new label sets are counted into its __other__ series.",
        description=(
            f"sloscope {INSTANCE} counted {VALUE_NUMBER} observations of {_label(c.FAMILY)} into its "
            f'"{c.OTHER}" series over the last {FOLDED_WINDOW} (limits.max_series_per_family or '
            f"limits.max_series_total reached): the new combinations of model, pool, class and pod are merged."
        ),
    )


def _scrapes_failing(t: AlertThresholds) -> Rule:
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
    )


def _records_lost(t: AlertThresholds) -> Rule:
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
    )


def _eligible_traffic_vanished(t: AlertThresholds) -> Rule:
    """The symptom behind a flat SLO: requests keep coming, none is judged any more (a gateway upgrade that strips
    the SLO headers, a renamed model no class matches). Only where the class had traffic and the pool still has."""
    by = _by((c.POOL, c.SLO_CLASS))
    eligible = c.SAMPLED_SLO_REQUESTS.exposed_name  # what was observed: 10 requests sampled at 1 in 10 are 10
    recent, history = t.eligible_vanished_window, t.eligible_history_window
    expr = (
        f"(\n"
        f"  sum by ({by}) (increase({eligible}[{history}] offset {recent})) >= {t.eligible_min_requests}\n"
        f"  unless\n"
        f"  sum by ({by}) (increase({eligible}[{recent}])) > 0\n"
        f")\n"
        f"and on ({c.POOL})\n"
        f"sum by ({c.POOL}) (increase({c.REQUESTS.exposed_name}[{recent}])) > 0"
    )
    return _alert(
        ELIGIBLE_TRAFFIC_VANISHED,
        expr,
        severity=TICKET,
        hold=t.eligible_vanished_for,
        summary="A class's requests are no longer judged against its SLOs.",
        description=(
            f"Pool {_label(c.POOL)} still serves requests, but none of class {_label(c.SLO_CLASS)} was eligible for "
            f"an SLO in the last {recent}, after at least {t.eligible_min_requests} sampled in the {history} before: "
            f"its SLO series are flat, not good. SLO headers stripped, or requests no longer matching the class."
        ),
    )


def _failures_without_pool(t: AlertThresholds) -> Rule:
    """Failures no pool could be told for are in no budget (a pool of failures only would page on any abort): their
    share is a data-quality ticket, never a page. The placed requests may have no series yet (every request failed
    before a pod): then the share is 1."""
    window = WITHOUT_POOL_WINDOW
    without = f"sum without ({c.REASON}) (rate({c.REQUESTS_WITHOUT_POOL.exposed_name}[{window}]))"
    placed = (
        f"sum without ({_by((c.MODEL, c.POOL, c.SLO_CLASS, c.ROUTING))}) (rate({c.REQUESTS.exposed_name}[{window}]))"
    )
    count = f"sum without ({c.REASON}) (increase({c.REQUESTS_WITHOUT_POOL.exposed_name}[{window}]))"
    expr = (
        f"{without}\n  / ({without} + ({placed} or {without} * 0))\n> {_num(t.without_pool_ratio)}\n"
        f"and\n{count} >= {t.without_pool_min_requests}"
    )
    return _alert(
        FAILURES_WITHOUT_POOL,
        expr,
        severity=TICKET,
        hold=t.without_pool_for,
        summary="Failed requests are counted in no pool's SLO budget.",
        description=(
            f"{VALUE_PERCENT} of the requests sloscope {INSTANCE} saw over the last {window} failed before reaching "
            f"any pod, and nothing told their pool (threshold {_pct(t.without_pool_ratio)}): no span named one, no "
            f"pools[].gateways pattern matched their gateway, their gateway answered no request recently, and their "
            f"model or a single pool did not decide. They are in sloscope_requests_without_pool_total only: no burn "
            f"alert sees them, so the real pool's budget reads better than its users fared."
        ),
    )


def _aborts_rising(t: AlertThresholds) -> Rule:
    """An aborted request is a request no answer was seen for: clients giving up, or model-server spans that stopped
    coming (tracing turned off, a collector dropping them), which look alike. A jump of their share is a ticket to
    find out which, never a page: an abort is a bad event only of the SLOs whose deadline it outwaited."""
    aborted = _selector(c.REQUESTS_FAILED.exposed_name, {c.REASON: c.FAILURE_ABORTED})
    recent, baseline = t.aborts_window, t.aborts_baseline_window

    def share(offset: str = "") -> str:
        window = baseline if offset else recent
        return (
            f"sum by ({c.POOL}) (rate({aborted}[{window}]{offset}))\n"
            f"  / sum by ({c.POOL}) (rate({c.REQUESTS.exposed_name}[{window}]{offset}))"
        )

    expr = (
        f"(\n  {share()}\n) > {_num(t.aborts_min_share)}\n"
        f"and\n(\n  {share()}\n) > {_num(t.aborts_jump_factor)} * (\n  {share(f' offset {recent}')}\n)\n"
        f"and\nsum by ({c.POOL}) (increase({aborted}[{recent}])) >= {t.aborts_min_requests}"
    )
    return _alert(
        ABORTS_RISING,
        expr,
        severity=TICKET,
        hold=t.aborts_for,
        summary="A pool's share of aborted requests jumped (clients giving up, or model-server spans missing).",
        description=(
            f"{VALUE_PERCENT} of pool {_label(c.POOL)}'s requests over the last {recent} were aborted (no answer "
            f"seen), more than {_num(t.aborts_jump_factor)} times their share over the {baseline} before and at "
            f"least {_pct(t.aborts_min_share)}. Either clients leave before their answer, or the model servers' "
            f"spans no longer reach sloscope, so answered requests look unanswered."
        ),
    )


def pipeline_alerts(thresholds: AlertThresholds) -> list[Rule]:
    return [
        _not_scraped(thresholds),
        _no_spans(thresholds),
        _queue_nearly_full(thresholds),
        _refusing_spans(thresholds),
        _spans_dropped(thresholds),
        _evicting_traces(thresholds),
        _join_ratio_low(thresholds),
        _invalid_values(thresholds),
        _label_values_folded(thresholds),
        _series_folded(thresholds),
        _scrapes_failing(thresholds),
        _records_lost(thresholds),
        _eligible_traffic_vanished(thresholds),
        _failures_without_pool(thresholds),
        _aborts_rising(thresholds),
    ]
