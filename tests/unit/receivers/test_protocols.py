"""Model-server protocol mappings: exact pod states from the real vLLM page and from hand-written pages.

The hand-written pages follow what each server emits (HELP and TYPE lines, label sets, neighbouring
series whose names start like a wanted one), and go through the real exposition parser, so a test
fails if a protocol names a series the parser would not hand over.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sloscope.receivers.exposition import ExpositionParser
from sloscope.receivers.protocols import (
    BUILTIN,
    SGLANG,
    TGI,
    TRITON_TRTLLM,
    TRTLLM_SERVE,
    VLLM,
    LoraState,
    MetricSpec,
    PodCounters,
    PodState,
    Protocol,
    canonical,
    merge_ranks,
    with_overrides,
)

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EMPTY = PodState(None, None, None, None, frozenset())


def state(protocol: Protocol, page: str, model: str | None = None) -> PodState:
    return protocol.pod_state(ExpositionParser(protocol.families).parse(page), model)


# --- the real vLLM 0.33 page ----------------------------------------------------------------------


def test_vllm_fixture_page(shared: Path) -> None:
    # Read off the file: vllm:num_requests_waiting 3.0, vllm:num_requests_running 27.0,
    # vllm:kv_cache_usage_perc 0.5873, all engine="0"; no LoRA series (the run had LoRA off), and the
    # num_requests_waiting_by_reason neighbours (2.0 + 1.0) must not be added in.
    page = (shared / "fixtures/vllm/metrics-vllm-0.33.0.txt").read_text()
    # vllm:engine_sleep_state{sleep_state="awake"} 1.0: awake. vllm:prefix_cache_hits_total 136480.0 of
    # vllm:prefix_cache_queries_total 566788.0 tokens (the external_ neighbours are 0 and must not be read),
    # vllm:num_preemptions_total 14.0.
    counters = PodCounters(prefix_cache_hits=136480.0, prefix_cache_queries=566788.0, preemptions=14.0)
    whole = PodState(3.0, 27.0, 0.5873, None, frozenset({LLAMA}), sleeping=False, counters=counters)
    assert state(VLLM, page) == whole
    assert state(VLLM, page, model=LLAMA) == whole
    # Another model's filter empties the pod's gauges; the EPP, which filters nothing, still reads the page.
    assert state(VLLM, page, model="other") == PodState(
        None,
        None,
        None,
        None,
        frozenset({LLAMA}),
        routing=PodState(3.0, 27.0, 0.5873, None, frozenset({LLAMA})),
    )


# --- hand-written pages ----------------------------------------------------------------------------

VLLM_OLD_KV = f"""\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{LLAMA}"}} 8.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="{LLAMA}"}} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{engine="0",model_name="{LLAMA}"}} 0.125
"""


def test_vllm_old_kv_cache_name() -> None:
    assert state(VLLM, VLLM_OLD_KV) == PodState(0.0, 8.0, 0.125, None, frozenset({LLAMA}))


def test_vllm_prefers_the_current_kv_cache_name_when_both_are_present() -> None:
    page = VLLM_OLD_KV + f'vllm:kv_cache_usage_perc{{engine="0",model_name="{LLAMA}"}} 0.5\n'
    assert state(VLLM, page).kv_cache_utilization == 0.5


SGLANG_PAGE = f"""\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="{LLAMA}"}} 12.0
# HELP sglang:num_running_reqs_offline_batch The number of running low-priority offline batch requests.
# TYPE sglang:num_running_reqs_offline_batch gauge
sglang:num_running_reqs_offline_batch{{model_name="{LLAMA}"}} 5.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{{model_name="{LLAMA}"}} 53000.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="{LLAMA}"}} 0.375
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="{LLAMA}"}} 4.0
"""


def test_sglang_page() -> None:
    assert state(SGLANG, SGLANG_PAGE) == PodState(4.0, 12.0, 0.375, None, frozenset({LLAMA}))


TRITON_PAGE = """\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 5
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 6
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 2
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 300
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 700
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 1000
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.3
"""


def _sglang_series(name: str, value: float, *, dp: int, pp: int = 0, tp: int = 0, priority: str = "") -> str:
    """A scheduler series with the labels of sglang 0.5.23 (observability/metrics_collector.py:1383-1392)."""
    labels = (
        f'model_name="{LLAMA}",engine_type="unified",tp_rank="{tp}",pp_rank="{pp}",moe_ep_rank="0",'
        f'priority="{priority}",dp_rank="{dp}"'
    )
    return f"{name}{{{labels}}} {value}\n"


def test_sglang_reads_each_engine_once_and_the_priority_total_only() -> None:
    """Two data-parallel engines (dp_rank 0 and 1), each run as two pipeline stages whose schedulers both log the
    engine's queue (tp_rank 0 and 4: the first tensor rank of each stage); priority scheduling writes the total under
    priority="" and each priority's share under its value (metrics_collector.py:1417-1429). The pod runs 7 + 5
    requests and queues 3 + 1, not twice or four times that."""
    page = "# TYPE sglang:num_running_reqs gauge\n"
    for dp, running, by_priority in ((0, 7, {"0": 4, "10": 3}), (1, 5, {"0": 5, "10": 0})):
        for pp, tp in ((0, 0), (1, 4)):
            page += _sglang_series("sglang:num_running_reqs", running, dp=dp, pp=pp, tp=tp)
            for priority, count in by_priority.items():
                page += _sglang_series("sglang:num_running_reqs", count, dp=dp, pp=pp, tp=tp, priority=priority)
    page += "# TYPE sglang:num_queue_reqs gauge\n"
    for dp, queued in ((0, 3), (1, 1)):
        for pp, tp in ((0, 0), (1, 4)):
            page += _sglang_series("sglang:num_queue_reqs", queued, dp=dp, pp=pp, tp=tp)
            page += _sglang_series("sglang:num_queue_reqs", queued, dp=dp, pp=pp, tp=tp, priority="0")
    page += "# TYPE sglang:token_usage gauge\n"
    for dp, usage in ((0, 0.5), (1, 0.25)):
        for pp, tp in ((0, 0), (1, 4)):
            page += _sglang_series("sglang:token_usage", usage, dp=dp, pp=pp, tp=tp)
    whole = state(SGLANG, page)
    assert (whole.waiting, whole.running, whole.kv_cache_utilization) == (4.0, 12.0, 0.375)
    # the EPP reads the first series of each family, as it does on any page
    assert whole.routing is not None
    assert (whole.routing.waiting, whole.routing.running, whole.routing.kv_cache_utilization) == (3.0, 7.0, 0.5)


def test_sglang_counters_add_up_cache_sources_and_streaming_and_read_each_engine_once() -> None:
    """The tokenizer's counters (labels model_name, engine_type; metrics_collector.py:1855-1859,1934-1938 of 0.5.23):
    cached prompt tokens by the one cache_source each token came from, prompt tokens by is_streaming; retractions are
    the scheduler's, one copy per pipeline stage (:557-562)."""
    tokenizer = f'model_name="{LLAMA}",engine_type="unified"'
    page = "# TYPE sglang:cached_tokens_total counter\n"
    page += f'sglang:cached_tokens_total{{{tokenizer},cache_source="device"}} 300.0\n'
    page += f'sglang:cached_tokens_total{{{tokenizer},cache_source="host"}} 100.0\n'
    page += "# TYPE sglang:prompt_tokens_total counter\n"
    page += f'sglang:prompt_tokens_total{{{tokenizer},is_streaming="true"}} 1000.0\n'
    page += f'sglang:prompt_tokens_total{{{tokenizer},is_streaming="false"}} 600.0\n'
    page += "# TYPE sglang:num_retracted_requests_total counter\n"
    for dp, retracted in ((0, 5), (1, 2)):
        for pp, tp in ((0, 0), (1, 4)):
            page += _sglang_series("sglang:num_retracted_requests_total", retracted, dp=dp, pp=pp, tp=tp)
    assert state(SGLANG, page).counters == PodCounters(400.0, 1600.0, 7.0)
    assert state(SGLANG, page, model="other").counters == PodCounters()


def test_counters_of_data_parallel_ranks_add_up() -> None:
    """A multi-port pod's ranks each serve their own page; the pod's counters are their sums, a rank without one
    adds nothing."""
    page = "# TYPE vllm:num_preemptions_total counter\n"
    first = state(VLLM, page + f'vllm:num_preemptions_total{{engine="0",model_name="{LLAMA}"}} 3.0\n')
    second = state(VLLM, page + f'vllm:num_preemptions_total{{engine="0",model_name="{LLAMA}"}} 4.0\n')
    assert merge_ranks([(0, first), (1, second), (2, EMPTY)]).counters == PodCounters(preemptions=7.0)


def test_triton_page_selects_by_label_and_names_its_model_in_model() -> None:
    whole = PodState(2.0, 5.0, 0.3, None, frozenset({"tensorrt_llm"}))
    assert state(TRITON_TRTLLM, TRITON_PAGE) == whole
    assert state(TRITON_TRTLLM, TRITON_PAGE, model="tensorrt_llm") == whole
    assert state(TRITON_TRTLLM, TRITON_PAGE, model="other").waiting is None


TRTLLM_SERVE_PAGE = f"""\
# HELP trtllm_num_requests_waiting Number of requests waiting to be processed.
# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{{model_name="{LLAMA}"}} 7.0
# HELP trtllm_num_requests_running Number of requests currently running.
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{{model_name="{LLAMA}"}} 64.0
# HELP trtllm_kv_cache_utilization KV cache utilization.
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{{model_name="{LLAMA}"}} 0.9375
"""


def test_trtllm_serve_page_and_path() -> None:
    assert state(TRTLLM_SERVE, TRTLLM_SERVE_PAGE) == PodState(7.0, 64.0, 0.9375, None, frozenset({LLAMA}))
    assert TRTLLM_SERVE.metrics_path == "/prometheus/metrics"
    assert {p.metrics_path for p in (VLLM, SGLANG, TRITON_TRTLLM, TGI)} == {"/metrics"}


TGI_PAGE = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 4096
"""


def test_tgi_page_has_no_kv_signal() -> None:
    assert TGI.kv_cache == ()
    assert state(TGI, TGI_PAGE) == PodState(3.0, 8.0, None, None, frozenset())
    assert state(TGI, TGI_PAGE, model=LLAMA) == state(TGI, TGI_PAGE)  # TGI names no model: nothing to filter


TWO_ENGINES = f"""\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{LLAMA}"}} 10.0
vllm:num_requests_running{{engine="1",model_name="{LLAMA}"}} 20.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="{LLAMA}"}} 3.0
vllm:num_requests_waiting{{engine="1",model_name="{LLAMA}"}} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="{LLAMA}"}} 0.25
vllm:kv_cache_usage_perc{{engine="1",model_name="{LLAMA}"}} 0.75
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{{engine="0",max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""}} 1.7e+09
vllm:lora_requests_info{{engine="1",max_lora="2",running_lora_adapters="b",waiting_lora_adapters="c"}} 1.8e+09
"""


def test_data_parallel_engines_sum_counts_and_average_kv_cache() -> None:
    lora = LoraState(running=("b",), waiting=("c",), max_lora=2)
    # The EPP reads engine 0's series, the first on the page (spec.go:406-431 at llm-d-router ebab6879).
    assert state(VLLM, TWO_ENGINES) == PodState(
        waiting=7.0,
        running=30.0,
        kv_cache_utilization=0.5,
        lora=lora,
        models=frozenset({LLAMA}),
        routing=PodState(3.0, 10.0, 0.25, lora, frozenset({LLAMA})),
    )


TWO_MODELS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 10.0
vllm:num_requests_running{engine="0",model_name="qwen"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 5.0
vllm:num_requests_waiting{engine="0",model_name="qwen"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.5
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.125
"""


BOTH = frozenset({"llama", "qwen"})
AS_EPP = PodState(5.0, 10.0, 0.5, None, BOTH)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # the EPP filters no model: it reads the first series, llama's
        pytest.param("llama", PodState(5.0, 10.0, 0.5, None, BOTH), id="llama only"),
        pytest.param("qwen", PodState(2.0, 1.0, 0.125, None, BOTH, routing=AS_EPP), id="qwen only"),
        pytest.param(None, PodState(7.0, 11.0, 0.3125, None, BOTH, routing=AS_EPP), id="no model: all"),
    ],
)
def test_two_models_on_one_pod(model: str | None, expected: PodState) -> None:
    assert state(VLLM, TWO_MODELS, model) == expected


LORA = """\
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.732e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora, chat-lora",waiting_lora_adapters="x"} 1.734e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.733e+09
"""


def test_lora_newest_series_by_value_wins() -> None:
    assert state(VLLM, LORA).lora == LoraState(running=("sql-lora", "chat-lora"), waiting=("x",), max_lora=4)


def test_lora_is_read_without_the_model_filter() -> None:
    # vllm:lora_requests_info has the labels max_lora, waiting/running_lora_adapters only
    # (vllm/v1/metrics/loggers.py:1103-1112 of vLLM 0.33.0): a model filter must not drop it.
    assert state(VLLM, LORA, model=LLAMA).lora == state(VLLM, LORA).lora


def test_lora_with_empty_lists_and_unreadable_max_lora() -> None:
    page = 'vllm:lora_requests_info{max_lora="",running_lora_adapters="",waiting_lora_adapters=""} 1.0\n'
    assert state(VLLM, page).lora == LoraState(running=(), waiting=(), max_lora=None)


NOTHING = """\
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 10.0
# HELP vllm:num_requests_waiting_by_reason Number of waiting requests by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 2.0
"""


@pytest.mark.parametrize("protocol", [pytest.param(p, id=name) for name, p in BUILTIN.items()])
@pytest.mark.parametrize("page", [pytest.param(NOTHING, id="other families"), pytest.param("", id="empty page")])
def test_a_page_missing_every_signal(protocol: Protocol, page: str) -> None:
    assert state(protocol, page) == EMPTY


BROKEN = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} -1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} NaN
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 1.5
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="1",running_lora_adapters="a",waiting_lora_adapters=""} NaN
"""


def test_nan_and_negative_values_are_missing() -> None:
    assert state(VLLM, BROKEN) == PodState(None, None, None, None, frozenset({"m"}))


def test_a_broken_engine_leaves_the_others_counted() -> None:
    page = """\
vllm:num_requests_waiting{engine="0",model_name="m"} NaN
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} -0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
"""
    result = state(VLLM, page)
    assert (result.waiting, result.kv_cache_utilization) == (2.0, 0.25)


def test_families_cover_every_spec() -> None:
    assert VLLM.families == {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:lora_requests_info",
        "vllm:engine_sleep_state",
        "vllm:request_queue_time_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:num_preemptions_total",
    }
    assert TRITON_TRTLLM.families == {"nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics"}
    assert TGI.families == {"tgi_queue_size", "tgi_batch_current_size"}


# --- the name{label=value} syntax and per-pool overrides -------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("vllm:num_requests_waiting", MetricSpec("vllm:num_requests_waiting"), id="bare name"),
        pytest.param(
            "nv_trt_llm_request_metrics{request_type=waiting}",
            MetricSpec("nv_trt_llm_request_metrics", (("request_type", "waiting"),)),
            id="one label",
        ),
        pytest.param("m{c=d,a=b}", MetricSpec("m", (("a", "b"), ("c", "d"))), id="two labels, sorted"),
        pytest.param("  m { a = b , c = d }  ", MetricSpec("m", (("a", "b"), ("c", "d"))), id="blanks ignored"),
        pytest.param('m{request_type="waiting"}', MetricSpec("m", (("request_type", "waiting"),)), id="quoted value"),
        pytest.param("m{a=0.5}", MetricSpec("m", (("a", "0.5"),)), id="value with a dot"),
    ],
)
def test_metric_spec_parse(text: str, expected: MetricSpec) -> None:
    assert MetricSpec.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "empty metric spec", id="empty"),
        pytest.param("   ", "empty metric spec", id="blanks only"),
        pytest.param("m{}", "empty label block", id="empty braces"),
        pytest.param("m{a=b", "unmatched braces", id="no closing brace"),
        pytest.param("ma=b}", "unmatched braces", id="no opening brace"),
        pytest.param("m}a=b{", "unmatched braces", id="braces reversed"),
        pytest.param("m{a=b} x", "after the closing brace", id="text after the labels"),
        pytest.param("m{a=b}{c=d}", "after the closing brace", id="two label blocks"),
        pytest.param("{a=b}", "is not a metric name", id="no name"),
        pytest.param("9m", "is not a metric name", id="name starts with a digit"),
        pytest.param("my metric", "is not a metric name", id="blank inside the name"),
        pytest.param("m{a}", "is not name=value", id="pair without ="),
        pytest.param("m{a=b=c}", "is not name=value", id="pair with two ="),
        pytest.param("m{a=b,}", "is not name=value", id="trailing comma"),
        pytest.param("m{=b}", "is not a label name", id="empty label name"),
        pytest.param("m{a:x=b}", "is not a label name", id="colon in a label name"),
        pytest.param("m{a=}", "empty or badly quoted value", id="empty value"),
        pytest.param('m{a=""}', "empty or badly quoted value", id="empty quoted value"),
        pytest.param('m{a="b}', "empty or badly quoted value", id="unbalanced quote"),
        pytest.param("m{a=b,a=c}", "appears twice", id="duplicate label"),
    ],
)
def test_metric_spec_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MetricSpec.parse(text)


@pytest.mark.parametrize(
    "text", ["vllm:num_requests_waiting", "nv_trt_llm_request_metrics{request_type=waiting}", "m{a=b,c=d}"]
)
def test_metric_spec_round_trips_through_str(text: str) -> None:
    assert str(MetricSpec.parse(text)) == text


def test_override_replaces_one_signal() -> None:
    custom = with_overrides(VLLM, waiting="vllm:num_requests_waiting_by_reason{reason=capacity}")
    assert custom.waiting == MetricSpec("vllm:num_requests_waiting_by_reason", (("reason", "capacity"),))
    assert (custom.running, custom.kv_cache, custom.lora, custom.metrics_path) == (
        VLLM.running,
        VLLM.kv_cache,
        VLLM.lora,
        VLLM.metrics_path,
    )
    assert "vllm:num_requests_waiting_by_reason" in custom.families
    page = NOTHING + 'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 1.0\n'
    assert state(custom, page).waiting == 2.0
    assert VLLM.waiting == MetricSpec("vllm:num_requests_waiting")  # the built-in is untouched


def test_override_of_kv_cache_replaces_every_alternative() -> None:
    custom = with_overrides(TGI, kv_cache="tgi_kv{kind=fraction}")
    assert custom.kv_cache == (MetricSpec("tgi_kv", (("kind", "fraction"),)),)
    page = TGI_PAGE + 'tgi_kv{kind="used"} 900\ntgi_kv{kind="fraction"} 0.5\n'
    assert state(custom, page).kv_cache_utilization == 0.5


def test_override_refuses_a_bad_spec() -> None:
    with pytest.raises(ValueError, match="unmatched braces"):
        with_overrides(VLLM, running="vllm:num_requests_running{engine=0")


# --- the EPP's engines -------------------------------------------------------------------------------

# defaultEngineConfigs of llm-d-router ebab6879,
# pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go:195-252: name -> (queued, running, kv, lora).
EPP_DEFAULTS = {
    "vllm": (
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:lora_requests_info",
    ),
    "sglang": ("sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage", None),
    "trtllm-serve": ("trtllm_num_requests_waiting", "trtllm_num_requests_running", "trtllm_kv_cache_utilization", None),
    "triton-tensorrt-llm": (
        "nv_trt_llm_request_metrics{request_type=waiting}",
        "nv_trt_llm_request_metrics{request_type=scheduled}",
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}",
        None,
    ),
    "triton": ("nv_inference_pending_request_count", "nv_inference_exec_count", None, None),
}


@pytest.mark.parametrize("name", sorted(EPP_DEFAULTS))
def test_builtin_protocols_read_the_epps_default_series(name: str) -> None:
    protocol = BUILTIN[name]
    queued, running, kv, lora = (None if text is None else MetricSpec.parse(text) for text in EPP_DEFAULTS[name])
    assert (protocol.waiting, protocol.running, protocol.lora) == (queued, running, lora)
    # the EPP's one KV-cache series is sloscope's preferred alternative (vLLM also reads the pre-0.10 name)
    assert (protocol.kv_cache[0] if protocol.kv_cache else None) == kv


def test_engine_names_and_the_old_triton_name() -> None:
    # tgi is sloscope's own: the EPP has no TGI mapping
    assert set(BUILTIN) == {*EPP_DEFAULTS, "tgi"}
    assert canonical("triton-trtllm") == "triton-tensorrt-llm" == TRITON_TRTLLM.name
    assert canonical("vllm") == "vllm"


def test_the_routing_view_takes_the_newest_timestamp_then_the_first() -> None:
    # getLatestMetric keeps a sample only when its timestamp is greater (spec.go:416-424): engine 1's
    # later timestamp wins; without timestamps (counted as 0) the first sample in page order does.
    page = (
        f'vllm:num_requests_waiting{{engine="0",model_name="{LLAMA}"}} 3.0 1000\n'
        f'vllm:num_requests_waiting{{engine="1",model_name="{LLAMA}"}} 4.9 2000\n'
        f'vllm:num_requests_running{{engine="0",model_name="{LLAMA}"}} 1.0\n'
        f'vllm:num_requests_running{{engine="1",model_name="{LLAMA}"}} 2.0\n'
    )
    routing = state(VLLM, page).routing
    assert routing is not None
    assert (routing.waiting, routing.running) == (4.0, 1.0)  # an integer, as the EPP reads a queue size


SLEEPING = f"""\
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{{engine="0",model_name="{LLAMA}",sleep_state="awake"}} 0.0
vllm:engine_sleep_state{{engine="0",model_name="{LLAMA}",sleep_state="weights_offloaded"}} 1.0
vllm:engine_sleep_state{{engine="0",model_name="{LLAMA}",sleep_state="discard_all"}} 0.0
"""


def test_sleep_state() -> None:
    # vllm/v1/metrics/loggers.py:593-617,1335-1352 of vLLM 0.33.0: awake 0 while asleep, all engines at once.
    assert state(VLLM, SLEEPING).sleeping is True
    assert state(VLLM, SLEEPING.replace('"awake"} 0.0', '"awake"} 1.0')).sleeping is False
    assert state(SGLANG, SGLANG_PAGE).sleeping is None  # no sleep state published
