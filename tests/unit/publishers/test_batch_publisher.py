"""The batch path against the one-request-at-a-time reference (tests/support/reference.py): the same requests give
byte-identical /metrics, and every request the same labels and evaluation.

Both paths run on their own registry with the same spec, caps and clock (exemplars carry a timestamp), and
the whole registry is rendered in the text format and in OpenMetrics (exemplars included). The requests
cover every class of the test spec, missing and invalid values, failures of every reason, label caps and
series budgets running out, and batches of every size from 1 up.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from sloscope import conventions as c
from sloscope.config import Limits
from sloscope.processors.evaluator import SLOEvaluator
from sloscope.processors.labels import LabelAdmission
from sloscope.processors.placement import Placed
from sloscope.publishers.in_memory import InMemoryPublisher
from sloscope.publishers.prometheus import PrometheusPublisher
from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.spec import SLOSpec
from sloscope.telemetry import Telemetry
from tests.support.joined_requests import SPEC, joined_requests
from tests.support.reference import ReferenceEvaluator, ReferencePublisher


def pool_of_pod(request: Placed) -> str | None:
    """Discovery's answer for a request without a pool: pod-1 and pod-2 are found, others not."""
    return {"pod-1": "found-a", "pod-2": "found-b"}.get(request.pod or "")


def assumed_probability(pool: str) -> float:
    """Where a trace recorded no probability: pool-b's EPP keeps one in five, the others every trace."""
    return 0.2 if pool == "pool-b" else 1.0


class Side:
    """One registry, publisher and label admission; ``reference``: the one-request-at-a-time reference."""

    def __init__(self, limits: Limits, spec: SLOSpec, discovery: bool, *, reference: bool) -> None:
        self.registry = CollectorRegistry()
        telemetry = Telemetry(self.registry, limits)
        admission = LabelAdmission(
            limits.max_label_values,
            telemetry.label_values_folded,
            "default-pool",
            pool_of_pod=pool_of_pod if discovery else None,
            model_of_pool={"pool-b": "configured-model", "found-a": "found-model"},
        )
        clock = lambda: 1_750_000_000.25  # noqa: E731
        self.publisher = (
            ReferencePublisher(
                self.registry,
                spec,
                telemetry,
                clock=clock,
                assumed_probability=assumed_probability,
                admission=admission,
            )
            if reference
            else PrometheusPublisher(
                self.registry, spec, telemetry, clock=clock, assumed_probability=assumed_probability
            )
        )
        self.seen = InMemoryPublisher()
        self.evaluator = SLOEvaluator(spec, admission, (self.publisher, self.seen))
        self.reference = ReferenceEvaluator(spec, admission, (self.publisher,) if reference else ())

    def exposition(self) -> tuple[str, str]:
        """Both formats, without the ``_created`` samples of the telemetry's counters (their creation times)."""
        return tuple(  # type: ignore[return-value]
            "".join(line for line in page.decode().splitlines(keepends=True) if "_created" not in line)
            for page in (generate_latest(self.registry), generate_openmetrics(self.registry))
        )

    def labelled(self) -> list[tuple[str, tuple[str, ...], Evaluation]]:
        """(trace id, labels, evaluation) of every request published, in order."""
        if self.reference.seen:
            return [(trace, tuple(labels), evaluation) for trace, labels, evaluation in self.reference.seen]
        return [(row.request.trace_id, tuple(row[2:]), row.evaluation) for row in self.seen.rows()]


def batches(requests: Sequence[JoinedRequest], sizes: Callable[[], int]) -> list[list[JoinedRequest]]:
    out, at = [], 0
    while at < len(requests):
        size = sizes()
        out.append(list(requests[at : at + size]))
        at += size
    return out


def run_both(
    requests: list[JoinedRequest],
    limits: Limits,
    sizes: Callable[[], int],
    *,
    spec: SLOSpec = SPEC,
    discovery: bool = False,
) -> tuple[Side, Side]:
    one, many = Side(limits, spec, discovery, reference=True), Side(limits, spec, discovery, reference=False)
    for request in requests:
        one.reference(request)
    for batch in batches(requests, sizes):
        many.evaluator.batch(batch)
    return one, many


def assert_identical(one: Side, many: Side) -> None:
    text_one, om_one = one.exposition()
    text_many, om_many = many.exposition()
    assert text_many == text_one
    assert om_many == om_one
    assert "# {trace_id=" in om_one  # the comparison covered exemplars
    # and fractional adjusted counts, in counters and histograms, beside the sampled twins
    assert re.search(r"^sloscope_requests_total\{[^}]*\} \d+\.\d*[1-9]", text_one, re.MULTILINE)
    assert re.search(r"^sloscope_ttft_seconds_bucket\{[^}]*\} \d+\.\d*[1-9]", text_one, re.MULTILINE)
    assert "\nsloscope_sampled_slo_violations_total{" in text_one
    assert many.labelled() == one.labelled()


CAPPED_LABELS = Limits(max_label_values={"model": 3, "pool": 2, "slo_class": 3, "pod": 2})
SMALL_BUDGET = Limits(max_series_per_family=60, max_series_total=700)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 500, 5000])
def test_fixed_batch_sizes_give_the_same_exposition(size: int) -> None:
    assert_identical(*run_both(joined_requests(seed=size, count=3000), Limits(), lambda: size))


@pytest.mark.parametrize("seed", range(6))
def test_random_batch_sizes_give_the_same_exposition(seed: int) -> None:
    rng = random.Random(seed)
    requests = joined_requests(seed=100 + seed, count=2500, models=rng.choice((0, 8)))
    assert_identical(*run_both(requests, Limits(), lambda: rng.randint(1, 300), discovery=seed % 2 == 0))


@pytest.mark.parametrize("seed", range(4))
def test_label_caps_folding_gives_the_same_exposition(seed: int) -> None:
    rng = random.Random(seed)
    requests = joined_requests(seed=200 + seed, count=2000, models=12)
    one, many = run_both(requests, CAPPED_LABELS, lambda: rng.randint(1, 200), discovery=True)
    assert_identical(one, many)
    assert one.registry.get_sample_value("sloscope_label_values_folded_total", {"label": c.MODEL})


@pytest.mark.parametrize("seed", range(4))
def test_series_budgets_running_out_give_the_same_exposition(seed: int) -> None:
    rng = random.Random(seed)
    requests = joined_requests(seed=300 + seed, count=2000, models=10)
    one, many = run_both(requests, SMALL_BUDGET, lambda: rng.randint(1, 400))
    assert_identical(one, many)
    folded = [
        one.registry.get_sample_value("sloscope_series_folded_total", {"family": family})
        for family in ("sloscope_requests_total", "sloscope_ttft_seconds")
    ]
    assert all(folded), folded  # both a counter and a histogram family ran out


def test_caps_and_budgets_together_in_one_batch_and_in_many() -> None:
    requests = joined_requests(seed=400, count=1500, models=9)
    limits = Limits(
        max_label_values={"model": 5, "pool": 3, "slo_class": 4, "pod": 3},
        max_series_per_family=40,
        max_series_total=300,
    )
    for sizes in (lambda: 1500, lambda: 1, lambda: 37):
        assert_identical(*run_both(requests, limits, sizes, discovery=True))


def test_an_empty_batch_publishes_nothing() -> None:
    one, many = run_both([], Limits(), lambda: 1)
    many.evaluator.batch([])
    assert many.exposition() == one.exposition()
