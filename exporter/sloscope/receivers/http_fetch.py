"""One GET of a metrics page or a JSON endpoint (or one POST), with every failure turned into a result value.

Every exchange has a total deadline, connect to last byte (:func:`exchange`), and a cap on the body it
reads: a peer that trickles its answer is cut off and counted ``timeout``, one that sends too much
``parse_error``. docs/operations.md ("Outbound deadlines") lists both per kind of call.

Scrapers of model servers, the EPP and the predictor servers share this, so that "timeout",
"connection_error", "http_error", "parse_error", "auth_error", "credentials_error" and "tls_error"
mean the same thing in every ``sloscope_scrapes_total{kind,result}`` series, and no scrape failure
ever raises into a loop. 401 and 403 are ``auth_error``, not ``http_error``: controller-runtime's
metrics filter, which the EPP runs by default, answers 401 to a missing or refused token and 403
"Authorization denied for user <name>" when the token's account lacks ``get`` on ``/metrics``; the
first line of that body is kept in ``error`` for the log, since it names the account.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from sloscope import conventions as c
from sloscope.receivers.exposition import is_openmetrics
from sloscope.receivers.http_auth import CredentialsError
from sloscope.receivers.off_loop import off_loop

__all__ = [
    "ACCEPT_TEXT",
    "MAX_ANSWER_BYTES",
    "MAX_PAGE_BYTES",
    "Exchanged",
    "Fetched",
    "exchange",
    "fetch",
    "fetch_json",
    "read_json",
]

# Ask for the Prometheus text format: prometheus_client's OpenMetrics writer drops the colons of
# "vllm:" sample names, and the text format is what every model server writes by default.
ACCEPT_TEXT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
MAX_PAGE_BYTES = 16 * 1024 * 1024  # a vLLM page is ~60 kB; a larger body is refused, not buffered
# A JSON answer of a predictor server: a /predict/bulk/strict answer of 100 predictions is ~25 kB
# (fixtures/predictor/llm-d/quantile/predict-bulk-strict-response-old-fields.json: 3 in 660 bytes),
# /status and /models/list under 1 kB.
MAX_ANSWER_BYTES = 1024 * 1024
_AUTH_STATUSES = frozenset({401, 403})
_REASON_BYTES = 200  # of a refusal's body, for the log


@dataclass(frozen=True)
class Exchanged:
    """One whole request/answer: ``result`` is one of conventions' scrape results; ``body`` only on success."""

    result: str
    status: int | None = None
    body: bytes = b""
    content_type: str = ""
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.result == c.RESULT_SUCCESS


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


async def exchange(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    headers: Mapping[str, str],
    content: bytes | None = None,
) -> Exchanged:
    """One request and its whole answer within ``timeout`` seconds, connect to last body byte.

    httpx's own timeouts bound each phase and each read, so a peer sending one byte every half second
    would never be cut off; the ``asyncio.timeout`` around the whole exchange is what makes
    ``timeout`` a total deadline (counted ``timeout``). A body longer than ``max_bytes`` is
    ``parse_error`` and is not read further; the body of a non-2xx answer is read only for the
    first line of a refusal (``auth_error``).
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(timeout):
            async with client.stream(method, url, headers=headers, content=content, timeout=timeout) as response:
                status = response.status_code
                if not 200 <= status < 300:
                    result = status_result(status)
                    error = await _refusal(response) if result == c.RESULT_AUTH_ERROR else f"HTTP {status}"
                    return Exchanged(result, status, error=error)
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        return Exchanged(c.RESULT_PARSE_ERROR, status, error=f"body larger than {max_bytes} bytes")
                content_type = response.headers.get("content-type", "")
    except TimeoutError:  # the total deadline
        return Exchanged(c.RESULT_TIMEOUT, error=f"no complete answer within {timeout:g}s")
    except (httpx.HTTPError, httpx.InvalidURL, CredentialsError) as exc:  # refused, reset, TLS, per-phase timeouts
        return Exchanged(failure_result(exc), error=f"{type(exc).__name__}: {exc}")
    return Exchanged(c.RESULT_SUCCESS, status, bytes(body), content_type, seconds=loop.time() - started)


async def fetch(
    client: httpx.AsyncClient, url: str, timeout: float, accept: str = ACCEPT_TEXT, *, max_bytes: int = MAX_PAGE_BYTES
) -> Fetched:
    """GET ``url`` within a total deadline; non-2xx is ``http_error`` (with the status), an oversize body
    ``parse_error``."""
    answer = await exchange(client, "GET", url, timeout=timeout, max_bytes=max_bytes, headers={"Accept": accept})
    if not answer.ok:
        return Fetched(answer.result, status=answer.status, error=answer.error)
    try:
        text = await off_loop(len(answer.body), answer.body.decode, "utf-8")  # 16 MiB: 12-25 ms in one C call
    except UnicodeDecodeError as exc:
        return Fetched(c.RESULT_PARSE_ERROR, status=answer.status, error=f"not UTF-8: {exc}")
    return Fetched(c.RESULT_SUCCESS, text, is_openmetrics(answer.content_type), answer.status, seconds=answer.seconds)


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
    """GET a JSON document (at most ``MAX_ANSWER_BYTES``); a body that is not JSON is a ``parse_error``. The
    value is None unless ok."""
    fetched = await fetch(client, url, timeout, accept="application/json", max_bytes=MAX_ANSWER_BYTES)
    if not fetched.ok:
        return fetched, None
    try:
        return fetched, await off_loop(len(fetched.text), read_json, fetched.text)
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
