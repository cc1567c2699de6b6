"""Spans shaped like the real ones, shared by tests, benchmarks and examples.

The shapes themselves are the catalogue's (:mod:`sloscope.upstream`: llm-d-router's EPP, its coordinator and P/D
sidecar, vLLM, the late-2025 EPP); this module makes them ``Span`` records for unit tests of the processors
(:class:`RecordWriter`) and OTLP protobuf or OTLP/JSON requests for anything that goes over the wire.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from sloscope.records import STATUS_ERROR, Span
from sloscope.upstream.coordinator import Coordinator
from sloscope.upstream.gie_2025 import gateway_attributes
from sloscope.upstream.llmd_router import Epp
from sloscope.upstream.pd_sidecar import Connector, Legs, Peer, Sidecar
from sloscope.upstream.vllm import vllm_033_attributes, vllm_attributes
from sloscope.upstream.writer import Drawn, Process, Scope

__all__ = [
    "RecordWriter",
    "coordinator_spans",
    "epp_spans",
    "export_request",
    "gateway_attributes",
    "sidecar_spans",
    "span",
    "to_otlp_json",
    "vllm_033_attributes",
    "vllm_attributes",
]


def span(
    trace: int,
    span_id: int,
    name: str,
    attributes: dict[str, Any],
    *,
    parent: int = 0,
    resource: dict[str, Any] | None = None,
    start_ns: int = 1_700_000_000_000_000_000,
    end_ns: int | None = None,
    status: tuple[int, str] = (0, ""),
) -> Span:
    """A decoded span; ids are small integers rendered as OTLP hex ids. It lasts one second unless told."""
    return Span(
        trace_id=f"{trace:032x}",
        span_id=f"{span_id:016x}",
        parent_span_id=f"{parent:016x}" if parent else "",
        name=name,
        start_ns=start_ns,
        end_ns=end_ns if end_ns is not None else start_ns + 1_000_000_000,
        attributes=attributes,
        resource=resource if resource is not None else {"service.name": "vllm", "k8s.pod.name": "vllm-0"},
        status_code=status[0],
        status_message=status[1],
    )


class RecordWriter:
    """The catalogue's spans (:mod:`sloscope.upstream`) as decoded :class:`~sloscope.records.Span` records of trace
    ``trace``: span ids numbered from ``first`` in the order the spans are made; a span's handle is its id."""

    def __init__(self, trace: int, first: int) -> None:
        self.trace, self.next_id = trace, first
        self.spans: list[Span] = []

    def span(self, process: Process, scope: Scope, drawn: Drawn[int]) -> int:
        del scope  # a decoded span keeps no scope
        span_id, self.next_id = self.next_id, self.next_id + 1
        failure = drawn.failure
        self.spans.append(
            span(
                self.trace,
                span_id,
                drawn.name,
                dict(drawn.attributes),
                parent=drawn.parent or 0,
                resource=dict(process.attributes),
                start_ns=drawn.start_ns,
                end_ns=drawn.end_ns,
                status=(STATUS_ERROR, failure) if failure is not None else (0, ""),
            )
        )
        return span_id


EPP = Process({"service.name": "llm-d-epp"})  # what the tests' EPP spans carry: the service's name alone
MS = 1_000_000


def epp_spans(
    trace: int,
    base: int,
    *,
    request_id: str,
    parent: int,
    start_ns: int,
    scorer: str | None = "latency-scorer",
    status: tuple[int, str] = (0, ""),
    orchestration_status: tuple[int, str] = (0, ""),
    model: str = "Qwen/Qwen3-8B",
    profile: str = "default",
    end_ns: int | None = None,
) -> list[Span]:
    """The llm-d-router EPP's spans of one call, as the catalogue draws them
    (:class:`sloscope.upstream.llmd_router.Epp`: gateway.request > orchestration > [run_scheduler_profile >
    filter_endpoints, scoring > scorer, pick_endpoints]). Span ids are ``base`` to ``base + 6``; ``scorer=None``
    stops before scheduling (a refused call). ``profile`` is the scheduling profile run (llm-d-router's chart names
    its only one ``default``; the coordinator's EPP runs the one its ``EPP-Profile`` header names), ``end_ns`` the
    gateway span's end (one second after its start unless told)."""
    writer = RecordWriter(trace, base)
    Epp(writer, EPP).call(
        parent or None,
        start_ns,
        end_ns if end_ns is not None else start_ns + 1_000_000_000,
        request_id=request_id,
        model=model,
        profile=profile,
        scorers=None if scorer is None else (scorer,),
        status=status[1] if status[0] else None,
        orchestration_error=orchestration_status[1] if orchestration_status[0] else None,
    )
    return writer.spans


def coordinator_spans(
    trace: int,
    base: int,
    *,
    phase: str | None,
    request_id: str,
    parent: int,
    start_ns: int,
    end_ns: int,
    scorer: str = "latency-scorer",
    model: str = "Qwen/Qwen3-8B",
) -> list[Span]:
    """The EPP's spans of one of llm-d's coordinator calls, as the catalogue draws them
    (:class:`sloscope.upstream.coordinator.Coordinator`): the leg of ``phase``, scheduled by that phase's profile, or
    with ``phase`` None the conditional-decode probe the EPP refused. Span ids are ``base`` to ``base + 6`` (one
    scorer, as :func:`epp_spans`); ``parent`` 0: the root of a trace of its own."""
    writer = RecordWriter(trace, base)
    coordinator = Coordinator(Epp(writer, EPP))
    if phase is None:
        coordinator.probe(parent or None, start_ns, end_ns, request_id=request_id, model=model, scorers=(scorer,))
    else:
        coordinator.leg(parent or None, phase, start_ns, end_ns, request_id=request_id, model=model, scorers=(scorer,))
    return writer.spans


SIDECAR_PEER = Peer("10.0.3.7", "10.0.0.5", 50412, "Envoy/1.36", "10.0.0.5", 1834, 48211)  # Envoy, on its way in
PREFILL_TARGET = "10.0.2.11:8000"  # the prefill pod the EPP's header names
SIDECAR_UUID = "5f0c6a3e-d1b2-11f0-8de9-0242ac120002"  # a v1 UUID, as the NIXL connector makes one


def sidecar_spans(
    trace: int,
    base: int,
    *,
    parent: int,
    forward_ns: int,
    prefill: tuple[int, int],
    decode: tuple[int, int],
    connector: Connector = "nixlv2",
    path: str = "/v1/chat/completions",
) -> tuple[list[Span], tuple[int, int]]:
    """The decode pod's routing sidecar's spans of one P/D request, as the catalogue draws them
    (:class:`sloscope.upstream.pd_sidecar.Sidecar`): its server span (from a millisecond before ``forward_ns`` to
    two after the decode leg), ``forward_request`` from ``forward_ns``, and the connector's legs over ``prefill``
    and ``decode`` (start, end), each leg's POST as long as its leg. Span ids are ``base`` to ``base + 5`` in that
    order (server, forward, prefill, its POST, decode, its POST); returns them and the prefill and decode POSTs'
    ids, the parents of the pods' ``llm_request``."""
    writer = RecordWriter(trace, base)
    sidecar = Sidecar(writer)
    server = sidecar.server(parent or None, forward_ns - MS, decode[1] + 2 * MS, path=path, peer=SIDECAR_PEER)
    forward = sidecar.forward_request(
        server, forward_ns, decode[1] + MS, connector=connector, path=path, prefill_target=PREFILL_TARGET
    )
    legs = Legs(connector, SIDECAR_UUID, forward_ns, prefill, prefill, decode, decode)
    posts = sidecar.legs(forward, legs, path=path, prefill_target=PREFILL_TARGET)
    return writer.spans, posts


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list | tuple):
        out = AnyValue()
        out.array_value.values.extend(any_value(v) for v in value)
        return out
    if isinstance(value, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(KeyValue(key=k, value=any_value(v)) for k, v in value.items())
        return out
    return AnyValue(string_value=str(value))


def key_values(attributes: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def export_request(spans: Iterable[Span]) -> ExportTraceServiceRequest:
    """An OTLP request with one ResourceSpans per distinct resource, in first-seen order."""
    request = ExportTraceServiceRequest()
    by_resource: dict[tuple[tuple[str, Any], ...], Any] = {}
    for s in spans:
        key = tuple(sorted((k, repr(v)) for k, v in s.resource.items()))
        scope_spans = by_resource.get(key)
        if scope_spans is None:
            resource_spans = request.resource_spans.add()
            resource_spans.resource.attributes.extend(key_values(s.resource))
            scope_spans = by_resource[key] = resource_spans.scope_spans.add()
            scope_spans.scope.name = "sloscope.testing"
        proto = scope_spans.spans.add()
        proto.trace_id = bytes.fromhex(s.trace_id)
        proto.span_id = bytes.fromhex(s.span_id)
        if s.parent_span_id:
            proto.parent_span_id = bytes.fromhex(s.parent_span_id)
        proto.name = s.name
        proto.kind = ProtoSpan.SPAN_KIND_SERVER
        proto.start_time_unix_nano = s.start_ns
        proto.end_time_unix_nano = s.end_ns
        proto.trace_state = s.tracestate
        proto.status.code = s.status_code
        proto.status.message = s.status_message
        proto.attributes.extend(key_values(s.attributes))
    return request


def to_otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON: the protobuf JSON mapping with trace and span ids as hex instead of base64 (a span's and its
    links')."""
    document = json_format.MessageToDict(request)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for s in scope_spans.get("spans", []):
                for ids in (s, *s.get("links", [])):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in ids:
                            ids[key] = base64.b64decode(ids[key]).hex()
    return json.dumps(document).encode()
