"""Builders of spans shaped like the real ones, shared by tests, benchmarks and examples.

``Span`` records for unit tests of the processors, and OTLP protobuf requests for anything that
goes over the wire. Shapes follow DESIGN.md: vLLM ``llm_request`` (SERVER, ``gen_ai.*`` in seconds
and counts, pod in resource attributes) under an EPP ``gateway.request`` (SLO headers captured as
``http.request.header.*`` string arrays).
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

from sloscope.records import Span


def vllm_attributes(
    *,
    ttft: float = 0.1,
    e2e: float = 1.0,
    completion_tokens: int = 11,
    prompt_tokens: int = 100,
    model: str | None = None,
    request_id: str = "chatcmpl-req-1",
) -> dict[str, Any]:
    """A model server's ``llm_request`` attributes, without the model by default.

    vLLM defines ``gen_ai.response.model`` but sets it on no span (0.33.0
    ``v1/engine/output_processor.py:941-1001``): the model comes from the EPP's spans. ``model``
    sets it, for an engine or a deployment that names it (the ``target_model`` mapping reads it).
    """
    attributes: dict[str, Any] = {
        "gen_ai.request.id": request_id,
        "gen_ai.usage.prompt_tokens": prompt_tokens,
        "gen_ai.usage.completion_tokens": completion_tokens,
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_queue": 0.01,
        "gen_ai.latency.time_in_model_prefill": ttft * 0.8,
        "gen_ai.latency.time_in_model_decode": max(e2e - ttft, 0.0),
        "gen_ai.latency.time_in_model_inference": e2e * 0.95,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.n": 1,
    }
    if model is not None:
        attributes["gen_ai.response.model"] = model
    return attributes


def vllm_033_attributes(
    *,
    request_id: str,
    ttft: float,
    e2e: float,
    completion_tokens: int,
    prompt_tokens: int = 1450,
    queue: float = 0.004,
    max_tokens: int = 256,
    temperature: float = 0.7,
) -> dict[str, Any]:
    """vllm/v1/engine/output_processor.py:957-993 (0.33.0): seconds as floats, no gen_ai.response.model,
    temperature only when truthy, n = 1 per engine request."""
    prefill = max(ttft - queue - 0.002, 0.0)
    decode = max(e2e - ttft - 0.001, 0.0) if completion_tokens > 1 else 0.0
    attributes: dict[str, Any] = {
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_queue": queue,
        "gen_ai.usage.prompt_tokens": prompt_tokens,
        "gen_ai.usage.completion_tokens": completion_tokens,
        "gen_ai.latency.time_in_model_prefill": prefill,
        "gen_ai.latency.time_in_model_decode": decode,
        "gen_ai.latency.time_in_model_inference": prefill + decode,
        "gen_ai.request.id": request_id,
        "gen_ai.request.top_p": 1.0,
        "gen_ai.request.max_tokens": max_tokens,
    }
    if temperature:
        attributes["gen_ai.request.temperature"] = temperature
    attributes["gen_ai.request.n"] = 1
    return attributes


def gateway_attributes(
    *,
    slo_ttft_ms: str | None = None,
    slo_tpot_ms: str | None = None,
    model: str = "llama-3-8b",
    request_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.request.model": model}
    if slo_ttft_ms is not None:
        attrs["http.request.header.x-slo-ttft-ms"] = [slo_ttft_ms]
    if slo_tpot_ms is not None:
        attrs["http.request.header.x-slo-tpot-ms"] = [slo_tpot_ms]
    if request_id is not None:
        attrs["http.request.header.x-request-id"] = [request_id]
    attrs.update(extra or {})
    return attrs


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
    """The llm-d-router EPP's spans of one call (ebab6879: ``pkg/epp/handlers/server.go:460``,
    ``pkg/epp/requestcontrol/director.go:242-267``, ``pkg/epp/scheduling/scheduler_profile.go:153-382``):
    gateway.request (no attributes) > orchestration > [run_scheduler_profile > scoring > scorer, pick].
    Span ids are ``base`` to ``base + 5``; ``scorer=None`` stops before scheduling (a refused call). ``profile`` is the
    scheduling profile run (llm-d-router's chart names its only one ``default``; the coordinator's EPP runs the one
    its ``EPP-Profile`` header names), ``end_ns`` the gateway span's end (one second after its start unless told)."""
    ms = 1_000_000
    resource = {"service.name": "llm-d-epp"}
    spans = [
        span(
            trace,
            base,
            "gateway.request",
            {},
            parent=parent,
            resource=resource,
            start_ns=start_ns,
            end_ns=end_ns,
            status=status,
        ),
        span(
            trace,
            base + 1,
            "gateway.request_orchestration",
            {"target_model": model, "request_prio": 0},
            parent=base,
            resource=resource,
            start_ns=start_ns + ms,
            status=orchestration_status,
        ),
    ]
    if scorer is None:
        return spans
    ids = {"gen_ai.request.id": request_id, **({"gen_ai.request.model": model} if model else {})}
    profile_name = {"llm_d.epp.scheduling.profile.name": profile}
    return [
        *spans,
        span(
            trace,
            base + 2,
            "run_scheduler_profile",
            profile_name,
            parent=base + 1,
            resource=resource,
            start_ns=start_ns + 2 * ms,
        ),
        span(trace, base + 3, "llm_d.epp.scoring", ids, parent=base + 2, resource=resource, start_ns=start_ns + 2 * ms),
        span(
            trace,
            base + 4,
            f"llm_d.epp.scorer.{scorer}",
            {"llm_d.epp.scorer.type": scorer, **ids},
            parent=base + 3,
            resource=resource,
            start_ns=start_ns + 2 * ms,
        ),
        span(trace, base + 5, "pick_endpoints", ids, parent=base + 2, resource=resource, start_ns=start_ns + 3 * ms),
    ]


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
