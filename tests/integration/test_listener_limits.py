"""Slowloris against a real ``sloscope serve``: held connections are closed, everyone else is served.

Each attacking connection sends the start of a request head and then one more header byte every
half second, never the blank line that ends it: the pattern that kept sockets open forever before
(uvicorn 0.54.0's h11 protocol arms no timer until a response completes, protocols/http/h11_impl.py
``on_response_complete``). The child's file limit is lowered (prlimit) below the number of attacking
connections, so without a per-listener cap it would run out of descriptors and stop accepting on
every port. asyncio accepts up to ``backlog`` connections per wake-up before any ``connection_made`` runs
(CPython 3.11.7 asyncio/selector_events.py:163, ``for _ in range(backlog)``), so the backlog is bounded too.
"""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext

from sloscope import conventions as c
from sloscope.testing import export_request, span, vllm_attributes

from .conftest import Server, start_server, wait_until

pytestmark = pytest.mark.integration

CONNECTIONS = int(os.environ.get("SLOSCOPE_TEST_SLOWLORIS_CONNECTIONS", "300"))
CAP = 64  # per HTTP listener
BACKLOG = 16  # asyncio accepts a whole backlog before any connection_made runs: peak ~ CAP + 2 x BACKLOG
FILE_LIMIT = 256  # below CONNECTIONS: only the cap keeps the child (15 descriptors idle) within it


class Slowloris:
    """``count`` connections split over ``ports``, each trickling an unfinished request head."""

    def __init__(self, ports: list[int], count: int) -> None:
        self.sockets: list[socket.socket] = []
        self.answers: list[bytes] = []  # what the server wrote before closing, per closed connection
        self.closed: set[int] = set()
        for i in range(count):
            sock = socket.create_connection(("127.0.0.1", ports[i % len(ports)]), timeout=5)
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: sloscope\r\nX-Slow: ")
            sock.setblocking(False)
            self.sockets.append(sock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        while not self._stop.is_set() and len(self.closed) < len(self.sockets):
            for index, sock in enumerate(self.sockets):
                if index in self.closed:
                    continue
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    data = None
                except OSError:
                    data = b""
                if data is not None:  # the server answered (408 or 503) or closed: this one is done
                    self.answers.append(data)
                    self.closed.add(index)
                    continue
                try:
                    sock.send(b"a")
                except BlockingIOError:
                    pass
                except OSError:
                    self.answers.append(b"")
                    self.closed.add(index)
            self._stop.wait(0.5)

    def all_closed(self) -> bool:
        return len(self.closed) == len(self.sockets)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.sockets:
            sock.close()


def _read_until_closed(sock: socket.socket) -> None:
    """Returns once the peer closed or reset the connection (the socket's timeout bounds the wait)."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass


def _open_files(server: Server) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def _grpc_export(server: Server, *, trace: int, timeout: float) -> SpanExportResult:
    """One model-server span exported over OTLP/gRPC by the OpenTelemetry SDK's exporter, within ``timeout``."""
    exporter = GrpcExporter(endpoint=server.otlp_grpc, insecure=True, timeout=timeout)
    llm = ReadableSpan(
        name="llm_request",
        context=SpanContext(trace_id=trace, span_id=trace, is_remote=False),
        attributes=vllm_attributes(ttft=0.1, e2e=1.0, completion_tokens=10),
    )
    try:
        return exporter.export([llm])
    finally:
        exporter.shutdown()


def _small_export() -> bytes:
    llm = span(1, 1, "llm_request", vllm_attributes(ttft=0.1, e2e=1.0, completion_tokens=10))
    return export_request([llm]).SerializeToString()


def test_slowloris_connections_are_closed_and_other_clients_are_served(tmp_path: Path) -> None:
    server = start_server(tmp_path, {"listeners": {"max_connections": CAP, "backlog": BACKLOG}})
    try:
        resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))
        limit = int(Path(f"/proc/{server.process.pid}/limits").read_text().split("Max open files")[1].split()[0])
        assert limit == FILE_LIMIT
        attack = Slowloris([server.http_port, server.metrics_port], CONNECTIONS)
        try:
            # While the attack holds every slot it can, ordinary clients are served on both HTTP listeners.
            most_files = _open_files(server)
            for _ in range(3):
                with urllib.request.urlopen(server.url("/healthz"), timeout=10) as response:
                    assert response.read() == b"ok\n"
                post = urllib.request.Request(
                    server.otlp_http, _small_export(), {"Content-Type": "application/x-protobuf"}
                )
                with urllib.request.urlopen(post, timeout=10) as response:
                    assert response.status == 200
                most_files = max(most_files, _open_files(server))
            assert most_files < FILE_LIMIT
            wait_until(attack.all_closed, timeout=60, what="every slowloris connection closed by sloscope")
        finally:
            attack.stop()
        refused = {reason: server.total(f"{c.LISTENER_CONNECTIONS_REFUSED.name}_total", reason=reason)
                   for reason in c.REFUSED_REASONS}  # fmt: skip
        # Each attacking connection ended one way: closed to make room (evicted), or timed out with a 408.
        # None was refused outright, since a header-less connection could always make room.
        assert refused[c.REFUSED_CONNECTION_LIMIT] == 0
        assert refused[c.REFUSED_TLS_HANDSHAKE] == 0
        # How many were evicted rather than timed out depends on how fast the attack connected (a slot freed
        # by a timeout needs no eviction); together they are every attacking connection.
        assert refused[c.REFUSED_EVICTED] + refused[c.REFUSED_HEADER_TIMEOUT] == CONNECTIONS
        timed_out = [a for a in attack.answers if a.startswith(b"HTTP/1.1 408 Request Timeout")]
        assert len(timed_out) == refused[c.REFUSED_HEADER_TIMEOUT]
        assert attack.answers.count(b"") == refused[c.REFUSED_EVICTED]  # evicted: closed without an answer
        assert server.value("sloscope_spans_received_total", transport="http") == 3
        # asyncio logs an accept() that hit the file limit ("socket.accept() out of system resource", EMFILE).
        assert not [line for line in server.log if "out of system resource" in line or "Too many open files" in line]
    finally:
        assert server.stop() == 0


def test_at_the_file_limit_with_the_default_caps_every_listener_still_answers(tmp_path: Path) -> None:
    """Started under ``prlimit --nofile=512`` with the default caps (512 connections per listener): sloscope lowers
    them to fit (service/descriptors.py), so 600 slow connections to OTLP/HTTP leave descriptors for the other
    listeners and for a legitimate export on the same one. Each answers within a one-second deadline."""
    server = start_server(tmp_path, {}, prefix=["prlimit", "--nofile=512:512", "--"])
    try:
        assert any("listeners' caps are lowered to 86 connections per HTTP listener" in line for line in server.log)
        attack = Slowloris([server.http_port], 600)
        try:
            post = urllib.request.Request(server.otlp_http, _small_export(), {"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(post, timeout=1) as response:
                assert response.status == 200
            assert _grpc_export(server, trace=2, timeout=1) == SpanExportResult.SUCCESS
            with urllib.request.urlopen(server.url("/metrics"), timeout=1) as response:
                assert b"sloscope_build_info" in response.read()
            assert _open_files(server) < 512
        finally:
            attack.stop()
        assert server.total(f"{c.LISTENER_CONNECTIONS_REFUSED.name}_total", reason=c.REFUSED_EVICTED) > 0
        assert not [line for line in server.log if "out of system resource" in line or "Too many open files" in line]
    finally:
        assert server.stop() == 0


def test_a_request_that_finishes_its_headers_in_time_is_served_and_kept_alive(tmp_path: Path) -> None:
    """The header deadline counts from a request's first byte: a kept-alive connection idle for longer than
    the header timeout (but less than the idle timeout) still serves its next request."""
    server = start_server(tmp_path, {"listeners": {"header_timeout_seconds": 1.0, "idle_timeout_seconds": 30}})
    try:
        with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10) as sock:
            request = b"GET /healthz HTTP/1.1\r\nHost: sloscope\r\n\r\n"
            for _ in range(2):
                sock.sendall(request)
                answer = b""
                while not answer.endswith(b"ok\n"):
                    chunk = sock.recv(4096)
                    assert chunk, f"closed after {answer!r}"
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 200 OK")
                time.sleep(1.5)  # longer than the header timeout, between two requests: idle, not slow
        assert server.total(f"{c.LISTENER_CONNECTIONS_REFUSED.name}_total") == 0
    finally:
        assert server.stop() == 0


def test_grpc_refuses_connections_beyond_its_cap_and_times_out_silent_ones(tmp_path: Path) -> None:
    """gRPC core closes connections beyond ``grpc.max_allowed_incoming_connections`` at once and those that never
    send the HTTP/2 preface after ``grpc.server_handshake_timeout_ms`` (grpc include/grpc/impl/channel_arg_names.h);
    an exporter connecting afterwards is served."""
    cap, silent = 4, 12
    server = start_server(tmp_path, {"listeners": {"header_timeout_seconds": 2.0, "grpc": {"max_connections": cap}}})
    try:
        sockets = [socket.create_connection(("127.0.0.1", server.grpc_port), timeout=30) for _ in range(silent)]
        try:
            for sock in sockets:  # each is closed by gRPC: beyond the cap at once, the others at the deadline
                _read_until_closed(sock)  # (after gRPC's own SETTINGS frame, for those it took)
        finally:
            for sock in sockets:
                sock.close()
        assert _grpc_export(server, trace=1, timeout=10) == SpanExportResult.SUCCESS
        assert server.value("sloscope_spans_received_total", transport="grpc") == 1
    finally:
        assert server.stop() == 0


def _frames(data: bytes) -> list[int]:
    """The types of the HTTP/2 frames in ``data`` (RFC 9113 section 4.1), a cut last frame left out."""
    types, at = [], 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at : at + 3], "big")
        types.append(data[at + 3])
        at += 9 + length
    return types


def test_grpc_connections_idle_past_their_limit_are_sent_goaway_and_closed(tmp_path: Path) -> None:
    """``listeners.grpc.max_connection_idle_seconds`` (gRPC core's ``grpc.max_connection_idle_ms``): a connection
    with no call for that long gets GOAWAY (frame type 7) and is closed."""
    server = start_server(tmp_path, {"listeners": {"grpc": {"max_connection_idle_seconds": 1.0}}})
    try:
        with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=15) as sock:
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # preface, SETTINGS
            started, received = time.monotonic(), b""
            try:
                while chunk := sock.recv(4096):
                    received += chunk
            except ConnectionResetError:
                pass
            waited = time.monotonic() - started
        assert 7 in _frames(received), _frames(received)
        assert 0.9 < waited < 10, waited
    finally:
        assert server.stop() == 0


PREFACE_AND_SETTINGS = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _ping(n: int) -> bytes:
    return bytes([0, 0, 8, 6, 0, 0, 0, 0, 0]) + n.to_bytes(8, "big")  # PING (type 6), no ACK flag, stream 0


def _pinging(port: int, pings: int, every: float) -> tuple[bool, list[int]]:
    """Sends ``pings`` HTTP/2 pings ``every`` seconds apart on a new connection with no call, then waits 3 s:
    whether the server closed the connection, and the types of the frames it sent."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        sock.sendall(PREFACE_AND_SETTINGS)
        try:
            for n in range(pings):
                sock.sendall(_ping(n))
                time.sleep(every)
            while chunk := sock.recv(4096):
                received += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
        except TimeoutError:  # still open after the pings
            return False, _frames(received)
    return True, _frames(received)


def test_grpc_clients_pinging_too_often_are_closed_and_polite_ones_kept(tmp_path: Path) -> None:
    """``listeners.grpc.min_ping_interval_seconds`` and ``permit_keepalive_without_calls`` (gRPC core's
    ``grpc.http2.min_ping_interval_without_data_ms``, ``grpc.keepalive_permit_without_calls``): a ping sooner than
    the interval is a strike, the third strike closes the connection (grpc/grpc src/core/ext/transport/chttp2/
    transport/ping_abuse_policy.cc at 3e80231b57e80b611f190ad67ba5eb99c023b473, ``max_ping_strikes`` 2; grpcio sends
    GOAWAY first). Pings 0.6 s apart are answered."""
    grpc = {"min_ping_interval_seconds": 0.5, "permit_keepalive_without_calls": True}
    server = start_server(tmp_path, {"listeners": {"grpc": grpc}})
    try:
        closed, frames = _pinging(server.grpc_port, pings=4, every=0.05)
        assert closed, frames
        closed, frames = _pinging(server.grpc_port, pings=4, every=0.6)
        assert not closed and frames.count(6) >= 4, frames  # each ping acknowledged (type 6 with ACK)
    finally:
        assert server.stop() == 0


def test_grpc_clients_pinging_without_a_call_are_closed_unless_permitted(tmp_path: Path) -> None:
    grpc = {"min_ping_interval_seconds": 0.1, "permit_keepalive_without_calls": False}
    server = start_server(tmp_path, {"listeners": {"grpc": grpc}})
    try:
        closed, frames = _pinging(server.grpc_port, pings=4, every=0.3)  # above the interval, but idle
        assert closed, frames
    finally:
        assert server.stop() == 0
