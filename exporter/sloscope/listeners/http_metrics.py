"""HTTP server metrics for sloscope's own endpoints, as vLLM exposes them.

``http_requests_total{handler,method,status}`` and ``http_request_duration_seconds{handler,method}``
(the prometheus-fastapi-instrumentator family), written as a plain ASGI middleware. ``handler`` is
the matched route template, or ``none`` for unmatched paths, so scanners cannot create series.

Every label is a closed set. The instrumentator labels the raw ``request.method``
(prometheus-fastapi-instrumentator middleware.py ``method=request.method``, commit 012b013c), so any token
a client sends as a method became a series. ``method`` here is one of the methods the OpenTelemetry HTTP
semantic conventions call known (``http.request.method``: RFC 9110's, PATCH from RFC 5789 and QUERY, the
list of opentelemetry-util-http 0.66b2 ``sanitize_method``), else ``_OTHER``, the value those conventions
prescribe: sloscope's self-tracing spans and any OpenTelemetry-instrumented proxy in front of it then
name an unknown method the same way. Methods are case-sensitive (RFC 9110 section 9.1), so ``get`` is
``_OTHER``, not ``GET`` (the Python helper upper-cases first; the conventions ask for an exact match).
``status`` is the code sloscope's own handlers or the server sent, never a client's value: it is kept as
the three digits when it is an HTTP status (100-599) and is ``_OTHER`` otherwise.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from sloscope import conventions as c

KNOWN_METHODS = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY", "TRACE"})
OTHER_METHOD = "_OTHER"

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(c.HTTP_REQUESTS.name, c.HTTP_REQUESTS.help, c.HTTP_REQUESTS.labels, registry=registry)
        self.duration = Histogram(
            c.HTTP_REQUEST_DURATION.name,
            c.HTTP_REQUEST_DURATION.help,
            c.HTTP_REQUEST_DURATION.labels,
            registry=registry,
            buckets=_BUCKETS,
        )

    def observe(self, handler: str, method: object, status: object, seconds: float) -> None:
        """One request answered: ``handler`` its route's template (``none`` unmatched), ``method`` and ``status``
        as the request and the answer had them (labelled as :func:`method_label` and :func:`status_label` say)."""
        label = method_label(method)
        self.requests.labels(handler, label, status_label(status)).inc()
        self.duration.labels(handler, label).observe(seconds)

    def middleware(self, app: Any) -> Any:
        observe = self.observe

        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            status: list[object] = [500]

            async def send_wrapper(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            start = time.perf_counter()
            try:
                await app(scope, receive, send_wrapper)
            finally:
                route = scope.get("route")
                handler = getattr(route, "path", None) or "none"
                observe(handler, scope.get("method"), status[0], time.perf_counter() - start)

        return asgi


def method_label(method: object) -> str:
    """The request's method when it is a known one, else ``_OTHER``."""
    return method if isinstance(method, str) and method in KNOWN_METHODS else OTHER_METHOD


def status_label(status: object) -> str:
    """The response's status code as three digits, ``_OTHER`` for anything that is not an HTTP status."""
    return str(status) if isinstance(status, int) and 100 <= status <= 599 else OTHER_METHOD
