"""OTLP/HTTP receiver: ``POST /v1/traces`` with protobuf or JSON bodies, gzip allowed. Thin.

Errors follow the OTLP/HTTP spec: the body of every 4xx/5xx is a ``google.rpc.Status`` in the
request's encoding. 400 malformed, 413 too large, 415 unsupported type, 429 + Retry-After when
the queue is full, 503 + Retry-After while shutting down; partial success in a 200 body.
A client that goes away mid-body is counted ``client_disconnected`` and logged at debug.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, NamedTuple

from fastapi import Request, Response
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Route
from starlette.types import Scope

from sloscope.receivers.in_flight import Lease
from sloscope.receivers.intake import Intake, Result, Status
from sloscope.receivers.otlp_decode import MalformedPayloadError, PayloadTooLargeError

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_PROTOBUF_TYPES = frozenset({PROTOBUF, "application/protobuf"})
TRACES_PATH = "/v1/traces"


class Reply(NamedTuple):
    """An answer of the receiver, whichever server sends it (uvicorn, or the native front)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def response(self) -> Response:
        return Response(self.body, self.status, dict(self.headers))


class OtlpHttpReceiver:
    """``POST /v1/traces`` as a plain ASGI app.

    FastAPI routes to it (:func:`otlp_route`); without self-tracing the listener calls it directly
    (:func:`sloscope.service.app.create_otlp_app`), because FastAPI's routing, dependency solving and
    exception middleware cost more per export than this handler's own work.
    ``body_timeout``: seconds a client has to send a body once its headers are in (a total, not per read).
    """

    def __init__(self, intake: Intake, max_request_bytes: int, body_timeout: float = 30.0) -> None:
        self._intake = intake
        self._limit = max_request_bytes
        self._body_timeout = body_timeout
        self._retry = {"Retry-After": str(intake.retry_after_seconds)}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        response = await self.export(Request(scope, receive))
        await response(scope, receive, send)

    async def export(self, request: Request) -> Response:
        intake = self._intake
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        is_json = media_type == JSON
        if not is_json and media_type not in _PROTOBUF_TYPES:
            intake.count_request("http", "unsupported")
            return unsupported(media_type).response()
        encoding = request.headers.get("content-encoding", "")
        lease = Lease(intake.in_flight)
        try:
            reply = await _export(
                request,
                intake,
                lease,
                encoding=encoding,
                is_json=is_json,
                limit=self._limit,
                body_timeout=self._body_timeout,
                retry=self._retry,
            )
            return reply.response()
        except ClientDisconnect:
            intake.count_request("http", "client_disconnected")
            log_disconnected(lease.size)
            return Response(status_code=499)  # never sent (the client is gone); 499 in the HTTP server series
        finally:
            lease.release()


class _NamedRoute(Route):
    """A route that puts itself in the scope when it matches, as FastAPI's own routes do: the HTTP server
    metrics read their ``handler`` label from it."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def otlp_route(receiver: OtlpHttpReceiver) -> Route:
    """The receiver's route: only POST, so any other method is answered 405 by the router."""
    return _NamedRoute(TRACES_PATH, receiver, methods=["POST"], name="otlp_traces", include_in_schema=False)


class _InFlightFullError(Exception):
    """Admitting the body would pass ``limits.max_bytes_in_flight``."""


async def _export(
    request: Request,
    intake: Intake,
    lease: Lease,
    *,
    encoding: str,
    is_json: bool,
    limit: int,
    body_timeout: float,
    retry: dict[str, str],
) -> Reply:
    try:
        async with asyncio.timeout(body_timeout):  # the total, not per chunk: a trickle of bytes never ends
            body = await _read_body(request, limit, lease)
        if encoding.strip().lower() not in ("", "identity") and not lease.take(limit):  # inflated, at worst
            raise _InFlightFullError
        result = await intake.receive(body, encoding, is_json=is_json, transport="http")
    except TimeoutError:
        intake.count_request("http", "body_timeout")
        log_body_timeout(body_timeout, lease.size)
        return body_timed_out(body_timeout, is_json)
    except _InFlightFullError:
        intake.count_request("http", "in_flight_full")
        return in_flight_full(is_json, retry)
    except PayloadTooLargeError as exc:
        intake.count_request("http", "too_large")
        return too_large(str(exc), is_json)
    except MalformedPayloadError as exc:
        intake.count_request("http", "malformed")
        return malformed(str(exc), is_json)
    return answer(result, is_json, retry)


def log_disconnected(read: int) -> None:
    log.debug("OTLP/HTTP client disconnected before its body was read whole (%d bytes read)", read)


def log_body_timeout(body_timeout: float, read: int) -> None:
    log.debug("OTLP/HTTP body not received within %gs (%d bytes read)", body_timeout, read)


def answer(result: Result, is_json: bool, retry: dict[str, str]) -> Reply:
    """The answer to a body the intake took (or refused: full, too many spans, shutting down)."""
    if result.status is Status.QUEUE_FULL:
        return _error(429, code_pb2.RESOURCE_EXHAUSTED, "sloscope is busy: queue full, retry later", is_json, retry)
    if result.status is Status.TOO_MANY_SPANS:
        return too_large(result.message, is_json)
    if result.status is Status.SHUTTING_DOWN:
        return _error(503, code_pb2.UNAVAILABLE, "sloscope is shutting down", is_json, retry)
    return _success(result.rejected, result.message, is_json)


def unsupported(media_type: str) -> Reply:
    message = f"unsupported Content-Type {media_type or '(none)'!r}; use {PROTOBUF} or {JSON}"
    return _error(415, code_pb2.INVALID_ARGUMENT, message, False)


def body_timed_out(body_timeout: float, is_json: bool) -> Reply:
    message = f"request body not received within {body_timeout:g}s"
    return _error(408, code_pb2.DEADLINE_EXCEEDED, message, is_json, {"Connection": "close"})


def in_flight_full(is_json: bool, retry: dict[str, str]) -> Reply:
    message = "sloscope is busy: too many bytes in flight, retry later"
    return _error(429, code_pb2.RESOURCE_EXHAUSTED, message, is_json, retry)


def too_large(message: str, is_json: bool) -> Reply:
    return _error(413, code_pb2.INVALID_ARGUMENT, message, is_json)


def malformed(message: str, is_json: bool) -> Reply:
    return _error(400, code_pb2.INVALID_ARGUMENT, message, is_json)


async def _read_body(request: Request, limit: int, lease: Lease) -> bytes:
    """The whole body, held in ``lease`` (the declared length up front, else chunk by chunk)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit():
        if int(declared) > limit:
            raise PayloadTooLargeError(f"body of {declared} bytes exceeds the limit of {limit}")
        if not lease.take(int(declared)):
            raise _InFlightFullError
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"body exceeds the limit of {limit} bytes")
        if size > lease.size and not lease.take(size - lease.size):
            raise _InFlightFullError
        chunks.append(chunk)
    return b"".join(chunks)


def _success(rejected: int, message: str, is_json: bool) -> Reply:
    if is_json:
        body = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}} if rejected else {}
        return _reply(200, json.dumps(body).encode(), JSON)
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return _reply(200, response.SerializeToString(), PROTOBUF)


def _error(status: int, code: int, message: str, is_json: bool, headers: dict[str, str] | None = None) -> Reply:
    if is_json:
        return _reply(status, json.dumps({"code": code, "message": message}).encode(), JSON, headers)
    body = status_pb2.Status(code=code, message=message).SerializeToString()
    return _reply(status, body, PROTOBUF, headers)


def _reply(status: int, body: bytes, media_type: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, [("content-type", media_type), *(headers or {}).items()], body)
