"""The Prometheus publisher on a fresh registry: exact samples from known evaluations."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Limits
from sloscope.loading import default_spec
from sloscope.publishers.in_memory import InMemoryPublisher
from sloscope.publishers.prometheus import buckets_with_targets
from sloscope.records import JoinedRequest
from sloscope.slo.evaluate import evaluate
from tests.support.stage import Stage, stage


def joined(**fields: object) -> JoinedRequest:
    """A healthy joined request (TTFT 0.3 s, e2e 0.8 s, 6 tokens) with ``fields`` set on it."""
    request = JoinedRequest(
        trace_id="ab" * 16, span_id="cd" * 8, outcome="joined", ttft_seconds=0.3, e2e_seconds=0.8, completion_tokens=6
    )
    for key, value in fields.items():
        setattr(request, key, value)
    return request


def publish(stage: Stage, **fields: object) -> None:
    """One request (an SLO of 250 ms TTFT, pool-a, pod-1 unless ``fields`` say otherwise) as a batch of one."""
    stage.publish(joined(**{"slo_ttft_ms": 250, "pool": "pool-a", "pod": "pod-1", **fields}))


def make(max_models: int = 50) -> tuple[CollectorRegistry, Stage]:
    limits = Limits(max_label_values={"model": max_models, "pool": 5, "slo_class": 5, "pod": 5})
    s = stage(default_spec(), limits, publishers=[InMemoryPublisher()])
    return s.registry, s


def test_a_violated_ttft_request() -> None:
    registry, publisher = make()
    publish(publisher, target_model="m")
    labels = {"model": "m", "pool": "pool-a", "slo_class": "interactive", "routing": "unknown"}
    assert registry.get_sample_value("sloscope_requests_total", labels) == 1
    assert registry.get_sample_value("sloscope_slo_requests_total", {**labels, "slo": "ttft"}) == 1
    assert registry.get_sample_value("sloscope_slo_violations_total", {**labels, "slo": "ttft"}) == 1
    assert registry.get_sample_value("sloscope_slo_requests_total", {**labels, "slo": "tpot"}) == 0  # not eligible
    assert registry.get_sample_value("sloscope_slo_violations_total", {**labels, "slo": "goodput"}) == 1
    assert (
        registry.get_sample_value(
            "sloscope_pod_slo_violations_total", {"pool": "pool-a", "pod": "pod-1", "slo": "ttft"}
        )
        == 1
    )
    hist = {"model": "m", "pool": "pool-a", "slo_class": "interactive"}
    assert registry.get_sample_value("sloscope_ttft_seconds_bucket", {**hist, "le": "0.25"}) == 0
    assert registry.get_sample_value("sloscope_ttft_seconds_bucket", {**hist, "le": "0.5"}) == 1
    assert registry.get_sample_value("sloscope_tpot_seconds_sum", hist) == 0.1


def test_label_values_beyond_the_cap_fold_into_other_and_are_counted() -> None:
    registry, publisher = make(max_models=2)
    for model in ("a", "b", "c", "d", "a"):
        publish(publisher, target_model=model)

    def requests(model: str) -> float | None:
        labels = {"model": model, "pool": "pool-a", "slo_class": "interactive", "routing": "unknown"}
        return registry.get_sample_value("sloscope_requests_total", labels)

    assert [requests(m) for m in ("a", "b", "c", "__other__")] == [2, 1, None, 2]
    assert registry.get_sample_value("sloscope_label_values_folded_total", {"label": "model"}) == 2


def test_the_spec_is_published_as_series() -> None:
    registry, _ = make()
    assert (
        registry.get_sample_value(
            "sloscope_slo_objective_ratio", {"model": "*", "slo_class": "interactive", "slo": "goodput"}
        )
        == 0.95
    )
    assert registry.get_sample_value("sloscope_slo_compliance_period_seconds", {"slo_class": "standard"}) == 2419200


def test_spec_targets_become_bucket_boundaries() -> None:
    assert buckets_with_targets((0.1, 1.0), [250.0, 1000.0]) == (0.1, 0.25, 1.0)


def test_later_publishers_get_the_same_capped_labels_without_a_second_fold() -> None:
    registry, stage = make(max_models=1)
    publish(stage, target_model="first")
    stage.publish(
        JoinedRequest(trace_id="ef" * 16, span_id="01" * 8, outcome="joined", target_model="second", pool="p")
    )
    (seen,) = stage.extra
    assert isinstance(seen, InMemoryPublisher)
    assert [(row.model, row.pool) for row in seen.rows()] == [("first", "pool-a"), ("__other__", "p")]
    assert (
        registry.get_sample_value(
            "sloscope_requests_total", {"model": "__other__", "pool": "p", "slo_class": "none", "routing": "unknown"}
        )
        == 1
    )
    assert registry.get_sample_value("sloscope_label_values_folded_total", {"label": "model"}) == 1


def test_the_pool_of_a_request_without_one_comes_from_its_pod() -> None:
    s = stage(default_spec(), pool_of_pod=lambda request: "pool-a" if request.pod == "vllm-0" else None)
    registry = s.registry
    for pod in ("vllm-0", "elsewhere"):
        s.publish(JoinedRequest(trace_id="ef" * 16, span_id="01" * 8, outcome="joined", target_model="m", pod=pod))
    assert registry.get_sample_value("sloscope_pod_requests_total", {"pool": "pool-a", "pod": "vllm-0"}) == 1
    assert registry.get_sample_value("sloscope_pod_requests_total", {"pool": "unknown", "pod": "elsewhere"}) == 1


def test_a_new_label_set_starts_every_sibling_at_zero() -> None:
    """A request that meets its SLO creates the violations of every SLO, eligible and every failure reason at 0,
    and its pod's violations too, so that the first miss is an increase from 0."""
    registry, publisher = make()
    publish(publisher, target_model="m", ttft_seconds=0.1)  # meets its 250 ms TTFT target
    labels = {"model": "m", "pool": "pool-a", "slo_class": "interactive", "routing": "unknown"}
    value = registry.get_sample_value
    assert value("sloscope_requests_total", labels) == 1
    slos = ("ttft", "tpot", "goodput")
    assert [value("sloscope_slo_requests_total", {**labels, "slo": s}) for s in slos] == [1, 0, 1]
    assert [value("sloscope_slo_violations_total", {**labels, "slo": s}) for s in slos] == [0] * 3
    reasons = ("error", "shed", "timeout", "aborted", "invalid")
    assert [value("sloscope_requests_failed_total", {**labels, "reason": r}) for r in reasons] == [0] * 5
    pod = {"pool": "pool-a", "pod": "pod-1"}
    assert value("sloscope_pod_requests_total", pod) == 1
    assert [value("sloscope_pod_slo_violations_total", {**pod, "slo": s}) for s in slos] == [0] * 3
    publish(publisher, target_model="m")  # 300 ms: the first miss adds to the series at 0
    assert value("sloscope_slo_violations_total", {**labels, "slo": "ttft"}) == 1
    assert value("sloscope_pod_slo_violations_total", {**pod, "slo": "ttft"}) == 1


def test_the_default_class_starts_an_slo_with_its_first_eligible_request() -> None:
    """The default class has no objectives (built-in spec: its requests carry no SLO), so no SLO series of it
    exist until one of its requests is eligible; then violated starts at 0 beside eligible."""
    registry, publisher = make()
    publish(publisher, target_model="m", slo_ttft_ms=None)  # no SLO header: class none
    labels = {"model": "m", "pool": "pool-a", "slo_class": "none", "routing": "unknown"}
    value = registry.get_sample_value
    assert value("sloscope_requests_total", labels) == 1
    assert value("sloscope_requests_failed_total", {**labels, "reason": "error"}) == 0
    assert value("sloscope_slo_requests_total", {**labels, "slo": "ttft"}) is None
    spec = default_spec().model_copy(update={"classes": []})  # every request is of the default class
    s = stage(spec)
    registry = s.registry
    request = JoinedRequest(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        outcome="joined",
        ttft_seconds=0.1,
        slo_ttft_ms=250,
        target_model="m",
        pool="pool-a",
    )
    s.publish(request)
    assert registry.get_sample_value("sloscope_slo_requests_total", {**labels, "slo": "ttft"}) == 1
    assert registry.get_sample_value("sloscope_slo_violations_total", {**labels, "slo": "ttft"}) == 0


def test_siblings_stay_within_the_label_caps() -> None:
    """Siblings are made only for admitted values: a folded model's requests start the __other__ label set once."""
    registry, publisher = make(max_models=1)
    for model in ("a", "b", "c"):
        publish(publisher, target_model=model)
    models = {
        dict(sample.labels)["model"]
        for family in registry.collect()
        if family.name == "sloscope_slo_violations"
        for sample in family.samples
    }
    assert models == {"a", "__other__"}


def test_invalid_values_and_folded_labels_exist_at_zero_from_start_up() -> None:
    registry, _ = make()
    for field in ("ttft_seconds", "e2e_seconds", "completion_tokens"):
        assert registry.get_sample_value("sloscope_invalid_values_total", {"field": field}) == 0
    for label in ("model", "pool", "slo_class", "pod"):
        assert registry.get_sample_value("sloscope_label_values_folded_total", {"label": label}) == 0


def test_the_invalid_fields_are_the_ones_evaluation_reports() -> None:
    """Every field the evaluator can name is in the vocabulary created at 0 (and no other)."""
    spec = default_spec()
    seen: set[str] = set()
    for fields in (
        {"ttft_seconds": None},
        {"ttft_seconds": -1.0},
        {"e2e_seconds": float("nan"), "slo_tpot_ms": 50},
        {"completion_tokens": 2.5, "slo_tpot_ms": 50},
        {"e2e_seconds": None, "completion_tokens": -1, "slo_tpot_ms": 50},
        {"server_ttft_seconds": float("inf"), "slo_tpot_ms": 50},
    ):
        seen.update(evaluate(joined(**fields), spec).invalid_fields)
    assert seen == set(c.INVALID_FIELDS)


def test_failed_requests_by_reason_start_at_zero_with_their_label_set() -> None:
    registry, publisher = make()
    publish(publisher, target_model="m")  # a healthy request creates the label set
    labels = {"model": "m", "pool": "pool-a", "slo_class": "interactive", "routing": "unknown"}
    failed = "sloscope_requests_failed_total"
    assert [registry.get_sample_value(failed, {**labels, "reason": r}) for r in ("error", "shed", "timeout")] == [0] * 3
    publish(publisher, target_model="m", failure_reason="shed", ttft_seconds=None, pod=None)
    assert registry.get_sample_value(failed, {**labels, "reason": "shed"}) == 1
    assert registry.get_sample_value(failed, {**labels, "reason": "aborted"}) == 0
    assert registry.get_sample_value("sloscope_requests_total", labels) == 2
    assert registry.get_sample_value("sloscope_slo_violations_total", {**labels, "slo": "ttft"}) == 2
    assert registry.get_sample_value("sloscope_slo_violations_total", {**labels, "slo": "goodput"}) == 2
    hist = {"model": "m", "pool": "pool-a", "slo_class": "interactive"}
    assert registry.get_sample_value("sloscope_ttft_seconds_count", hist) == 1  # a failure is no latency sample
    pods = {"pool": "pool-a", "pod": "pod-1"}
    assert registry.get_sample_value("sloscope_pod_requests_total", pods) == 1  # the shed one reached no pod
    assert registry.get_sample_value("sloscope_pod_requests_total", {**pods, "pod": "unknown"}) is None


def test_a_request_whose_spans_name_no_model_takes_its_pools() -> None:
    publisher = stage(default_spec(), model_of_pool={"pool-a": "Qwen/Qwen3-8B"})
    registry = publisher.registry
    publish(publisher)  # vLLM 0.33 sets no gen_ai.response.model
    publish(publisher, pool="pool-b")
    base = {"slo_class": "interactive", "routing": "unknown"}
    assert (
        registry.get_sample_value("sloscope_requests_total", {**base, "model": "Qwen/Qwen3-8B", "pool": "pool-a"}) == 1
    )
    assert registry.get_sample_value("sloscope_requests_total", {**base, "model": "unknown", "pool": "pool-b"}) == 1


def test_e2e_latency_and_token_counts_are_observed_when_valid() -> None:
    registry, publisher = make()
    publish(publisher, target_model="m", prompt_tokens=600)
    publish(publisher, target_model="m", prompt_tokens=-1, completion_tokens=None, e2e_seconds=float("nan"))
    hist = {"model": "m", "pool": "pool-a", "slo_class": "interactive"}
    assert registry.get_sample_value("sloscope_e2e_seconds_count", hist) == 1
    assert registry.get_sample_value("sloscope_e2e_seconds_sum", hist) == 0.8
    assert registry.get_sample_value("sloscope_e2e_seconds_bucket", {**hist, "le": "1.0"}) == 1
    assert registry.get_sample_value("sloscope_prompt_tokens_count", hist) == 1
    assert registry.get_sample_value("sloscope_prompt_tokens_sum", hist) == 600
    assert registry.get_sample_value("sloscope_prompt_tokens_bucket", {**hist, "le": "500.0"}) == 0
    assert registry.get_sample_value("sloscope_prompt_tokens_bucket", {**hist, "le": "1000.0"}) == 1
    assert registry.get_sample_value("sloscope_completion_tokens_sum", hist) == 6
    assert registry.get_sample_value("sloscope_completion_tokens_bucket", {**hist, "le": "5.0"}) == 0
    assert registry.get_sample_value("sloscope_completion_tokens_bucket", {**hist, "le": "10.0"}) == 1
