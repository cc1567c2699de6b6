"""The SLO evaluator stage: joined requests in, as one batch, their evaluations out to every publisher.

A batch is the unit from the join on (a one-row batch is a batch): the native join's record batch
(:meth:`SLOEvaluator.records`) or the reference join's objects made into one (:meth:`SLOEvaluator.batch`).
For each, the stage computes the SLO verdicts of every row at once (:func:`evaluate_batch`), admits the label
values every row is published under (:class:`~sloscope.processors.labels.LabelAdmission`), and hands the
:class:`EvaluatedBatch` to every publisher in turn. A publisher that fails loses its own series of the batch,
and says so; the others still get it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from sloscope.columnar.batch import Batch
from sloscope.processors import joined_batch
from sloscope.processors.joined_batch import EvaluatedBatch
from sloscope.processors.labels import LabelAdmission
from sloscope.records import JoinedRequest
from sloscope.slo.evaluate_batch import evaluate_batch
from sloscope.slo.spec import SLOSpec

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """What every publisher of evaluated requests is to the evaluator: one method, handed each batch once.

    ``publish`` runs on the pipeline worker, one batch at a time (the pipeline holds its publishing lock), and
    must not wait on the network: a publisher that ships elsewhere queues and ships from its own thread.
    """

    def publish(self, batch: EvaluatedBatch) -> None: ...


class SLOEvaluator:
    def __init__(self, spec: SLOSpec, admission: LabelAdmission, publishers: Sequence[Publisher] = ()) -> None:
        self._spec = spec
        self.admission = admission
        self._publishers = tuple(publishers)

    def add(self, publisher: Publisher) -> None:
        """One more publisher, after the others (before the pipeline starts)."""
        self._publishers = (*self._publishers, publisher)

    def batch(self, requests: Sequence[JoinedRequest]) -> None:
        """Evaluate and publish ``requests`` (the reference join's objects) as one batch."""
        if requests:
            self._publish(joined_batch.from_requests(requests), requests)

    def records(self, records: Batch) -> None:
        """Evaluate and publish a batch of joined requests made elsewhere (the native join); ValueError, before
        anything is published, when its columns are not those :mod:`~sloscope.processors.joined_batch` says."""
        joined_batch.check(records)
        if len(records):
            self._publish(records, None)

    def evaluated(self, records: Batch, requests: Sequence[JoinedRequest] | None = None) -> EvaluatedBatch:
        """The batch evaluated and its labels admitted: what every publisher is handed."""
        verdicts = evaluate_batch(records, self._spec)
        return EvaluatedBatch(records, verdicts, self.admission.admit(records.coded, verdicts), requests)

    def _publish(self, records: Batch, requests: Sequence[JoinedRequest] | None) -> None:
        evaluated = self.evaluated(records, requests)  # whatever may fail fails before any publisher has counted
        for publisher in self._publishers:
            try:
                publisher.publish(evaluated)
            except Exception:  # nor stop the others; this publisher's series of the batch are lost, and said so
                log.exception("publisher %s failed on a batch of %d requests", type(publisher).__name__, len(evaluated))
