"""A hostile peer on loopback: it answers every HTTP request at once with 200 and its headers, then trickles
the body one byte every ``interval`` seconds, never finishing it in time.

This is the peer that a per-read timeout never cuts off (a byte always arrives before the read timeout
runs out): only a total deadline on the whole exchange ends the call. It stands in for a model server's
page, a training or prediction server (health GETs and ``POST /predict/bulk/strict`` alike), or an EPP.

Every request is numbered; :meth:`TrickleServer.trickling` tells which are still being answered (the
client has not closed the connection), :attr:`TrickleServer.requests` every ``(number, method, path)``
received. The server runs its own event loop in a background thread, so it keeps trickling whatever the
test's or sloscope's loop does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Self

_DECLARED_BYTES = 10_000_000  # the Content-Length announced: never reached at one byte per interval


class TrickleServer:
    """Serves on 127.0.0.1 (a free port) at every path: headers, then one body byte per ``interval`` seconds."""

    def __init__(self, interval: float = 0.5, content_type: str = "application/json") -> None:
        self.interval = interval
        self.content_type = content_type
        self.requests: list[tuple[int, str, str]] = []
        self._open: dict[int, str] = {}  # request number -> path, while its answer is still trickling
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="trickle-server", daemon=True)
        self.address = ""
        self.url = ""

    def start(self) -> Self:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        self.url = f"http://{self.address}"
        return self

    def trickling(self, path: str | None = None) -> set[int]:
        """Numbers of the requests (to ``path``, or any) whose answers are still being trickled."""
        with self._lock:
            return {n for n, p in self._open.items() if path is None or p == path}

    def received(self, path: str) -> int:
        """How many requests for ``path`` arrived."""
        with self._lock:
            return sum(1 for _, _, p in self.requests if p == path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path = self._request_line(head)
            length = _content_length(head)
            if length:
                await reader.readexactly(length)
            number = self._opened(method, path)
            try:
                await self._trickle(reader, writer)
            finally:
                with self._lock:
                    self._open.pop(number, None)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # stop(): ending the handler normally keeps asyncio from logging it
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _request_line(self, head: bytes) -> tuple[str, str]:
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        return method, rest.split(" ", 1)[0].split("?", 1)[0]

    def _opened(self, method: str, path: str) -> int:
        with self._lock:
            number = len(self.requests)
            self.requests.append((number, method, path))
            self._open[number] = path
            return number

    async def _trickle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Headers now, then a byte per interval until the client closes the connection."""
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {self.content_type}\r\nContent-Length: {_DECLARED_BYTES}\r\n\r\n"
        writer.write(head.encode())
        closed = asyncio.ensure_future(reader.read(1))  # b"" (EOF) when the client closes
        try:
            for _ in range(_DECLARED_BYTES):
                writer.write(b" ")  # whitespace: a valid start of a JSON document or of a metrics page
                await writer.drain()
                done, _ = await asyncio.wait({closed}, timeout=self.interval)
                if done:
                    return
        finally:
            closed.cancel()

    def stop(self) -> None:
        """Closes the listener and every trickling connection, then the loop; safe twice and without start."""
        if self._server is not None:
            server, self._server = self._server, None

            async def close() -> None:
                server.close()
                tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _content_length(head: bytes) -> int:
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return int(value.strip())
    return 0
