"""OTLP export bodies as large as a size limit allows, of distinct whole requests (gateway + vLLM span)."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.records import Span
from sloscope.testing import RecordWriter, export_request, gateway_attributes, to_otlp_json, vllm_attributes
from sloscope.upstream.gie_2025 import Gie2025Epp, Vllm2025Pod
from sloscope.upstream.writer import Process

_SAMPLE_REQUESTS = 100
_T0 = 1_700_000_000_000_000_000
_SECOND = 1_000_000_000
_EPP = Process({"service.name": "epp"})
_POD = Process({"service.name": "vllm", "k8s.pod.name": "vllm-0"})


def _spans(requests: int, first_trace: int) -> list[Span]:
    """A trace per request, as the late-2025 EPP and vLLM write it: both spans over the same second."""
    out = []
    for trace in range(first_trace, first_trace + requests):
        writer = RecordWriter(trace, 1)
        attributes = gateway_attributes(slo_ttft_ms="200", slo_tpot_ms="50")
        gateway = Gie2025Epp(writer, _EPP).gateway(None, _T0, _T0 + _SECOND, attributes)
        Vllm2025Pod(writer, _POD).llm_request(gateway, _T0, _T0 + _SECOND, vllm_attributes())
        out += writer.spans
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
