"""End to end: the real OpenTelemetry SDK exports vLLM- and EPP-shaped spans to a ``sloscope serve``
process over gRPC, HTTP/protobuf and raw OTLP/JSON; /metrics must show the exact ground truth.

Ground truth with the default SLO spec (interactive: TTFT target <= 1000 ms; standard: any other
SLO; none: no SLO headers). TPOT = (e2e - ttft) / (tokens - 1).

 id   class        model    routing    targets (ms)     ttft   e2e   tok  verdicts                 delivery
 R1   interactive  llama    unknown    ttft 200 tpot 50  0.15  0.65  11  ttft ok, tpot 0.05 ok    gRPC + HTTP
 R2   interactive  llama    unknown    ttft 200 tpot 50  0.25  0.75  11  ttft MISS, tpot ok       gRPC + HTTP
 R3   standard     mistral  unknown    ttft 2000         1.50  3.40  20  ttft ok                  gRPC + HTTP
 R4   standard     llama    unknown    tpot 30           0.50  2.50  41  tpot 0.05 MISS           gRPC + HTTP
 R5   none         llama    unknown    -                 0.20  0.90  8   nothing eligible         gRPC + HTTP
 R6   interactive  llama    unknown    ttft 500 tpot 50  0.30  0.30  1   ttft ok, no TPOT (1 tok)  gRPC + HTTP
 R7   none         llama    (no pool)  - (gateway lost)  0.20  0.40  3   anchor only              gRPC only
 R8   standard     llama    unknown    ttft 3000         0.40  0.80  5   ttft ok                  sent twice
 R9   interactive  llama    unknown    ttft 300 tpot 50  0.35  0.85  11  ttft MISS, tpot ok       EPP first, vLLM later
 R10  standard     llama    unknown    ttft 5000         0.80  1.20  9   ttft ok                  split over 2 exports
 R11  interactive  llama    unknown    ttft 100          0.12  0.50  4   ttft MISS                raw OTLP/JSON
 R12  interactive  llama    predicted  ttft 1000         0.90  1.10  3   ttft ok                  gRPC + HTTP
 R13  interactive  llama    unknown    ttft 400          0.30  0.60  1   ttft ok                  two traces, joined by
                                                                                                  x-request-id (old EPP)
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from sloscope.conventions import ALL_METRICS
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration


class Fleet:
    """One EPP and two vLLM pods, each a real TracerProvider recording into memory; tests choose what to export."""

    def __init__(self) -> None:
        self.epp_spans = InMemorySpanExporter()
        self.vllm_spans = InMemorySpanExporter()
        self.epp = self._provider({"service.name": "epp"}, self.epp_spans).get_tracer("gateway-api-inference-extension")
        self.pods = {
            pod: self._provider({"service.name": "vllm", "k8s.pod.name": pod}, self.vllm_spans).get_tracer(
                "vllm.llm_engine"
            )
            for pod in ("vllm-0", "vllm-1")
        }

    @staticmethod
    def _provider(resource: dict[str, str], sink: InMemorySpanExporter) -> TracerProvider:
        provider = TracerProvider(resource=Resource.create(resource))
        provider.add_span_processor(SimpleSpanProcessor(sink))
        return provider

    def request(
        self, *, pod: str, gateway: dict[str, Any], vllm: dict[str, Any], orchestration: bool = False
    ) -> tuple[list[ReadableSpan], ReadableSpan]:
        """Gateway span(s) and the vLLM child, shaped like the EPP's and vLLM's; returns (gateway spans, vLLM span)."""
        before = len(self.epp_spans.get_finished_spans())
        now = time.time_ns()  # every span starts at once: the TTFT from the gateway's arrival is vLLM's own
        root = self.epp.start_span(
            "gateway.request",
            kind=trace.SpanKind.SERVER,
            attributes={"inference_pool": "pool-a", **gateway},
            start_time=now,
        )
        parent = root
        if orchestration:
            parent = self.epp.start_span(
                "gateway.request_orchestration",
                context=trace.set_span_in_context(root),
                attributes={"target_model": vllm["gen_ai.response.model"], "request_prio": 0},
                start_time=now,
            )
        llm = self.pods[pod].start_span(
            "llm_request",
            context=trace.set_span_in_context(parent),
            kind=trace.SpanKind.SERVER,
            attributes=vllm,
            start_time=now,
        )
        llm.end()
        if parent is not root:
            parent.end()
        root.end()
        return list(self.epp_spans.get_finished_spans()[before:]), self.vllm_spans.get_finished_spans()[-1]


def headers(ttft: str | None = None, tpot: str | None = None, model: str = "llama", **extra: Any) -> dict[str, Any]:
    return gateway_attributes(slo_ttft_ms=ttft, slo_tpot_ms=tpot, model=model, extra=extra)


def model_server(ttft: float, e2e: float, tokens: int, model: str = "llama") -> dict[str, Any]:
    return vllm_attributes(ttft=ttft, e2e=e2e, completion_tokens=tokens, model=model)


def export(exporter: Any, spans: Sequence[ReadableSpan]) -> None:
    assert exporter.export(list(spans)) == SpanExportResult.SUCCESS


def post_json(server: Server, body: bytes) -> int:
    request = urllib.request.Request(server.otlp_http, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def test_joined_series_match_the_ground_truth(serve: Callable[..., Server], tmp_path: Path) -> None:
    # The record store is on so that every series of the contract exists (its own only do with it).
    store = {"enabled": True, "directory": str(tmp_path / "records")}
    server = serve(join={"window_seconds": 1.0, "trace_ttl_seconds": 5.0}, store=store)
    fleet = Fleet()
    grpc_exporter = GrpcExporter(endpoint=server.otlp_grpc, insecure=True)
    http_exporter = HttpExporter(endpoint=server.otlp_http)

    plain = [
        ("vllm-0", headers("200", "50"), model_server(0.15, 0.65, 11)),  # R1
        ("vllm-0", headers("200", "50"), model_server(0.25, 0.75, 11)),  # R2
        ("vllm-0", headers("2000", model="mistral"), model_server(1.5, 3.4, 20, "mistral")),  # R3
        ("vllm-0", headers(tpot="30"), model_server(0.5, 2.5, 41)),  # R4
        ("vllm-0", headers(), model_server(0.2, 0.9, 8)),  # R5
        ("vllm-0", headers("500", "50"), model_server(0.3, 0.3, 1)),  # R6
        (
            "vllm-1",
            headers("1000", **{"http.request.header.x-prediction-based-scheduling": ["true"]}),
            model_server(0.9, 1.1, 3),
        ),  # R12
    ]
    for pod, gw, llm in plain:
        gateway_spans, llm_span = fleet.request(pod=pod, gateway=gw, vllm=llm)
        export(grpc_exporter, [llm_span])
        export(http_exporter, gateway_spans)

    _lost_gateway, r7 = fleet.request(pod="vllm-1", gateway=headers("200"), vllm=model_server(0.2, 0.4, 3))
    export(grpc_exporter, [r7])  # R7: the gateway span never arrives

    r8_gateway, r8 = fleet.request(pod="vllm-1", gateway=headers("3000"), vllm=model_server(0.4, 0.8, 5))
    export(http_exporter, [*r8_gateway, r8])
    export(grpc_exporter, [r8, *r8_gateway])  # R8: an exporter retry delivers both spans again

    r9_gateway, r9 = fleet.request(pod="vllm-1", gateway=headers("300", "50"), vllm=model_server(0.35, 0.85, 11))
    export(http_exporter, r9_gateway)  # R9: the parent first, the model-server span later

    r10_gateway, r10 = fleet.request(
        pod="vllm-1", gateway=headers("5000"), vllm=model_server(0.8, 1.2, 9), orchestration=True
    )
    root = [s for s in r10_gateway if s.name == "gateway.request"]
    orchestration = [s for s in r10_gateway if s.name == "gateway.request_orchestration"]
    export(grpc_exporter, [r10, *orchestration])  # R10: one trace split over two exports...
    export(grpc_exporter, [r9])
    export(http_exporter, root)  # ...whose root comes last

    r11 = [
        span(
            0xA11,
            1,
            "gateway.request",
            {"inference_pool": "pool-a", **headers("100")},
            resource={"service.name": "epp"},
        ),
        span(
            0xA11,
            2,
            "llm_request",
            model_server(0.12, 0.5, 4),
            parent=1,
            resource={"service.name": "vllm", "k8s.pod.name": "vllm-1"},
        ),
    ]
    assert post_json(server, to_otlp_json(export_request(r11))) == 200  # R11: raw OTLP/JSON

    # R13: an EPP that starts its own trace; vLLM's span is the root of another one. They share the
    # request id: the x-request-id header on the gateway span, vLLM's prefixed id on its own.
    epp_root = fleet.epp.start_span(
        "gateway.request",
        context=trace.set_span_in_context(trace.INVALID_SPAN),
        attributes={"inference_pool": "pool-a", **headers("400", **{"http.request.header.x-request-id": ["req-13"]})},
    )
    epp_root.end()
    llm_root = fleet.pods["vllm-1"].start_span(
        "llm_request",
        context=trace.set_span_in_context(trace.INVALID_SPAN),
        kind=trace.SpanKind.SERVER,
        attributes={**model_server(0.3, 0.6, 1), "gen_ai.request.id": "chatcmpl-req-13"},
    )
    llm_root.end()
    assert epp_root.get_span_context().trace_id != llm_root.get_span_context().trace_id
    export(grpc_exporter, [fleet.vllm_spans.get_finished_spans()[-1]])
    export(http_exporter, [fleet.epp_spans.get_finished_spans()[-1]])

    wait_until(lambda: server.total("sloscope_traces_joined_total") == 13, what="13 joined requests")
    samples = server.samples()

    def count(name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    def slo(name: str, slo_class: str, slo_name: str, model: str = "llama", routing: str = "unknown") -> float:
        return count(name, model=model, pool="pool-a", slo_class=slo_class, routing=routing, slo=slo_name)

    assert count("sloscope_traces_joined_total", outcome="joined") == 11
    assert count("sloscope_traces_joined_total", outcome="anchor_only") == 1
    assert count("sloscope_traces_joined_total", outcome="joined_by_request_id") == 1
    assert count("sloscope_spans_dropped_total", reason="duplicate") == 2
    assert (
        count("sloscope_spans_received_total", transport="grpc")
        + count("sloscope_spans_received_total", transport="http")
        == 28
    )

    requests = {
        (dict(labels)["model"], dict(labels)["pool"], dict(labels)["slo_class"], dict(labels)["routing"]): value
        for (name, labels), value in samples.items()
        if name == "sloscope_requests_total"
    }
    assert requests == {
        ("llama", "pool-a", "interactive", "unknown"): 6,  # R1 R2 R6 R9 R11 R13
        ("llama", "pool-a", "interactive", "predicted"): 1,  # R12
        ("mistral", "pool-a", "standard", "unknown"): 1,  # R3
        ("llama", "pool-a", "standard", "unknown"): 3,  # R4 R8 R10
        ("llama", "pool-a", "none", "unknown"): 1,  # R5
        ("llama", "unknown", "none", "unknown"): 1,  # R7
    }
    expected = {  # (class, slo, model, routing): (eligible, violations)
        ("interactive", "ttft", "llama", "unknown"): (6, 3),
        ("interactive", "tpot", "llama", "unknown"): (3, 0),
        ("interactive", "goodput", "llama", "unknown"): (6, 3),
        ("interactive", "ttft", "llama", "predicted"): (1, 0),
        ("interactive", "tpot", "llama", "predicted"): (0, 0),
        ("interactive", "goodput", "llama", "predicted"): (1, 0),
        ("standard", "ttft", "mistral", "unknown"): (1, 0),
        ("standard", "goodput", "mistral", "unknown"): (1, 0),
        ("standard", "ttft", "llama", "unknown"): (2, 0),
        ("standard", "tpot", "llama", "unknown"): (1, 1),
        ("standard", "goodput", "llama", "unknown"): (3, 1),
        ("none", "ttft", "llama", "unknown"): (0, 0),
        ("none", "goodput", "llama", "unknown"): (0, 0),
    }
    for (slo_class, slo_name, model, routing), (eligible, violations) in expected.items():
        assert slo("sloscope_slo_requests_total", slo_class, slo_name, model, routing) == eligible, (
            slo_class,
            slo_name,
        )
        assert slo("sloscope_slo_violations_total", slo_class, slo_name, model, routing) == violations, (
            slo_class,
            slo_name,
        )

    hist = {"model": "llama", "pool": "pool-a", "slo_class": "interactive"}
    assert count("sloscope_ttft_seconds_count", **hist) == 7  # R1 R2 R6 R9 R11 R12 R13
    assert count("sloscope_ttft_seconds_bucket", **hist, le="0.25") == 3  # R1 0.15, R2 0.25, R11 0.12
    assert count("sloscope_tpot_seconds_count", **hist) == 5  # R1 R2 R9 R11 R12; R6 has one token
    assert count("sloscope_pod_requests_total", pool="pool-a", pod="vllm-0") == 6
    assert count("sloscope_pod_slo_violations_total", pool="pool-a", pod="vllm-1", slo="ttft") == 2  # R9 R11
    assert count("sloscope_invalid_values_total", field="ttft_seconds") == 0

    # Contract: every sloscope series on /metrics is defined in conventions, and every definition is exposed.
    known = {d.name for d in ALL_METRICS}
    families = {family.name for family in text_string_to_metric_families(server.text())}
    ours = {n for n in families if n.startswith(("sloscope_", "http_")) and not n.endswith("_created")}
    assert ours == (known - {"sloscope_build"}) | {"sloscope_build_info"}  # an info family is exposed as _info
    assert {"process_cpu_seconds", "python_info"} <= families  # the standard process and runtime series

    openmetrics = urllib.request.Request(
        server.url("/metrics"), headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    text = urllib.request.urlopen(openmetrics, timeout=10).read().decode()
    # The newest observation of that bucket is R11, posted last: its trace id is the exemplar.
    assert re.search(
        r'^sloscope_ttft_seconds_bucket\{le="0.25",model="llama",pool="pool-a",slo_class="interactive"\} 3.0 '
        r'# \{trace_id="00000000000000000000000000000a11"\} 0.12',
        text,
        re.MULTILINE,
    ), text

    assert server.stop() == 0
    assert any("sloscope stopped" in line for line in server.log)
