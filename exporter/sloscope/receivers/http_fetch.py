"""One GET of a metrics page or a JSON endpoint, with every failure turned into a result value.

Scrapers of model servers, the EPP and the predictor servers share this, so that "timeout",
"connection_error", "http_error" and "parse_error" mean the same thing in every
``sloscope_scrapes_total{kind,result}`` series, and no scrape failure ever raises into a loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from sloscope import conventions as c
from sloscope.receivers.exposition import is_openmetrics

__all__ = ["ACCEPT_TEXT", "MAX_PAGE_BYTES", "Fetched", "fetch", "fetch_json"]

# Ask for the Prometheus text format: prometheus_client's OpenMetrics writer drops the colons of
# "vllm:" sample names, and the text format is what every model server writes by default.
ACCEPT_TEXT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
MAX_PAGE_BYTES = 16 * 1024 * 1024  # a vLLM page is ~60 kB; a larger body is refused, not buffered


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
                return Fetched(c.RESULT_HTTP_ERROR, status=response.status_code, error=f"HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_PAGE_BYTES:
                    return Fetched(c.RESULT_PARSE_ERROR, status=response.status_code, error="body too large")
            seconds = response.elapsed.total_seconds()
            content_type = response.headers.get("content-type", "")
    except httpx.TimeoutException:
        return Fetched(c.RESULT_TIMEOUT, error=f"no answer within {timeout:g}s")
    except httpx.HTTPError as exc:  # refused, reset, DNS, protocol errors
        return Fetched(c.RESULT_CONNECTION_ERROR, error=f"{type(exc).__name__}: {exc}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Fetched(c.RESULT_PARSE_ERROR, status=response.status_code, error=f"not UTF-8: {exc}")
    return Fetched(c.RESULT_SUCCESS, text, is_openmetrics(content_type), response.status_code, seconds=seconds)


async def fetch_json(client: httpx.AsyncClient, url: str, timeout: float) -> tuple[Fetched, Any]:
    """GET a JSON document; a body that is not JSON is a ``parse_error``. The value is None unless ok."""
    fetched = await fetch(client, url, timeout, accept="application/json")
    if not fetched.ok:
        return fetched, None
    try:
        return fetched, json.loads(fetched.text)
    except ValueError as exc:
        return Fetched(c.RESULT_PARSE_ERROR, status=fetched.status, error=f"not JSON: {exc}"), None
