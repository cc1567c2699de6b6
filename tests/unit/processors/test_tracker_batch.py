"""The prediction tracker's batch path against the one-request-at-a-time reference (tests/support/reference.py):
identical /metrics, records and shadow queues. The records of a batch are one Arrow table built from the batch's
columns; the reference's are objects turned into rows value by value, and the two must agree value for value
(NaN and null told apart), for the rows settled with the batch and for those settled later by a shadow
prediction, a skip or shutdown.

Each side is what the service runs as the evaluator stage (pipeline.py, service/server.py): label admission, the
Prometheus publisher, then the tracker, on one registry. The requests are the differential generator's
(tests/support/joined_requests.py) with predictions carried on spans (usable, unusable, NaN), arrivals, and pods
discovery knows (by name in their pool, by name alone, by address; one never scraped) or not, so TPOT SLOs run on
known pods and headroom meets the tightest of them. Pools with a predictor and without, quantile and mean
objectives, shadowing on and off, a share drawn from the same seeded rng, a queue that fills, label caps and
series budgets running out per family. Pool ``pool-b``'s EPP runs with streaming off: its predicted TTFT is
compared with the end-to-end latency as signal ``e2e`` and its TPOT not at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from collections.abc import Callable

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from sloscope import conventions as c
from sloscope.config import Headroom, Limits, Predictions
from sloscope.processors import joined_batch
from sloscope.processors.evaluator import SLOEvaluator
from sloscope.processors.labels import LabelAdmission
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.prediction_series import PredictionSeries
from sloscope.processors.predictions import Pending, PredictionTracker
from sloscope.processors.running_slos import RunningSLOs
from sloscope.publishers.prometheus import PrometheusPublisher
from sloscope.receivers.discovery import Target
from sloscope.receivers.protocols import PodState
from sloscope.records import JoinedRequest
from sloscope.telemetry import Telemetry
from tests.support.joined_requests import SPEC, joined_requests
from tests.support.reference import ReferenceEvaluator, ReferencePublisher, ReferenceTracker, record_rows

TARGETS = (
    Target(pool="pool-a", pod="pod-1", address="10.0.0.1:8000"),
    Target(pool="pool-b", pod="pod-2", address="10.0.0.2:8000"),
    Target(pool="pool-c", pod="pod-3", address="10.0.0.3:8000"),  # a pool no span names: found by pod name
    Target(pool="pool-c", pod="pod-4", address="10.0.0.4:8000"),  # known to discovery, never scraped
)
SCRAPED = TARGETS[:3]
STATE = PodState(waiting=3.0, running=7.0, kv_cache_utilization=0.25, lora=None, models=frozenset())
QUANTILES = {"pool-a": 0.8}
OBJECTIVES = {"pool-b": c.OBJECTIVE_MEAN, "pool-c": c.OBJECTIVE_MEAN}
STREAMING_OFF = {"pool-b"}
_PREDICTED_TTFT = (None, None, 150.0, 400.0, 2000.0, 80.0, 0.0, -3.0, math.nan, math.inf, 1e-300)
_PREDICTED_TPOT = (None, None, 20.0, 45.0, 5.0, 0.0, math.nan, 1e300)


def requests(seed: int, count: int, *, models: int = 0) -> list[JoinedRequest]:
    """The generator's requests, some with predictions, an arrival, and an endpoint or pod discovery knows."""
    rng = random.Random(seed)
    out = []
    for request in joined_requests(seed, count, models=models):
        predicted = rng.random() < 0.45
        out.append(
            dataclasses.replace(
                request,
                predicted_ttft_ms=rng.choice(_PREDICTED_TTFT) if predicted else None,
                predicted_tpot_ms=rng.choice(_PREDICTED_TPOT) if predicted else None,
                arrival_ns=rng.choice((0, request.start_ns - 50_000_000)),
                pod=rng.choice((request.pod, "pod-3", request.pod, "pod-4")),
                endpoint=rng.choice((request.endpoint, "10.0.0.3:8000")),
            )
        )
    return out


class Side:
    """``reference``: the one-request-at-a-time reference (tests/support/reference.py), else the production path."""

    def __init__(self, limits: Limits, predictions: Predictions, *, seed: int, reference: bool) -> None:
        self.registry = CollectorRegistry()
        telemetry = Telemetry(self.registry, limits)
        admission = LabelAdmission(
            limits.max_label_values,
            telemetry.label_values_folded,
            "default-pool",
            model_of_pool={"pool-b": "configured-model"},
        )
        publisher = ReferencePublisher if reference else PrometheusPublisher
        self.publisher = publisher(self.registry, SPEC, telemetry, clock=lambda: 1_750_000_000.25)
        history = PodHistory(8, 30.0, 60.0)
        for target in TARGETS:
            history.track(target)
        for target in SCRAPED:
            history.record(target.key, 1_699_999_999.5, STATE)
        self.records: list[pa.RecordBatch] = []
        self.series = PredictionSeries(self.registry, ["pool-a", "pool-b", "pool-c"], telemetry.series_budget)
        self.series._series._clock = lambda: 1_750_000_000.25  # the exemplars' timestamps, alike on both sides
        for family in (self.series._ratio, self.series._headroom):
            family._clock = lambda: 1_750_000_000.25
        tracker = ReferenceTracker if reference else PredictionTracker
        self.tracker = tracker(
            settings=predictions,
            headroom=Headroom(slo_buffer_factor=0.9),
            history=history,
            running=RunningSLOs(),
            series=self.series,
            predicted_pools={"pool-a", "pool-c"},
            quantile_of=QUANTILES.get,
            objective_of=OBJECTIVES.get,
            rng=random.Random(seed),
            sink=self.records.append,
            streaming_of=lambda pool: pool not in STREAMING_OFF,
        )
        self.evaluator = SLOEvaluator(SPEC, admission, (self.publisher, self.tracker))
        self.reference = ReferenceEvaluator(SPEC, admission, (self.publisher, self.tracker) if reference else ())

    def exposition(self) -> tuple[str, str]:
        """Both formats, without the ``_created`` samples of the telemetry's counters (their creation times)."""
        return tuple(  # type: ignore[return-value]
            "".join(line for line in page.decode().splitlines(keepends=True) if "_created" not in line)
            for page in (generate_latest(self.registry), generate_openmetrics(self.registry))
        )

    def rows(self) -> list[dict[str, object]]:
        """Every record so far, as rows."""
        return record_rows(self.records)

    def queued(self) -> list[Pending]:
        """Every pool's queue, oldest first (read, not taken)."""
        return [pending for queue in self.tracker._pending.values() for pending in queue]


def run_both(
    requests: list[JoinedRequest],
    sizes: Callable[[], int],
    *,
    limits: Limits | None = None,
    predictions: Predictions | None = None,
    seed: int = 5,
    native: bool = False,
) -> tuple[Side, Side]:
    """``native``: the batches come as record batches alone, as the native join hands them (no request objects:
    the tracker makes those it queues or records from the rows)."""
    limits, predictions = limits or Limits(), predictions or Predictions()
    one = Side(limits, predictions, seed=seed, reference=True)
    many = Side(limits, predictions, seed=seed, reference=False)
    for request in requests:
        one.reference(request)
    at = 0
    while at < len(requests):
        chunk = requests[at : at + sizes()]
        if native:
            many.evaluator.records(joined_batch.from_requests(chunk))
        else:
            many.evaluator.batch(chunk)
        at += len(chunk)
    return one, many


def assert_identical(one: Side, many: Side) -> None:
    text_one, om_one = one.exposition()
    text_many, om_many = many.exposition()
    assert text_many == text_one
    assert om_many == om_one
    # by their repr: a NaN a span carried is a value, and equal to itself only there
    assert repr(many.rows()) == repr(one.rows())
    assert repr(many.queued()) == repr(one.queued())


_SHADOW_PREDICTED = (None, 0.0, 0.12, 0.4, 3.0, math.nan)


def settle_both(one: Side, many: Side, seed: int) -> None:
    """Every queued request settled alike on both sides, the way the shadow predictor settles them: predicted
    (values, objectives and quantiles drawn from one seed, unusable ones among them), skipped for a reason, or
    abandoned at shutdown; then their records must agree too."""
    before = len(one.rows())
    for side in (one, many):
        rng = random.Random(seed)
        pending = side.tracker.take(side.tracker.waiting())
        # as a shadow call settles its requests (one table of records), or one at a time
        with side.tracker.settling() if seed % 2 else contextlib.nullcontext():
            _settle(side, pending, rng)
        side.tracker.abandon(c.SKIP_SHUTDOWN)
    assert_identical(one, many)
    settled = one.rows()[before:]
    if settled:
        assert {row["prediction_source"] for row in settled} <= {c.SOURCE_SHADOW, c.SOURCE_NONE}


def _settle(side: Side, pending: list[Pending], rng: random.Random) -> None:
    """Each request predicted, skipped or queued again, by a draw of ``rng``."""
    for queued in pending:
        fate = rng.random()
        if fate < 0.7:
            objective = rng.choice(c.OBJECTIVES)
            side.tracker.record(
                queued,
                source=c.SOURCE_SHADOW,
                predicted_ttft=rng.choice(_SHADOW_PREDICTED),
                predicted_tpot=rng.choice(_SHADOW_PREDICTED),
                quantile=rng.choice((0.9, 0.5)),
                objective=objective,
            )
        elif fate < 0.85:
            side.tracker.unpredicted(queued, rng.choice((c.SKIP_FAILED, c.SKIP_NO_POD_STATE)))
        else:
            side.tracker._enqueue(queued)


def sample(side: Side, name: str, **labels: str) -> float:
    return side.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("size", [1, 2, 7, 128, 512, 3000])
def test_fixed_batch_sizes_give_the_same_series_records_and_queue(size: int) -> None:
    count = 3000 if size > 100 else 300  # a batch of one costs what a batch of a hundred does
    predictions = Predictions(max_pending=count // 8, share=0.7)
    one, many = run_both(requests(size, count), lambda: size, predictions=predictions)
    assert_identical(one, many)
    # the comparison covered what it is meant to: every objective, headroom with exemplars, every skip, records
    _, om = one.exposition()
    for family in ("sloscope_prediction_ratio_bucket", "sloscope_headroom_seconds_bucket"):
        assert any(line.startswith(family) and "# {trace_id=" in line for line in om.splitlines()), family
    assert "sloscope_mean_prediction_squared_error_seconds2_total" in om or "mean_prediction" in om
    rows = one.rows()
    for reason in (c.SKIP_NO_PREDICTOR, c.SKIP_SAMPLED_OUT, c.SKIP_QUEUE_FULL):
        assert any(r["prediction_skipped"] == reason for r in rows), reason
    assert {r["prediction_source"] for r in rows} == {c.SOURCE_SPAN, c.SOURCE_NONE}
    assert {r["prediction_objective"] for r in rows} == {*c.OBJECTIVES, None}
    assert any(r["tpot_headroom_seconds"] is not None and r["pod_waiting"] is not None for r in rows)
    # pods with a scraped state and without one (never scraped, or not known to discovery)
    assert any(r["pod"] == "pod-4" and r["pod_state_age_seconds"] is None for r in rows)
    assert any(r["failure_reason"] is not None for r in rows) and any(r["invalid_fields"] for r in rows)
    # streaming off (requests counted in pool-b, whatever their labels): e2e comparisons and headroom, records
    # with the e2e prediction and never a TTFT or TPOT one
    text, _ = one.exposition()
    for family in ("sloscope_mean_predictions_total", "sloscope_headroom_seconds_bucket"):
        assert any(line.startswith(family) and 'signal="e2e"' in line for line in text.splitlines()), family
    off = [r for r in rows if r["pool"] == "pool-b" and r["prediction_source"] == c.SOURCE_SPAN]
    assert any(r["predicted_e2e_seconds"] is not None and r["e2e_headroom_seconds"] is not None for r in off)
    assert all(r["predicted_ttft_seconds"] is None and r["predicted_tpot_seconds"] is None for r in off)
    assert max(len(queue) for queue in one.tracker._pending.values()) == predictions.max_pending  # a full queue
    settle_both(one, many, size)
    shadowed = [r for r in one.rows() if r["prediction_source"] == c.SOURCE_SHADOW]
    assert {r["prediction_objective"] for r in shadowed} == set(c.OBJECTIVES)
    assert {r["prediction_skipped"] for r in one.rows()} >= {c.SKIP_FAILED, c.SKIP_NO_POD_STATE, c.SKIP_SHUTDOWN}


@pytest.mark.parametrize("seed", range(6))
def test_random_batch_sizes_shadow_on_and_off(seed: int) -> None:
    rng = random.Random(seed)
    predictions = Predictions(shadow=seed % 3 != 0, share=rng.choice((1.0, 0.5)), max_pending=rng.choice((50, 10_000)))
    one, many = run_both(
        requests(100 + seed, 2500, models=rng.choice((0, 8))),
        lambda: rng.randint(1, 600),
        predictions=predictions,
        seed=seed,
    )
    assert_identical(one, many)
    if not predictions.shadow:
        assert not one.queued()
        assert all(r["prediction_skipped"] is None for r in one.rows())
    settle_both(one, many, seed)


@pytest.mark.parametrize("seed", range(3))
def test_record_batches_without_objects_give_the_same_series_records_and_queue(seed: int) -> None:
    rng = random.Random(seed)
    predictions = Predictions(shadow=seed != 1, share=0.6, max_pending=150)
    one, many = run_both(
        requests(500 + seed, 2000), lambda: rng.randint(100, 700), predictions=predictions, seed=seed, native=True
    )
    assert_identical(one, many)
    assert many.records and all(r["trace_id"] for r in many.rows())
    settle_both(one, many, seed)


@pytest.mark.parametrize("seed", range(3))
def test_caps_and_per_family_budgets_give_the_same_series(seed: int) -> None:
    """Label caps fold models and pools; each family's budget runs out (the total is left ample: a budget shared
    by every family admits in the order the families are published, which a batch changes for every batch
    publisher alike)."""
    rng = random.Random(seed)
    limits = Limits(
        max_label_values={"model": 5, "pool": 3, "slo_class": 4, "pod": 3},
        max_series_per_family=24,
        max_series_total=100_000,
    )
    one, many = run_both(requests(300 + seed, 2000, models=12), lambda: rng.randint(1, 300), limits=limits, seed=seed)
    assert_identical(one, many)
    assert sample(one, "sloscope_series_folded_total", family="sloscope_prediction_ratio")


def test_a_failing_publisher_before_the_tracker_changes_nothing_the_tracker_does() -> None:
    """The labels are the batch's, admitted before any publisher: the Prometheus publisher failing on every batch
    costs its own series only; the tracker's records and queue are those of the reference."""
    reqs = requests(9, 600)
    one, _ = run_both(reqs, lambda: 200)
    many = Side(Limits(), Predictions(), seed=5, reference=False)

    def fail(batch: object) -> None:
        raise RuntimeError("a publisher failing")

    many.publisher.publish = fail  # type: ignore[method-assign]
    for at in range(0, len(reqs), 200):
        many.evaluator.batch(reqs[at : at + 200])
    assert repr(many.rows()) == repr(one.rows())
    assert repr(many.queued()) == repr(one.queued())
    text_one, text_many = one.exposition()[0], many.exposition()[0]
    assert "sloscope_requests_total{" in text_one
    assert "sloscope_requests_total{" not in text_many  # the failing publisher's series alone are lost

    def predictions(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("sloscope_predictions_total{")]

    assert len(predictions(text_one)) > 3
    assert predictions(text_many) == predictions(text_one)


def test_an_empty_batch_changes_nothing() -> None:
    one, many = run_both([], lambda: 1)
    many.evaluator.batch([])
    assert_identical(one, many)
