"""HTTP server metrics for sloscope's own endpoints, as vLLM exposes them.

``http_requests_total{handler,method,status}`` and ``http_request_duration_seconds{handler,method}``
(the prometheus-fastapi-instrumentator family), written as a plain ASGI middleware. ``handler`` is
the matched route template, or ``none`` for unmatched paths, so scanners cannot create series.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from sloscope import conventions as c

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

    def middleware(self, app: Any) -> Any:
        requests, duration = self.requests, self.duration

        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            status = ["500"]

            async def send_wrapper(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status[0] = str(message["status"])
                await send(message)

            start = time.perf_counter()
            try:
                await app(scope, receive, send_wrapper)
            finally:
                route = scope.get("route")
                handler = getattr(route, "path", None) or "none"
                method = scope.get("method", "")
                requests.labels(handler, method, status[0]).inc()
                duration.labels(handler, method).observe(time.perf_counter() - start)

        return asgi
