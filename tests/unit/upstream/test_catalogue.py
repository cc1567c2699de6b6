"""The catalogue of upstream span shapes, drawn as records: the tree, names, attributes and statuses each
upstream writes (llm-d-router ebab6879, vLLM 0.33.0, the late-2025 EPP), exactly; and llm-d-router's trees held
to the spans of a running llm-d-router v0.10.0 (../shared/fixtures/llm-d-router/captured-v0.10.0)."""

from __future__ import annotations

import json
from pathlib import Path

from sloscope.records import STATUS_ERROR, Span
from sloscope.testing import RecordWriter
from sloscope.upstream.gie_2025 import gateway_attributes
from sloscope.upstream.llmd_router import Epp, epp_process
from sloscope.upstream.pd_sidecar import Connector, Legs, Peer, Sidecar
from sloscope.upstream.vllm import VllmPod, vllm_033_attributes
from sloscope.upstream.writer import Drawn, Process, Scope

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def tree(spans: list[Span]) -> list[tuple[str, str]]:
    """(name, parent's name) of every span, in the order drawn."""
    names = {s.span_id: s.name for s in spans}
    return [(s.name, names.get(s.parent_span_id, "")) for s in spans]


def test_a_scheduled_call_is_the_gateway_its_orchestration_and_one_profile_run() -> None:
    writer = RecordWriter(trace=1, first=10)
    gateway = Epp(writer, epp_process("pool-a")).call(
        None, T0, T0 + 900 * MS, request_id="r1", model="Qwen/Qwen3-8B", scorers=("latency-scorer",)
    )
    spans = writer.spans
    assert gateway == 10 and [s.span_id for s in spans] == [f"{i:016x}" for i in range(10, 17)]
    assert tree(spans) == [
        ("gateway.request", ""),
        ("gateway.request_orchestration", "gateway.request"),
        ("run_scheduler_profile", "gateway.request_orchestration"),
        ("filter_endpoints", "run_scheduler_profile"),
        ("llm_d.epp.scoring", "run_scheduler_profile"),
        ("llm_d.epp.scorer.latency-scorer", "llm_d.epp.scoring"),
        ("pick_endpoints", "run_scheduler_profile"),
    ]
    assert spans[0].attributes == {} and (spans[0].start_ns, spans[0].end_ns) == (T0, T0 + 900 * MS)
    assert spans[0].resource == {
        "service.name": "llm-d-epp",
        "service.version": "v0.0.0-ebab687",
        "k8s.inferencepool.name": "pool-a",
    }
    assert spans[1].attributes == {"target_model": "Qwen/Qwen3-8B", "request_prio": 0}
    assert spans[2].attributes == {"llm_d.epp.scheduling.profile.name": "default"}
    assert spans[5].attributes["llm_d.epp.scorer.type"] == "latency-scorer"
    assert spans[6].attributes["gen_ai.request.id"] == "r1"
    assert spans[6].attributes["gen_ai.request.model"] == "Qwen/Qwen3-8B"
    assert all(s.status_code == 0 for s in spans)


def test_a_refused_call_stops_before_scheduling_with_its_error_on_both_spans() -> None:
    writer = RecordWriter(trace=2, first=1)
    error = "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
    Epp(writer).call(
        None, T0, T0 + 10 * MS, request_id="r2", model=None, scorers=None, status=error, orchestration_error=error
    )
    assert tree(writer.spans) == [("gateway.request", ""), ("gateway.request_orchestration", "gateway.request")]
    assert [(s.status_code, s.status_message) for s in writer.spans] == [(STATUS_ERROR, error)] * 2
    assert writer.spans[1].attributes == {}  # it failed before the target model was known


def test_the_disagg_profile_handler_runs_decode_then_prefill_and_prepares() -> None:
    writer = RecordWriter(trace=3, first=1)
    epp = Epp(writer)
    gateway = epp.gateway(None, T0, T0 + 3000 * MS)
    orchestration = epp.orchestration(gateway, T0 + MS, T0 + 20 * MS, model="m")
    epp.disaggregate(orchestration, T0 + 2 * MS, request_id="r3", model="m", prefill_address="10.0.2.11")
    under = [name for name, parent in tree(writer.spans) if parent == "gateway.request_orchestration"]
    assert under == [
        "pick_disagg_profile",
        "run_scheduler_profile",
        "pick_disagg_profile",
        "run_scheduler_profile",
        "pick_disagg_profile",
        "prepare_disaggregation",
    ]
    profiles = [
        s.attributes["llm_d.epp.scheduling.profile.name"] for s in writer.spans if s.name == "run_scheduler_profile"
    ]
    assert profiles == ["decode", "prefill"]
    prepare = writer.spans[-1]
    assert prepare.attributes["llm_d.epp.pd.disaggregation_used"] is True
    assert prepare.attributes["llm_d.epp.pd.prefill_pod_address"] == "10.0.2.11"


def test_prepare_disaggregation_alone_is_the_one_the_handler_ends_with() -> None:
    writer = RecordWriter(trace=3, first=1)
    Epp(writer).disaggregate(2, T0, request_id="r3", model="m", prefill_address="10.0.2.11")
    alone = Keeping()
    Epp(alone).prepare_disaggregation(2, T0, T0 + MS, request_id="r3", model="m", prefill_address="10.0.2.11")
    [(scope, drawn)] = alone.drawn
    assert (drawn.name, drawn.parent, drawn.kind, scope.name) == (
        "prepare_disaggregation",
        2,
        "internal",
        "llm-d-router/pkg/epp/framework/plugins/scheduling",
    )
    assert drawn.attributes == writer.spans[-1].attributes
    assert drawn.attributes["llm_d.epp.pd.prefill_pod_port"] == "8000"


def test_vllm_ends_its_span_half_a_millisecond_after_e2e_under_the_parent_it_was_sent() -> None:
    writer = RecordWriter(trace=4, first=20)
    attributes = vllm_033_attributes(request_id="chatcmpl-r4", ttft=0.25, e2e=1.5, completion_tokens=51)
    VllmPod(writer, "vllm-0").llm_request(7, T0, attributes)
    (span,) = writer.spans
    assert (span.name, span.parent_span_id, span.end_ns - span.start_ns) == ("llm_request", f"{7:016x}", 1_500_500_000)
    assert span.resource["k8s.pod.name"] == "vllm-0"
    assert "gen_ai.response.model" not in span.attributes  # vLLM 0.33 sets it on no span


def test_the_late_2025_gateway_captures_its_headers_as_string_arrays() -> None:
    assert gateway_attributes(slo_ttft_ms="200", slo_tpot_ms="50", model="m", request_id="r5") == {
        "gen_ai.request.model": "m",
        "http.request.header.x-slo-ttft-ms": ["200"],
        "http.request.header.x-slo-tpot-ms": ["50"],
        "http.request.header.x-request-id": ["r5"],
    }


# ---- against a running llm-d-router v0.10.0 ------------------------------------------------------------------

CAPTURED = Path(__file__).resolve().parents[4] / "shared/fixtures/llm-d-router/captured-v0.10.0"
_KIND = {1: "internal", 2: "server", 3: "client"}
Shape = tuple[tuple[str, str, str, str, tuple[str, ...], bool, bool], ...]


def captured_shapes(name: str) -> set[Shape]:
    """Every trace of a capture as (name, parent's name, kind, scope, attribute keys, failed, exception event) per
    span, in start order: the real EPP's trees (its README: captured from llm-d-router v0.10.0, 71f4f099)."""
    traces: dict[str, list[tuple[int, str, str, str, str, tuple[str, ...], bool, bool]]] = {}
    names: dict[str, str] = {}
    for line in (CAPTURED / name).read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for s in scope_spans["spans"]:
                    names[s["spanId"]] = s["name"]
                    keys = tuple(sorted(a["key"] for a in s.get("attributes", [])))
                    failed = s.get("status", {}).get("code") == STATUS_ERROR
                    raised = any(e["name"] == "exception" for e in s.get("events", []))
                    row = (s["name"], s.get("parentSpanId", ""), _KIND[s["kind"]], scope_spans["scope"]["name"])
                    traces.setdefault(s["traceId"], []).append(
                        (int(s["startTimeUnixNano"]), *row, keys, failed, raised)
                    )
    return {
        tuple((n, names.get(p, ""), k, sc, keys, f, r) for _, n, p, k, sc, keys, f, r in sorted(spans))
        for spans in traces.values()
    }


class Keeping:
    """A writer that keeps everything the catalogue says of each span."""

    def __init__(self) -> None:
        self.drawn: list[tuple[Scope, Drawn[int]]] = []

    def span(self, process: Process, scope: Scope, drawn: Drawn[int]) -> int:
        self.drawn.append((scope, drawn))
        return len(self.drawn)

    def shape(self) -> Shape:
        names = {i + 1: drawn.name for i, (_, drawn) in enumerate(self.drawn)}
        return tuple(
            (
                d.name, names.get(d.parent or 0, ""), d.kind, scope.name, tuple(sorted(d.attributes)),
                d.failure is not None, d.error is not None,
            )
            for scope, d in self.drawn
        )  # fmt: skip


def test_a_scheduled_call_has_the_tree_of_the_captured_epp() -> None:
    writer = Keeping()
    Epp(writer).call(None, T0, T0 + 500 * MS, request_id="r", model="sim-model", scorers=("latency-scorer",))
    assert writer.shape() in captured_shapes("spans-file-discovery.otlp.jsonl")
    assert writer.shape() in captured_shapes("spans-k8s-with-shed.otlp.jsonl")


def test_a_shed_call_has_the_tree_of_the_captured_epp() -> None:
    """Admission refused: RecordError on both spans, the orchestration with its target model (director.go:265-267
    run before admission)."""
    writer = Keeping()
    epp = Epp(writer)
    refused = "inference error: Internal - request cannot be admitted: no valid endpoint available to serve the request"
    gateway = epp.gateway(None, T0, T0 + 5 * MS, error=refused)
    epp.orchestration(gateway, T0 + MS, T0 + 4 * MS, model="sim-model", error=refused)
    assert writer.shape() in captured_shapes("spans-k8s-with-shed.otlp.jsonl")


# ---- the P/D routing sidecar, held to fixtures/llm-d-router/spans.md section 2 (constructed from the code) -----------

SPANS_MD = Path(__file__).parents[3].parent / "shared" / "fixtures" / "llm-d-router" / "spans.md"
PEER = Peer("10.0.3.7", "10.0.0.5", 50412, "Envoy/1.36", "10.0.0.5", 1834, 48211)


def sidecar_tree(connector: Connector) -> tuple[list[Span], tuple[int, int]]:
    writer = RecordWriter(trace=3, first=30)
    sidecar = Sidecar(writer)
    server = sidecar.server(10, T0 + 25 * MS, T0 + 2880 * MS, path="/v1/chat/completions", peer=PEER)
    forward = sidecar.forward_request(
        server, T0 + 26 * MS, T0 + 2879 * MS, connector=connector, path="/v1/chat/completions",
        prefill_target="10.0.2.11:8000",
    )  # fmt: skip
    at = [T0 + ms * MS for ms in (27, 270, 28, 270, 275, 2878, 275, 2878)]
    legs = Legs(connector, "5f0c6a3e", T0 + 26 * MS, (at[0], at[1]), (at[2], at[3]), (at[4], at[5]), (at[6], at[7]))
    posts = sidecar.legs(forward, legs, path="/v1/chat/completions", prefill_target="10.0.2.11:8000")
    return writer.spans, posts


def test_the_nixl_connector_nests_decode_under_prefill_with_the_summary_on_decode() -> None:
    spans, posts = sidecar_tree("nixlv2")
    assert tree(spans) == [
        ("llm_d.pd_proxy.POST /v1/chat/completions", ""),  # under the EPP's traceparent (span 10, not drawn)
        ("forward_request", "llm_d.pd_proxy.POST /v1/chat/completions"),
        ("prefill", "forward_request"),
        ("HTTP POST", "prefill"),
        ("decode", "prefill"),  # the one ctx rebound (connector_nixlv2.go:87,296)
        ("HTTP POST", "decode"),
    ]
    assert posts == (33, 35)
    decode = spans[4].attributes
    assert (decode["llm_d.pd_proxy.true_ttft_ms"], decode["llm_d.pd_proxy.total_duration_ms"]) == (249.0, 2852.0)
    assert (
        decode["llm_d.pd_proxy.coordinator_overhead_ms"],
        spans[2].attributes["llm_d.pd_proxy.prefill.duration_ms"],
    ) == (5.0, 242.0)
    assert spans[5].attributes["url.full"] == "http://localhost:8200/v1/chat/completions"
    assert spans[0].resource == {"service.name": "llm-d-disagg-sidecar", "service.version": ""}
    text = SPANS_MD.read_text()
    for span in spans:  # every name and attribute key is one spans.md names
        assert all(key in text for key in span.attributes), span.name
    assert "llm_d.pd_proxy.POST /v1/chat/completions" in text and "forward_request (S)" in text


def test_the_p2p_connector_hangs_the_prefill_post_under_forward_request() -> None:
    spans, _ = sidecar_tree("offloading")
    assert tree(spans)[2:] == [
        ("llm_d.pd_proxy.prefill", "forward_request"),
        ("HTTP POST", "forward_request"),  # cloned before the prefill span starts (connector_p2p.go:126-129)
        ("llm_d.pd_proxy.decode", "llm_d.pd_proxy.prefill"),
        ("HTTP POST", "llm_d.pd_proxy.decode"),
    ]
    assert spans[4].attributes["llm_d.pd_proxy.concurrent_pd"] is True
    text = SPANS_MD.read_text()
    assert all(key in text for span in spans for key in span.attributes)


def test_a_chunked_decode_is_the_proxys_internal_span_under_the_decode_leg_with_each_chunks_post_under_it() -> None:
    writer = Keeping()
    sidecar = Sidecar(writer)
    chunks = sidecar.chunked_decode(5, T0, T0 + 2345 * MS + MS // 2, chunk_size=64, chunks=3, total_tokens=150)
    sidecar.post(chunks, T0 + MS, T0 + 800 * MS, target="localhost:8200", path="/v1/chat/completions")
    (scope, drawn), (_, post) = writer.drawn
    assert (drawn.name, drawn.parent, drawn.kind, scope.name) == (
        "chunked_decode",
        5,
        "internal",
        "llm-d-router/pkg/sidecar/proxy",
    )
    assert (post.name, post.parent, post.kind) == ("HTTP POST", chunks, "client")
    assert drawn.attributes["llm_d.pd_proxy.chunked_decode.duration_ms"] == 2345.0  # whole milliseconds
    assert (drawn.attributes["llm_d.pd_proxy.chunked_decode.chunks"], drawn.failure) == (3, None)
    text = SPANS_MD.read_text()
    assert "chunked_decode (I)" in text
    keys = "/.".join(key.removeprefix("llm_d.pd_proxy.chunked_decode.") for key in drawn.attributes)
    assert f"llm_d.pd_proxy.chunked_decode.{keys}" in text  # spans.md writes them as one line, in that order
