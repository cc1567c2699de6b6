"""Credentials the listeners require: a bearer token or basic auth, both read from files.

:class:`Credentials` checks an ``Authorization`` value; :func:`require_credentials` wraps an ASGI
app (401 with ``WWW-Authenticate``, RFC 9110 section 11.6.1) and
:class:`~sloscope.listeners.grpc_auth.GrpcAuthInterceptor` answers gRPC calls UNAUTHENTICATED.
The secrets are re-read when their files change (a rotated Secret needs no restart), compared in
constant time, and never logged: a refusal logs nothing but its count, since a client retrying with
a wrong token would flood the log.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from sloscope import conventions as c
from sloscope.config import ListenerAuth
from sloscope.listeners.file_watch import Reloading

REALM = "sloscope"


def _read_secret(path: str) -> bytes:
    """The file's content without its trailing newline; an empty secret is an error, never 'no secret'."""
    value = Path(path).read_bytes().rstrip(b"\r\n")
    if not value:
        raise ValueError(f"{path} is empty")
    return value


class Credentials:
    """The accepted credentials of one deployment: a bearer token, a user and password, or both."""

    def __init__(self, config: ListenerAuth) -> None:
        self._token: Reloading[bytes] | None = None
        self._password: Reloading[bytes] | None = None
        self._username = (config.username or "").encode()
        self.challenges: list[str] = []
        """WWW-Authenticate values of a 401, one per accepted scheme."""
        if config.token_file is not None:
            path = config.token_file
            self._token = Reloading("listener bearer token", [path], lambda: _read_secret(path))
            self.challenges.append(f'Bearer realm="{REALM}"')
        if config.password_file is not None:
            secret = config.password_file
            self._password = Reloading("listener basic auth password", [secret], lambda: _read_secret(secret))
            self.challenges.append(f'Basic realm="{REALM}", charset="UTF-8"')

    def check(self, authorization: str | None) -> str | None:
        """None when the header carries accepted credentials, else the refusal reason (missing or invalid)."""
        if not authorization:
            return c.AUTH_MISSING
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self._token is not None:
            return None if hmac.compare_digest(value.encode(), self._token.current()) else c.AUTH_INVALID
        if scheme.lower() == "basic" and self._password is not None:
            return None if self._basic_matches(value) else c.AUTH_INVALID
        return c.AUTH_MISSING if scheme.lower() not in ("bearer", "basic") else c.AUTH_INVALID

    def _basic_matches(self, value: str) -> bool:
        assert self._password is not None
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        same_user = hmac.compare_digest(user, self._username)
        same_password = hmac.compare_digest(password, self._password.current())
        return bool(sep) and same_user and same_password


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def require_credentials(
    app: Any, credentials: Credentials, on_refusal: Callable[[str], None], open_paths: Collection[str] = ()
) -> Any:
    """An ASGI app that answers 401 to HTTP requests without accepted credentials, except on ``open_paths``."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in open_paths:
            await app(scope, receive, send)
            return
        reason = credentials.check(_header(scope, b"authorization"))
        if reason is None:
            await app(scope, receive, send)
            return
        on_refusal(reason)
        headers, body = unauthorized(credentials, reason)
        raw = [(name.encode(), value.encode()) for name, value in headers]
        await send({"type": "http.response.start", "status": 401, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    return asgi


def unauthorized(credentials: Credentials, reason: str) -> tuple[list[tuple[str, str]], bytes]:
    """The headers and body of a 401 (whichever HTTP server sends it): a challenge per accepted scheme."""
    body = f"401 Unauthorized: credentials {reason}\n".encode()
    headers = [
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", str(len(body))),
        ("connection", "close"),  # the body of an unauthenticated request is not read
        *(("www-authenticate", value) for value in credentials.challenges),
    ]
    return headers, body


def unauthenticated_message(reason: str) -> str:
    """What a gRPC call refused for its credentials is told (UNAUTHENTICATED)."""
    return f"credentials {reason}: send authorization metadata (Bearer token or Basic)"
