"""Envoy's ingress span: what a gateway in front of the EPP writes for one request, as the catalogue draws it.

Envoy's HTTP connection manager names its span after the listener's ``operation_name`` (``ingress``), SERVER, and
tags it with its own tags (``source/common/tracing/common_values.h``: ``component``, ``http.method``,
``http.url``, ``http.protocol``, ``guid:x-request-id``, ``http.status_code`` and ``response_flags``, all strings)
plus the operator's custom tags (``type/tracing/v3/custom_tag.proto``: a request header under a tag name the
operator chooses, its value a string). A gateway configured to capture headers as OpenTelemetry's HTTP
conventions name them writes ``http.request.header.<name>`` string arrays instead (:func:`captured_headers`).
No capture of an Envoy span is among the fixtures: these are the tag names of Envoy's source (v1.36), and the
values the tests and the demo chose.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic

from sloscope.upstream.writer import Drawn, Handle, Process, Scope, SpanWriter

__all__ = ["INGRESS", "Envoy", "captured_headers", "envoy_process", "envoy_tags"]

INGRESS = "ingress"
SCOPE = Scope("envoy")


def envoy_process(service: str = "envoy") -> Process:
    """The tracer's resource: the service name its OpenTelemetry config gives (``service_name``)."""
    return Process({"service.name": service})


def envoy_tags(
    *, request_id: str, url: str, headers: Mapping[str, str], status_code: str = "200", response_flags: str = "-"
) -> dict[str, Any]:
    """Envoy's own tags with the custom tags ``headers`` (tag name: value) between the request's and the
    response's."""
    return {
        "component": "proxy",
        "http.method": "POST",
        "http.url": url,
        "http.protocol": "HTTP/1.1",
        "guid:x-request-id": request_id,
        "http.request.header.x-request-id": request_id,
        **headers,
        "http.status_code": status_code,
        "response_flags": response_flags,
    }


def captured_headers(
    *,
    request_id: str,
    headers: Mapping[str, str],
    path: str | None = None,
    status_code: int | None = None,
) -> dict[str, Any]:
    """The request headers ``headers`` (name: value) captured as OpenTelemetry's HTTP conventions name them, after
    the request id, with the method and path when ``path`` is given and the response's status code when known."""
    attributes: dict[str, Any] = {"http.request.method": "POST", "url.path": path} if path is not None else {}
    attributes["http.request.header.x-request-id"] = [request_id]
    attributes.update({f"http.request.header.{name}": [value] for name, value in headers.items()})
    if status_code is not None:
        attributes["http.response.status_code"] = status_code
    return attributes


class Envoy(Generic[Handle]):
    """One Envoy process writing through ``writer``; times are Unix nanoseconds."""

    def __init__(self, writer: SpanWriter[Handle], process: Process | None = None) -> None:
        self.writer = writer
        self.process = process or envoy_process()

    def ingress(
        self, parent: Handle | None, start_ns: int, end_ns: int, attributes: Mapping[str, Any], *, failed: bool = False
    ) -> Handle:
        """The ingress span, a child of the caller's traceparent (Envoy passes it on to the EPP); ``failed``: a 5xx
        answer, an Error status without a description."""
        drawn = Drawn(INGRESS, parent, start_ns, end_ns, "server", attributes, status="" if failed else None)
        return self.writer.span(self.process, SCOPE, drawn)
