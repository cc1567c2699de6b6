"""Running a stand-in FastAPI app on loopback for tests, and the switches every stand-in shares.

:class:`RunningServer` serves an app with uvicorn on 127.0.0.1 on a free port (the socket is bound
before the thread starts, so the URL is known at once) in a background thread; ``start()`` returns
once it listens, ``stop()`` releases delayed answers, stops it and joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Self

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse


def install_switches(app: FastAPI, behaviour: Any, release: asyncio.Event | None) -> None:
    """Records every call's path in ``behaviour.calls``, then applies ``delay_seconds``, ``fail`` and
    ``require_token`` (when the behaviour has one: 401 unless ``Authorization: Bearer <token>``).

    ``release`` (set by :meth:`RunningServer.stop`) cuts a delay short.
    """

    @app.middleware("http")
    async def switches(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        behaviour.calls.append(request.url.path)
        if behaviour.delay_seconds > 0:
            if release is None:
                await asyncio.sleep(behaviour.delay_seconds)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), behaviour.delay_seconds)
        if behaviour.fail:
            return JSONResponse({"detail": "Internal Server Error"}, status_code=500)
        token = getattr(behaviour, "require_token", None)
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"detail": "Unauthorized"}, status_code=401)  # a proxy in front of the server
        return await call_next(request)


class _Server(uvicorn.Server):
    """Tells the starting thread when it listens, and remembers its loop for a thread-safe stop."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)
        self.listening.set()


class RunningServer:
    """A FastAPI app served by uvicorn on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app_factory: Callable[[asyncio.Event], FastAPI]) -> None:
        self._release = asyncio.Event()
        self._app = app_factory(self._release)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self._app, log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
        self._server = _Server(config)
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._sock.listen(128)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name=f"stand-in:{self.port}", daemon=True
        )
        self._thread.start()
        if not self._server.listening.wait(10):
            self.stop()
            raise RuntimeError(f"stand-in server on port {self.port} did not start")
        return self

    def stop(self) -> None:
        """Releases delayed answers, stops the server and joins its thread; safe twice and without start."""
        loop = self._server.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._release.set)
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)
            if self._thread.is_alive():
                raise RuntimeError(f"stand-in server on port {self.port} did not stop")
            self._thread = None
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
