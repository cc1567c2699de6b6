"""A simulated pod's /metrics page, written as vLLM 0.33 writes its own.

sloscope scrapes real vLLM pages, so the demo's pods must publish what vLLM publishes: the same family
names, HELP texts, types, label names (``engine``, ``model_name``, ``finished_reason``) and bucket
boundaries. Everything here is copied from the vLLM 0.33 page in the shared fixtures, and
tests/unit/demo/test_demo_pod_metrics.py holds each published family to that page, so a mismatch fails a
test instead of silently teaching the demo a dialect no model server speaks.

What is recorded follows vLLM's v1 stat loggers:

- the three scheduler gauges are read from the pod at scrape time (a collector, not ``Gauge.set``), so
  a page always shows the pod's state at the moment it is served;
- ``prompt_tokens_total`` counts a request's prompt once, when its prefill yields its first token (a
  recompute after preemption is not counted again); ``generation_tokens_total`` counts every generated
  token, the first included; ``prefix_cache_queries_total`` counts the same prompt tokens and
  ``prefix_cache_hits_total`` stays 0: the simulated pods have no prefix cache;
- ``time_to_first_token_seconds`` is observed at the first token, ``inter_token_latency_seconds`` at
  every later token (the time since the request's previous token, a preemption's wait included);
- the per-request histograms are observed when a request finishes, with vLLM's intervals: queue =
  scheduled - arrived, prefill = first token - scheduled, decode = finished - first token, inference =
  finished - scheduled, time per output token = decode / (tokens - 1), or 0 for a one-token request;
- ``request_success_total`` counts finished requests as ``length`` (they end at their token budget) and
  requests dropped because their client gave up as ``abort``.

The page is the Prometheus text format 0.0.4 from ``generate_latest``: that is what vLLM serves, and
the OpenMetrics writer would rewrite the colons in vLLM's names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sloscope.demo.records import Completion, PodSnapshot

__all__ = ["FINISHED_REASONS", "PodMetrics"]

ENGINE = "0"  # one engine per pod: vLLM labels data-parallel engines "0", "1", ...
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
"""vLLM 0.33's ``finished_reason`` values, each created at zero as vLLM does. Simulated requests always
end by reaching their token budget, which vLLM reports as ``length``."""

_LABELS = ("engine", "model_name")

# Bucket boundaries exactly as on the vLLM 0.33 page (vllm/v1/metrics/loggers.py). The token-count
# buckets follow --max-model-len there (1-2-5 steps up to it); these are the ones for 8192.
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)  # fmt: skip
_TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
)  # fmt: skip
_TOKEN_COUNT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
_PREEMPTION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)


class _SchedulerGauges(Collector):
    """vLLM's scheduler gauges, read from the pod when the page is rendered."""

    def __init__(self, labels: tuple[str, str], state: Callable[[], PodSnapshot]) -> None:
        self._labels = list(labels)
        self._state = state

    def describe(self) -> Iterable[Metric]:
        return self._families(None)

    def collect(self) -> Iterable[Metric]:
        return self._families(self._state())

    def _families(self, snapshot: PodSnapshot | None) -> Iterator[Metric]:
        for name, documentation, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", "running"),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "waiting"),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv_cache_utilization"),
        ):
            family = GaugeMetricFamily(name, documentation, labels=list(_LABELS))
            if snapshot is not None:
                family.add_metric(self._labels, float(getattr(snapshot, value)))
            yield family


class PodMetrics:
    """One pod's vLLM-compatible series on a registry of its own; the pod calls the ``record_*`` methods.

    ``state`` gives the pod's current :class:`PodSnapshot`; it is called on every render. Not
    thread-safe beyond what prometheus_client guarantees: the demo calls everything from one event loop.
    """

    def __init__(self, model: str, state: Callable[[], PodSnapshot]) -> None:
        self.registry = CollectorRegistry()
        labels = (ENGINE, model)
        self.registry.register(_SchedulerGauges(labels, state))

        def counter(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, _LABELS, registry=self.registry)

        def histogram(name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, documentation, _LABELS, registry=self.registry, buckets=buckets)

        self._preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self._prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        cache_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self._generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ("engine", "finished_reason", "model_name"),
            registry=self.registry,
        )
        for reason in FINISHED_REASONS:  # every reason exists at zero, as on a vLLM page
            success.labels(engine=ENGINE, finished_reason=reason, model_name=model)
        self._success_length = success.labels(engine=ENGINE, finished_reason="length", model_name=model)
        self._success_abort = success.labels(engine=ENGINE, finished_reason="abort", model_name=model)

        prompt_hist = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKEN_COUNT_BUCKETS
        )
        generation_hist = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKEN_COUNT_BUCKETS
        )
        ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _TTFT_BUCKETS
        )
        itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _TOKEN_LATENCY_BUCKETS
        )
        tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _TOKEN_LATENCY_BUCKETS,
        )
        e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", _REQUEST_LATENCY_BUCKETS
        )
        queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        preemptions_hist = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            _PREEMPTION_BUCKETS,
        )

        # The label values never change, so the children are bound once.
        self._ttft = ttft.labels(*labels)
        self._itl = itl.labels(*labels)
        self._tpot = tpot.labels(*labels)
        self._e2e = e2e.labels(*labels)
        self._queue = queue.labels(*labels)
        self._inference = inference.labels(*labels)
        self._prefill = prefill.labels(*labels)
        self._decode = decode.labels(*labels)
        self._prompt_hist = prompt_hist.labels(*labels)
        self._generation_hist = generation_hist.labels(*labels)
        self._preemptions_hist = preemptions_hist.labels(*labels)
        self._preemptions_child = self._preemptions.labels(*labels)
        self._prompt_tokens_child = self._prompt_tokens.labels(*labels)
        self._cache_queries_child = cache_queries.labels(*labels)
        cache_hits.labels(*labels)  # at 0 from the start, as vLLM creates it
        self._generation_tokens_child = self._generation_tokens.labels(*labels)

    def record_first_token(self, ttft: float, prompt_tokens: int) -> None:
        """A request's prefill produced its first token ``ttft`` seconds after it arrived."""
        self._ttft.observe(ttft)
        self._prompt_tokens_child.inc(prompt_tokens)
        self._cache_queries_child.inc(prompt_tokens)
        self._generation_tokens_child.inc()

    def record_next_token(self, interval: float) -> None:
        """A request produced a later token, ``interval`` seconds after its previous one."""
        self._itl.observe(interval)
        self._generation_tokens_child.inc()

    def record_preemption(self) -> None:
        self._preemptions_child.inc()

    def record_aborted(self) -> None:
        """A request was dropped unfinished because its client gave up."""
        self._success_abort.inc()

    def record_finished(self, completion: Completion, preemptions: int) -> None:
        """A request generated its whole budget (vLLM's ``length``); ``preemptions`` is how often it was preempted."""
        tokens = completion.completion_tokens
        self._success_length.inc()
        self._e2e.observe(completion.e2e)
        self._queue.observe(completion.queue_time)
        self._prefill.observe(completion.prefill_time)
        self._decode.observe(completion.decode_time)
        self._inference.observe(completion.finished - completion.scheduled)
        self._tpot.observe(completion.decode_time / (tokens - 1) if tokens > 1 else 0.0)
        self._prompt_hist.observe(completion.prompt_tokens)
        self._generation_hist.observe(tokens)
        self._preemptions_hist.observe(preemptions)

    def text(self) -> str:
        """The page in the Prometheus text format 0.0.4."""
        return generate_latest(self.registry).decode()
