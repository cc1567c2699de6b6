"""The evaluator stage and its publishers one request at a time: the reference the production batch path is held to.

Production evaluates and publishes batches only (processors/evaluator.py): verdicts as columns, labels admitted
per batch, each family counted per label set. The differential tests feed the same requests here, one at a time,
written as plainly as the rules read (evaluate one request, admit its four labels, count it in every family),
and require byte-identical /metrics, the same records and the same shadow queues. The classes below subclass
the production publishers only to reach their families: what they count, and in what order, is this file's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from sloscope import conventions as c
from sloscope.processors.labels import LabelAdmission
from sloscope.processors.predictions import DEFAULT_QUANTILE, Pending, PredictionTracker
from sloscope.publishers.prometheus import PrometheusPublisher
from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.evaluate import evaluate, valid_seconds, valid_tokens
from sloscope.slo.spec import SLOSpec, is_valid_target


class RequestLabels(NamedTuple):
    """The capped label values one request is published under."""

    model: str
    pool: str
    slo_class: str
    pod: str


def admit(admission: LabelAdmission, request: JoinedRequest, evaluation: Evaluation) -> RequestLabels:
    """One request's labels: model, pool, class and pod, each through the caps as it comes."""
    guard = admission.guard
    raw_pool = admission.pool(request.pool, request)
    return RequestLabels(
        guard.admit(c.MODEL, admission.model(request.model, raw_pool)),
        guard.admit(c.POOL, raw_pool),
        guard.admit(c.SLO_CLASS, evaluation.slo_class),
        guard.admit(c.POD, request.pod or request.endpoint or c.UNKNOWN),
    )


class RequestPublisher(Protocol):
    def publish_request(self, request: JoinedRequest, evaluation: Evaluation, labels: RequestLabels) -> None: ...


class ReferenceEvaluator:
    """``evaluator(request)``: evaluate it, admit its labels, hand it to every publisher; ``seen`` keeps, per request,
    (trace id, labels, evaluation) in order."""

    def __init__(self, spec: SLOSpec, admission: LabelAdmission, publishers: Sequence[RequestPublisher]) -> None:
        self.spec, self.admission, self.publishers = spec, admission, tuple(publishers)
        self.seen: list[tuple[str, RequestLabels, Evaluation]] = []

    def __call__(self, request: JoinedRequest) -> RequestLabels:
        evaluation = evaluate(request, self.spec)
        labels = admit(self.admission, request, evaluation)
        self.seen.append((request.trace_id, labels, evaluation))
        for publisher in self.publishers:
            publisher.publish_request(request, evaluation, labels)
        return labels


class ReferencePublisher(PrometheusPublisher):
    def publish_request(self, request: JoinedRequest, evaluation: Evaluation, labels: RequestLabels) -> None:
        model, pool, slo_class, pod = labels
        base = (model, pool, slo_class, request.routing)
        with self._series.lock:
            if base not in self._requests.values:
                self._start_request(base, slo_class)
            self._requests.inc(base)
            if request.failure_reason is not None:
                self._failed.inc((*base, request.failure_reason))
            on_a_pod = request.failure_reason is None or bool(request.pod or request.endpoint)
            if on_a_pod:  # a request refused or lost before any pod is no pod's
                if (pool, pod) not in self._pod_requests.values:
                    self._start_pod(pool, pod)
                self._pod_requests.inc((pool, pod))
            for field in evaluation.invalid_fields:
                self._invalid.inc((field,))
            for slo in c.SLOS:
                verdict = evaluation.verdict(slo)
                if not verdict.eligible:
                    continue
                key = (*base, slo)
                if key not in self._slo_requests.values:  # the default class's first eligible request
                    self._slo_violations.start(key)
                self._slo_requests.inc(key)
                if not verdict.met:
                    self._slo_violations.inc(key)
                    if on_a_pod:
                        self._pod_violations.inc((pool, pod, slo))
            self._observe_request(request, evaluation, (model, pool, slo_class))

    def _observe_request(self, request: JoinedRequest, evaluation: Evaluation, histogram: tuple[str, str, str]) -> None:
        """Its latencies and token counts, each when valid (a failed request may carry none)."""
        trace = request.trace_id
        if evaluation.ttft_seconds is not None:
            self._ttft.observe(histogram, evaluation.ttft_seconds, trace)
        if evaluation.tpot_seconds is not None:
            self._tpot.observe(histogram, evaluation.tpot_seconds, trace)
        if valid_seconds(request.server_ttft_seconds):
            self._server_ttft.observe(histogram, request.server_ttft_seconds, trace)
        if valid_seconds(request.e2e_seconds):
            self._e2e.observe(histogram, request.e2e_seconds, trace)
        if valid_tokens(request.prompt_tokens):
            self._prompt_tokens.observe(histogram, request.prompt_tokens)
        if valid_tokens(request.completion_tokens):
            self._completion_tokens.observe(histogram, request.completion_tokens)


class ReferenceTracker(PredictionTracker):
    def publish_request(self, request: JoinedRequest, evaluation: Evaluation, labels: RequestLabels) -> None:
        key = self._history.resolve(request.pool, request.pod, request.endpoint)
        pool = key[0] if key is not None else (request.pool or labels.pool)
        arrival = (request.arrival_ns or request.start_ns) / 1e9
        slo_tpot = _target_seconds(request.slo_tpot_ms)
        tightest = None
        if key is not None and slo_tpot is not None:  # only TPOT headroom needs it, and only with a TPOT SLO
            tightest = self._running.tightest_at(key, arrival)
            if request.end_ns:
                self._running.add(key, arrival, request.end_ns / 1e9, slo_tpot)
        pending = Pending(request, evaluation, (labels.model, labels.pool), pool, key, arrival, tightest)
        if request.predicted_ttft_ms is not None or request.predicted_tpot_ms is not None:
            self.record(
                pending,
                source=c.SOURCE_SPAN,
                predicted_ttft=_seconds(request.predicted_ttft_ms),
                predicted_tpot=_seconds(request.predicted_tpot_ms),
                quantile=self._quantile_of(pool) or DEFAULT_QUANTILE,
                objective=self._objective_of(pool) or c.OBJECTIVE_QUANTILE,
            )
        elif not self._settings.shadow:
            self.unpredicted(pending, None)
        elif pool not in self._predicted_pools:
            self.unpredicted(pending, c.SKIP_NO_PREDICTOR)
        elif self._settings.share < 1.0 and self._rng.random() >= self._settings.share:
            self.unpredicted(pending, c.SKIP_SAMPLED_OUT)
        else:
            self._enqueue(pending)


def _seconds(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None else None


def _target_seconds(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None and is_valid_target(ms) else None
