"""One GET of a metrics page or a JSON endpoint, with every failure turned into a result value.

Scrapers of model servers, the EPP and the predictor servers share this, so that "timeout",
"connection_error", "http_error", "parse_error", "auth_error", "credentials_error" and "tls_error"
mean the same thing in every ``sloscope_scrapes_total{kind,result}`` series, and no scrape failure
ever raises into a loop. 401 and 403 are ``auth_error``, not ``http_error``: controller-runtime's
metrics filter, which the EPP runs by default, answers 401 to a missing or refused token and 403
"Authorization denied for user <name>" when the token's account lacks ``get`` on ``/metrics``; the
first line of that body is kept in ``error`` for the log, since it names the account.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

from sloscope import conventions as c
from sloscope.receivers.exposition import is_openmetrics
from sloscope.receivers.http_auth import CredentialsError

__all__ = ["ACCEPT_TEXT", "MAX_PAGE_BYTES", "Fetched", "fetch", "fetch_json", "read_json"]

# Ask for the Prometheus text format: prometheus_client's OpenMetrics writer drops the colons of
# "vllm:" sample names, and the text format is what every model server writes by default.
ACCEPT_TEXT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
MAX_PAGE_BYTES = 16 * 1024 * 1024  # a vLLM page is ~60 kB; a larger body is refused, not buffered
_AUTH_STATUSES = frozenset({401, 403})
_REASON_BYTES = 200  # of a refusal's body, for the log


@dataclass(frozen=True)
class Fetched:
    """What one GET gave: ``result`` is one of conventions' scrape results; ``text`` only on success."""

    result: str
    text: str = ""
    openmetrics: bool = False
    status: int | None = None
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.result == c.RESULT_SUCCESS


async def fetch(client: httpx.AsyncClient, url: str, timeout: float, accept: str = ACCEPT_TEXT) -> Fetched:
    """GET ``url``; non-2xx is ``http_error`` (with the status), an oversize body ``parse_error``."""
    try:
        async with client.stream("GET", url, headers={"Accept": accept}, timeout=timeout) as response:
            if not 200 <= response.status_code < 300:
                result = status_result(response.status_code)
                error = await _refusal(response) if result == c.RESULT_AUTH_ERROR else f"HTTP {response.status_code}"
                return Fetched(result, status=response.status_code, error=error)
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_PAGE_BYTES:
                    return Fetched(c.RESULT_PARSE_ERROR, status=response.status_code, error="body too large")
            seconds = response.elapsed.total_seconds()
            content_type = response.headers.get("content-type", "")
    except CredentialsError as exc:
        return Fetched(c.RESULT_CREDENTIALS_ERROR, error=str(exc))
    except httpx.TimeoutException:
        return Fetched(c.RESULT_TIMEOUT, error=f"no answer within {timeout:g}s")
    except httpx.HTTPError as exc:  # refused, reset, DNS, protocol errors
        return Fetched(failure_result(exc), error=f"{type(exc).__name__}: {exc}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Fetched(c.RESULT_PARSE_ERROR, status=response.status_code, error=f"not UTF-8: {exc}")
    return Fetched(c.RESULT_SUCCESS, text, is_openmetrics(content_type), response.status_code, seconds=seconds)


async def _refusal(response: httpx.Response) -> str:
    """``HTTP 403: <the first line of the body>``, from at most a few hundred bytes of it."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _REASON_BYTES:
            break
    lines = body[:_REASON_BYTES].decode("utf-8", "replace").strip().splitlines()
    return f"HTTP {response.status_code}: {lines[0]}" if lines else f"HTTP {response.status_code}"


def status_result(status: int) -> str:
    """The result of an answer that is not a 2xx: a refusal of the credentials, or another HTTP error."""
    return c.RESULT_AUTH_ERROR if status in _AUTH_STATUSES else c.RESULT_HTTP_ERROR


def failure_result(exc: Exception) -> str:
    """The result of a call that raised: sloscope's own files unreadable, a timeout, TLS, or the connection."""
    if isinstance(exc, CredentialsError):
        return c.RESULT_CREDENTIALS_ERROR
    if isinstance(exc, httpx.TimeoutException):
        return c.RESULT_TIMEOUT
    return c.RESULT_TLS_ERROR if _tls_failure(exc) else c.RESULT_CONNECTION_ERROR


def _tls_failure(exc: BaseException) -> bool:
    """Whether an SSL error (an unverified certificate, a name mismatch, a refused handshake) caused ``exc``."""
    seen: BaseException | None = exc
    for _ in range(8):  # httpx -> httpcore -> ssl; bounded in case of a cycle
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def fetch_json(client: httpx.AsyncClient, url: str, timeout: float) -> tuple[Fetched, Any]:
    """GET a JSON document; a body that is not JSON is a ``parse_error``. The value is None unless ok."""
    fetched = await fetch(client, url, timeout, accept="application/json")
    if not fetched.ok:
        return fetched, None
    try:
        return fetched, read_json(fetched.text)
    except ValueError as exc:
        return Fetched(c.RESULT_PARSE_ERROR, status=fetched.status, error=f"not JSON: {exc}"), None


def read_json(body: str | bytes) -> Any:
    """A peer's JSON answer; raises only ``ValueError``, whatever the body.

    ``json.loads`` raises ``RecursionError`` for a document nested deeper than Python's recursion limit
    (``[[[...]]]``), which the callers' ``except ValueError`` would let through into a poll or prediction
    loop; it is turned into a ``ValueError`` here. (Bad UTF-8 and integers of more than 4300 digits
    already raise ``ValueError``.)
    """
    try:
        return json.loads(body)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
