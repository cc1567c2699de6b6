"""Shared by every test builder: the scenario's labels and evaluation interval, input series in promtool's
expanding notation, durations in minutes, test groups and alert cases, and :class:`_Rules`, the generated
alerts whose annotations the expected alerts render."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sloscope.generators.rule_tests.templates import render_template
from sloscope.generators.windows import duration_seconds

Test = dict[str, Any]

EVALUATION_INTERVAL = "1m"
MODEL = "llama-3-8b"
POOL = "pool-a"
# The target labels Prometheus adds when it scrapes sloscope; per-replica alerts keep them.
TARGET = {"instance": "sloscope-0:9464", "job": "sloscope"}
TIME_SERIES_MINUTES = 60  # input series are written for this long unless a scenario needs more


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


def _group(
    name: str, series: Sequence[dict[str, str]], *, interval: str = EVALUATION_INTERVAL, **cases: list[dict[str, Any]]
) -> Test:
    """A test group; ``interval`` is the spacing of the input samples (rules are evaluated every minute)."""
    return {"name": name, "interval": interval, "input_series": list(series), **cases}


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


def _accumulated(start: float, step: float, times: int) -> list[float]:
    """The values of promtool's ``start+stepxtimes``: it adds ``step`` once per sample, as done here, so the floats
    are the ones promtool feeds Prometheus."""
    values = []
    for _ in range(times + 1):
        values.append(start)
        start += step
    return values


def _extrapolated(values: Sequence[float], every: int, at: int, window: int, *, counter: bool, rate: bool) -> float:
    """What Prometheus 3 computes for ``rate()``/``increase()`` (``counter``) or ``delta()`` of a series with a
    sample every ``every`` minutes from minute 0, evaluated at minute ``at`` over ``window`` minutes.

    The same float operations, in the same order, as ``extrapolatedRate`` in promql/functions.go (Prometheus
    v3.x, the pinned promtool): samples in the left-open range (at - window, at], extrapolated to the range's
    edges when they lie within 1.1 average intervals, never below a counter's zero point. Without resets (the
    series here only grow). The generated tests use it to know the exact minute an alert starts to hold.
    """
    start = at - window
    points = [(minute, values[minute // every]) for minute in range(0, at + 1, every) if minute > start]
    if len(points) < 2:
        return math.nan  # no result: Prometheus returns no sample, and no condition on it holds
    (first_t, first_v), (last_t, last_v) = points[0], points[-1]
    result = last_v - first_v
    to_start, to_end = float((first_t - start) * 60), float((at - last_t) * 60)
    sampled = float((last_t - first_t) * 60)
    average = sampled / (len(points) - 1)
    if counter and result > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / result))
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    factor = interval / sampled
    if rate:
        factor /= window * 60
    return result * factor
