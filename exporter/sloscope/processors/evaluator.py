"""The SLO evaluator stage: joined requests in, their evaluations out to every publisher.

One request at a time (``evaluator(request)``): :func:`evaluate`, then every publisher's
``publish(request, evaluation)``; this is the reference. A batch (:meth:`SLOEvaluator.batch`, what the
pipeline hands it: the requests one call of the trace assembler emitted; :meth:`SLOEvaluator.records`, the
same as an Arrow record batch): the SLO verdicts are computed for the whole batch at once
(:func:`evaluate_batch`), a publisher with a ``publish_batch`` method takes the batch, and every other one
still gets its (request, evaluation) pairs, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import pyarrow as pa

from sloscope.columnar import arrow_arrays
from sloscope.processors import joined_batch
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.evaluate import evaluate
from sloscope.slo.evaluate_batch import evaluate_batch
from sloscope.slo.spec import SLOSpec

log = logging.getLogger(__name__)


class RequestPublisher(Protocol):
    def publish(self, request: JoinedRequest, evaluation: Evaluation) -> None: ...


@runtime_checkable
class BatchPublisher(Protocol):
    def publish_batch(self, batch: EvaluatedBatch) -> None: ...


MIN_BATCH = 128
"""Batches smaller than this take the one-at-a-time path: the vectorized one costs about a hundred numpy and
Arrow calls per batch whatever its size, which a small batch does not repay (bench/columnar.py measures the
crossover). Both paths publish identical series (tests/unit/publishers/test_batch_publisher.py)."""


class SLOEvaluator:
    def __init__(self, spec: SLOSpec, publishers: Sequence[RequestPublisher], *, min_batch: int = MIN_BATCH) -> None:
        self._spec = spec
        self._publishers = tuple(publishers)
        self._min_batch = min_batch

    def add(self, publisher: RequestPublisher) -> None:
        """One more publisher, after the others (before the pipeline starts)."""
        self._publishers = (*self._publishers, publisher)

    def __call__(self, request: JoinedRequest) -> None:
        evaluation = evaluate(request, self._spec)
        for publisher in self._publishers:
            _publish(publisher, request, evaluation)

    def batch(self, requests: Sequence[JoinedRequest]) -> None:
        """Evaluate and publish ``requests`` as one batch (one at a time when fewer than ``min_batch``)."""
        if len(requests) < self._min_batch:
            for request in requests:
                self(request)
        else:
            self._publish_batch(joined_batch.from_requests(requests), requests)

    def records(self, records: pa.RecordBatch) -> None:
        """Evaluate and publish a record batch of :data:`~sloscope.processors.joined_batch.SCHEMA` made elsewhere
        (the native join); ValueError, before anything is published, when its columns are not the schema's."""
        joined_batch.check(records)
        if records.num_rows:
            self._publish_batch(records, None)

    def _publish_batch(self, records: pa.RecordBatch, requests: Sequence[JoinedRequest] | None) -> None:
        strings = arrow_arrays.StringColumns(records)  # read by the verdicts and by every publisher
        evaluated = EvaluatedBatch(records, evaluate_batch(records, self._spec, strings), requests, strings)
        # Built before anything is published, so whatever may fail fails before any publisher has counted.
        one_by_one = [p for p in self._publishers if not isinstance(p, BatchPublisher)]
        pairs = evaluated.pairs() if one_by_one else []
        for publisher in self._publishers:
            if isinstance(publisher, BatchPublisher):
                try:
                    publisher.publish_batch(evaluated)
                except Exception:  # nor stop the others; this publisher's series of the batch are lost, and said so
                    log.exception(
                        "publisher %s failed on a batch of %d requests", type(publisher).__name__, len(evaluated)
                    )
                continue
            for request, evaluation in pairs:
                _publish(publisher, request, evaluation)


def _publish(publisher: RequestPublisher, request: JoinedRequest, evaluation: Evaluation) -> None:
    try:
        publisher.publish(request, evaluation)
    except Exception:  # a failing publisher must not stop the others or the worker
        log.exception("publisher %s failed on trace %s", type(publisher).__name__, request.trace_id)
