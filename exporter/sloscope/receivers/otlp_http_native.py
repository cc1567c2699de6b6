"""OTLP/HTTP receiver on the native core's HTTP/1.1 server (``listeners.otlp_http_server: native``).

uvicorn's event loop spends 0.6 to 0.8 µs a span reading and answering OTLP/HTTP requests before sloscope
decodes anything, and each body then hops to a decoding thread (docs/performance.md). The native front
(native/src/front/http.rs) reads each body on a thread of its own, decodes a plain protobuf or JSON body there
without the GIL, and takes the GIL once to call :meth:`NativeHttpReceiver.export`. Every answer is made here,
from the same functions as the uvicorn receiver's (:mod:`sloscope.receivers.otlp_http`), and every request is
counted in the same series: ``otlp_requests``, the HTTP server metrics, the listener's refused connections and
authentication failures. A compressed body, or JSON the native decoder leaves to the Python reference, is
decoded here (:meth:`NativeHttpReceiver.export_body`), still off the event loop.

With ``self_tracing`` on, each request routed here gets the server span FastAPI's instrumentation would have
made (:class:`sloscope.listeners.tracing.ServerSpans`).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

from sloscope import _native
from sloscope.config import Settings
from sloscope.listeners.auth import Credentials, unauthorized
from sloscope.listeners.http_metrics import HttpMetrics
from sloscope.listeners.tls import Pems
from sloscope.listeners.tracing import ServerSpans
from sloscope.receivers.in_flight import TRIM_FROM_BYTES
from sloscope.receivers.intake import Intake
from sloscope.receivers.native_decode import decoded
from sloscope.receivers.otlp_decode import Decoded, MalformedPayloadError, PayloadTooLargeError
from sloscope.receivers.otlp_http import (
    JSON,
    TRACES_PATH,
    Reply,
    answer,
    body_timed_out,
    in_flight_full,
    log_body_timeout,
    log_disconnected,
    malformed,
    too_large,
    unsupported,
)

_UNMATCHED = "none"  # the handler label of a path no route matches
_GONE = Reply(499, [], b"")  # never sent (the client is gone); 499 in the HTTP server series


def _detail(status: int, detail: str, headers: list[tuple[str, str]] | None = None) -> Reply:
    """FastAPI's answer to a path or method it does not serve."""
    return Reply(status, [("content-type", JSON), *(headers or [])], json.dumps({"detail": detail}).encode())


class NativeHttpReceiver:
    """The Python half of the native HTTP front: the answers, and their counts. Called on the front's threads."""

    def __init__(
        self,
        intake: Intake,
        settings: Settings,
        metrics: HttpMetrics,
        connection_refused: Callable[[str], None],
        *,
        credentials: tuple[Credentials, Callable[[str], None]] | None = None,
        freed: Callable[[int], None] = lambda _: None,
        spans: ServerSpans | None = None,
    ) -> None:
        """``freed``: told of a large body let go (``InFlightBytes.freed_from_threads``), to trim memory; ``spans``:
        where self-tracing spans go (None: self-tracing is off)."""
        self._intake = intake
        self._metrics = metrics
        self._body_timeout = settings.listeners.body_timeout_seconds
        self._retry = {"Retry-After": str(intake.retry_after_seconds)}
        self._credentials = credentials
        self.connection_refused = connection_refused
        self.freed = freed
        self._spans = spans

    def _answered(
        self, reply: Reply, seconds: float, method: str = "POST", handler: str = TRACES_PATH, path: str = TRACES_PATH
    ) -> Reply:
        self._metrics.observe(handler, method, reply.status, seconds)
        if self._spans is not None:
            self._spans.record(method, path, None if handler == _UNMATCHED else handler, reply.status, seconds)
        return reply

    def authorize(self, authorization: str | None, method: str, seconds: float) -> Reply | None:
        """None when the request carries accepted credentials, else the 401 (counted, as the uvicorn listener's)."""
        assert self._credentials is not None
        credentials, on_refusal = self._credentials
        reason = credentials.check(authorization)
        if reason is None:
            return None
        on_refusal(reason)
        headers, body = unauthorized(credentials, reason)
        self._metrics.observe(_UNMATCHED, method, 401, seconds)  # refused before routing: no span (ServerSpans)
        return Reply(401, headers, body)

    def other(self, method: str, path: str, seconds: float) -> Reply:
        """Anything but ``POST /v1/traces``: 405 on the path (only POST is served), 404 elsewhere."""
        if path == TRACES_PATH:
            return self._answered(_detail(405, "Method Not Allowed", [("allow", "POST")]), seconds, method)
        return self._answered(_detail(404, "Not Found"), seconds, method, _UNMATCHED, path)

    def export(self, outcome: _native.Outcome | str, is_json: bool, seconds: float) -> Reply:
        """``outcome``: what the native decoder made of the body, or why it is not an export."""
        if isinstance(outcome, str):
            self._intake.count_request("http", "malformed")
            return self._answered(malformed(outcome, is_json), seconds)
        return self._submit(decoded(outcome), is_json, seconds)

    def export_body(self, body: bytes, encoding: str, is_json: bool, seconds: float) -> Reply:
        """A body the front did not decode: compressed, or OTLP/JSON the native decoder leaves to the reference."""
        try:
            decoded = self._intake.decoder.decode_blocking(body, encoding, is_json=is_json)
        except PayloadTooLargeError as exc:
            self._intake.count_request("http", "too_large")
            return self._answered(too_large(str(exc), is_json), seconds)
        except MalformedPayloadError as exc:
            self._intake.count_request("http", "malformed")
            return self._answered(malformed(str(exc), is_json), seconds)
        return self._submit(decoded, is_json, seconds)

    def _submit(self, export: Decoded, is_json: bool, seconds: float) -> Reply:
        result = self._intake.submit(export, "http")
        return self._answered(answer(result, is_json, self._retry), seconds)

    def refused(self, result: str, reason: str, read: int, is_json: bool, seconds: float) -> Reply:
        """A request the front refused before :meth:`export` (native/src/front/http.rs ``Handler::refused``);
        ``read``: the bytes of its body read."""
        self._intake.count_request("http", result)
        if result == "unsupported":
            reply = unsupported(reason)
        elif result == "too_large":
            reply = too_large(reason, is_json)
        elif result == "in_flight_full":
            reply = in_flight_full(is_json, self._retry)
        elif result == "body_timeout":
            log_body_timeout(self._body_timeout, read)
            reply = body_timed_out(self._body_timeout, is_json)
        else:  # client_disconnected
            log_disconnected(read)
            reply = _GONE
        return self._answered(reply, seconds)


def start(
    sock: socket.socket,
    intake: Intake,
    settings: Settings,
    receiver: NativeHttpReceiver,
    tls: tuple[Pems, Callable[[], Pems | None]] | None,
    *,
    authorize: bool,
) -> _native.HttpFront:
    """Serves ``sock`` (bound) from now on; the front owns it. ``tls``: the listener's TLS files and their reload
    check (``ListenerSetup.tls_files``), None for plain connections."""
    listeners, limits = settings.listeners, settings.limits
    decoder = intake.native_decoder
    if decoder is None:
        raise ValueError("listeners.otlp_http_server: native needs join.engine: native (the native decoder)")
    sock.listen(listeners.backlog)
    return _native.HttpFront(
        sock.detach(),
        decoder,
        intake.in_flight.budget,
        receiver,
        authorize,
        None if tls is None else tls[0],
        None if tls is None else tls[1],
        name="otlp_http",
        max_request_bytes=limits.max_request_bytes,
        max_connections=listeners.max_connections,
        header_timeout=listeners.header_timeout_seconds,
        idle_timeout=listeners.idle_timeout_seconds,
        body_timeout=listeners.body_timeout_seconds,
        handler_threads=limits.decode_threads,
        trim_from=TRIM_FROM_BYTES,
    )
