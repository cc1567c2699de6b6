"""Asks the prediction servers of a pool for TTFT/TPOT predictions, the way the EPP does.

Requests go out as ``POST /predict/bulk/strict``, the endpoint both EPP generations call at routing
time (``PredictBulkStrict``: gateway-api-inference-extension ``slo_aware_router/
latencypredictor_helper.go:348`` at 0f0dff68, llm-d-router ``predictedlatency/training.go:237`` at
ebab6879), in batches of at most ``settings.batch_size`` (the EPP's bulk calls carry up to 100), one
batch per server in round-robin order, all batches of one :meth:`PredictionClient.predict` call at
once. Each server has its own :class:`CircuitBreaker`; a server whose breaker is open is skipped,
and a batch finding every breaker open is answered without a call (counted ``circuit_open``).

A batch whose call fails (timeout, refused connection, 5xx, unreadable answer) is sent once more to
another server of the pool whose breaker is closed, if there is one, before its requests count as
failed; each such second attempt is reported to ``retried(purpose)``. A 422 is not retried: every
replica validates alike.

What the prediction server answers (``prediction_server.py`` of the latency predictor, recorded in
``fixtures/predictor/`` and ``fixtures/predictor/llm-d/``) and what the client makes of it:

- 200 with ``predictions`` (one entry per request): the predictions by index. ``/predict/bulk/strict``
  either predicts every item or fails the whole call (503 "Models not ready" when its models are not
  loaded, 500 when predicting raises: ``predict_bulk_strict_endpoint`` at llm-d-latency-predictor
  b5d19f17); ``null`` entries or an ``errors`` list (``{"index", "error", "request"}``, the shape of
  ``/predict/bulk``) are read as failed items, and a 200 without a single prediction is counted
  ``http_error`` and trips the breaker.
- 422: FastAPI's validation error (a feature out of range, a missing field): the request was wrong,
  not the server, so it is counted ``rejected`` and neither trips nor closes the breaker. The whole
  batch is refused (validation happens before any item is predicted).
- any other status (500, 503, 404 of a wrong URL), a timeout, a refused or reset connection, or a body
  that is not the documented JSON (or larger than ``MAX_ANSWER_BYTES``): ``http_error`` / ``timeout`` /
  ``connection_error`` / ``parse_error``, a failure for the breaker, ``None`` for the batch (after the
  retry). ``timeout`` is a total deadline, connect to the answer's last byte (``predictions.timeout_seconds``,
  :func:`sloscope.receivers.http_fetch.exchange`), as the EPP's ``http.Client{Timeout}`` is
  (``latencypredictorclient/latencypredictor_async.go:65`` at llm-d-router ebab6879): a server
  trickling its answer is cut off.
- 200 of the documented shape with values that cannot be predictions (a quantile outside (0, 1), a
  negative, NaN or infinite latency: :func:`sloscope.predictor.features.out_of_range`) or another count of
  predictions than requests: ``invalid_answer``, the whole answer discarded, a failure for the breaker,
  retried like the failures above. It costs the batch's predictions only: their requests are still
  recorded (skipped ``failed``). 401/403, a
  failed TLS handshake and an unreadable token file are ``auth_error`` / ``tls_error`` /
  ``credentials_error``, classified as the scrapes classify them (``receivers/http_fetch.py``).

Whether the answers carry ``objective_type`` (the llm-d predictor's do) is kept in
:attr:`PredictionClient.speaks_objective`, for telling EPP generations apart.

Nothing here raises for server trouble; results are always index-aligned with the input.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import httpx

from sloscope import conventions as c
from sloscope.config import Predictions
from sloscope.predictor.breaker import CLOSED, OPEN, BreakerState, CircuitBreaker
from sloscope.predictor.features import Features, Prediction, is_json_number, out_of_range, parse_objective
from sloscope.receivers.http_fetch import MAX_ANSWER_BYTES, exchange, read_json
from sloscope.receivers.off_loop import off_loop
from sloscope.redaction import redact_url

__all__ = ["BULK_PATH", "PredictionClient"]

BULK_PATH = "/predict/bulk/strict"
_RETRIED = frozenset(
    {
        c.RESULT_TIMEOUT,
        c.RESULT_CONNECTION_ERROR,
        c.RESULT_HTTP_ERROR,
        c.RESULT_PARSE_ERROR,
        c.RESULT_AUTH_ERROR,  # replicas may sit behind different proxies
        c.RESULT_TLS_ERROR,
        c.RESULT_INVALID_ANSWER,
    }
)
_REJECTED_STATUS = 422  # FastAPI's request validation error

log = logging.getLogger(__name__)

Result = list[Prediction | None]


@dataclass
class _Server:
    url: str  # base URL without a trailing slash
    breaker: CircuitBreaker
    shown: str  # in the logs: its server label (a name, or the URL with userinfo masked)


class PredictionClient:
    """Batched, round-robin ``/predict/bulk/strict`` calls to one pool's prediction servers.

    ``count(purpose, result)`` is called once per HTTP call with one of ``conventions.PREDICTOR_RESULTS``
    (and once per batch answered ``circuit_open`` without a call); ``retried(purpose)`` once per batch
    sent again to another server after a failed call. ``clock`` drives the breakers (monotonic
    seconds). Use from one event loop.
    """

    def __init__(
        self,
        urls: list[str],
        settings: Predictions,
        http: httpx.AsyncClient,
        count: Callable[[str, str], None] | None = None,
        *,
        retried: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        labels: Sequence[str] | None = None,
    ) -> None:
        """``labels``: each server's name in the logs (its ``server`` label); else its URL, userinfo masked."""
        if not urls:
            raise ValueError("a prediction client needs at least one server URL")
        self._settings = settings
        self._http = http
        self._count = count or _no_count
        self._retried = retried or _no_retry
        self.speaks_objective: bool | None = None
        """Whether the last successful answer's predictions carried ``objective_type``; None before one."""
        shown = list(labels) if labels is not None else [redact_url(url.rstrip("/")) for url in urls]
        self._servers = [
            _Server(
                url.rstrip("/"), CircuitBreaker(settings.breaker_failures, settings.breaker_open_seconds, clock), label
            )
            for url, label in zip(urls, shown, strict=True)
        ]
        self._next = 0  # index of the server next in turn

    @property
    def server_count(self) -> int:
        """How many prediction servers the pool has: one batch each can be in flight at once."""
        return len(self._servers)

    def breaker_states(self) -> dict[str, BreakerState]:
        """Each server's breaker state, by base URL."""
        return {server.url: server.breaker.state for server in self._servers}

    async def predict(self, features: Sequence[Features], purpose: str) -> Result:
        """Predictions for ``features``, index-aligned; ``None`` where no prediction could be had."""
        size = self._settings.batch_size
        batches = [list(features[start : start + size]) for start in range(0, len(features), size)]
        calls = [self._batch(batch, purpose) for batch in batches]
        results = await asyncio.gather(*calls)
        return [prediction for result in results for prediction in result]

    async def _batch(self, batch: list[Features], purpose: str) -> Result:
        missing: Result = [None] * len(batch)
        try:
            body = json.dumps({"requests": [f.to_json() for f in batch]}, allow_nan=False).encode()
        except (ValueError, TypeError):
            # NaN, infinity or a non-number cannot be sent: refused before any call, as the server would.
            self._count(purpose, c.RESULT_REJECTED)
            return missing
        # Picked before the first await: gather starts the batches in order, so turns follow batch order,
        # and a batch cancelled before it started has reserved nothing.
        server = self._pick()
        if server is None:
            self._count(purpose, c.RESULT_CIRCUIT_OPEN)
            return missing
        result, predictions = await self._call(server, body, len(batch), purpose)
        if result in _RETRIED:
            other = self._pick_other(server)
            if other is not None:
                self._retried(purpose)
                result, predictions = await self._call(other, body, len(batch), purpose)
        return predictions if predictions is not None else missing

    async def _call(self, server: _Server, body: bytes, size: int, purpose: str) -> tuple[str, Result | None]:
        """One call to ``server`` (whose breaker let it through), counted and told to its breaker."""
        breaker = server.breaker
        try:
            result, predictions = await self._post(server, body, size)
        except BaseException:  # cancelled: the call says nothing about the server
            breaker.abandon()
            raise
        self._count(purpose, result)
        if result == c.RESULT_SUCCESS:
            breaker.success()
        elif result == c.RESULT_REJECTED:
            breaker.abandon()
        else:
            breaker.failure()
            if breaker.state == OPEN:
                log.warning(
                    "prediction server %s: %s; not called for %gs",
                    server.shown,
                    result,
                    self._settings.breaker_open_seconds,
                )
        return result, predictions

    def _pick(self) -> _Server | None:
        servers = self._servers
        for step in range(len(servers)):
            index = (self._next + step) % len(servers)
            if servers[index].breaker.allow():
                self._next = (index + 1) % len(servers)
                return servers[index]
        return None

    def _pick_other(self, failed: _Server) -> _Server | None:
        """Another server whose breaker is closed (a healthy replica), next in turn after ``failed``."""
        servers = self._servers
        start = servers.index(failed)
        for step in range(1, len(servers)):
            server = servers[(start + step) % len(servers)]
            if server.breaker.state == CLOSED and server.breaker.allow():
                return server
        return None

    async def _post(self, server: _Server, body: bytes, size: int) -> tuple[str, Result | None]:
        answer = await exchange(
            self._http,
            "POST",
            server.url + BULK_PATH,
            timeout=self._settings.timeout_seconds,
            max_bytes=MAX_ANSWER_BYTES,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            content=body,
        )
        if answer.status == _REJECTED_STATUS:
            return c.RESULT_REJECTED, None
        if not answer.ok:
            return answer.result, None
        try:
            document = await off_loop(len(answer.body), read_json, answer.body)
        except ValueError:  # not JSON, not UTF-8, nested too deeply
            return c.RESULT_PARSE_ERROR, None
        result, predictions = _parse_bulk(document, size)
        if predictions is None:
            if result == c.RESULT_INVALID_ANSWER:
                log.warning("prediction server %s: answer discarded: %s", server.shown, _invalid_reason(document, size))
            return result, None
        if size and all(p is None for p in predictions):
            return c.RESULT_HTTP_ERROR, predictions  # the server could not predict at all (models not loaded)
        self.speaks_objective = _speaks_objective(document)
        return c.RESULT_SUCCESS, predictions


class _InvalidError(ValueError):
    """An entry of the documented shape whose values cannot be a prediction (``out_of_range``)."""


def _parse_bulk(document: Any, size: int) -> tuple[str, Result | None]:
    """The predictions of a ``/predict/bulk/strict`` (or ``/predict/bulk``) answer for ``size`` requests.

    ``parse_error`` (None) for another shape; ``invalid_answer`` (None) for another count of predictions
    than requests (the EPP's client refuses that too: ``coalescer.go:165`` "Guard against response
    length mismatch" at llm-d-router ebab6879) or any value out of range: the whole answer is
    discarded, since a server that writes one impossible value cannot be trusted for the others.
    """
    if not isinstance(document, dict):
        return c.RESULT_PARSE_ERROR, None
    entries = document.get("predictions")
    if not isinstance(entries, list):
        return c.RESULT_PARSE_ERROR, None
    if len(entries) != size:
        return c.RESULT_INVALID_ANSWER, None
    failed: set[int] = set()
    errors = document.get("errors", [])
    if isinstance(errors, list):
        failed.update(e["index"] for e in errors if isinstance(e, dict) and _is_int(e.get("index")))
    out: Result = []
    for index, entry in enumerate(entries):
        if entry is None or index in failed:
            out.append(None)
            continue
        try:
            prediction = _prediction(entry)
        except _InvalidError:
            return c.RESULT_INVALID_ANSWER, None
        if prediction is None:
            return c.RESULT_PARSE_ERROR, None
        out.append(prediction)
    return c.RESULT_SUCCESS, out


def _invalid_reason(document: dict[str, Any], size: int) -> str:
    """What made an answer ``invalid_answer``, for the log line."""
    entries = document["predictions"]
    if len(entries) != size:
        return f"{len(entries)} predictions for {size} requests"
    for entry in entries:
        try:
            _prediction(entry)
        except _InvalidError as exc:
            return str(exc)
    return "values out of range"


def _speaks_objective(document: dict[str, Any]) -> bool:
    """Whether the answer's predictions name their objective (``objective_type``: the llm-d predictor)."""
    return any(isinstance(e, dict) and "objective_type" in e for e in document["predictions"])


def _prediction(entry: Any) -> Prediction | None:
    """One entry; None for another shape, :class:`_InvalidError` for values that cannot be a prediction."""
    if not isinstance(entry, dict):
        return None
    ttft, tpot, quantile, model_type = (entry.get(k) for k in ("ttft_ms", "tpot_ms", "quantile", "model_type"))
    try:
        objective = parse_objective(entry.get("objective_type"))
    except ValueError:
        return None
    if not (_is_number(ttft) and _is_number(tpot) and _is_number(quantile) and isinstance(model_type, str)):
        return None
    reason = out_of_range(float(ttft), float(tpot), float(quantile))
    if reason is not None:
        raise _InvalidError(reason)
    return Prediction(float(ttft), float(tpot), float(quantile), model_type, objective)


def _is_number(value: Any) -> TypeGuard[int | float]:
    """A JSON number (Python's json reads NaN and Infinity too: :func:`out_of_range` refuses them)."""
    return is_json_number(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _no_count(purpose: str, result: str) -> None:
    pass


def _no_retry(purpose: str) -> None:
    pass
