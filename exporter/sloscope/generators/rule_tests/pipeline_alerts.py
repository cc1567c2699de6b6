"""Tests of sloscope's own health alerts: spans in, the queue, refusals and drops, record sinks, evictions,
joins, invalid values, folded label values and scrapes."""

from __future__ import annotations

import math

from sloscope import conventions as c
from sloscope.generators import rules as r
from sloscope.generators.rule_tests.common import (
    MODEL,
    POOL,
    TARGET,
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

# Rates exist from minute 1 (two samples), so a condition on them holds from minute 1 and a `for` of F
# minutes fires at minute 1 + F.


def _pipeline_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    return [
        *_not_scraped_tests(rules, t),
        *_no_spans_tests(rules, t),
        *_queue_tests(rules, t),
        *_refusing_tests(rules, t),
        *_dropped_tests(rules, t),
        *_records_lost_tests(rules, t),
        *_eligible_vanished_tests(rules, t),
        *_aborts_rising_tests(rules, t),
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

    silent = [received("grpc", _gauge(500, minutes)), received("http", _gauge(0, minutes))]
    running = _series(c.POD_REQUESTS_RUNNING.exposed_name, {c.POOL: POOL, c.POD: "vllm-0"}, _gauge(3, minutes))
    idle = _series(c.POD_REQUESTS_RUNNING.exposed_name, {c.POOL: POOL, c.POD: "vllm-0"}, _gauge(0, minutes))
    attempts = _series(
        c.EPP_SCHEDULER_ATTEMPTS.exposed_name,
        {c.POOL: POOL, c.TARGET_MODEL: MODEL, c.POD: "vllm-0", c.STATUS: "success"},
        _counter(60, minutes),
    )
    return [
        _group(
            f"{name} fires when no span arrives on any transport while pods run requests",
            [*silent, running],
            alert_rule_test=_held(name, 1 + hold, rules.expect(name, TARGET, 0.0)),
        ),
        _group(
            f"{name} fires when no span arrives while the EPP schedules requests to idle-looking pods",
            [*silent, idle, attempts],
            alert_rule_test=_held(name, 1 + hold, rules.expect(name, TARGET, 0.0)),
        ),
        _group(
            f"{name} stays silent without spans when no pod runs a request and the EPP schedules none",
            [*silent, idle],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        ),
        _group(
            f"{name} stays silent while spans arrive on one transport",
            [received("grpc", _counter(100, minutes)), received("http", _gauge(0, minutes)), running],
            alert_rule_test=[_alert_case(name, 1 + hold)],
        ),
    ]


def _not_scraped_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    name, hold = r.NOT_SCRAPED, _minutes(t.not_scraped_for)
    minutes, down_at = hold + 20, 10
    pod = {"instance": "10.0.0.7:9464", "job": "monitoring/sloscope"}  # prometheus-operator's PodMonitor job
    info = {**pod, "python": "3.11.9", "version": "0.1.0"}
    node = {"instance": "node-exporter-0:9100", "job": "node"}

    def series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {"series": f"{metric}{{{inner}}}", "values": values}

    served = series(c.BUILD_INFO.exposed_name, info, _gauge(1, minutes))
    return [
        _group(
            f"{name} fires when a target that served sloscope's series stops answering scrapes, whatever its job",
            [
                series("up", pod, _switch(1, 0, down_at, minutes)),
                series(c.BUILD_INFO.exposed_name, info, f"1x{down_at - 2} _x{minutes - down_at + 1}"),
                series("up", node, _gauge(1, minutes)),
            ],
            alert_rule_test=_held(name, down_at + hold, rules.expect(name, pod, 0.0)),
        ),
        _group(
            f"{name} fires when Prometheus has no sloscope series at all",
            [series("up", node, _gauge(1, minutes))],
            alert_rule_test=_held(name, hold, rules.expect(name, {}, 1.0)),
        ),
        _group(
            f"{name} stays silent while sloscope is scraped and another job's target is down",
            [series("up", pod, _gauge(1, minutes)), served, series("up", node, _gauge(0, minutes))],
            alert_rule_test=[_alert_case(name, down_at + hold)],
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


def _eligible_vanished_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    """A class's eligible requests stop while its pool's requests go on (SLO headers stripped): a ticket once the
    recent window holds none and the hold has passed; nothing when the whole pool stops, or the class was quiet."""
    name, hold = r.ELIGIBLE_TRAFFIC_VANISHED, _minutes(t.eligible_vanished_for)
    history, recent = _minutes(t.eligible_history_window), _minutes(t.eligible_vanished_window)
    stop_at = history + 10  # the class's last eligible request, at a minute past a full history window
    minutes = stop_at + recent + hold + 10
    per_minute = max(1, math.ceil(2 * t.eligible_min_requests / history))
    which = {c.POOL: POOL, c.SLO_CLASS: "interactive"}
    request = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: "interactive", c.ROUTING: c.ROUTING_PREDICTED}

    def eligible(values: str, cls: str = "interactive") -> dict[str, str]:
        labels = {**TARGET, **request, c.SLO_CLASS: cls, c.SLO: c.SLO_TTFT}
        return _series(c.SAMPLED_SLO_REQUESTS.exposed_name, labels, values)

    def requests(values: str) -> dict[str, str]:
        return _series(c.REQUESTS.exposed_name, {**TARGET, **request, c.SLO_CLASS: "none"}, values)

    stopping = f"0+{per_minute}x{stop_at} {per_minute * stop_at}+0x{minutes - stop_at}"
    going_on = _counter(10, minutes)
    # Ranges are left-open: the last growth leaves the recent window one evaluation before it has slid past it.
    fires_at = stop_at + recent - 1 + hold
    return [
        _group(
            f"{name} fires when a class's eligible requests stop while its pool serves on",
            [eligible(stopping), requests(going_on)],
            alert_rule_test=_held(name, fires_at, rules.expect(name, which, 0.0)),
        ),
        _group(
            f"{name} stays silent when the whole pool stops",
            [eligible(stopping), requests(f"0+10x{stop_at} {10 * stop_at}+0x{minutes - stop_at}")],
            alert_rule_test=[_alert_case(name, fires_at + 5)],
        ),
        _group(
            f"{name} stays silent while the class's eligible requests go on",
            [eligible(_counter(per_minute, minutes)), requests(going_on)],
            alert_rule_test=[_alert_case(name, fires_at + 5)],
        ),
        _group(
            f"{name} stays silent for a class that had fewer than {t.eligible_min_requests} eligible requests sampled",
            [eligible(f"0+0x{stop_at - 3} 1+0x{minutes - stop_at + 2}", "batch"), requests(going_on)],
            alert_rule_test=[_alert_case(name, fires_at + 5)],
        ),
    ]


def _aborts_rising_tests(rules: _Rules, t: r.AlertThresholds) -> list[Test]:
    """A pool's aborted share jumps from 1 % to 10 % after a day: a ticket once the recent window holds the new share
    and the hold has passed; nothing at a steady 10 %, nor for a jump to less than the floor. Samples every 5 minutes
    (a day of history)."""
    name, every = r.ABORTS_RISING, 5
    recent, history, hold = (_minutes(w) for w in (t.aborts_window, t.aborts_baseline_window, t.aborts_for))
    jump_at = history + recent  # minutes: the baseline window before the recent one is a full day of 1 %
    steps, jumped = (jump_at + recent + hold + 30) // every, jump_at // every
    labels = {c.MODEL: MODEL, c.POOL: POOL, c.SLO_CLASS: "interactive", c.ROUTING: c.ROUTING_PREDICTED}
    requests = _series(c.REQUESTS.exposed_name, labels, f"0+500x{steps}")

    def aborted(before: int, after: int) -> dict[str, str]:
        values = f"0+{before}x{jumped} {before * jumped}+{after}x{steps - jumped}"
        return _series(c.REQUESTS_FAILED.exposed_name, {**labels, c.REASON: c.FAILURE_ABORTED}, values)

    at = jump_at + recent + hold + 15  # the recent window all new, the hold passed
    low = max(1, math.floor(t.aborts_min_share * 500) - 5)  # a jump to just under the floor
    return [
        _group(
            f"{name} fires when a pool's aborted share jumps from 1% to 10%",
            [requests, aborted(5, 50)],
            interval=f"{every}m",
            alert_rule_test=[
                _alert_case(name, jump_at),
                _alert_case(name, at, [rules.expect(name, {c.POOL: POOL}, 0.1)]),
            ],
        ),
        _group(
            f"{name} stays silent at a steady 10% of aborted requests",
            [requests, aborted(50, 50)],
            interval=f"{every}m",
            alert_rule_test=[_alert_case(name, at)],
        ),
        _group(
            f"{name} stays silent when the share jumps to under {t.aborts_min_share:.0%}",
            [requests, aborted(1, low)],
            interval=f"{every}m",
            alert_rule_test=[_alert_case(name, at)],
        ),
    ]


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
            # Traces without a model-server span, and failed requests (no model-server span either), join
            # nothing: they do not count against the ratio, so an outage does not page as a join problem.
            _series(c.TRACES_JOINED.exposed_name, {c.OUTCOME: c.OUTCOME_NO_ANCHOR}, _counter(500, minutes)),
            _series(c.TRACES_JOINED.exposed_name, {c.OUTCOME: c.OUTCOME_FAILED}, _counter(500, minutes)),
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
    """Both fold counters start at 0 (every capped label, every capped family), so the first fold is an increase."""
    folded_at = 11
    tests = []
    for name, counter, labels in (
        (r.LABEL_VALUES_FOLDED, c.LABEL_VALUES_FOLDED, {c.LABEL: c.MODEL}),
        (r.SERIES_FOLDED, c.SERIES_FOLDED, {c.FAMILY: c.REQUESTS_FAILED.exposed_name}),
    ):
        expected = rules.expect(name, {**TARGET, **labels}, 5.0)
        tests += [
            _group(
                f"{name} fires as soon as observations are folded into {c.OTHER}",
                [_series(counter.exposed_name, labels, f"0x{folded_at - 1} 5x20")],
                alert_rule_test=[_alert_case(name, folded_at - 1), _alert_case(name, folded_at, [expected])],
            ),
            _group(
                f"{name} stays silent while nothing is folded",
                [_series(counter.exposed_name, labels, _gauge(0, 30))],
                alert_rule_test=[_alert_case(name, folded_at)],
            ),
        ]
    return tests


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
