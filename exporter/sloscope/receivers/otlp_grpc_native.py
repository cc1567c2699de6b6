"""OTLP/gRPC receiver on the native core's HTTP/2 server (``listeners.grpc.server: native``).

grpcio's asyncio server spends about 0.5 µs a span of the event loop's and its own threads' time before
sloscope sees a message, and the message then hops to a decoding thread (bench/front.py). The native front
(native/src/front) reads each Export message on a thread of its own, decodes it there without the GIL and
takes the GIL once to call :meth:`NativeGrpcReceiver.export`, which hands the spans to the intake and answers
with :class:`~sloscope.receivers.otlp_grpc_answers.Answers`, as the grpcio receiver does; it needs no grpcio.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from functools import partial

from sloscope import _native
from sloscope.config import Settings
from sloscope.listeners.tls import Pems
from sloscope.receivers.in_flight import TRIM_FROM_BYTES
from sloscope.receivers.intake import Intake
from sloscope.receivers.native_decode import decoded
from sloscope.receivers.otlp_grpc_answers import Answer, Answers, Code

Wire = tuple[int, str, list[tuple[str, bytes]], bytes]
"""An answer as the front takes it: (status code, message, trailing metadata, response message)."""


def _authorize(check: Callable[[str | None], str | None], authorization: str | None) -> Wire | None:
    message = check(authorization)
    return None if message is None else _wire(Answer(Code.UNAUTHENTICATED, message))


def _wire(answer: Answer) -> Wire:
    return int(answer.code), answer.message, list(answer.metadata), answer.body


class NativeGrpcReceiver:
    """The Python half of the native front: what it does with a decoded message, and its counts."""

    def __init__(self, intake: Intake, max_request_bytes: int) -> None:
        self._intake = intake
        self._answers = Answers(intake.retry_after_seconds, max_request_bytes)

    def export(self, outcome: _native.Outcome | str) -> Wire:
        """``outcome``: what the decoder made of the message, or why it is not an export."""
        if isinstance(outcome, str):
            self._intake.count_request("grpc", "malformed")
            return _wire(Answer(Code.INVALID_ARGUMENT, outcome))
        result = self._intake.submit(decoded(outcome), "grpc")
        return _wire(self._answers.of(result))

    def refused(self, result: str, size: int, reason: str) -> Wire:
        """A call the front refused before :meth:`export` (native/src/front/server.rs ``Handler::refused``)."""
        self._intake.count_request("grpc", "malformed" if result == "unsupported_encoding" else result)
        if result == "too_large":
            return _wire(self._answers.too_large(size))
        if result == "in_flight_full":
            return _wire(self._answers.in_flight_full)
        code = Code.UNIMPLEMENTED if result == "unsupported_encoding" else Code.INVALID_ARGUMENT
        return _wire(Answer(code, reason))


def start(
    sock: socket.socket,
    intake: Intake,
    settings: Settings,
    check: Callable[[str | None], str | None] | None,
    tls: tuple[Pems, Callable[[], Pems | None]] | None,
) -> _native.GrpcFront:
    """Serves ``sock`` (bound) from now on; the front owns it. ``check``: the listener's credentials check
    (``ListenerSetup.grpc_check``), None when it needs none; ``tls``: its TLS files and their reload check
    (``ListenerSetup.tls_files``), None for plain connections. Called on the event loop."""
    limits, grpc_limits = settings.limits, settings.listeners.grpc
    receiver = NativeGrpcReceiver(intake, limits.max_request_bytes)
    decoder = intake.native_decoder
    if decoder is None:
        raise ValueError("listeners.grpc.server: native needs join.engine: native (the native decoder)")
    sock.listen(settings.listeners.backlog)
    return _native.GrpcFront(
        sock.detach(),
        decoder,
        intake.in_flight.budget,
        receiver.export,
        receiver.refused,
        None if check is None else partial(_authorize, check),
        None if tls is None else tls[0],
        None if tls is None else tls[1],
        max_request_bytes=limits.max_request_bytes,
        max_connections=grpc_limits.max_connections,
        max_concurrent_streams=grpc_limits.max_concurrent_streams,
        keepalive_time=grpc_limits.keepalive_time_seconds,
        keepalive_timeout=grpc_limits.keepalive_timeout_seconds,
        min_ping_interval=grpc_limits.min_ping_interval_seconds,
        permit_without_calls=grpc_limits.permit_keepalive_without_calls,
        handshake_timeout=settings.listeners.header_timeout_seconds,
        max_idle=grpc_limits.max_connection_idle_seconds,
        max_age=grpc_limits.max_connection_age_seconds,
        max_age_grace=grpc_limits.max_connection_age_grace_seconds,
        handler_threads=limits.decode_threads,
        freed=intake.in_flight.freed_from_threads(),
        trim_from=TRIM_FROM_BYTES,
    )
