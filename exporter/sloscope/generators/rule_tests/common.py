"""Shared by every test builder: the scenario's labels and evaluation interval, input series in promtool's
expanding notation, durations in minutes, test groups and alert cases, and :class:`_Rules`, the generated
alerts whose annotations the expected alerts render."""

from __future__ import annotations

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
