"""The SLO evaluator stage: joined request in, (request, evaluation) out to every publisher."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.evaluate import evaluate
from sloscope.slo.spec import SLOSpec

log = logging.getLogger(__name__)


class RequestPublisher(Protocol):
    def publish(self, request: JoinedRequest, evaluation: Evaluation) -> None: ...


class SLOEvaluator:
    def __init__(self, spec: SLOSpec, publishers: Sequence[RequestPublisher]) -> None:
        self._spec = spec
        self._publishers = tuple(publishers)

    def add(self, publisher: RequestPublisher) -> None:
        """One more publisher, after the others (before the pipeline starts)."""
        self._publishers = (*self._publishers, publisher)

    def __call__(self, request: JoinedRequest) -> None:
        evaluation = evaluate(request, self._spec)
        for publisher in self._publishers:
            try:
                publisher.publish(request, evaluation)
            except Exception:  # a failing publisher must not stop the others or the worker
                log.exception("publisher %s failed on trace %s", type(publisher).__name__, request.trace_id)
