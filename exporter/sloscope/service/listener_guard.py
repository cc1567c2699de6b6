"""Limits of one HTTP listener: a connection cap, a header read timeout, an idle timeout, and TLS.

uvicorn counts requests, not connections (``limit_concurrency`` answers 503 once a request
arrives), and its h11 protocol has a keep-alive timeout but no deadline for a request's headers
(uvicorn 0.54.0, protocols/http/h11_impl.py: ``timeout_keep_alive_task`` is armed only in
``on_response_complete`` and cancelled by any ``data_received``). A slowloris peer that never
finishes its headers therefore holds its socket forever. :func:`guarded_protocol` makes an
``H11Protocol`` subclass, passed to uvicorn as its ``http`` class, that

- counts every accepted socket of its listener (TLS handshakes included). At the cap, a new
  connection closes the one that has waited longest for a request (idle, or still sending its
  headers), else it is refused: ``503`` and close (plain HTTP) or closed before the handshake (TLS);
- gives a request ``header_timeout_seconds`` from its first byte (a new connection: from accept) to
  complete its line and headers, then answers ``408`` and closes;
- does TLS itself with :meth:`asyncio.loop.start_tls` and a handshake deadline, taking the
  listener's current context at each connection (certificates reload without a restart), because
  uvicorn hands asyncio one fixed context with the default 60 s handshake timeout. asyncio may
  decrypt the first request before ``start_tls`` returns (CPython 3.11.7 asyncio/sslproto.py
  ``_on_handshake_complete``, lines 600-601, reads at once), so those bytes wait until the connection is set up.

Every refusal is counted in ``sloscope_listener_connections_refused_total{listener,reason}``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

import h11
from prometheus_client import Counter
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from sloscope import conventions as c

log = logging.getLogger(__name__)


def _plain_response(status: str, text: str, extra: str = "") -> bytes:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
        f"{extra}connection: close\r\n\r\n"
    )
    return head.encode() + body


class ListenerGuard:
    """The shared state of one listener's connections: how many are open, which wait for a request."""

    def __init__(
        self,
        name: str,
        *,
        max_connections: int,
        header_timeout: float,
        idle_timeout: float,
        refused: Counter,
        tls: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        self.name = name
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.tls = tls
        self.open = 0
        self.waiting: dict[GuardedProtocol, None] = {}  # insertion order: the longest waiting first
        self._refused = {reason: refused.labels(name, reason) for reason in c.REFUSED_REASONS}
        self._refuse_503 = _plain_response(
            "503 Service Unavailable",
            f"sloscope: listener {name} is at its limit of {max_connections} connections\n",
            "retry-after: 1\r\n",
        )
        self.timeout_408 = _plain_response("408 Request Timeout", "sloscope: request headers not received in time\n")

    def count(self, reason: str) -> None:
        self._refused[reason].inc()

    def admit(self) -> bool:
        """Whether a new connection may stay; at the cap the longest-waiting connection makes room."""
        if self.open < self.max_connections:
            return True
        if self.waiting:
            victim = next(iter(self.waiting))
            self.count(c.REFUSED_EVICTED)
            victim.drop()
            return True
        self.count(c.REFUSED_CONNECTION_LIMIT)
        return False

    def refusal(self) -> bytes | None:
        """What a refused connection is told: a 503 over plain HTTP, nothing before a TLS handshake."""
        return None if self.tls is not None else self._refuse_503


def guarded_protocol(guard: ListenerGuard) -> type[GuardedProtocol]:
    """An h11 protocol class bound to ``guard``, for ``uvicorn.Config(http=...)``."""
    return type(f"GuardedProtocol_{guard.name}", (GuardedProtocol,), {"guard": guard})


class GuardedProtocol(H11Protocol):
    guard: ListenerGuard

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.timeout_keep_alive = self.guard.idle_timeout  # type: ignore[assignment]  # uvicorn's call_later takes floats
        self._raw: asyncio.BaseTransport | None = None
        self._header_timer: asyncio.TimerHandle | None = None
        self._counted = False
        self._established = False
        self._gone = False
        self._early: list[bytes] = []  # decrypted before start_tls returned (asyncio reads right after the handshake)
        self._handshake_task: asyncio.Task[None] | None = None  # held: the loop keeps only weak references

    # -- connection lifetime ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self.guard
        self._raw = transport
        if not guard.admit():
            refusal = guard.refusal()
            if refusal is not None and isinstance(transport, asyncio.WriteTransport):
                transport.write(refusal)
                transport.close()
            else:
                transport.abort()  # type: ignore[attr-defined]
            self._gone = True
            return
        guard.open += 1
        self._counted = True
        self._begin_wait(arm=False)  # the handshake has its own deadline; the header timer starts after it
        if guard.tls is None:
            self._establish(transport)
        else:
            self._handshake_task = self.loop.create_task(self._handshake(transport, guard.tls()))

    async def _handshake(self, transport: asyncio.BaseTransport, context: ssl.SSLContext) -> None:
        timeout = self.guard.header_timeout
        try:
            tls = await self.loop.start_tls(
                transport,  # type: ignore[arg-type]
                self,
                context,
                server_side=True,
                ssl_handshake_timeout=timeout,
                ssl_shutdown_timeout=timeout,
            )
        except asyncio.CancelledError:  # the server is stopping
            self._release()
            raise
        except (OSError, TimeoutError) as exc:  # ssl.SSLError and ConnectionError are OSErrors
            if not self._gone:  # not evicted: the handshake itself failed or ran out of time
                self.guard.count(c.REFUSED_TLS_HANDSHAKE)
                log.debug("listener %s: TLS handshake failed: %s", self.guard.name, type(exc).__name__)
            self._release()
            return
        if self._gone or tls is None:  # lost between the handshake and now
            self._release()
            return
        self._establish(tls)

    def _establish(self, transport: asyncio.BaseTransport) -> None:
        self._established = True
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()
        early, self._early = b"".join(self._early), []
        if early:
            self.data_received(early)

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True
        if self._established:
            super().connection_lost(exc)
        self._release()

    def _release(self) -> None:
        self._gone = True
        self._end_wait()
        if self._counted:
            self._counted = False
            self.guard.open -= 1

    def drop(self) -> None:
        """Close at once (evicted): no response, no TLS close_notify to wait for."""
        self._gone = True
        self._end_wait()
        if self._raw is not None:
            self._raw.abort()  # type: ignore[attr-defined]

    # -- waiting for a request --------------------------------------------------------------------

    def _begin_wait(self, *, arm: bool) -> None:
        self.guard.waiting.pop(self, None)
        self.guard.waiting[self] = None
        if arm:
            self._arm()

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.guard.header_timeout, self._header_timeout)

    def _end_wait(self) -> None:
        self.guard.waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._gone:
            return
        self.guard.count(c.REFUSED_HEADER_TIMEOUT)
        self._end_wait()
        if not self.transport.is_closing():
            self.transport.write(self.guard.timeout_408)
            self.transport.close()

    def _track(self) -> None:
        """After h11 consumed input: a request whose headers are complete stops waiting."""
        if self._gone or self.transport is None:
            return
        if self.conn.their_state is h11.IDLE:
            if self in self.guard.waiting:
                self._arm()  # bytes of a request's head arrived: its deadline runs from now
            else:
                self._begin_wait(arm=True)
        else:
            self._end_wait()

    def data_received(self, data: bytes) -> None:
        if not self._established:
            self._early.append(data)
            return
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._gone or self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self._begin_wait(arm=False)  # kept alive: the idle timeout runs until the next request's first byte
