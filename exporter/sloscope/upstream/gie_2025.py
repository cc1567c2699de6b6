"""The late-2025 EPP of gateway-api-inference-extension (GIE v1.x before 2026): one ``gateway.request`` span that
carries the request's model and the SLO headers as captured request headers (``http.request.header.<name>``, string
arrays), the model server's span under it."""

from __future__ import annotations

from typing import Any

__all__ = ["GATEWAY_REQUEST", "gateway_attributes"]

GATEWAY_REQUEST = "gateway.request"


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
