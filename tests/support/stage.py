"""The evaluator stage as the pipeline builds it (label admission, the Prometheus publisher first, then any
others), on a registry a test owns: one request or a few at a time through the production batch path."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from sloscope.config import Limits
from sloscope.processors.evaluator import Publisher, SLOEvaluator
from sloscope.processors.joined_batch import EvaluatedBatch, from_requests
from sloscope.processors.labels import LabelAdmission
from sloscope.processors.placement import Placed
from sloscope.publishers.prometheus import PrometheusPublisher
from sloscope.records import JoinedRequest
from sloscope.slo.spec import SLOSpec
from sloscope.telemetry import Telemetry


@dataclass
class Stage:
    registry: CollectorRegistry
    telemetry: Telemetry
    admission: LabelAdmission
    publisher: PrometheusPublisher
    evaluator: SLOEvaluator
    spec: SLOSpec
    extra: list[Publisher] = field(default_factory=list)

    def publish(self, *requests: JoinedRequest) -> None:
        """The requests as one batch, through every publisher."""
        self.evaluator.batch(list(requests))

    def evaluated(self, requests: Sequence[JoinedRequest]) -> EvaluatedBatch:
        """The batch a publisher would be handed (labels admitted, so folds count), without publishing it."""
        return self.evaluator.evaluated(from_requests(requests), requests)

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


def stage(
    spec: SLOSpec,
    limits: Limits | None = None,
    *,
    registry: CollectorRegistry | None = None,
    default_pool: str = "unknown",
    pool_of_pod: Callable[[Placed], str | None] | None = None,
    model_of_pool: dict[str, str] | None = None,
    publishers: Sequence[Publisher] = (),
    clock: Callable[[], float] | None = None,
    assumed_probability: Callable[[str], float] = lambda pool: 1.0,
) -> Stage:
    limits = limits or Limits()
    registry = registry if registry is not None else CollectorRegistry()
    telemetry = Telemetry(registry, limits)
    admission = LabelAdmission(
        limits.max_label_values,
        telemetry.label_values_folded,
        default_pool,
        pool_of_pod=pool_of_pod,
        model_of_pool=model_of_pool,
    )
    publisher = PrometheusPublisher(
        registry, spec, telemetry, clock=clock or time.time, assumed_probability=assumed_probability
    )
    evaluator = SLOEvaluator(spec, admission, (publisher, *publishers))
    return Stage(registry, telemetry, admission, publisher, evaluator, spec, list(publishers))


def publishing_to(
    *publishers: Publisher,
    spec: SLOSpec | None = None,
    default_pool: str = "pool-a",
    pool_of_pod: Callable[[Placed], str | None] | None = None,
) -> Callable[[JoinedRequest], None]:
    """``publish(request)``: the request evaluated as a batch of one, its labels admitted (uncapped), and handed to
    ``publishers`` alone: the evaluator stage of a test that watches one publisher."""
    limits = Limits(max_label_values={})
    registry = CollectorRegistry()
    admission = LabelAdmission(
        {}, Telemetry(registry, limits).label_values_folded, default_pool, pool_of_pod=pool_of_pod
    )
    evaluator = SLOEvaluator(spec or SLOSpec(version="sloscope/v1"), admission, publishers)

    def publish(request: JoinedRequest) -> None:
        evaluator.batch([request])

    return publish
