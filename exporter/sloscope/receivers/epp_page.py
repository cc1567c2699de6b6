"""One scrape of the EPP's ``/metrics`` as sloscope series: the right family of each twin, labels put right.

Two EPP generations are in the field, and sloscope reads both.

**llm-d-router** (llm-d/llm-d-router, read at ebab6879) writes most series twice from the same
``Record*`` call: an ``llm_d_epp_*`` family and a deprecated twin under the old prefix. Its
latency-predicting plugin (``predicted-latency-producer``, ``pkg/epp/framework/plugins/requestcontrol/
dataproducer/predictedlatency/metrics.go``) writes the predictions, the prediction durations and the SLO
violations as ``llm_d_epp_request_*`` with ``plugin_name``/``plugin_type`` labels, twinned by
``inference_objective_request_*`` without them; its own actual TTFT and TPOT exist only as
``inference_objective_request_{ttft,tpot}_seconds``, deprecated in favour of the EPP core's
``llm_d_epp_request_ttft_seconds{streaming}`` and ``llm_d_epp_request_streaming_tpot_seconds``
(``pkg/epp/metrics/llm_d_router_metrics.go:143,156``; measured by the request handler for every
request, TPOT from the reported completion tokens rather than from response chunks). The scheduler's
attempts are ``llm_d_epp_scheduler_attempts_total`` (twin ``inference_extension_scheduler_attempts_total``).

**The late-2025 gateway-api-inference-extension EPP** (4d37fbca) writes ``inference_objective_request_*``
only, without plugin labels, and ``inference_extension_scheduler_attempts_total{status}``.

Each republished family reads the first of its sources present on the page (:data:`_CHOICES`): the
``llm_d_epp_*`` family when the page has it, else its twin. The twins hold the same observations, so
reading one family per republished series never counts a request twice.

**Streaming.** llm-d-router's plugin has a ``streamingMode`` setting, off by default (``plugin.go:237,266``).
Off, it records its "TTFT" at the end of the response, so it is end-to-end latency, and records no TPOT
at all, neither actual nor predicted (``requestcontrol_hooks.go:151-185``). A plugin key (model, target
model, plugin) whose predicted TTFT has observations and whose predicted TPOT has none is therefore a
plugin running with streaming off; its predicted TTFT is republished as ``sloscope_epp_predicted_e2e_seconds``
and its ``ttft`` violations as type ``e2e``. The core's TTFT says per request whether the response was
streamed (``streaming="false"``: "this equals total request duration", ``llm_d_router_metrics.go:143``);
those series go to ``sloscope_epp_e2e_seconds``. The late-2025 EPP records TTFT only on a streamed chunk
(``slo_aware_router/requestcontrol_hooks.go:187-200`` @4d37fbca), so its pages are read as streaming.

**GIE v1.5.0** (df9f8909fe06, its last EPP) writes the late-2025 families only (no ``llm_d_epp_*``), but its
plugin is llm-d-router's ``predicted-latency-producer``, with the same ``streamingMode``, off by default
(``predictedlatency/plugin.go:129-136``): run against the real binary (tests/e2e), streaming off, it records a
"TTFT" equal to the request's duration and no TPOT. A page whose ``inference_extension_plugin_duration_seconds``
names that plugin type (the late-2025 plugin was ``predicted-latency-scorer``) is read for streaming mode as
llm-d-router's is. v1.5.0 emits no scheduling span, so a request's ``routing`` cannot come from its spans; its
page says it for every request instead (:func:`page_routing`). Such a page is v1.5.0's when it has that plugin
or, with the latency predictor off, scheduler attempts that name their pod (``pod_name``: the late-2025 EPP's
named none; llm-d-router's ``llm_d_epp_*`` twin names it ``endpoint_name``, which is read first).

**Predictions.** On llm-d-router the predicted TTFT and TPOT are the predictions made at routing time for
the chosen endpoint (Produce stores them, ``PreRequest`` and the first token read them back,
``requestcontrol_hooks.go:228-243,292-303``); the late-2025 EPP recorded a re-prediction made when the
first token arrived and an average of sampled TPOT predictions.

Two label defects, still present at ebab6879, are put right per series, so that a fixed EPP passes unchanged:

- The plugin never assigns the incoming (requested) model name (``predictedlatency/plugin.go:379`` declares
  it, nothing sets it), so its series carry ``model_name=""``. A series with an empty
  ``model_name`` and a non-empty ``target_model_name`` gets ``model`` = the target model: exact unless the
  pool rewrites model names, in which case ``model`` names the model served, not the one asked for.
- The prediction-duration histograms are recorded with the two model labels in the wrong order
  (``predictedlatency/training.go:254-255``): ``model_name`` holds the target model, ``target_model_name``
  the empty incoming one. A duration series with an empty ``target_model_name`` and a non-empty
  ``model_name`` has the two swapped back, then the empty model is filled as above.

A swap cannot be recognized once the EPP fills in the incoming model (both labels non-empty); such series
pass through as written. Extra labels (``fairness_id``, ``priority``, ``namespace``, ``port``) are not kept:
series that become one are added up, histograms only when their bucket boundaries agree.

**Flow control** (opt-in on both: llm-d-router's ``flowControl`` feature gate, ``cmd/epp/runner/runner.go:754,962``
at ebab6879; GIE v1.5.0's flow-control layer). llm-d-router writes ``llm_d_epp_flow_control_*``
(``metrics/llm_d_router_metrics.go:332-386``), GIE v1.5.0 ``inference_extension_flow_control_*``
(``pkg/epp/metrics/metrics.go:390-455``): the queue-duration histogram by ``outcome`` (and flow, priority,
model labels, added up here), the queue-size gauge (added up by ``priority``) and the pool saturation, by
``stage`` on llm-d-router (prefill, decode, effective = their max, which gates dispatch) and one value on GIE
v1.5.0 (the gating one, republished as stage ``effective``).

Histograms keep the EPP's own bucket boundaries. A series that is incomplete or inconsistent (no ``+Inf``
bucket, cumulative counts that decrease, a missing ``_sum`` or ``_count``, a ``_count`` other than the
``+Inf`` bucket, a non-finite or negative count) is dropped, never repaired; so is a counter series whose
value is negative or not finite. :func:`normalize` lists what it dropped in :attr:`EPPPage.dropped`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sloscope import conventions as c
from sloscope.receivers.exposition import Sample

__all__ = [
    "DEFAULT_LATENCY_SCORERS",
    "EPP_FAMILIES",
    "DroppedSeries",
    "EPPPage",
    "HistogramSeries",
    "normalize",
    "page_routing",
]

_Split = Literal["", "streaming_label", "streaming_mode"]


@dataclass(frozen=True)
class _Source:
    """One EPP family and how its series become sloscope series."""

    family: str  # a counter's without "_total", as OpenMetrics names the family
    plugin: bool = False  # carries plugin_name/plugin_type (llm-d-router's plugin families)
    swapped: bool = False  # written with its two model labels swapped (prediction durations)
    split: _Split = ""  # how series that are end-to-end latency are told apart (module docstring)


_LLMD = "llm_d_epp_request_"
_GIE = "inference_objective_request_"
_PREDICTED_TTFT = (
    _Source(f"{_LLMD}predicted_ttft_seconds", plugin=True, split="streaming_mode"),
    _Source(f"{_GIE}predicted_ttft_seconds", split="streaming_mode"),
)
_PREDICTED_TPOT = (_Source(f"{_LLMD}predicted_tpot_seconds", plugin=True), _Source(f"{_GIE}predicted_tpot_seconds"))
_PLUGIN_TTFT = _Source(f"{_GIE}ttft_seconds", split="streaming_mode")
_PLUGIN_TPOT = _Source(f"{_GIE}tpot_seconds")

_LLMD_FLOW = "llm_d_epp_flow_control_"
_GIE_FLOW = "inference_extension_flow_control_"


def _flow(name: str) -> tuple[_Source, ...]:
    """A flow-control family under llm-d-router's name, then GIE v1.5.0's."""
    return _Source(f"{_LLMD_FLOW}{name}"), _Source(f"{_GIE_FLOW}{name}")


_HISTOGRAM_CHOICES: Mapping[c.MetricDef, tuple[_Source, ...]] = {
    c.EPP_TTFT_SECONDS: (_Source(f"{_LLMD}ttft_seconds", split="streaming_label"), _PLUGIN_TTFT),
    c.EPP_TPOT_SECONDS: (_Source(f"{_LLMD}streaming_tpot_seconds"), _PLUGIN_TPOT),
    c.EPP_PREDICTED_TTFT_SECONDS: _PREDICTED_TTFT,
    c.EPP_PREDICTED_TPOT_SECONDS: _PREDICTED_TPOT,
    c.EPP_TTFT_PREDICTION_DURATION_SECONDS: (
        _Source(f"{_LLMD}ttft_prediction_duration_seconds", plugin=True, swapped=True),
        _Source(f"{_GIE}ttft_prediction_duration_seconds", swapped=True),
    ),
    c.EPP_TPOT_PREDICTION_DURATION_SECONDS: (
        _Source(f"{_LLMD}tpot_prediction_duration_seconds", plugin=True, swapped=True),
        _Source(f"{_GIE}tpot_prediction_duration_seconds", swapped=True),
    ),
    c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS: _flow("request_queue_duration_seconds"),
}
"""Each republished histogram and its sources, preferred first; the first present on the page is read."""

_VIOLATIONS = (
    _Source(f"{_LLMD}slo_violation", plugin=True, split="streaming_mode"),
    _Source(f"{_GIE}slo_violation", split="streaming_mode"),
)
_ATTEMPTS = (_Source("llm_d_epp_scheduler_attempts"), _Source("inference_extension_scheduler_attempts"))
_REQUESTS = (_Source("llm_d_epp_request"), _Source("inference_objective_request"))
"""Counted once a request is scheduled (llm-d-router ebab6879 pkg/epp/handlers/server.go:515, after
``director.HandleRequest`` returned without error): requests refused before that are not in it."""
_COUNTER_CHOICES: Mapping[c.MetricDef, tuple[_Source, ...]] = {
    c.EPP_SLO_VIOLATIONS: _VIOLATIONS,
    c.EPP_SCHEDULER_ATTEMPTS: _ATTEMPTS,
    c.EPP_REQUESTS: _REQUESTS,
}
_GAUGE_CHOICES: Mapping[c.MetricDef, tuple[_Source, ...]] = {
    c.EPP_FLOW_CONTROL_SATURATION: _flow("pool_saturation"),
    c.EPP_FLOW_CONTROL_QUEUED_REQUESTS: _flow("queue_size"),
}
_E2E_OF: Mapping[c.MetricDef, c.MetricDef] = {
    c.EPP_TTFT_SECONDS: c.EPP_E2E_SECONDS,
    c.EPP_PREDICTED_TTFT_SECONDS: c.EPP_PREDICTED_E2E_SECONDS,
}
"""Where a TTFT series goes when it is end-to-end latency."""

_HISTOGRAM_FAMILIES = frozenset(s.family for sources in _HISTOGRAM_CHOICES.values() for s in sources)
_COUNTER_FAMILIES = frozenset(s.family for sources in _COUNTER_CHOICES.values() for s in sources)
_GAUGE_FAMILIES = frozenset(s.family for sources in _GAUGE_CHOICES.values() for s in sources)
_PLUGIN_DURATION = "inference_extension_plugin_duration_seconds"
"""The EPP's per-plugin durations: read only for the plugin types it names (the streaming-mode marker below)."""
_MODE_PLUGIN_TYPE = "predicted-latency-producer"
"""The plugin that has ``streamingMode`` (GIE v1.5.0, llm-d-router); late-2025 had ``predicted-latency-scorer``."""

EPP_FAMILIES: frozenset[str] = _HISTOGRAM_FAMILIES | _COUNTER_FAMILIES | _GAUGE_FAMILIES | {_PLUGIN_DURATION}
DEFAULT_LATENCY_SCORERS = frozenset({"latency-scorer"})
"""``join.latency_scorer_types``' default: the scorer type of prediction-based routing."""
"""The families read from the EPP's page (the parser selects ``_bucket``, ``_sum``, ``_count``, ``_total``)."""

REPUBLISHED_HISTOGRAMS: tuple[c.MetricDef, ...] = (
    c.EPP_TTFT_SECONDS,
    c.EPP_E2E_SECONDS,
    c.EPP_PREDICTED_TTFT_SECONDS,
    c.EPP_PREDICTED_E2E_SECONDS,
    c.EPP_TPOT_SECONDS,
    c.EPP_PREDICTED_TPOT_SECONDS,
    c.EPP_TTFT_PREDICTION_DURATION_SECONDS,
    c.EPP_TPOT_PREDICTION_DURATION_SECONDS,
    c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS,
)
REPUBLISHED_COUNTERS: tuple[c.MetricDef, ...] = (c.EPP_SLO_VIOLATIONS, c.EPP_SCHEDULER_ATTEMPTS, c.EPP_REQUESTS)
REPUBLISHED_GAUGES: tuple[c.MetricDef, ...] = tuple(_GAUGE_CHOICES)

# The EPP's label names.
_MODEL_NAME = "model_name"
_TARGET_MODEL_NAME = "target_model_name"
_PLUGIN_NAME = "plugin_name"
_PLUGIN_TYPE = "plugin_type"
_EXTENSION_POINT = "extension_point"
_SCORER = "Scorer"
_STREAMING = "streaming"
_TYPE = "type"
_STATUS = "status"
_ENDPOINT_NAME = "endpoint_name"
_POD_NAME = "pod_name"
_OUTCOME = "outcome"
_STAGE = "stage"
_PRIORITY = "priority"
_LE = "le"

_Labels = tuple[tuple[str, str], ...]  # label pairs as written on the page, sorted
SeriesKey = tuple[str, ...]
"""The label values of one republished series, in its MetricDef's label order (``pool`` first)."""
_PluginKey = tuple[str, str, str, str]  # (model, target_model, plugin_name, plugin_type)


@dataclass(frozen=True)
class HistogramSeries:
    """One histogram series as the EPP wrote it: cumulative buckets by ascending ``le``, ``+Inf`` last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass(frozen=True)
class DroppedSeries:
    """A series left out of a page, and why. ``key`` holds the label values after normalization."""

    family: str  # the EPP's family name (a counter's with "_total")
    labels: _Labels  # as on the page, ``le`` excluded
    key: SeriesKey
    reason: str


@dataclass(frozen=True)
class EPPPage:
    """One scrape of one pool's EPP, normalized; never mutated after :func:`normalize` built it.

    ``histograms``, ``counters`` and ``gauges`` map every republished family name (``MetricDef.name``) to its series,
    keyed by their label values in the family's label order.
    """

    pool: str
    histograms: Mapping[str, Mapping[SeriesKey, HistogramSeries]]
    counters: Mapping[str, Mapping[SeriesKey, float]]
    dropped: tuple[DroppedSeries, ...] = ()
    models_filled: int = 0  # series whose empty model_name was filled from target_model_name
    labels_swapped: int = 0  # duration series whose two model labels were swapped back
    sources: tuple[str, ...] = ()  # the EPP families read, sorted
    streaming_off: frozenset[_PluginKey] = frozenset()  # plugin keys found running with streamingMode off
    routing: str | None = None  # GIE v1.5.0: the routing every request gets, from the scorers that ran
    streaming: bool | None = None  # the latency plugin's streaming mode (:func:`_plugin_streaming`); None: not shown
    gie_v15: bool = False  # the page is GIE v1.5.0's (module docstring): its EPP asks the predictor as that one does
    gauges: Mapping[str, Mapping[SeriesKey, float]] = field(default_factory=dict)  # by family, as the others

    @property
    def violations(self) -> Mapping[SeriesKey, float]:
        return self.counters[c.EPP_SLO_VIOLATIONS.name]


@dataclass
class _RawHistogram:
    buckets: list[tuple[str, float]] = field(default_factory=list)  # (le as written, count)
    sums: list[float] = field(default_factory=list)
    counts: list[float] = field(default_factory=list)


@dataclass
class _Page:
    """What :func:`normalize` accumulates before freezing it into an :class:`EPPPage`."""

    pool: str
    off: set[_PluginKey]
    histograms: dict[str, dict[SeriesKey, HistogramSeries]] = field(
        default_factory=lambda: {d.name: {} for d in REPUBLISHED_HISTOGRAMS}
    )
    counters: dict[str, dict[SeriesKey, float]] = field(
        default_factory=lambda: {d.name: {} for d in REPUBLISHED_COUNTERS}
    )
    gauges: dict[str, dict[SeriesKey, float]] = field(default_factory=lambda: {d.name: {} for d in REPUBLISHED_GAUGES})
    dropped: list[DroppedSeries] = field(default_factory=list)
    filled: int = 0
    swapped: int = 0


def normalize(
    samples: Iterable[Sample], pool: str, *, latency_scorers: frozenset[str] = DEFAULT_LATENCY_SCORERS
) -> EPPPage:
    """The EPP's samples as sloscope series of ``pool``: one family per twin, labels put right, broken series dropped.

    Pure: reads only its arguments. Samples of other families, OpenMetrics ``_created`` samples and
    timestamps are ignored. ``latency_scorers`` are the scorer types of prediction-based routing
    (``join.latency_scorer_types``), for :func:`page_routing`.
    """
    raw_histograms, raw_counters, raw_gauges, scorers = _group(samples)
    producer = _MODE_PLUGIN_TYPE in scorers.plugins
    # GIE v1.5.0: the producer plugin, or (without the latency predictor) attempts that name their pod
    gie_v15 = producer or any(
        family == _ATTEMPTS[1].family and any(k == _POD_NAME for k, _ in labels) for family, labels in raw_counters
    )
    present = {family for raw in (raw_histograms, raw_counters, raw_gauges) for family, _ in raw}
    llmd = any(family.startswith("llm_d_epp_") for family in present)
    choices = {**_HISTOGRAM_CHOICES, **_COUNTER_CHOICES, **_GAUGE_CHOICES}
    chosen = {d: _first_present(sources, present) for d, sources in choices.items()}
    off: set[_PluginKey] = set()
    predicted = chosen[c.EPP_PREDICTED_TTFT_SECONDS], chosen[c.EPP_PREDICTED_TPOT_SECONDS]
    if llmd or producer:  # the late-2025 EPP has no streamingMode: it records TTFT on a streamed chunk only
        off |= _streaming_off(raw_histograms, *predicted)
        if chosen[c.EPP_TTFT_SECONDS] == _PLUGIN_TTFT:  # the core TTFT, when present, says it per request
            off |= _streaming_off(raw_histograms, _PLUGIN_TTFT, _PLUGIN_TPOT)
    page = _Page(pool, off)

    for (family, labels), raw in raw_histograms.items():
        for definition, source in chosen.items():
            if source is not None and source.family == family:
                _add_histogram(page, definition, source, labels, raw)
    for (family, labels), values in raw_counters.items():
        for definition, source in chosen.items():
            if source is not None and source.family == family:
                _add_value(page, definition, source, labels, values, gauge=False)
    for (family, labels), values in raw_gauges.items():
        for definition, source in chosen.items():
            if source is not None and source.family == family:
                _add_value(page, definition, source, labels, values, gauge=True)

    read = sorted(s.family for s in chosen.values() if s is not None)
    return EPPPage(
        pool,
        page.histograms,
        page.counters,
        tuple(page.dropped),
        page.filled,
        page.swapped,
        tuple(read),
        frozenset(off),
        page_routing(scorers.scorers, latency_scorers) if gie_v15 and not llmd else None,
        _plugin_streaming(raw_histograms, *predicted, has_mode=llmd or producer),
        gie_v15 and not llmd,
        page.gauges,
    )


def page_routing(scorers: frozenset[str], latency_scorers: frozenset[str]) -> str | None:
    """How a GIE v1.5.0 EPP routes, from the plugin types its page shows at the ``Scorer`` extension point.

    That EPP puts no scheduling span and no routing header anywhere, so a request's ``routing`` cannot come from
    its spans; but it runs one scheduling profile for every request (the chart's ``default``), so the scorers its
    page has timed are those every request was scored by: a latency scorer among them is ``predicted``, other
    scorers only ``default``. None before any scorer ran.
    """
    if not scorers:
        return None
    return c.ROUTING_PREDICTED if scorers & latency_scorers else c.ROUTING_DEFAULT


def _first_present(sources: tuple[_Source, ...], present: set[str]) -> _Source | None:
    return next((s for s in sources if s.family in present), None)


@dataclass
class _Plugins:
    """The plugin types the page's plugin-duration family names: all of them, and those timed as scorers."""

    plugins: set[str] = field(default_factory=set)
    scorers: frozenset[str] = frozenset()


_Values = dict[tuple[str, _Labels], list[float]]  # a counter's or gauge's samples by (family, labels)


def _group(samples: Iterable[Sample]) -> tuple[dict[tuple[str, _Labels], _RawHistogram], _Values, _Values, _Plugins]:
    """The samples by series as written on the page: histograms by (family, labels without ``le``), counters, gauges;
    and the plugin types the page has timed (GIE v1.5.0's ``predicted-latency-producer`` has a ``streamingMode``)."""
    histograms: dict[tuple[str, _Labels], _RawHistogram] = {}
    counters: _Values = {}
    gauges: _Values = {}
    plugins = _Plugins()
    scorers: set[str] = set()
    for sample in samples:
        family, name = sample.family, sample.name
        if family == _PLUGIN_DURATION:
            kind = sample.labels.get(_PLUGIN_TYPE, "")
            plugins.plugins.add(kind)
            if sample.labels.get(_EXTENSION_POINT) == _SCORER:
                scorers.add(kind)
        elif family in _HISTOGRAM_FAMILIES:
            suffix = name[len(family) :]
            if suffix not in ("_bucket", "_sum", "_count"):
                continue  # OpenMetrics "_created", or a sample named like the family itself
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != _LE))
            raw = histograms.setdefault((family, labels), _RawHistogram())
            if suffix == "_bucket":
                raw.buckets.append((sample.labels.get(_LE, ""), sample.value))
            elif suffix == "_sum":
                raw.sums.append(sample.value)
            else:
                raw.counts.append(sample.value)
        elif family in _COUNTER_FAMILIES and name == f"{family}_total":
            counters.setdefault((family, tuple(sorted(sample.labels.items()))), []).append(sample.value)
        elif family in _GAUGE_FAMILIES and name == family:
            gauges.setdefault((family, tuple(sorted(sample.labels.items()))), []).append(sample.value)
    plugins.scorers = frozenset(scorers)
    return histograms, counters, gauges, plugins


def _streaming_off(
    raw: Mapping[tuple[str, _Labels], _RawHistogram], ttft: _Source | None, tpot: _Source | None
) -> set[_PluginKey]:
    """Plugin keys with TTFT observations and no TPOT observation: a plugin whose streamingMode is off.

    With streaming on, every request whose TTFT the plugin records had a later chunk, so its TPOT is
    recorded too (requestcontrol_hooks.go:151-185 @ebab6879); with streaming off, no TPOT ever is.
    """
    if ttft is None:
        return set()
    return _observed(raw, ttft) - _observed(raw, tpot)


def _plugin_streaming(
    raw: Mapping[tuple[str, _Labels], _RawHistogram],
    ttft: _Source | None,
    tpot: _Source | None,
    *,
    has_mode: bool,
) -> bool | None:
    """The streaming mode of the EPP's latency plugin, from its predicted TTFT and TPOT; None until it predicted.

    Off when a plugin key has predicted TTFTs and no predicted TPOT (:func:`_streaming_off`), on when every key
    with predicted TTFTs has predicted TPOTs too. An EPP without ``streamingMode`` (``has_mode`` false: the
    late-2025 one, which recorded its predictions on a streamed chunk) is streaming once it predicted.
    """
    if ttft is None:
        return None
    predicted = _observed(raw, ttft)
    if not predicted:
        return None
    return not has_mode or not (predicted - _observed(raw, tpot))


def _observed(raw: Mapping[tuple[str, _Labels], _RawHistogram], source: _Source | None) -> set[_PluginKey]:
    """The plugin keys of ``source``'s series that have at least one observation."""
    keys: set[_PluginKey] = set()
    for (family, labels), series in raw.items():
        if source is not None and family == source.family and any(count > 0 for count in series.counts):
            keys.add(_plugin_key(source, dict(labels))[0])
    return keys


def _plugin_key(source: _Source, labels: Mapping[str, str]) -> tuple[_PluginKey, bool, bool]:
    """((model, target_model, plugin_name, plugin_type), whether model was filled, whether swapped back)."""
    model = labels.get(_MODEL_NAME, "")
    target = labels.get(_TARGET_MODEL_NAME, "")
    swapped = source.swapped and not target and bool(model)
    if swapped:
        model, target = target, model
    filled = not model and bool(target)
    if filled:
        model = target
    plugin = (labels.get(_PLUGIN_NAME, ""), labels.get(_PLUGIN_TYPE, "")) if source.plugin else ("", "")
    return (model, target, *plugin), filled, swapped


def _attempt_pod(labels: Mapping[str, str]) -> str:
    """The pod of a scheduling attempt: ``endpoint_name`` of llm-d-router's family, ``pod_name`` of the
    ``inference_extension_`` one (GIE v1.5.0 writes only that one; the late-2025 EPP named no pod)."""
    return labels.get(_ENDPOINT_NAME) or labels.get(_POD_NAME, "")


_FLOW_KEY_LABELS: Mapping[c.MetricDef, tuple[str, str]] = {
    c.EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS: (_OUTCOME, ""),
    c.EPP_FLOW_CONTROL_QUEUED_REQUESTS: (_PRIORITY, ""),
    c.EPP_FLOW_CONTROL_SATURATION: (_STAGE, c.FLOW_STAGE_EFFECTIVE),  # GIE v1.5.0: one value, the gating one
}
"""The one EPP label a flow-control family keeps besides the pool, and its value when the page has none."""


def _place(
    definition: c.MetricDef, source: _Source, labels: Mapping[str, str], off: set[_PluginKey], pool: str
) -> tuple[c.MetricDef, SeriesKey, bool, bool]:
    """(the republished family, the series key, filled, swapped) of one EPP series."""
    flow_label = _FLOW_KEY_LABELS.get(definition)
    if flow_label is not None:
        label, default = flow_label
        return definition, (pool, labels.get(label, default)), False, False
    if definition is c.EPP_SCHEDULER_ATTEMPTS:
        return (
            definition,
            (pool, labels.get(_TARGET_MODEL_NAME, ""), _attempt_pod(labels), labels.get(_STATUS, "")),
            False,
            False,
        )
    key, filled, swapped = _plugin_key(source, labels)
    e2e = (source.split == "streaming_label" and labels.get(_STREAMING) == "false") or (
        source.split == "streaming_mode" and key in off
    )
    if definition is c.EPP_SLO_VIOLATIONS:
        kind = labels.get(_TYPE, "")
        if e2e and kind == c.SLO_TTFT:
            kind = c.EPP_TYPE_E2E
        return definition, (pool, *key, kind), filled, swapped
    if e2e:
        definition = _E2E_OF[definition]
    values = (pool, *key) if c.PLUGIN_NAME in definition.labels else (pool, *key[:2])
    return definition, values, filled, swapped


def _add_histogram(
    page: _Page,
    definition: c.MetricDef,
    source: _Source,
    labels: _Labels,
    raw: _RawHistogram,
) -> None:
    definition, key, filled, swapped = _place(definition, source, dict(labels), page.off, page.pool)
    series, reason = _histogram(raw)
    out = page.histograms[definition.name]
    if series is not None and key in out:
        series, reason = add_histograms(out[key], series)
    if series is None:
        page.dropped.append(DroppedSeries(source.family, labels, key, reason))
        return
    out[key] = series
    page.filled += filled
    page.swapped += swapped


def _add_value(
    page: _Page, definition: c.MetricDef, source: _Source, labels: _Labels, values: list[float], *, gauge: bool
) -> None:
    """One counter or gauge series; series that become one are added up (a gauge's: queue sizes of flows and
    models; a saturation has one series per stage)."""
    definition, key, filled, _ = _place(definition, source, dict(labels), page.off, page.pool)
    value = values[0]
    kind, written = ("gauge", source.family) if gauge else ("counter", f"{source.family}_total")
    if len(values) > 1:
        reason = "the same series twice on the page"
    elif not math.isfinite(value) or value < 0:
        reason = f"{kind} value {value!r} is negative or not finite"
    else:
        out = (page.gauges if gauge else page.counters)[definition.name]
        out[key] = out.get(key, 0.0) + value
        page.filled += filled
        return
    page.dropped.append(DroppedSeries(written, labels, key, reason))


def _histogram(raw: _RawHistogram) -> tuple[HistogramSeries | None, str]:
    """The series, or None and the reason it cannot be published."""
    bounds: dict[float, float] = {}
    for le_text, count in raw.buckets:
        try:
            le = float(le_text)
        except ValueError:
            return None, f"bucket boundary le={le_text!r} is not a number"
        if math.isnan(le):
            return None, "bucket boundary le=NaN"
        if le in bounds:
            return None, f"bucket le={le_text!r} twice"
        if not math.isfinite(count) or count < 0:
            return None, f"bucket count {count!r} is negative or not finite"
        bounds[le] = count
    if math.inf not in bounds:
        return None, "no +Inf bucket"
    if len(raw.sums) != 1 or len(raw.counts) != 1:
        return None, "not exactly one _sum and one _count"
    buckets = tuple(sorted(bounds.items()))
    if any(later < earlier for (_, earlier), (_, later) in itertools.pairwise(buckets)):
        return None, "cumulative bucket counts decrease"
    total, count = raw.sums[0], raw.counts[0]
    if not math.isfinite(total):
        return None, f"_sum {total!r} is not finite"
    if count != buckets[-1][1]:
        return None, f"_count {count!r} differs from the +Inf bucket {buckets[-1][1]!r}"
    return HistogramSeries(buckets, total, count), ""


def add_histograms(a: HistogramSeries, b: HistogramSeries) -> tuple[HistogramSeries | None, str]:
    if [le for le, _ in a.buckets] != [le for le, _ in b.buckets]:
        return None, "same labels as another series after normalization, with other bucket boundaries"
    buckets = tuple((le, x + y) for (le, x), (_, y) in zip(a.buckets, b.buckets, strict=True))
    return HistogramSeries(buckets, a.sum + b.sum, a.count + b.count), ""
