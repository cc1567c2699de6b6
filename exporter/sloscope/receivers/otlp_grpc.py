"""OTLP/gRPC receiver: the ``TraceService/Export`` method on a ``grpc.aio`` server. Thin.

The method is registered with a raw-bytes handler so that a malformed message reaches our decoder
and is answered INVALID_ARGUMENT with a reason (a generated servicer would fail inside gRPC with
an opaque INTERNAL). A full queue answers RESOURCE_EXHAUSTED with a RetryInfo, sent both the
standard way (``grpc-status-details-bin``) and the way OpenTelemetry SDK exporters read it
(``google.rpc.retryinfo-bin``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from sloscope.receivers.intake import Intake, Status
from sloscope.receivers.otlp_decode import MalformedPayloadError, decode_protobuf

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


def _retry_metadata(seconds: int, message: str) -> tuple[tuple[str, bytes], ...]:
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))
    detail = any_pb2.Any()
    detail.Pack(retry)
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=[detail])
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
    )


def trace_service_handler(intake: Intake, max_request_bytes: int) -> grpc.GenericRpcHandler:
    busy = "sloscope is busy: queue full, retry later"
    retry_metadata = _retry_metadata(intake.retry_after_seconds, busy)

    async def export(request: bytes, context: Any) -> bytes:
        if len(request) > max_request_bytes:  # permanent: INVALID_ARGUMENT, so exporters do not retry it
            intake.count_request("grpc", "too_large")
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"message of {len(request)} bytes exceeds the limit of {max_request_bytes}; send smaller batches",
            )
        try:
            decoded = decode_protobuf(request, intake.keep)
        except MalformedPayloadError as exc:
            intake.count_request("grpc", "malformed")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        result = intake.submit(decoded, "grpc")
        if result.status is Status.QUEUE_FULL:
            context.set_trailing_metadata(retry_metadata)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, busy)
        if result.status is Status.TOO_MANY_SPANS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, result.message)
        if result.status is Status.SHUTTING_DOWN:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "sloscope is shutting down")
        response = ExportTraceServiceResponse()
        if result.rejected:
            response.partial_success.rejected_spans = result.rejected
            response.partial_success.error_message = result.message
        serialized: bytes = response.SerializeToString()
        return serialized

    handler = grpc.unary_unary_rpc_method_handler(export)  # no (de)serializers: raw bytes both ways
    return grpc.method_handlers_generic_handler(SERVICE, {"Export": handler})


def create_server(
    intake: Intake,
    max_request_bytes: int,
    *,
    options: Sequence[tuple[str, int]] = (),
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> grpc.aio.Server:
    """``options``: further channel arguments (the listener's limits); ``interceptors``: its credentials check."""
    # gRPC's own cap answers RESOURCE_EXHAUSTED, which exporters retry forever; it is set well above
    # ours so that the handler can refuse oversize messages with a permanent, counted error.
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 4 * max_request_bytes),
            ("grpc.so_reuseport", 0),
            *options,
        ],
        interceptors=interceptors,
    )
    server.add_generic_rpc_handlers((trace_service_handler(intake, max_request_bytes),))
    return server
