"""The late-2025 EPP of gateway-api-inference-extension (GIE v1.x before 2026) and the vLLM of its time: one
``gateway.request`` span (SERVER; GIE ``pkg/epp/handlers/server.go:133-134`` at 812efb21, the first EPP that
traced) that carries the request's model and the SLO headers as captured request headers
(``http.request.header.<name>``, string arrays; ``../shared/fixtures/request-headers.md``, GIE main @ 4d37fbca),
which the EPP of that era did not set itself: a gateway in front tagged it. Under it, an orchestration span, and the
model server's ``llm_request`` (SERVER, vLLM's tracer ``vllm.llm_engine`` of that time) as the child of the
``traceparent`` the EPP injected, ending when the request finished.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic

from sloscope.upstream.writer import Drawn, Handle, Process, Scope, SpanWriter

__all__ = ["GATEWAY_REQUEST", "SCOPE", "Gie2025Epp", "Vllm2025Pod", "gateway_attributes"]

GATEWAY_REQUEST = "gateway.request"
SCOPE = Scope("gateway-api-inference-extension")
VLLM_SCOPE = Scope("vllm.llm_engine")  # init_tracer("vllm.llm_engine", ...) of the vLLM of that time


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


class Gie2025Epp(Generic[Handle]):
    """The late-2025 EPP (process ``epp``, its spans in ``scope``) writing through ``writer``; times are Unix
    nanoseconds."""

    def __init__(self, writer: SpanWriter[Handle], epp: Process, scope: Scope = SCOPE) -> None:
        self.writer, self.epp, self.scope = writer, epp, scope

    def gateway(self, parent: Handle | None, start_ns: int, end_ns: int, attributes: Mapping[str, Any]) -> Handle:
        """gateway.request with the attributes the gateway tagged it with (:func:`gateway_attributes`)."""
        drawn = Drawn(GATEWAY_REQUEST, parent, start_ns, end_ns, "server", attributes)
        return self.writer.span(self.epp, self.scope, drawn)

    def orchestration(self, gateway: Handle, start_ns: int, end_ns: int, *, model: str, priority: int = 0) -> Handle:
        """gateway.request_orchestration (INTERNAL in that era) with the target model and the priority."""
        attributes: dict[str, Any] = {"target_model": model, "request_prio": priority}
        drawn = Drawn("gateway.request_orchestration", gateway, start_ns, end_ns, "internal", attributes)
        return self.writer.span(self.epp, self.scope, drawn)


class Vllm2025Pod(Generic[Handle]):
    """A model server of that time (``process`` names its pod) writing through ``writer``."""

    def __init__(self, writer: SpanWriter[Handle], process: Process) -> None:
        self.writer, self.process = writer, process

    def llm_request(self, parent: Handle | None, start_ns: int, end_ns: int, attributes: Mapping[str, Any]) -> Handle:
        """``llm_request`` under the traceparent the EPP forwarded (``parent``), ended when the request finished."""
        drawn = Drawn("llm_request", parent, start_ns, end_ns, "server", attributes)
        return self.writer.span(self.process, VLLM_SCOPE, drawn)
