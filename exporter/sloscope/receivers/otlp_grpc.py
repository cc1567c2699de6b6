"""OTLP/gRPC receiver: the ``TraceService/Export`` method on a ``grpc.aio`` server. Thin.

The method is registered with a raw-bytes handler so that a malformed message reaches our decoder
and is answered INVALID_ARGUMENT with a reason (a generated servicer would fail inside gRPC with
an opaque INTERNAL). A full queue, or too many bytes in flight, answers RESOURCE_EXHAUSTED with a
RetryInfo, sent both the standard way (``grpc-status-details-bin``) and the way OpenTelemetry SDK
exporters read it (``google.rpc.retryinfo-bin``). Decoding runs off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import grpc

from sloscope.listeners.grpc_status import refuse
from sloscope.receivers.in_flight import Lease
from sloscope.receivers.intake import Intake
from sloscope.receivers.otlp_decode import MalformedPayloadError
from sloscope.receivers.otlp_grpc_answers import Answer, Answers, Code

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_STATUS = {code: grpc.StatusCode[code.name] for code in Code}  # the answers' codes as grpcio's


def trace_service_handler(intake: Intake, max_request_bytes: int) -> grpc.GenericRpcHandler:
    answers = Answers(intake.retry_after_seconds, max_request_bytes)

    async def export(request: bytes, context: Any) -> bytes:
        size = len(request)
        if size > max_request_bytes:
            intake.count_request("grpc", "too_large")
            intake.in_flight.freed(size)
            return answer(context, answers.too_large(size))
        lease = Lease(intake.in_flight)
        if not lease.take(size):
            intake.count_request("grpc", "in_flight_full")
            intake.in_flight.freed(size)
            return answer(context, answers.in_flight_full)
        try:
            result = await intake.receive(request, "", is_json=False, transport="grpc")
        except MalformedPayloadError as exc:
            intake.count_request("grpc", "malformed")
            return refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except asyncio.CancelledError:  # the client went away (or cancelled) while its message was decoded
            intake.count_request("grpc", "client_disconnected")
            log.debug("OTLP/gRPC client cancelled during decoding")
            raise
        finally:
            lease.release()
        return answer(context, answers.of(result))

    handler = grpc.unary_unary_rpc_method_handler(export)  # no (de)serializers: raw bytes both ways
    return grpc.method_handlers_generic_handler(SERVICE, {"Export": handler})


def answer(context: Any, reply: Answer) -> bytes:
    if reply.code is Code.OK:
        return reply.body
    return refuse(context, _STATUS[reply.code], reply.message, reply.metadata)


def create_server(
    intake: Intake,
    max_request_bytes: int,
    *,
    options: Sequence[tuple[str, int]] = (),
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> grpc.aio.Server:
    """``options``: further channel arguments (the listener's limits); ``interceptors``: its credentials check."""
    server = grpc.aio.server(options=server_options(max_request_bytes, options), interceptors=interceptors)
    server.add_generic_rpc_handlers((trace_service_handler(intake, max_request_bytes),))
    return server


def server_options(max_request_bytes: int, options: Sequence[tuple[str, int]] = ()) -> list[tuple[str, int]]:
    """The receiver's channel arguments, ``options`` (the listener's limits) after its own."""
    # gRPC's own cap answers RESOURCE_EXHAUSTED, which exporters retry forever; it is set well above
    # ours so that the handler can refuse oversize messages with a permanent, counted error.
    return [("grpc.max_receive_message_length", 4 * max_request_bytes), ("grpc.so_reuseport", 0), *options]
