"""Serving simulated pods' /metrics pages on loopback, one port per pod, as a real pool is scraped.

sloscope names a scrape target by ``host:port``, so every pod gets a listening socket of its own.

The servers are ``asyncio.start_server`` with a minimal HTTP/1.1 handler, not uvicorn:
``uvicorn.Server.serve`` installs its own SIGINT/SIGTERM handlers when run in the main thread and
restores them on exit, so a dozen servers in one loop would swap the demo's signal handling back and
forth, and each would add a 0.1 s ticker task and startup log lines. Serving one GET without a body
needs little of HTTP: a request line, headers up to a blank line, ``Content-Length`` on the answer,
keep-alive unless the client says ``Connection: close`` (sloscope's scraper keeps its connections
open). Anything this handler does not understand gets a 400 and the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from sloscope.demo.pod import SimPod

__all__ = ["PageServer", "PodServers", "serve_page", "serve_pods"]

METRICS_PATH = "/metrics"
_IDLE_TIMEOUT_S = 60.0  # a connection with no complete request head for this long is closed
_MAX_HEAD_BYTES = 16 * 1024


@dataclass(frozen=True)
class _Response:
    status: int
    reason: str
    content_type: str
    body: bytes


def _plain(status: int, reason: str) -> _Response:
    return _Response(status, reason, "text/plain; charset=utf-8", f"{reason}\n".encode())


@dataclass
class _PodServer:
    """One listening socket serving one pod's page, and its open connections (closed on stop)."""

    page: Callable[[], str]
    server: asyncio.Server | None = None
    connections: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # the streams protocol runs each connection in a task
        self.connections.add(task)
        try:
            while await self._answer_one(reader, writer):
                pass
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away or stalled: nothing to answer
        except asyncio.CancelledError:
            # stop() cancels idle keep-alive connections. Ending normally instead of re-raising: Python 3.11's
            # stream protocol calls task.exception() on the finished task and would log the cancellation.
            pass
        finally:
            self.connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Reads one request and answers it; whether the connection stays open for another."""
        async with asyncio.timeout(_IDLE_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        response, keep_alive, method = self._respond(head)
        headers = (
            f"HTTP/1.1 {response.status} {response.reason}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n" + ("" if keep_alive else "Connection: close\r\n") + "\r\n"
        )
        writer.write(headers.encode("latin-1") + (b"" if method == "HEAD" else response.body))
        await writer.drain()
        return keep_alive

    def _respond(self, head: bytes) -> tuple[_Response, bool, str]:
        """The response to a request head, whether to keep the connection, and the method."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _plain(400, "Bad Request"), False, ""
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, sep, value = line.partition(":")
                if not sep:
                    return _plain(400, "Bad Request"), False, method
                headers[name.strip().lower()] = value.strip().lower()
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
            return _plain(400, "Bad Request"), False, method  # a body would be read as the next request
        connection = headers.get("connection", "")
        keep_alive = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        if method not in {"GET", "HEAD"}:
            return _plain(405, "Method Not Allowed"), keep_alive, method
        if target.split("?", 1)[0] != METRICS_PATH:
            return _plain(404, "Not Found"), keep_alive, method
        return _Response(200, "OK", CONTENT_TYPE_PLAIN_0_0_4, self.page().encode()), keep_alive, method

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.connections):  # idle keep-alive connections would hold wait_closed (3.12+)
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()


class PodServers:
    """The running page servers of a set of pods; :meth:`stop` closes their ports and connections."""

    def __init__(self, servers: dict[str, tuple[_PodServer, str]]) -> None:
        self._servers = servers

    def address_of(self, pod_name: str) -> str:
        """``host:port`` of the pod's page, as sloscope's discovery names the target."""
        return self._servers[pod_name][1]

    @property
    def addresses(self) -> dict[str, str]:
        """Every pod's ``host:port``, by pod name."""
        return {name: address for name, (_, address) in self._servers.items()}

    async def stop(self) -> None:
        """Closes every listening socket and open connection; safe to call twice."""
        await asyncio.gather(*(server.stop() for server, _ in self._servers.values()))


PageServer = _PodServer
"""One page server (:func:`serve_page`); ``await server.stop()`` closes it."""


async def serve_page(page: Callable[[], str], host: str = "127.0.0.1") -> tuple[PageServer, str]:
    """Serves ``GET /metrics`` answering ``page()`` on ``host`` and a free port; returns it and its ``host:port``.

    The demo's EPP page is served this way, like a pod's.
    """
    server = _PodServer(page)
    server.server = await asyncio.start_server(server.handle, host, 0, limit=_MAX_HEAD_BYTES)
    return server, f"{host}:{server.server.sockets[0].getsockname()[1]}"


async def serve_pods(pods: Sequence[SimPod], host: str = "127.0.0.1") -> PodServers:
    """Starts one page server per pod on ``host`` and a free port, in the running event loop.

    ``GET /metrics`` answers the pod's current page (text format 0.0.4); other paths answer 404.
    Raises ``ValueError`` when two pods share a name. If a server cannot start, those already
    started are stopped again.
    """
    names = [pod.name for pod in pods]
    if len(set(names)) != len(names):
        raise ValueError(f"pod names must be unique: {names}")
    started: dict[str, tuple[_PodServer, str]] = {}
    try:
        for pod in pods:
            started[pod.name] = await serve_page(pod.metrics_text, host)
    except BaseException:
        await PodServers(started).stop()
        raise
    return PodServers(started)
