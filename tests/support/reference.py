"""The evaluator stage and its publishers one request at a time: the reference the production batch path is held to.

Production evaluates and publishes batches only (processors/evaluator.py): verdicts as columns, labels admitted
per batch, each family counted per label set. The differential tests feed the same requests here, one at a time,
written as plainly as the rules read (evaluate one request, admit its four labels, count it in every family),
and require byte-identical /metrics, the same records and the same shadow queues. The classes below subclass
the production publishers only to reach their families: what they count, and in what order, is this file's own.

The records too: production builds a batch's records as one Arrow table from the batch's columns
(processors/record_parts.py, store/schema.py); here each request's record is an object (:class:`RequestRecord`)
made of its request, its evaluation and its prediction, and :func:`record_table` turns such objects into rows
value by value, as the rules for each column read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from sloscope import conventions as c
from sloscope.processors.labels import LabelAdmission
from sloscope.processors.predictions import DEFAULT_QUANTILE, Pending, PredictionTracker
from sloscope.processors.record_parts import Settled
from sloscope.processors.trace_sampling import adjusted_count
from sloscope.publishers.prometheus import PrometheusPublisher
from sloscope.records import Evaluation, JoinedRequest, Verdict
from sloscope.slo.evaluate import evaluate, valid_seconds, valid_tokens
from sloscope.slo.spec import SLOSpec, is_valid_target
from sloscope.store.schema import COLUMNS, SCHEMA, SCHEMA_VERSION, Records


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
    """One request at a time; ``admission`` tells the pool a request is counted in before the cap (whose sampling
    setting applies), else its label is taken for it."""

    def __init__(self, *args: Any, admission: LabelAdmission | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._admission = admission

    def publish_request(self, request: JoinedRequest, evaluation: Evaluation, labels: RequestLabels) -> None:
        model, pool, slo_class, pod = labels
        base = (model, pool, slo_class, request.routing)
        counted = self._admission.pool(request.pool, request) if self._admission is not None else pool
        weight = adjusted_count(request.sampling_probability, self._assumed(counted))
        with self._series.lock:
            if base not in self._requests.values:
                self._start_request(base, slo_class)
            self._requests.inc(base, weight)
            self._sampled_requests.inc(base)
            if request.failure_reason is not None:
                self._failed.inc((*base, request.failure_reason), weight)
            on_a_pod = request.failure_reason is None or bool(request.pod or request.endpoint)
            if on_a_pod:  # a request refused or lost before any pod is no pod's
                if (pool, pod) not in self._pod_requests.values:
                    self._start_pod(pool, pod)
                self._pod_requests.inc((pool, pod), weight)
            for field in evaluation.invalid_fields:
                self._invalid.inc((field,))
            for slo in c.SLOS:
                verdict = evaluation.verdict(slo)
                if not verdict.eligible:
                    continue
                key = (*base, slo)
                if key not in self._slo_requests.values:  # the default class's first eligible request
                    self._slo_violations.start(key)
                self._slo_requests.inc(key, weight)
                self._sampled_slo_requests.inc(key)
                if not verdict.met:
                    self._slo_violations.inc(key, weight)
                    self._sampled_slo_violations.inc(key)
                    if on_a_pod:
                        self._pod_violations.inc((pool, pod, slo), weight)
            self._observe_request(request, evaluation, (model, pool, slo_class), weight)

    def _observe_request(
        self, request: JoinedRequest, evaluation: Evaluation, histogram: tuple[str, str, str], weight: float
    ) -> None:
        """Its latencies and token counts, each when valid (a failed request may carry none)."""
        trace = request.trace_id
        if evaluation.ttft_seconds is not None:
            self._ttft.observe(histogram, evaluation.ttft_seconds, trace, weight)
        if evaluation.tpot_seconds is not None:
            self._tpot.observe(histogram, evaluation.tpot_seconds, trace, weight)
        if valid_seconds(request.server_ttft_seconds):
            self._server_ttft.observe(histogram, request.server_ttft_seconds, trace, weight)
        if valid_seconds(request.e2e_seconds):
            self._e2e.observe(histogram, request.e2e_seconds, trace, weight)
        if valid_tokens(request.prompt_tokens):
            self._prompt_tokens.observe(histogram, request.prompt_tokens, weight=weight)
        if valid_tokens(request.completion_tokens):
            self._completion_tokens.observe(histogram, request.completion_tokens, weight=weight)


@dataclass(slots=True)
class PodStateAtArrival:
    """The scraped state of the request's pod as of its arrival (the sample the as-of join found)."""

    waiting: float | None
    running: float | None
    kv_cache_utilization: float | None  # 0..1
    age_seconds: float  # arrival minus the sample's scrape time


@dataclass(slots=True)
class RequestRecord:
    """One evaluated request with everything sloscope learned about it: the record store's row as an object."""

    request: JoinedRequest
    evaluation: Evaluation
    pool: str  # the pool the request is counted in (span, discovery or the default pool)
    prediction_source: str  # "span", "shadow" or "none"
    predicted_ttft_seconds: float | None = None
    predicted_tpot_seconds: float | None = None
    prediction_quantile: float | None = None  # None for a mean prediction
    prediction_objective: str | None = None  # "quantile" or "mean"; None without a prediction
    prediction_skipped: str | None = None  # why there is no prediction (a shadow skip reason), else None
    ttft_headroom_seconds: float | None = None  # SLO - predicted at routing
    tpot_headroom_seconds: float | None = None
    pod_state: PodStateAtArrival | None = None
    predicted_e2e_seconds: float | None = None  # streaming off: the predicted "TTFT" is end-to-end latency
    e2e_headroom_seconds: float | None = None


def _ns(value: int) -> int | None:
    return value or None  # 0 means "no span said"


def _met(verdict: Verdict) -> bool | None:
    return verdict.met if verdict.eligible else None


def _pod(record: RequestRecord, field: str) -> float | None:
    state = record.pod_state
    return getattr(state, field) if state is not None else None


def _tokens(value: float | None) -> int | None:
    """A token count as an int64; None when missing or not a count an int64 can hold."""
    if value is None or not math.isfinite(value) or not 0 <= value <= 2**63 - 1:
        return None
    return int(value)


# Each column of the record store, from one request's record (the production columns say it for a batch's parts).
_VALUES: dict[str, Callable[[RequestRecord], Any]] = {
    "schema_version": lambda r: SCHEMA_VERSION,
    "trace_id": lambda r: r.request.trace_id,
    "span_id": lambda r: r.request.span_id,
    "request_id": lambda r: r.request.request_id,
    "arrival_time": lambda r: _ns(r.request.arrival_ns),
    "start_time": lambda r: _ns(r.request.start_ns),
    "end_time": lambda r: _ns(r.request.end_ns),
    "model": lambda r: r.request.model,
    "requested_model": lambda r: r.request.requested_model,
    "pool": lambda r: r.pool,
    "pod": lambda r: r.request.pod,
    "endpoint": lambda r: r.request.endpoint,
    "slo_class": lambda r: r.evaluation.slo_class,
    "routing": lambda r: r.request.routing,
    "target_source": lambda r: r.evaluation.target_source,
    "ttft_target_seconds": lambda r: r.evaluation.ttft.target,
    "tpot_target_seconds": lambda r: r.evaluation.tpot.target,
    "ttft_seconds": lambda r: r.evaluation.ttft_seconds,
    "model_server_ttft_seconds": lambda r: r.request.server_ttft_seconds,
    "ttft_source": lambda r: r.request.ttft_source,
    "tpot_seconds": lambda r: r.evaluation.tpot_seconds,
    "e2e_seconds": lambda r: r.request.e2e_seconds,
    "queue_seconds": lambda r: r.request.queue_seconds,
    "prefill_seconds": lambda r: r.request.prefill_seconds,
    "decode_seconds": lambda r: r.request.decode_seconds,
    "prompt_tokens": lambda r: _tokens(r.request.prompt_tokens),
    "completion_tokens": lambda r: _tokens(r.request.completion_tokens),
    "ttft_met": lambda r: _met(r.evaluation.ttft),
    "tpot_met": lambda r: _met(r.evaluation.tpot),
    "goodput_met": lambda r: _met(r.evaluation.goodput),
    "invalid_fields": lambda r: list(r.evaluation.invalid_fields),
    "prediction_source": lambda r: r.prediction_source,
    "prediction_skipped": lambda r: r.prediction_skipped,
    "predicted_ttft_seconds": lambda r: r.predicted_ttft_seconds,
    "predicted_tpot_seconds": lambda r: r.predicted_tpot_seconds,
    "prediction_quantile": lambda r: r.prediction_quantile,
    "prediction_objective": lambda r: r.prediction_objective,
    "ttft_headroom_seconds": lambda r: r.ttft_headroom_seconds,
    "tpot_headroom_seconds": lambda r: r.tpot_headroom_seconds,
    "predicted_e2e_seconds": lambda r: r.predicted_e2e_seconds,
    "e2e_headroom_seconds": lambda r: r.e2e_headroom_seconds,
    "pod_waiting": lambda r: _pod(r, "waiting"),
    "pod_running": lambda r: _pod(r, "running"),
    "pod_kv_cache_utilization": lambda r: _pod(r, "kv_cache_utilization"),
    "pod_state_age_seconds": lambda r: _pod(r, "age_seconds"),
    "join_outcome": lambda r: r.request.outcome,
    "failure_reason": lambda r: r.request.failure_reason,
    "choices": lambda r: r.request.choices,
    "prefill_pod": lambda r: r.request.prefill_pod,
    "prefill_queue_seconds": lambda r: r.request.prefill_queue_seconds,
    "prefill_stage_seconds": lambda r: r.request.prefill_seconds_on_prefill_pod,
    "call_arrival_time": lambda r: _ns(r.request.call_arrival_ns),
    "gateway": lambda r: r.request.gateway,
    "ttft_judged_seconds": lambda r: r.evaluation.ttft.actual,
    "sampling_probability": lambda r: r.request.sampling_probability,
}
assert list(_VALUES) == [column.name for column in COLUMNS], "a column of the store without its rule here"


def record_table(records: Sequence[RequestRecord]) -> pa.Table:
    """Records as rows of the record store, value by value."""
    arrays = [pa.array([_VALUES[column.name](r) for r in records], type=column.type) for column in COLUMNS]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def record_rows(tables: Iterable[Records]) -> list[dict[str, Any]]:
    """Every row of the tables as a dict, in order; times as int64 nanoseconds (what the columns hold, exactly)."""
    rows: list[dict[str, Any]] = []
    for table in tables:
        columns = {
            name: (column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column).to_pylist()
            for name, column in zip(table.schema.names, table.columns, strict=True)
        }
        rows += [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    return rows


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

    def _settled_records(self, settled: list[tuple[Pending, Settled]]) -> pa.RecordBatch:
        """The requests' records as objects, each made of its request, its evaluation, its prediction (the values
        :meth:`record` or :meth:`unpredicted` settled on) and its pod's state as of arrival."""
        (batch,) = record_table([self._record_of(pending, values) for pending, values in settled]).to_batches()
        return batch

    def _record_of(self, pending: Pending, values: Settled) -> RequestRecord:
        sample = self._history.as_of(pending.key, pending.arrival) if pending.key is not None else None
        pod_state = None
        if sample is not None:
            state = sample.state
            pod_state = PodStateAtArrival(
                state.waiting, state.running, state.kv_cache_utilization, pending.arrival - sample.at
            )
        return RequestRecord(
            pending.request,
            pending.evaluation,
            pool=values.pool,
            prediction_source=values.source,
            predicted_ttft_seconds=values.ttft,
            predicted_tpot_seconds=values.tpot,
            prediction_quantile=values.quantile,
            prediction_objective=values.objective,
            prediction_skipped=values.skipped,
            ttft_headroom_seconds=values.ttft_headroom,
            tpot_headroom_seconds=values.tpot_headroom,
            pod_state=pod_state,
            predicted_e2e_seconds=values.e2e,
            e2e_headroom_seconds=values.e2e_headroom,
        )


def _seconds(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None else None


def _target_seconds(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None and is_valid_target(ms) else None
