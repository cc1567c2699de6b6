"""Model-server protocol mappings: which series of a scraped ``/metrics`` page give a pod's state.

The endpoint picker (EPP) routes on four signals per pod: queued requests, running requests, KV-cache
utilization and LoRA adapters. Each model server names them differently, so a :class:`Protocol` says
where each signal comes from, in the EPP's own flag syntax ``name{label=value}`` (its
``--total-queued-requests-metric`` and friends), so that a pool configured for the EPP can be
configured for sloscope with the same strings. :func:`with_overrides` replaces single signals per pool.

The built-in protocols carry the EPP's engine names and default series (llm-d-router ebab6879,
``pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go:195-252``), plus what the EPP does
not read: the label a server names its model in (``model_name``; Triton's ``model``; TGI none), vLLM's
sleep state and the engines' own request-latency histograms (:mod:`sloscope.receivers.engine_latency`).

:meth:`Protocol.pod_state` is pure: samples in (from ``ExpositionParser(protocol.families)``), a
:class:`PodState` out. A signal the page lacks is ``None``, never an exception: a model server that
renames a series must cost a gauge, not the scrape loop.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from sloscope import conventions as c
from sloscope.engines import ALIASES, TRITON_TENSORRT_LLM, MetricSpec
from sloscope.receivers.exposition import Sample

__all__ = [
    "ALIASES",
    "BUILTIN",
    "SGLANG",
    "TGI",
    "TRITON",
    "TRITON_TRTLLM",
    "TRTLLM_SERVE",
    "VLLM",
    "LoraState",
    "MetricSpec",
    "PodState",
    "Protocol",
    "canonical",
    "merge_ranks",
    "with_overrides",
]

MODEL_NAME = "model_name"  # the label vLLM, SGLang and trtllm-serve put the served model's name in


@dataclass(frozen=True)
class LoraState:
    """The adapters of the newest ``lora_requests_info`` series; ``max_lora`` None when unreadable."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    max_lora: int | None


@dataclass(frozen=True)
class PodCounters:
    """A pod's own cumulative counters as its server wrote them (summed over engines), each None when unpublished.

    Passed through, not differenced: they reset when the server restarts, and ``rate()`` reads a reset as
    Prometheus reads any scraped counter's. Prefix-cache hits and queries are counted in prompt tokens.
    """

    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    preemptions: float | None = None


@dataclass(frozen=True)
class PodState:
    """What one page says about a pod; each signal ``None`` when the page lacks it.

    The gauges describe the whole pod (summed over data-parallel engines). ``routing`` holds the values
    as the EPP reads them (the first matching series of each spec, no model filter) when they differ
    from the whole pod's, else None: features of what the EPP asked read ``state.routing or state``.
    ``sleeping`` is True when every engine of the page says it is asleep (vLLM's sleep mode), None when
    the server publishes no sleep state.
    """

    waiting: float | None
    running: float | None
    kv_cache_utilization: float | None  # 0..1
    lora: LoraState | None
    models: frozenset[str]  # distinct model-label values on the protocol's series, before any model filter
    sleeping: bool | None = None
    routing: PodState | None = None
    ranks: tuple[tuple[int, PodState], ...] = ()  # a multi-port data-parallel pod: each rank's page as the EPP reads it
    counters: PodCounters = PodCounters()  # the server's own cumulative counters, summed over engines

    def rank(self, rank: int | None) -> PodState:
        """What the EPP read for the endpoint of ``rank``: that rank's page (the first rank's when ``rank`` is unknown
        or not listed), or the pod's own state when it is one endpoint."""
        if not self.ranks:
            return self
        return dict(self.ranks).get(rank if rank is not None else -1, self.ranks[0][1])


@dataclass(frozen=True)
class Protocol:
    """Where a model server publishes each signal, and the path of its metrics page.

    ``kv_cache`` lists alternatives in order of preference; the first one present on the page is
    used. vLLM renamed ``vllm:gpu_cache_usage_perc`` to ``vllm:kv_cache_usage_perc`` around 0.10/0.11,
    and a pool may run both versions during an upgrade.

    ``model_label`` is the label the server names its model in; a pool's model filter applies only to
    series that carry it (None: the server names no model, nothing is filtered). ``sleep`` selects the
    series that reads 1 while an engine is awake and 0 while it sleeps. ``latency`` maps a latency
    signal (``queue``, ``ttft``, ``itl``, ``tpot``, ``e2e``) to the server's own histogram family.

    ``replicated_labels`` name the ranks whose series are copies of one engine's value (SGLang: every
    pipeline stage, and with ``--enable-metrics-for-all-schedulers`` every tensor rank, logs the same
    queue), so one engine's series differ only in them: they count once. ``breakdown_label`` names a label
    whose non-empty values break a total down (SGLang's ``priority``: the total under ``priority=""``, each
    priority's share under its own value); only the total is read.

    ``prefix_cache_hits``, ``prefix_cache_queries`` and ``preemptions`` select the server's own counters
    (:class:`PodCounters`), which sloscope passes through per pod for the dashboards; the EPP reads none.
    """

    name: str
    waiting: MetricSpec | None
    running: MetricSpec | None
    kv_cache: tuple[MetricSpec, ...] = ()
    lora: MetricSpec | None = None
    metrics_path: str = "/metrics"
    model_label: str | None = MODEL_NAME
    sleep: MetricSpec | None = None
    latency: tuple[tuple[str, str], ...] = ()
    replicated_labels: frozenset[str] = frozenset()
    breakdown_label: str | None = None
    prefix_cache_hits: MetricSpec | None = None
    prefix_cache_queries: MetricSpec | None = None
    preemptions: MetricSpec | None = None

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return tuple(
            s
            for s in (
                self.waiting,
                self.running,
                *self.kv_cache,
                self.lora,
                self.sleep,
                self.prefix_cache_hits,
                self.prefix_cache_queries,
                self.preemptions,
            )
            if s is not None
        )

    @property
    def families(self) -> frozenset[str]:
        """The names to give :class:`~sloscope.receivers.exposition.ExpositionParser`."""
        return frozenset(spec.name for spec in self.specs) | {family for _, family in self.latency}

    def _engines(self, samples: Sequence[Sample], spec: MetricSpec) -> list[Sample]:
        """One sample per engine of ``spec``'s series: a breakdown's parts left out, replicated ranks read once
        (the largest of the copies: they should agree, and a sum would count one engine's queue several times)."""
        breakdown, replicated = self.breakdown_label, self.replicated_labels
        engines: dict[tuple[tuple[str, str], ...], Sample] = {}
        for sample in samples:
            if not spec.matches(sample) or (breakdown is not None and sample.labels.get(breakdown, "")):
                continue
            if math.isnan(sample.value):
                continue
            key = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in replicated))
            kept = engines.get(key)
            if kept is None or sample.value > kept.value:
                engines[key] = sample
        return list(engines.values())

    def carries_model(self, sample: Sample, model: str | None) -> bool:
        """Whether the model filter keeps ``sample``: no filter, no model label on it, or the label says ``model``."""
        if model is None or self.model_label is None or self.model_label not in sample.labels:
            return True
        return sample.labels[self.model_label] == model

    def pod_state(self, samples: Iterable[Sample], model: str | None = None) -> PodState:
        """The pod's state from one page's samples; only ``model``'s series count when it is given.

        Data-parallel engines (vLLM's ``engine`` label) each publish their own series. Queue and batch
        sizes are per engine, so the pod's are their sums. KV-cache utilization is averaged: each
        engine has its own KV cache of the same size (same model, same flags), so the pod's used
        share is the mean of the engines' shares, whereas a sum could exceed 1. LoRA info is a
        snapshot stamped with its time, so the newest across engines wins; vLLM's
        ``vllm:lora_requests_info`` names no model, so it is read without the model filter.
        """
        names = {spec.name for spec in self.specs}
        page = [s for s in samples if s.name in names]
        label = self.model_label
        models = frozenset(s.labels[label] for s in page if label is not None and label in s.labels)
        seen = [s for s in page if self.carries_model(s, model)]

        def total(spec: MetricSpec | None) -> float | None:
            return _count(self._engines(seen, spec) if spec else None)

        whole = PodState(
            waiting=total(self.waiting),
            running=total(self.running),
            kv_cache_utilization=_kv_cache([self._engines(seen, spec) for spec in self.kv_cache]),
            lora=_lora(page, self.lora),
            models=models,
            sleeping=_sleeping(seen, self.sleep),
            counters=PodCounters(
                total(self.prefix_cache_hits), total(self.prefix_cache_queries), total(self.preemptions)
            ),
        )
        routing = replace(
            whole,
            waiting=_first_count(page, self.waiting),
            running=_first_count(page, self.running),
            kv_cache_utilization=_first_kv(page, self.kv_cache),
        )
        return whole if routing == whole else replace(whole, routing=routing)


def merge_ranks(pages: Sequence[tuple[int, PodState]]) -> PodState:
    """The whole pod from its ranks' pages (rank, state), in rank order: counts summed, KV-cache utilization averaged
    as over data-parallel engines, asleep when every rank is; each rank's own view kept in :attr:`PodState.ranks`."""
    states = [state for _, state in pages]
    kv = [s.kv_cache_utilization for s in states if s.kv_cache_utilization is not None]
    sleeping = [s.sleeping for s in states if s.sleeping is not None]
    return PodState(
        waiting=_sum(s.waiting for s in states),
        running=_sum(s.running for s in states),
        kv_cache_utilization=math.fsum(kv) / len(kv) if kv else None,
        lora=next((s.lora for s in states if s.lora is not None), None),
        models=frozenset().union(*(s.models for s in states)),
        sleeping=all(sleeping) if len(sleeping) == len(states) else None,
        ranks=tuple((rank, state.routing or state) for rank, state in pages),
        counters=PodCounters(
            *(_sum(getattr(s.counters, f.name) for s in states) for f in dataclasses.fields(PodCounters))
        ),
    )


def _sum(values: Iterable[float | None]) -> float | None:
    """The sum of the known values, None when none is known."""
    known = [v for v in values if v is not None]
    return math.fsum(known) if known else None


def _count(engines: Sequence[Sample] | None) -> float | None:
    """Sum over engines. A NaN or negative sample is a broken series and is left out, not zeroed."""
    if engines is None:
        return None
    values = [s.value for s in engines if s.value >= 0]  # NaN >= 0 is False
    return math.fsum(values) if values else None


def _kv_cache(alternatives: Sequence[Sequence[Sample]]) -> float | None:
    """Mean over engines of the first alternative with a usable sample; values outside 0..1 are unusable."""
    for engines in alternatives:
        values = [s.value for s in engines if 0 <= s.value <= 1]
        if values:
            return math.fsum(values) / len(values)
    return None


def _first(samples: Sequence[Sample], spec: MetricSpec | None) -> float | None:
    """The value of the one sample the EPP reads: the matching one with the newest timestamp, the first of equals.

    The EPP's ``Spec.getLatestMetric`` (spec.go:406-431 at llm-d-router ebab6879) keeps a sample only
    when its timestamp is greater than the kept one's, starting from -1; a sample without a timestamp
    counts as 0, so on a page without timestamps the first matching sample in page order wins.
    """
    if spec is None:
        return None
    chosen: Sample | None = None
    for sample in samples:
        if spec.matches(sample) and (chosen is None or (sample.timestamp or 0.0) > (chosen.timestamp or 0.0)):
            chosen = sample
    return None if chosen is None else chosen.value


def _first_count(samples: Sequence[Sample], spec: MetricSpec | None) -> float | None:
    """As the EPP reads a queue or batch size: an integer (``int(extractValue(metric))``, extractor.go:132,141)."""
    value = _first(samples, spec)
    return float(math.trunc(value)) if value is not None and math.isfinite(value) and value >= 0 else None


def _first_kv(samples: Sequence[Sample], specs: Sequence[MetricSpec]) -> float | None:
    """The first alternative present on the page, read as the EPP reads one; unusable outside 0..1."""
    for spec in specs:
        value = _first(samples, spec)
        if value is not None:
            return value if 0 <= value <= 1 else None
    return None


def _sleeping(samples: Sequence[Sample], spec: MetricSpec | None) -> bool | None:
    """Asleep when every engine's awake series reads 0 (vLLM sets all engines at once, loggers.py:1335-1352)."""
    if spec is None:
        return None
    values = [s.value for s in samples if spec.matches(s) and not math.isnan(s.value)]
    return all(v == 0 for v in values) if values else None


def _lora(samples: Sequence[Sample], spec: MetricSpec | None) -> LoraState | None:
    """The newest series (its value is a timestamp), as the EPP reads ``vllm:lora_requests_info``."""
    if spec is None:
        return None
    series = [s for s in samples if spec.matches(s) and not math.isnan(s.value)]
    if not series:
        return None
    newest = max(series, key=lambda s: s.value)  # first of equals: page order breaks ties
    labels = newest.labels
    return LoraState(
        running=_adapters(labels.get("running_lora_adapters", "")),
        waiting=_adapters(labels.get("waiting_lora_adapters", "")),
        max_lora=_int_or_none(labels.get("max_lora")),
    )


def _adapters(value: str) -> tuple[str, ...]:
    return tuple(name for name in (part.strip() for part in value.split(",")) if name)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def with_overrides(
    protocol: Protocol,
    *,
    waiting: str | None = None,
    running: str | None = None,
    kv_cache: str | None = None,
    lora: str | None = None,
) -> Protocol:
    """``protocol`` with the given signals read from user-given ``name{label=value}`` specs instead.

    ``None`` keeps the built-in source. An overridden KV-cache spec replaces every built-in
    alternative: a user naming a series means that series, not "that one or the defaults".
    Raises ``ValueError`` on a malformed spec.
    """
    return replace(
        protocol,
        waiting=protocol.waiting if waiting is None else MetricSpec.parse(waiting),
        running=protocol.running if running is None else MetricSpec.parse(running),
        kv_cache=protocol.kv_cache if kv_cache is None else (MetricSpec.parse(kv_cache),),
        lora=protocol.lora if lora is None else MetricSpec.parse(lora),
    )


_p = MetricSpec.parse

QUEUE, TTFT, ITL, TPOT, E2E = c.SIGNAL_QUEUE, c.SIGNAL_TTFT, c.SIGNAL_ITL, c.SIGNAL_TPOT, c.SIGNAL_E2E

VLLM = Protocol(  # vllm/v1/metrics/loggers.py of vLLM 0.33.0: 499-617 (labels, sleep state), 925-975 (histograms)
    name="vllm",
    waiting=_p("vllm:num_requests_waiting"),
    running=_p("vllm:num_requests_running"),
    kv_cache=(_p("vllm:kv_cache_usage_perc"), _p("vllm:gpu_cache_usage_perc")),
    lora=_p("vllm:lora_requests_info"),
    sleep=_p("vllm:engine_sleep_state{sleep_state=awake}"),
    prefix_cache_hits=_p("vllm:prefix_cache_hits_total"),  # in tokens, loggers.py of 0.33.0 (as on the 0.33 page)
    prefix_cache_queries=_p("vllm:prefix_cache_queries_total"),
    preemptions=_p("vllm:num_preemptions_total"),
    latency=(
        (QUEUE, "vllm:request_queue_time_seconds"),
        (TTFT, "vllm:time_to_first_token_seconds"),
        (ITL, "vllm:inter_token_latency_seconds"),
        (TPOT, "vllm:request_time_per_output_token_seconds"),
        (E2E, "vllm:e2e_request_latency_seconds"),
    ),
)
SGLANG = Protocol(  # sglang 0.5.23 srt/observability/metrics_collector.py: 365-405, 838, 1807-1822, 2040-2073
    name="sglang",
    # 0.5.23 metrics_collector.py:1360-1392 (each pipeline stage's and, with metrics for all schedulers, each
    # tensor rank's scheduler logs its own copy; dp_rank tells engines apart) and :1417-1429 (priority breakdown)
    replicated_labels=frozenset({"tp_rank", "pp_rank", "moe_ep_rank"}),
    breakdown_label="priority",
    waiting=_p("sglang:num_queue_reqs"),
    running=_p("sglang:num_running_reqs"),
    kv_cache=(_p("sglang:token_usage"),),
    # 0.5.23 metrics_collector.py:1934-1938,2114-2134 (cached prompt tokens by cache_source, summed: each token is
    # counted under one source), :1855-1859 (prompt tokens by is_streaming), :557-562 (retractions: preemptions)
    prefix_cache_hits=_p("sglang:cached_tokens_total"),
    prefix_cache_queries=_p("sglang:prompt_tokens_total"),
    preemptions=_p("sglang:num_retracted_requests_total"),
    latency=(
        (QUEUE, "sglang:queue_time_seconds"),
        (TTFT, "sglang:time_to_first_token_seconds"),
        (ITL, "sglang:inter_token_latency_seconds"),
        (TPOT, "sglang:request_time_per_output_token_seconds"),
        (E2E, "sglang:e2e_request_latency_seconds"),
    ),
)
TRITON_TRTLLM = Protocol(  # tensorrtllm_backend README.md:420-446 at 0b9d7d5: labels model, version
    name=TRITON_TENSORRT_LLM,
    waiting=_p("nv_trt_llm_request_metrics{request_type=waiting}"),
    running=_p("nv_trt_llm_request_metrics{request_type=scheduled}"),
    kv_cache=(_p("nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}"),),
    model_label="model",
)
TRITON = Protocol(  # Triton for non-LLM models, as the EPP's "triton" engine: its counters, no KV cache
    name="triton",
    waiting=_p("nv_inference_pending_request_count"),
    running=_p("nv_inference_exec_count"),
    model_label="model",
)
TRTLLM_SERVE = Protocol(  # TensorRT-LLM tensorrt_llm/metrics/collector.py at 050f80de (labels model_name, engine_type)
    name="trtllm-serve",
    waiting=_p("trtllm_num_requests_waiting"),
    running=_p("trtllm_num_requests_running"),
    kv_cache=(_p("trtllm_kv_cache_utilization"),),
    metrics_path="/prometheus/metrics",
    latency=(
        (QUEUE, "trtllm_request_queue_time_seconds"),
        (TTFT, "trtllm_time_to_first_token_seconds"),
        (TPOT, "trtllm_time_per_output_token_seconds"),
        (E2E, "trtllm_e2e_request_latency_seconds"),
    ),
)
TGI = Protocol(  # TGI publishes no KV-cache utilization and names no model (backends/v3/src at db931fc)
    name="tgi",
    waiting=_p("tgi_queue_size"),
    running=_p("tgi_batch_current_size"),
    model_label=None,
)

BUILTIN: Mapping[str, Protocol] = MappingProxyType(
    {p.name: p for p in (VLLM, SGLANG, TRITON_TRTLLM, TRITON, TRTLLM_SERVE, TGI)}
)
"""The built-in protocols by the EPP's engine names, as a pool's configuration and a pod's
``llm-d.ai/engine-type`` label name them."""


def canonical(name: str) -> str:
    """The built-in protocol name for ``name`` or one of its aliases."""
    return ALIASES.get(name, name)
