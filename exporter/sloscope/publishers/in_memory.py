"""A publisher that keeps what it is handed: the in-memory double of the publisher contract, for tests and for
anyone wiring a new stage who wants to see what the evaluator hands on."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.records import Evaluation, JoinedRequest

__all__ = ["InMemoryPublisher", "PublishedRow"]


class PublishedRow(NamedTuple):
    """One request as a publisher saw it: the request, its evaluation and the labels it was published under."""

    request: JoinedRequest
    evaluation: Evaluation
    model: str
    pool: str
    slo_class: str
    pod: str


class InMemoryPublisher:
    def __init__(self) -> None:
        self.batches: list[EvaluatedBatch] = []

    def publish(self, batch: EvaluatedBatch) -> None:
        self.batches.append(batch)

    def rows(self) -> list[PublishedRow]:
        """Every request handed on so far, in order, with its evaluation and labels."""
        out: list[PublishedRow] = []
        for batch in self.batches:
            labels = batch.labels
            every = np.arange(len(batch))
            columns = [column.at(every) for column in (labels.model, labels.pool, labels.slo_class, labels.pod)]
            for (request, evaluation), *values in zip(batch.pairs(), *columns, strict=True):
                out.append(PublishedRow(request, evaluation, *values))
        return out

    def clear(self) -> None:
        self.batches.clear()
