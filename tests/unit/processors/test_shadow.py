"""The per-request side of predicted-versus-actual: what is compared, queued or skipped, and the EPP's features."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from sloscope.config import Headroom, Predictions
from sloscope.predictor.features import Features
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.prediction_series import PredictionSeries
from sloscope.processors.predictions import PredictionTracker
from sloscope.processors.running_slos import RunningSLOs
from sloscope.processors.shadow import TokenBucket, features_of
from sloscope.receivers.discovery import Target
from sloscope.receivers.exposition import ExpositionParser
from sloscope.receivers.protocols import VLLM, PodState
from sloscope.records import JoinedRequest
from tests.support.records import rows_of
from tests.support.stage import publishing_to

POD = Target(pool="pool-a", pod="vllm-0", address="10.0.0.1:8000")
STATE = PodState(waiting=3.0, running=27.0, kv_cache_utilization=0.5873, lora=None, models=frozenset())


def test_features_are_what_the_epp_sends() -> None:
    settings = Predictions()
    assert features_of(STATE, 400, settings) == Features(
        kv_cache_percentage=0.5873,
        input_token_length=300,  # 400 tokens x 0.75 words per token
        num_request_waiting=3,
        num_request_running=27,
        num_tokens_generated=1,
        prefix_cache_score=0.0,
    )
    assert features_of(STATE, 400, settings, prefix_cache_score=0.8).prefix_cache_score == 0.8  # type: ignore[union-attr]


def test_a_data_parallel_pod_is_asked_about_with_the_engine_the_epp_reads() -> None:
    """The whole pod's gauges sum both engines (6 waiting, 24 running); the EPP reads engine 0's series."""
    page = (Path(__file__).parents[2] / "data" / "engines" / "vllm-0.33-data-parallel.prom").read_text()
    state = VLLM.pod_state(ExpositionParser(VLLM.families).parse(page))
    assert (state.waiting, state.running) == (6.0, 24.0)
    features = features_of(state, 400, Predictions())
    assert features is not None
    assert (features.num_request_waiting, features.num_request_running, features.kv_cache_percentage) == (1, 10, 0.25)


def test_features_without_kv_cache_send_zero_and_without_queue_none() -> None:
    tgi = PodState(waiting=2.0, running=5.0, kv_cache_utilization=None, lora=None, models=frozenset())
    assert features_of(tgi, 100, Predictions()).kv_cache_percentage == 0.0  # type: ignore[union-attr]
    blind = PodState(waiting=None, running=5.0, kv_cache_utilization=0.1, lora=None, models=frozenset())
    assert features_of(blind, 100, Predictions()) is None


def test_token_bucket_caps_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=10.0, burst=10.0, clock=lambda: now[0])
    assert bucket.take(25) == 10  # the burst
    assert bucket.take(5) == 0
    now[0] = 0.5
    assert bucket.take(25) == 5  # half a second refills 5
    now[0] = 100.0
    assert bucket.take(25) == 10  # never more than the burst


class Harness:
    def __init__(self, *, streaming: bool = True, **settings: object) -> None:
        self.tables: list[pa.RecordBatch] = []
        self.registry = CollectorRegistry()
        self.history = PodHistory(8, 30.0, 60.0)
        self.history.track(POD)
        self.history.record(POD.key, 100.0, STATE)
        self.series = PredictionSeries(self.registry, ["pool-a"])
        self.tracker = PredictionTracker(
            settings=Predictions(**settings),  # type: ignore[arg-type]
            headroom=Headroom(),
            history=self.history,
            running=RunningSLOs(),
            series=self.series,
            predicted_pools={"pool-a"},
            rng=random.Random(7),
            sink=self.tables.append,
            streaming_of=lambda pool: streaming,
        )
        self._publish = publishing_to(self.tracker)

    @property
    def records(self) -> list[SimpleNamespace]:
        """The records so far, a row each (its columns as attributes)."""
        return rows_of(self.tables)

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def publish(self, **fields: object) -> JoinedRequest:
        values: dict[str, object] = {
            "trace_id": "ab" * 16,
            "span_id": "cd" * 8,
            "outcome": "joined",
            "target_model": "llama",
            "pod": "vllm-0",
            "ttft_seconds": 0.15,
            "server_ttft_seconds": 0.15,
            "e2e_seconds": 0.35,
            "completion_tokens": 11,
            "prompt_tokens": 400,
            "start_ns": 101_000_000_000,
            "end_ns": 102_000_000_000,
            "arrival_ns": 101_000_000_000,
        }
        request = JoinedRequest(**{**values, **fields})  # type: ignore[arg-type]
        self._publish(request)
        return request


def test_a_span_prediction_is_compared_at_once_and_never_queued() -> None:
    h = Harness()
    h.publish(predicted_ttft_ms=200.0, predicted_tpot_ms=15.0, slo_ttft_ms=250.0)
    ttft = {"model": "llama", "pool": "pool-a", "signal": "ttft", "source": "span"}
    tpot = {**ttft, "signal": "tpot"}
    assert h.value("sloscope_predictions_total", **ttft) == 1
    assert h.value("sloscope_prediction_covered_total", **ttft) == 1  # 150 <= 200 ms
    assert h.value("sloscope_predictions_total", **tpot) == 1
    assert h.value("sloscope_prediction_covered_total", **tpot) == 0  # (350 - 150) / 10 = 20 ms > 15 ms
    assert h.value("sloscope_prediction_pinball_loss_seconds_total", **tpot) == pytest.approx(0.9 * 0.005)
    routed = {"model": "llama", "pool": "pool-a", "signal": "ttft"}
    assert h.value("sloscope_headroom_seconds_bucket", le="0.05", **routed) == 1  # 250 - 200 ms = 50 ms
    assert h.value("sloscope_headroom_seconds_bucket", le="0.025", **routed) == 0
    assert h.tracker.waiting() == 0


def test_with_streaming_off_the_predicted_ttft_is_compared_with_the_end_to_end_latency_and_tpot_not_at_all() -> None:
    """The EPP's plugin with streamingMode off (the upstream default) trains and predicts "TTFT" as the request's
    duration from its own receipt of it (llm-d-router predictedlatency/requestcontrol_hooks.go:159-168), and never
    TPOT. Arrived at 100.9 s (the gateway span), ended at 102 s: 1.1 s end to end, against a 0.9 s prediction."""
    h = Harness(streaming=False)
    h.publish(predicted_ttft_ms=900.0, predicted_tpot_ms=15.0, slo_ttft_ms=1000.0, arrival_ns=100_900_000_000)
    e2e = {"model": "llama", "pool": "pool-a", "signal": "e2e", "source": "span"}
    assert h.value("sloscope_predictions_total", **e2e) == 1
    assert h.value("sloscope_prediction_covered_total", **e2e) == 0  # 1.1 s > 0.9 s
    assert h.value("sloscope_prediction_pinball_loss_seconds_total", **e2e) == pytest.approx(0.9 * 0.2)
    for signal in ("ttft", "tpot"):  # neither is compared, nor started at 0
        assert h.registry.get_sample_value("sloscope_predictions_total", {**e2e, "signal": signal}) is None
    routed = {"model": "llama", "pool": "pool-a", "signal": "e2e"}  # as the EPP: 1.0 s TTFT SLO - 0.9 s predicted
    assert h.value("sloscope_headroom_seconds_bucket", le="0.1", **routed) == 1
    assert h.value("sloscope_headroom_seconds_bucket", le="0.05", **routed) == 0
    assert h.registry.get_sample_value("sloscope_headroom_seconds_count", {**routed, "signal": "tpot"}) is None
    (record,) = h.records
    assert (record.predicted_ttft_seconds, record.predicted_tpot_seconds, record.tpot_headroom_seconds) == (None,) * 3
    assert record.ttft_headroom_seconds is None
    assert record.predicted_e2e_seconds == 0.9
    assert record.e2e_headroom_seconds == pytest.approx(0.1)


def test_with_streaming_off_a_shadow_prediction_is_read_as_end_to_end_too() -> None:
    h = Harness(streaming=False)
    h.publish(arrival_ns=100_500_000_000)  # 1.5 s end to end
    (pending,) = h.tracker.take(10)
    h.tracker.record(pending, source="shadow", predicted_ttft=2.0, predicted_tpot=0.01, quantile=0.9, objective="mean")
    e2e = {"model": "llama", "pool": "pool-a", "signal": "e2e", "source": "shadow"}
    assert h.value("sloscope_mean_predictions_total", **e2e) == 1
    assert h.value("sloscope_mean_prediction_overestimate_seconds_total", **e2e) == 0.5
    assert h.registry.get_sample_value("sloscope_mean_predictions_total", {**e2e, "signal": "tpot"}) is None
    assert h.records[-1].predicted_e2e_seconds == 2.0


def test_requests_without_predictions_are_queued_for_shadowing() -> None:
    h = Harness()
    request = h.publish()
    (pending,) = h.tracker.take(10)
    assert pending.request is request
    assert pending.key == POD.key
    assert pending.arrival == 101.0
    assert pending.labels == ("llama", "pool-a")


def test_sampling_queue_cap_and_pools_without_predictor_are_counted() -> None:
    h = Harness(share=0.5, max_pending=3)
    for _ in range(40):
        h.publish()
    sampled_out = h.value("sloscope_shadow_skipped_total", pool="pool-a", reason="sampled_out")
    queue_full = h.value("sloscope_shadow_skipped_total", pool="pool-a", reason="queue_full")
    assert h.tracker.waiting() == 3
    assert sampled_out + queue_full + 3 == 40
    assert 10 <= sampled_out <= 30  # a share of 0.5, seeded
    h.publish(pod="vllm-9", pool="pool-b")  # a pod sloscope does not know, in a pool without a predictor
    assert h.value("sloscope_shadow_skipped_total", pool="pool-b", reason="no_predictor") == 1


def test_the_tightest_running_tpot_slo_on_the_pod_is_noted_for_later_requests() -> None:
    h = Harness()
    h.publish(slo_tpot_ms=30.0)  # ran 101..102 s on vllm-0
    h.tracker.take(10)
    h.publish(slo_tpot_ms=80.0, arrival_ns=101_500_000_000, start_ns=101_500_000_000)
    (second,) = h.tracker.take(10)
    assert second.tightest_running == 0.03


# ---- one record per request, once its prediction is settled ------------------------------------


def test_a_span_prediction_is_recorded_with_its_headroom_and_the_pod_state_at_arrival() -> None:
    h = Harness()
    request = h.publish(predicted_ttft_ms=200.0, predicted_tpot_ms=15.0, slo_ttft_ms=250.0)
    (record,) = h.records
    assert record.trace_id == request.trace_id
    assert (record.pool, record.prediction_source, record.prediction_skipped) == ("pool-a", "span", None)
    assert (record.predicted_ttft_seconds, record.predicted_tpot_seconds) == (0.2, 0.015)
    assert record.prediction_quantile == 0.9
    assert record.ttft_headroom_seconds == pytest.approx(0.05)
    assert record.tpot_headroom_seconds is None  # no TPOT SLO
    # arrival at 101 s; the sample scraped at 100 s is the as-of state
    pod_state = (record.pod_waiting, record.pod_running, record.pod_kv_cache_utilization, record.pod_state_age_seconds)
    assert pod_state == (3.0, 27.0, 0.5873, 1.0)


def test_a_queued_request_is_recorded_only_once_its_shadow_prediction_is_settled() -> None:
    h = Harness()
    h.publish()
    assert h.records == []
    (pending,) = h.tracker.take(10)
    h.tracker.record(pending, source="shadow", predicted_ttft=0.1, predicted_tpot=0.03, quantile=0.8)
    (record,) = h.records
    assert (record.prediction_source, record.predicted_ttft_seconds, record.prediction_quantile) == ("shadow", 0.1, 0.8)


def test_requests_settled_together_are_recorded_as_one_table_in_the_order_they_settled() -> None:
    """A shadow call settles its requests in one ``settling`` block: their records are one table, handed over
    when the block ends, each built from its own row of its own batch (three batches here)."""
    h = Harness()
    for n, end in enumerate((102_000_000_000, 103_000_000_000, 104_000_000_000)):
        h.publish(trace_id=f"{n:032x}", end_ns=end)
    pending = h.tracker.take(10)
    assert len(pending) == 3
    with h.tracker.settling():
        h.tracker.record(pending[2], source="shadow", predicted_ttft=0.1, predicted_tpot=0.03, quantile=0.8)
        h.tracker.unpredicted(pending[0], "failed")
        with h.tracker.settling():  # nested: adds to the outer block
            h.tracker.record(pending[1], source="shadow", predicted_ttft=0.2, predicted_tpot=None, quantile=0.9)
        assert h.tables == []
    (table,) = h.tables
    assert table.num_rows == 3
    rows = h.records
    assert [r.trace_id for r in rows] == [f"{n:032x}" for n in (2, 0, 1)]
    assert [(r.prediction_source, r.prediction_skipped, r.predicted_ttft_seconds) for r in rows] == [
        ("shadow", None, 0.1),
        ("none", "failed", None),
        ("shadow", None, 0.2),
    ]
    assert [r.end_time for r in rows] == [104_000_000_000, 102_000_000_000, 103_000_000_000]
    assert all(r.pod_state_age_seconds == 1.0 for r in rows)  # arrival 101 s, the sample of 100 s


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param({"shadow": False}, None, id="shadowing off: no reason, not counted"),
        pytest.param({"share": 0.0}, "sampled_out", id="sampled out"),
        pytest.param({"max_pending": 1}, "queue_full", id="queue full (the second request)"),
    ],
)
def test_a_request_without_a_prediction_is_recorded_with_the_reason(
    settings: dict[str, object], expected: str | None
) -> None:
    h = Harness(**settings)
    h.publish()
    h.publish(trace_id="ef" * 16)
    record = h.records[-1]
    assert (record.prediction_source, record.prediction_skipped) == ("none", expected)
    assert record.predicted_ttft_seconds is None and record.ttft_headroom_seconds is None
    assert record.pod_state_age_seconds is not None


def test_a_pool_without_a_predictor_is_recorded_as_no_predictor() -> None:
    h = Harness()
    h.tracker._predicted_pools = set()
    h.publish()
    assert [r.prediction_skipped for r in h.records] == ["no_predictor"]
    assert h.value("sloscope_shadow_skipped_total", pool="pool-a", reason="no_predictor") == 1


def test_at_shutdown_what_is_still_queued_is_recorded_and_counted() -> None:
    h = Harness()
    for n in range(3):
        h.publish(trace_id=f"{n:032x}")
    assert h.tracker.abandon("shutdown") == 3
    assert [r.prediction_skipped for r in h.records] == ["shutdown"] * 3
    assert h.value("sloscope_shadow_skipped_total", pool="pool-a", reason="shutdown") == 3
    assert h.tracker.waiting() == 0


def test_a_request_whose_pod_was_never_scraped_has_no_pod_state() -> None:
    h = Harness(shadow=False)
    h.publish(pod="vllm-9")
    assert h.records[0].pod_state_age_seconds is None


def test_a_change_of_objective_is_logged_once_per_change_and_each_prediction_counted_by_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    objective = ["quantile"]
    h.tracker._objective_of = lambda pool: objective[0]  # the pool's predictor as last polled
    for n in range(3):
        h.publish(trace_id=f"{n:032x}")
    first, second, third = h.tracker.take(10)
    with caplog.at_level(logging.INFO, logger="sloscope.processors.predictions"):
        h.tracker.record(first, source="shadow", predicted_ttft=0.2, predicted_tpot=0.03, quantile=0.9)
        h.tracker.record(
            second, source="shadow", predicted_ttft=0.1, predicted_tpot=0.03, quantile=0.9, objective="mean"
        )
        h.tracker.record(
            third, source="shadow", predicted_ttft=0.2, predicted_tpot=0.02, quantile=0.9, objective="mean"
        )
        objective[0] = "mean"
        h.publish(trace_id="ef" * 16, predicted_ttft_ms=100.0)  # a span prediction at the polled objective
        objective[0] = "quantile"
        h.publish(trace_id="fe" * 16, predicted_ttft_ms=100.0)
    assert [r.getMessage() for r in caplog.records] == [
        "predictions of pool pool-a are now mean predictions (were quantile)",
        "predictions of pool pool-a are now quantile predictions (were mean)",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    assert [(r.prediction_objective, r.prediction_quantile) for r in h.records] == [
        ("quantile", 0.9),
        ("mean", None),
        ("mean", None),
        ("mean", None),
        ("quantile", 0.9),
    ]
    shadow = {"model": "llama", "pool": "pool-a", "signal": "ttft", "source": "shadow"}
    span = {**shadow, "source": "span"}
    assert h.value("sloscope_predictions_total", **shadow) == 1
    assert h.value("sloscope_mean_predictions_total", **shadow) == 2
    # actual TTFT 0.15 s against 0.1 and 0.2 s: too low by 0.05 s once, too high by 0.05 s once: bias 0, MAE 0.05 s
    assert h.value("sloscope_mean_prediction_underestimate_seconds_total", **shadow) == pytest.approx(0.05)
    assert h.value("sloscope_mean_prediction_overestimate_seconds_total", **shadow) == pytest.approx(0.05)
    assert h.value("sloscope_mean_predictions_total", **span) == 1
    assert h.value("sloscope_predictions_total", **span) == 1
