"""The simulated EPP's own ``/metrics`` page: what the router routed and observed, in its generation's families.

The router (:mod:`sloscope.demo.router`) tells this what happens: a request scheduled on a pod (and, for
P/D, its prefill pod), a bulk prediction call and how long it took, a request that ended on its pod with its
TTFT and TPOT and the router's predictions. :meth:`EppMetrics.page` renders the page of the EPP generation
being simulated, with the families, label sets and bucket boundaries that generation's code builds:

* ``llm-d`` (llm-d/llm-d-router at ebab6879; ``fixtures/llm-d-router/epp-metrics.prom`` shows each family
  with its ``# src:`` file:line): the core's ``llm_d_epp_request_total`` (and its deprecated twin
  ``inference_objective_request_total``, counted when a request is scheduled), ``llm_d_epp_request_ttft_seconds``
  (``streaming="true"``: the demo streams) and ``llm_d_epp_request_streaming_tpot_seconds`` for every request
  that reached a pod; the latency plugin's (``predicted-latency-producer``) predicted TTFT/TPOT, prediction
  durations and SLO violations as ``llm_d_epp_request_*`` with ``plugin_name``/``plugin_type``, each with its
  deprecated ``inference_objective_request_*`` twin, and the plugin's own actual TTFT/TPOT
  (``inference_objective_request_{ttft,tpot}_seconds``, no twin); ``llm_d_epp_scheduler_attempts_total`` per
  picked pod (``endpoint_name`` the pod's name, ``scheduling/scheduler.go:68``); the in-flight load producer's
  ``llm_d_epp_inflight_requests`` and ``llm_d_epp_inflight_tokens`` per ``endpoint_name="<pod>-rank-0"``
  (``inflightload/metrics.go:32-48``: up by one request and its prompt tokens for the primary target of each
  profile when scheduled, down when the request ends; created by the first request, kept at 0 after);
  ``llm_d_epp_ready_endpoints``.
* ``gie-2025`` (gateway-api-inference-extension 4d37fbca; ``fixtures/epp/slo-metrics-constructed-from-code.prom``):
  the ``inference_objective_request_*`` families only (``inference_objective_request_total`` per model and
  target model, counted when a request is scheduled) and ``inference_extension_scheduler_attempts_total{status}``.

Both keep the upstream label defects sloscope repairs: the plugin's series carry ``model_name=""`` (the
incoming model name is never assigned, ``predictedlatency/plugin.go:379``) and its prediction durations have
the two model labels swapped (``predictedlatency/training.go:254-255``). The plugin records only requests it
scheduled (the router's ``predicted`` profile, with predictions), at the end of the response
(``requestcontrol_hooks.go:159-185``): TTFT and predicted TTFT, a TTFT violation when the request carried a
TTFT SLO it missed; with at least two tokens the average TPOT, its prediction and a TPOT violation likewise.
No ``_created`` samples: the EPP is written in Go. Thread-safe (the page is read by the server task while
the router writes; both run in the event loop, the lock keeps a page whole).
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

__all__ = ["GENERATIONS", "EppMetrics", "endpoint_name"]

GENERATIONS = ("llm-d", "gie-2025")
PLUGIN = "predicted-latency-producer"  # the llm-d latency plugin's name and type (the fixture's)
PRODUCER = "inflight-load-producer"
NAMESPACE = "demo"
_FLOW = {"fairness_id": "default-flow", "priority": "0"}

# Bucket boundaries, as the fixture's pages list them (metrics/llm_d_router_metrics.go and
# predictedlatency/metrics.go at ebab6879; the same lists at gateway-api-inference-extension 4d37fbca).
GENERAL_LATENCY = (
    *(0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, 120),
    *(180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600),
)
TPOT = (
    *(0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1),
    *(1.5, 2, 3, 4.5, 6, 12, 18, 24, 30, 36, 48, 60, 90, 120, 180, 270, 360),
)
PREDICTION_LATENCY = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)
CORE_TTFT = GENERAL_LATENCY[:24]  # llm_d_router_metrics.go:143: its own buckets, up to 120 s
CORE_TPOT = (*TPOT[:18], 2)  # llm_d_router_metrics.go:156

_Labels = tuple[tuple[str, str], ...]


def endpoint_name(pod: str) -> str:
    """The EPP's endpoint ID of a single-rank pod (``datastore/datastore.go:521-526``)."""
    return f"{pod}-rank-0"


@dataclass
class _Histogram:
    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # le is inclusive
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        running, out = 0, list[tuple[str, float]]()
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else _go_float(bound), running))
        return out


_ALPHA = "[ALPHA] "
_DEPRECATED = "[ALPHA] [Deprecated: Use {}] "
_HELP_TTFT = "Inference model TTFT distribution in seconds for each model and target model."
_HELP_TPOT = "Inference model TPOT distribution in seconds for each model and target model."
_HELP_PREDICTED_TTFT = "Inference model Predicted TTFT distribution in seconds for each model and target model."
_HELP_PREDICTED_TPOT = "Inference model Predicted TPOT distribution in seconds for each model and target model."
_HELP_TTFT_DURATION = "Duration taken to generate TTFT predictions in seconds for each model and target model."
_HELP_TPOT_DURATION = "Duration taken to generate TPOT predictions in seconds for each model and target model."
_HELP_CORE_TTFT = (
    "[ALPHA] Time to first token in seconds, measured from request received to first response byte. For "
    "non-streaming requests, this equals total request duration."
)
_HELP_CORE_TPOT = (
    "[ALPHA] Average time per output token in seconds for streaming requests, computed as (e2e - TTFT) / "
    "(output_tokens - 1)."
)
_HELP_VIOLATIONS = "Counter of SLO violations for each model, target model, and violation type."

# The latency plugin's histograms: (name between the prefix and "_seconds", help, buckets, model labels swapped)
_PLUGIN_FAMILIES = (
    ("predicted_ttft", _HELP_PREDICTED_TTFT, GENERAL_LATENCY, False),
    ("predicted_tpot", _HELP_PREDICTED_TPOT, TPOT, False),
    ("ttft_prediction_duration", _HELP_TTFT_DURATION, PREDICTION_LATENCY, True),
    ("tpot_prediction_duration", _HELP_TPOT_DURATION, PREDICTION_LATENCY, True),
)


class EppMetrics:
    """The EPP's counts and histograms of one simulated pool, and its page (see the module docstring)."""

    def __init__(self, generation: str, pool: str, model: str, pods: Sequence[tuple[str, str]]) -> None:
        """``pods``: (name, host:port) of each pod in the pool (the port labels the scheduler attempts)."""
        if generation not in GENERATIONS:
            raise ValueError(f"generation must be one of {', '.join(GENERATIONS)}, not {generation!r}")
        self.generation = generation
        self._pool = pool
        self._model = model
        self._ports = {name: address.rpartition(":")[2] for name, address in pods}
        self._lock = threading.Lock()
        self._histograms: dict[tuple[str, _Labels], _Histogram] = {}
        self._help: dict[str, str] = {}
        self._counters: Counter[tuple[str, _Labels]] = Counter()
        self._inflight: dict[str, list[int]] = {}  # pod -> [requests, tokens], from its first request on
        self._held: dict[str, list[tuple[str, int]]] = {}  # request id -> (pod, tokens) it holds
        self.attempts = 0  # scheduling attempts, for checks
        self.violations = 0  # SLO violations the plugin counted (one series increment each), for checks

    # --- what the router tells it ---

    def inflight(self, pod: str) -> tuple[int, int]:
        """(requests, prompt tokens) the EPP has in flight on the pod now: what the llm-d plugin routes on."""
        with self._lock:
            requests, tokens = self._inflight.get(pod, (0, 0))
            return requests, tokens

    def scheduled(self, request_id: str, pod: str, prompt_tokens: int, *, primary: bool = True) -> None:
        """A scheduling profile picked ``pod`` for the request (``primary``: the decode/only profile's attempt)."""
        with self._lock:
            load = self._inflight.setdefault(pod, [0, 0])
            load[0] += 1
            load[1] += prompt_tokens
            self._held.setdefault(request_id, []).append((pod, prompt_tokens))
            if primary:
                self.attempts += 1
                if self.generation == "llm-d":
                    labels = {
                        "endpoint_name": pod,
                        "namespace": NAMESPACE,
                        "port": self._ports.get(pod, ""),
                        "status": "success",
                        "target_model_name": self._model,
                    }
                    self._count("llm_d_epp_scheduler_attempts", labels, _HELP_ATTEMPTS)
                else:
                    self._count("inference_extension_scheduler_attempts", {"status": "success"}, _HELP_ATTEMPTS)
                self._count_request()

    def predicted(self, seconds: float) -> None:
        """One bulk prediction call for a request the plugin scheduled, which took ``seconds``."""
        with self._lock:
            for name, _, _, swapped in _PLUGIN_FAMILIES[2:]:
                self._plugin_observe(name, seconds, swapped)

    def ended(  # what one response tells the EPP's handlers and its plugin
        self,
        request_id: str,
        *,
        ttft: float | None = None,
        tpot: float | None = None,
        predicted_ttft: float | None = None,
        predicted_tpot: float | None = None,
        slo_ttft: float | None = None,
        slo_tpot: float | None = None,
    ) -> None:
        """The request left its pods: its in-flight load is released; a completed one (``ttft`` set) is observed.

        Seconds throughout. ``predicted_*`` are the router's predictions for the pod it chose (None when the
        plugin did not schedule it); ``tpot`` is None below two tokens.
        """
        with self._lock:
            for pod, tokens in self._held.pop(request_id, []):
                load = self._inflight[pod]
                load[0] -= 1
                load[1] -= tokens
            if ttft is None:
                return
            if self.generation == "llm-d":
                core = {"model_name": self._model, "target_model_name": self._model, **_FLOW}
                self._observe(
                    "llm_d_epp_request_ttft_seconds", {**core, "streaming": "true"}, ttft, CORE_TTFT, _HELP_CORE_TTFT
                )
                if tpot is not None:
                    self._observe("llm_d_epp_request_streaming_tpot_seconds", core, tpot, CORE_TPOT, _HELP_CORE_TPOT)
            if predicted_ttft is None:
                return
            help_ttft = self._twin_help("llm_d_epp_request_ttft_seconds", _HELP_TTFT)
            self._observe(
                "inference_objective_request_ttft_seconds", self._plugin_labels(), ttft, GENERAL_LATENCY, help_ttft
            )
            self._plugin_observe("predicted_ttft", predicted_ttft)
            if slo_ttft is not None and ttft > slo_ttft:
                self._plugin_violation("ttft")
            if tpot is None or predicted_tpot is None:
                return
            help_tpot = self._twin_help("llm_d_epp_request_streaming_tpot_seconds", _HELP_TPOT)
            self._observe("inference_objective_request_tpot_seconds", self._plugin_labels(), tpot, TPOT, help_tpot)
            self._plugin_observe("predicted_tpot", predicted_tpot)
            if slo_tpot is not None and tpot > slo_tpot:
                self._plugin_violation("tpot")

    # --- the page ---

    def page(self) -> str:
        """The EPP's /metrics now, in the Prometheus text format 0.0.4."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return generate_latest(registry).decode()

    def families(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._families_unlocked()

    def _families_unlocked(self) -> Iterator[Metric]:
        histograms: dict[str, list[tuple[_Labels, _Histogram]]] = {}
        counters: dict[str, list[tuple[_Labels, int]]] = {}
        for (name, labels), histogram in self._histograms.items():
            histograms.setdefault(name, []).append((labels, histogram))
        for (name, labels), value in self._counters.items():
            counters.setdefault(name, []).append((labels, value))
        metrics: list[Metric] = []
        for name, histogram_series in histograms.items():
            family = HistogramMetricFamily(name, self._help[name], labels=_names(histogram_series))
            for labels, histogram in sorted(histogram_series, key=lambda s: s[0]):
                family.add_metric([v for _, v in labels], histogram.buckets(), histogram.total)
            metrics.append(family)
        for name, counter_series in counters.items():
            counter = CounterMetricFamily(name, self._help[name], labels=_names(counter_series))
            for labels, value in sorted(counter_series, key=lambda s: s[0]):
                counter.add_metric([v for _, v in labels], value)
            metrics.append(counter)
        yield from sorted(metrics, key=lambda m: m.name)
        if self.generation != "llm-d":
            return
        ready = GaugeMetricFamily(
            "llm_d_epp_ready_endpoints",
            "[ALPHA] The number of ready endpoints in the inference server pool.",
            labels=["name"],
        )
        ready.add_metric([self._pool], len(self._ports))
        yield ready
        for position, gauge_name, text in (
            (0, "llm_d_epp_inflight_requests", "Current number of in-flight requests per endpoint"),
            (
                1,
                "llm_d_epp_inflight_tokens",
                "Current number of in-flight tokens per endpoint (uncached prompt "
                "tokens, optionally plus estimated output)",
            ),
        ):
            gauge = GaugeMetricFamily(
                gauge_name,
                f"[ALPHA] {text}, as tracked by the in-flight load producer.",
                labels=["endpoint_name", "fairness_id", "namespace", "priority", "producer_name"],
            )
            for pod in sorted(self._inflight):
                values = [endpoint_name(pod), _FLOW["fairness_id"], NAMESPACE, _FLOW["priority"], PRODUCER]
                gauge.add_metric(values, self._inflight[pod][position])
            yield gauge

    # --- helpers (under the lock) ---

    def _count_request(self) -> None:
        """The request counter, once a request is scheduled (after ``director.HandleRequest``: llm-d-router ebab6879
        ``handlers/server.go:515``, gateway-api-inference-extension 4d37fbca ``handlers/server.go:240``); the llm-d
        EPP writes the core family and its deprecated twin, the late-2025 one the twin alone, without a priority."""
        models = {"model_name": self._model, "target_model_name": self._model}
        if self.generation == "llm-d":
            self._count("llm_d_epp_request", {**models, **_FLOW}, _ALPHA + "Total number of processed requests.")
            twin = _DEPRECATED.format("llm_d_epp_request_total") + _HELP_REQUESTS
            self._count("inference_objective_request", {**models, "priority": _FLOW["priority"]}, twin)
        else:
            self._count("inference_objective_request", models, _ALPHA + _HELP_REQUESTS)

    def _plugin_labels(self, *, swapped: bool = False, plugin: bool = False) -> dict[str, str]:
        models = ("", self._model)  # (model_name, target_model_name): the incoming model is never assigned
        model_name, target = models[::-1] if swapped else models
        labels = {"model_name": model_name, "target_model_name": target}
        if plugin:
            labels |= {"plugin_name": PLUGIN, "plugin_type": PLUGIN}
        return labels

    def _plugin_observe(self, name: str, value: float, swapped: bool = False) -> None:
        """The plugin's family ``name``: llm_d_epp_request_* and its twin (llm-d), inference_objective_* (both)."""
        help_text, bounds = next((h, b) for n, h, b, _ in _PLUGIN_FAMILIES if n == name)
        llmd = f"llm_d_epp_request_{name}_seconds"
        twin_help = self._twin_help(llmd, help_text)
        self._observe(
            f"inference_objective_request_{name}_seconds",
            self._plugin_labels(swapped=swapped),
            value,
            bounds,
            twin_help,
        )
        if self.generation == "llm-d":
            self._observe(llmd, self._plugin_labels(swapped=swapped, plugin=True), value, bounds, _ALPHA + help_text)

    def _plugin_violation(self, kind: str) -> None:
        self.violations += 1
        llmd = "llm_d_epp_request_slo_violation"
        twin_help = self._twin_help(f"{llmd}_total", _HELP_VIOLATIONS)
        self._count("inference_objective_request_slo_violation", {**self._plugin_labels(), "type": kind}, twin_help)
        if self.generation == "llm-d":
            self._count(llmd, {**self._plugin_labels(plugin=True), "type": kind}, _ALPHA + _HELP_VIOLATIONS)

    def _twin_help(self, llmd: str, text: str) -> str:
        """An inference_objective_* family's HELP: deprecated in favour of ``llmd`` on llm-d-router."""
        return (_DEPRECATED.format(llmd) if self.generation == "llm-d" else _ALPHA) + text

    def _observe(
        self, name: str, labels: dict[str, str], value: float, bounds: Sequence[float], help_text: str
    ) -> None:
        key = (name, tuple(sorted(labels.items())))
        self._histograms.setdefault(key, _Histogram(bounds)).observe(value)
        self._help.setdefault(name, help_text)

    def _count(self, name: str, labels: dict[str, str], help_text: str) -> None:
        self._counters[(name, tuple(sorted(labels.items())))] += 1
        self._help.setdefault(name, help_text)


_HELP_ATTEMPTS = "[ALPHA] Total number of scheduling attempts."
_HELP_REQUESTS = "Counter of inference objective requests broken out for each model and target model."


class _Collector:
    def __init__(self, metrics: EppMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.families()


def _names(series: Sequence[tuple[_Labels, object]]) -> list[str]:
    """The label names of a family's series (every series of a family has the same)."""
    return [name for name, _ in series[0][0]]


def _go_float(value: float) -> str:
    """A bucket boundary as Go's strconv.FormatFloat(v, 'g', -1, 64) writes it: 1 not 1.0."""
    return repr(float(value)).removesuffix(".0")
