"""OTLP export bodies as large as a size limit allows, of distinct whole requests (gateway + vLLM span)."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.records import Span
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes

_SAMPLE_REQUESTS = 100


def _spans(requests: int, first_trace: int) -> list[Span]:
    out = []
    for i in range(requests):
        trace = first_trace + i
        out.append(
            span(
                trace,
                1,
                "gateway.request",
                gateway_attributes(slo_ttft_ms="200", slo_tpot_ms="50"),
                resource={"service.name": "epp"},
            )
        )
        out.append(span(trace, 2, "llm_request", vllm_attributes(), parent=1))
    return out


def _encode(request: ExportTraceServiceRequest, json: bool) -> bytes:
    return to_otlp_json(request) if json else request.SerializeToString()


def largest_body(limit: int, *, json: bool, first_trace: int = 1) -> bytes:
    """The largest body of whole requests that is at most ``limit`` bytes (within one request's size)."""
    sample = len(_encode(export_request(_spans(_SAMPLE_REQUESTS, first_trace)), json)) / _SAMPLE_REQUESTS
    requests = max(1, int(limit / sample))
    while True:
        body = _encode(export_request(_spans(requests, first_trace)), json)
        if len(body) <= limit:
            return body
        requests -= max(1, int((len(body) - limit) / sample) + 1)
