"""OTLP/HTTP receiver: ``POST /v1/traces`` with protobuf or JSON bodies, gzip allowed. Thin.

Errors follow the OTLP/HTTP spec: the body of every 4xx/5xx is a ``google.rpc.Status`` in the
request's encoding. 400 malformed, 413 too large, 415 unsupported type, 429 + Retry-After when
the queue is full, 503 + Retry-After while shutting down; partial success in a 200 body.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from sloscope.receivers.intake import Intake, Status
from sloscope.receivers.otlp_decode import (
    MalformedPayloadError,
    PayloadTooLargeError,
    decode_json,
    decode_protobuf,
    decompress,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_PROTOBUF_TYPES = frozenset({PROTOBUF, "application/protobuf"})


def otlp_router(intake: Intake, max_request_bytes: int) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/traces", summary="OTLP/HTTP trace export")
    async def export_traces(request: Request) -> Response:
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        is_json = media_type == JSON
        if not is_json and media_type not in _PROTOBUF_TYPES:
            intake.count_request("http", "unsupported")
            return _error(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported Content-Type {media_type or '(none)'!r}; use {PROTOBUF} or {JSON}",
                False,
            )
        try:
            body = await _read_body(request, max_request_bytes)
            payload = decompress(body, request.headers.get("content-encoding", ""), max_request_bytes)
            decoded = decode_json(payload, intake.keep) if is_json else decode_protobuf(payload, intake.keep)
        except PayloadTooLargeError as exc:
            intake.count_request("http", "too_large")
            return _error(413, code_pb2.INVALID_ARGUMENT, str(exc), is_json)
        except MalformedPayloadError as exc:
            intake.count_request("http", "malformed")
            return _error(400, code_pb2.INVALID_ARGUMENT, str(exc), is_json)
        result = intake.submit(decoded, "http")
        retry = {"Retry-After": str(intake.retry_after_seconds)}
        if result.status is Status.QUEUE_FULL:
            return _error(429, code_pb2.RESOURCE_EXHAUSTED, "sloscope is busy: queue full, retry later", is_json, retry)
        if result.status is Status.TOO_MANY_SPANS:
            return _error(413, code_pb2.INVALID_ARGUMENT, result.message, is_json)
        if result.status is Status.SHUTTING_DOWN:
            return _error(503, code_pb2.UNAVAILABLE, "sloscope is shutting down", is_json, retry)
        return _success(result.rejected, result.message, is_json)

    return router


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"body of {declared} bytes exceeds the limit of {limit}")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"body exceeds the limit of {limit} bytes")
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
