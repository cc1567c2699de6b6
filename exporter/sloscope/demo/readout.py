"""What sloscope says, read back from its /metrics page over HTTP: the figures the demo shows and checks.

The demo never looks inside sloscope: it scrapes ``/metrics`` like Prometheus would and sums the series
it needs, so the live view and the end-of-run comparison show sloscope's published numbers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sloscope import conventions as c

__all__ = ["Readout", "read"]


@dataclass
class Readout:
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (slo_class, routing)
    eligible: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (slo_class, routing, slo)
    violations: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    failed: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (slo_class, routing, reason)
    per_pod: Counter[str] = field(default_factory=Counter)  # requests counted on each pod
    predictions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (signal, source)
    covered: Counter[tuple[str, str]] = field(default_factory=Counter)
    pods: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))  # pod -> gauge -> value
    headroom: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (pod, slo_class, signal)
    pods_with_headroom: dict[str, float] = field(default_factory=dict)  # slo_class -> pods
    quantile: float | None = None
    objective: str | None = None  # what the predictor predicts: "quantile" or "mean" (sloscope_predictor_objective)
    predictor_up: dict[str, float] = field(default_factory=dict)  # server -> 0/1
    # mean predictions, by (signal, source): compared, and the sums of by how much they were too low, too high (s)
    mean_predictions: Counter[tuple[str, str]] = field(default_factory=Counter)
    mean_under: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    mean_over: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    epp: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # sloscope_epp_* sample -> sum
    # how the spans fared on the way in: what to read first when a count differs from the truth
    spans_dropped: Counter[str] = field(default_factory=Counter)  # reason
    otlp_requests: Counter[str] = field(default_factory=Counter)  # result, over both transports
    traces_joined: Counter[str] = field(default_factory=Counter)  # outcome

    @property
    def total(self) -> int:
        return int(sum(self.requests.values()))

    def coverage(self, signal: str, source: str = "shadow") -> float | None:
        n = self.predictions[(signal, source)]
        return self.covered[(signal, source)] / n if n else None

    def bias_and_mae(self, signal: str, source: str = "shadow") -> tuple[float, float] | None:
        """Mean predictions: (mean of actual - predicted, mean absolute error), seconds; None before one."""
        key = (signal, source)
        n = self.mean_predictions[key]
        if not n:
            return None
        return (self.mean_under[key] - self.mean_over[key]) / n, self.mean_absolute(signal, source) / n

    def mean_absolute(self, signal: str, source: str = "shadow") -> float:
        """The sum of |actual - predicted| of mean predictions, seconds: too low plus too high."""
        return self.mean_under[(signal, source)] + self.mean_over[(signal, source)]

    def attainment(self, slo_class: str, slo: str) -> float | None:
        eligible = sum(v for (c, _, s), v in self.eligible.items() if c == slo_class and s == slo)
        missed = sum(v for (c, _, s), v in self.violations.items() if c == slo_class and s == slo)
        return 1.0 - missed / eligible if eligible else None


_POD_GAUGES = {
    "sloscope_pod_requests_waiting": "waiting",
    "sloscope_pod_requests_running": "running",
    "sloscope_pod_kv_cache_utilization": "kv",
    "sloscope_pod_up": "up",
}


# counter sample -> (the Readout's counter, the labels of its key, summed over the others)
_COUNTERS = {
    "sloscope_requests_total": ("requests", ("slo_class", "routing")),
    "sloscope_slo_requests_total": ("eligible", ("slo_class", "routing", "slo")),
    "sloscope_slo_violations_total": ("violations", ("slo_class", "routing", "slo")),
    "sloscope_requests_failed_total": ("failed", ("slo_class", "routing", "reason")),
    "sloscope_pod_requests_total": ("per_pod", ("pod",)),
    "sloscope_predictions_total": ("predictions", ("signal", "source")),
    "sloscope_prediction_covered_total": ("covered", ("signal", "source")),
    "sloscope_mean_predictions_total": ("mean_predictions", ("signal", "source")),
    c.SPANS_DROPPED.exposed_name: ("spans_dropped", (c.REASON,)),
    c.OTLP_REQUESTS.exposed_name: ("otlp_requests", (c.RESULT,)),
    c.TRACES_JOINED.exposed_name: ("traces_joined", (c.OUTCOME,)),
}
_MEAN_SUMS = {
    c.MEAN_PREDICTION_UNDERESTIMATE.exposed_name: "mean_under",
    c.MEAN_PREDICTION_OVERESTIMATE.exposed_name: "mean_over",
}


def parse(text: str) -> Readout:
    out = Readout()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name in _COUNTERS:
                counter, keys = _COUNTERS[name]
                key = tuple(labels[k] for k in keys)
                getattr(out, counter)[key[0] if len(key) == 1 else key] += round(value)
            elif name in _POD_GAUGES:
                out.pods[labels["pod"]][_POD_GAUGES[name]] = value
            elif name == "sloscope_pod_headroom_seconds":
                out.headroom[(labels["pod"], labels["slo_class"], labels["signal"])] = value
            elif name == "sloscope_pool_pods_with_headroom":
                out.pods_with_headroom[labels["slo_class"]] = value
            elif name == "sloscope_predictor_quantile":
                out.quantile = value
            elif name == "sloscope_predictor_up":
                out.predictor_up[labels["server"]] = value
            elif name == "sloscope_predictor_objective" and value == 1:
                out.objective = labels["objective"]
            elif name in _MEAN_SUMS:
                getattr(out, _MEAN_SUMS[name])[(labels["signal"], labels["source"])] += value
            elif name.startswith("sloscope_epp_") and not name.endswith(("_created", "_bucket")):
                out.epp[name] += value
    return out


async def read(http: httpx.AsyncClient, url: str) -> Readout | None:
    """sloscope's figures now, or None when /metrics cannot be read."""
    try:
        response = await http.get(url, timeout=5.0)
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    return parse(response.text)
