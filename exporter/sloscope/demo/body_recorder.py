"""ASGI middleware that hands each POST body, as received, to a callback: what callers of a stand-in really sent.

A validated request model loses what a body-level comparison needs (key order, fields left out, the exact numbers),
so the stand-in predictor records the bytes before FastAPI parses them, then replays them to the app unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyRecorder"]

OnBody = Callable[[Scope, bytes], None]


class BodyRecorder:
    """Reads each POST body whole, calls ``on_body(scope, body)``, then runs the app with the same body."""

    def __init__(self, app: ASGIApp, on_body: OnBody) -> None:
        self.app = app
        self.on_body = on_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False) and message["type"] == "http.request"
        self.on_body(scope, body)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
