"""What the OTLP/gRPC Export method answers, shared by the grpcio receiver and the native front, without grpcio.

The status codes are gRPC's numbers (``grpc/status.h``, the same in every gRPC implementation): the native front
answers with the number, and the grpcio receiver (:mod:`sloscope.receivers.otlp_grpc`) turns a code into
grpcio's ``StatusCode`` by name. So ``serve`` with the native front imports no grpcio, which cost it 8 MiB of
resident memory (docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from sloscope.receivers.intake import Result, Status


class Code(IntEnum):
    """The gRPC status codes the receivers answer with (``grpc/status.h``)."""

    OK = 0
    INVALID_ARGUMENT = 3
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


def _retry_metadata(seconds: int, message: str) -> tuple[tuple[str, bytes], ...]:
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))
    detail = any_pb2.Any()
    detail.Pack(retry)
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=[detail])
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
    )


@dataclass(frozen=True)
class Answer:
    """What a call is answered: a status, and the response message when it is OK."""

    code: Code
    message: str = ""
    metadata: tuple[tuple[str, bytes], ...] = ()
    body: bytes = b""


class Answers:
    """The answers of the Export method, shared by the grpcio receiver and the native front."""

    def __init__(self, retry_after_seconds: int, max_request_bytes: int) -> None:
        self.max_request_bytes = max_request_bytes
        busy = "sloscope is busy: queue full, retry later"
        self.queue_full = Answer(Code.RESOURCE_EXHAUSTED, busy, _retry_metadata(retry_after_seconds, busy))
        full = "sloscope is busy: too many bytes in flight, retry later"
        self.in_flight_full = Answer(Code.RESOURCE_EXHAUSTED, full, _retry_metadata(retry_after_seconds, full))

    def too_large(self, size: int) -> Answer:
        """Permanent: INVALID_ARGUMENT, so exporters do not retry it."""
        return Answer(
            Code.INVALID_ARGUMENT,
            f"message of {size} bytes exceeds the limit of {self.max_request_bytes}; send smaller batches",
        )

    def of(self, result: Result) -> Answer:
        """The answer to a message the intake took (or refused)."""
        if result.status is Status.QUEUE_FULL:
            return self.queue_full
        if result.status is Status.TOO_MANY_SPANS:
            return Answer(Code.INVALID_ARGUMENT, result.message)
        if result.status is Status.SHUTTING_DOWN:
            return Answer(Code.UNAVAILABLE, "sloscope is shutting down")
        response = ExportTraceServiceResponse()
        if result.rejected:
            response.partial_success.rejected_spans = result.rejected
            response.partial_success.error_message = result.message
        return Answer(Code.OK, body=response.SerializeToString())
