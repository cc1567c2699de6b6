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
from typing import Any

from fastapi import Request, Response
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Route
from starlette.types import Scope

from sloscope.receivers.in_flight import Lease
from sloscope.receivers.intake import Intake, Status
from sloscope.receivers.otlp_decode import MalformedPayloadError, PayloadTooLargeError

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_PROTOBUF_TYPES = frozenset({PROTOBUF, "application/protobuf"})
TRACES_PATH = "/v1/traces"


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
            message = f"unsupported Content-Type {media_type or '(none)'!r}; use {PROTOBUF} or {JSON}"
            return _error(415, code_pb2.INVALID_ARGUMENT, message, False)
        encoding = request.headers.get("content-encoding", "")
        lease = Lease(intake.in_flight)
        try:
            return await _export(
                request,
                intake,
                lease,
                encoding=encoding,
                is_json=is_json,
                limit=self._limit,
                body_timeout=self._body_timeout,
                retry=self._retry,
            )
        except ClientDisconnect:
            intake.count_request("http", "client_disconnected")
            log.debug("OTLP/HTTP client disconnected before its body was read whole (%d bytes read)", lease.size)
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
) -> Response:
    try:
        async with asyncio.timeout(body_timeout):  # the total, not per chunk: a trickle of bytes never ends
            body = await _read_body(request, limit, lease)
        if encoding.strip().lower() not in ("", "identity") and not lease.take(limit):  # inflated, at worst
            raise _InFlightFullError
        result = await intake.receive(body, encoding, is_json=is_json, transport="http")
    except TimeoutError:
        intake.count_request("http", "body_timeout")
        log.debug("OTLP/HTTP body not received within %gs (%d bytes read)", body_timeout, lease.size)
        message = f"request body not received within {body_timeout:g}s"
        return _error(408, code_pb2.DEADLINE_EXCEEDED, message, is_json, {"Connection": "close"})
    except _InFlightFullError:
        intake.count_request("http", "in_flight_full")
        message = "sloscope is busy: too many bytes in flight, retry later"
        return _error(429, code_pb2.RESOURCE_EXHAUSTED, message, is_json, retry)
    except PayloadTooLargeError as exc:
        intake.count_request("http", "too_large")
        return _error(413, code_pb2.INVALID_ARGUMENT, str(exc), is_json)
    except MalformedPayloadError as exc:
        intake.count_request("http", "malformed")
        return _error(400, code_pb2.INVALID_ARGUMENT, str(exc), is_json)
    if result.status is Status.QUEUE_FULL:
        return _error(429, code_pb2.RESOURCE_EXHAUSTED, "sloscope is busy: queue full, retry later", is_json, retry)
    if result.status is Status.TOO_MANY_SPANS:
        return _error(413, code_pb2.INVALID_ARGUMENT, result.message, is_json)
    if result.status is Status.SHUTTING_DOWN:
        return _error(503, code_pb2.UNAVAILABLE, "sloscope is shutting down", is_json, retry)
    return _success(result.rejected, result.message, is_json)


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


def _success(rejected: int, message: str, is_json: bool) -> Response:
    if is_json:
        body = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}} if rejected else {}
        return Response(json.dumps(body), media_type=JSON)
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return Response(response.SerializeToString(), media_type=PROTOBUF)


def _error(status: int, code: int, message: str, is_json: bool, headers: dict[str, str] | None = None) -> Response:
    if is_json:
        return Response(json.dumps({"code": code, "message": message}), status, headers, media_type=JSON)
    body = status_pb2.Status(code=code, message=message).SerializeToString()
    return Response(body, status, headers, media_type=PROTOBUF)
