"""vLLM's ``llm_request`` span (0.33.0, 0.34): what the catalogue draws of a vLLM pod.

One SERVER span a request, its attributes set once when the request finishes (``vllm/v1/engine/
output_processor.py:957-1001``), the traceparent it was sent as its parent; the resource made by
``Resource.create`` of vLLM's two attributes (``vllm/tracing/otel.py:76-81``), the pod named through
``OTEL_RESOURCE_ATTRIBUTES`` as docs/sending-traces.md tells operators to. Seconds as floats; no
``gen_ai.response.model`` (defined, set on no span).
"""

from __future__ import annotations

from typing import Any, Generic

from sloscope.upstream.writer import Drawn, Handle, Process, Scope, SpanWriter

__all__ = [
    "LLM_REQUEST",
    "VllmPod",
    "llm_request_attributes",
    "vllm_033_attributes",
    "vllm_attributes",
    "vllm_process",
]

LLM_REQUEST = "llm_request"
SCOPE = Scope("vllm.tracing.otel")  # vllm/tracing/otel.py:192


def vllm_process(pod: str, namespace: str | None = None) -> Process:
    """The resource a vLLM pod's spans carry (without the SDK's defaults, which a writer may add)."""
    attributes: dict[str, Any] = {
        "vllm.instrumenting_module_name": "vllm.llm_engine",
        "vllm.process_id": "1",
        "k8s.pod.name": pod,
    }
    if namespace is not None:
        attributes["k8s.namespace.name"] = namespace
    return Process(attributes)


class VllmPod(Generic[Handle]):
    """One vLLM API-server process writing through ``writer``."""

    def __init__(self, writer: SpanWriter[Handle], pod: str, process: Process | None = None) -> None:
        self.writer, self.pod = writer, pod
        self.process = process or vllm_process(pod)

    def llm_request(
        self, parent: Handle | None, start_ns: int, attributes: dict[str, Any], *, end_ns: int | None = None
    ) -> Handle:
        """SERVER, started at the request's arrival, ended just after its finishing iteration (e2e after the
        arrival, and half a millisecond for do_tracing, unless the caller measured ``end_ns``), no status."""
        if end_ns is None:
            end_ns = start_ns + round(float(attributes["gen_ai.latency.e2e"]) * 1e9) + 500_000
        return self.writer.span(self.process, SCOPE, Drawn(LLM_REQUEST, parent, start_ns, end_ns, "server", attributes))


def llm_request_attributes(
    *,
    request_id: str | int,
    prompt_tokens: int,
    completion_tokens: int,
    ttft: float,
    e2e: float,
    queue: float,
    prefill: float,
    decode: float,
    inference: float,
    max_tokens: int,
    top_p: float,
    temperature: float,
    model: str | None = None,
) -> dict[str, Any]:
    """``llm_request``'s attributes in the order vLLM sets them (``vllm/v1/engine/output_processor.py:957-993``,
    0.33.0): seconds as floats, the temperature only when it is not 0, n = 1 per engine request. vLLM defines
    ``gen_ai.response.model`` but sets it on no span: the model comes from the EPP's spans; ``model`` sets it, for
    an engine or a deployment that names it (the ``target_model`` mapping reads it)."""
    attributes: dict[str, Any] = {
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_queue": queue,
        "gen_ai.usage.prompt_tokens": prompt_tokens,
        "gen_ai.usage.completion_tokens": completion_tokens,
        "gen_ai.latency.time_in_model_prefill": prefill,
        "gen_ai.latency.time_in_model_decode": decode,
        "gen_ai.latency.time_in_model_inference": inference,
        "gen_ai.request.id": request_id,
        "gen_ai.request.top_p": top_p,
        "gen_ai.request.max_tokens": max_tokens,
    }
    if temperature:
        attributes["gen_ai.request.temperature"] = temperature
    attributes["gen_ai.request.n"] = 1
    if model is not None:
        attributes["gen_ai.response.model"] = model
    return attributes


def vllm_attributes(
    *,
    ttft: float = 0.1,
    e2e: float = 1.0,
    completion_tokens: int = 11,
    prompt_tokens: int = 100,
    model: str | None = None,
    request_id: str = "chatcmpl-req-1",
) -> dict[str, Any]:
    """A model server's ``llm_request`` attributes with round made-up stage times (a tenth of a second in the queue,
    four fifths of TTFT in prefill), without the model by default."""
    return llm_request_attributes(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        ttft=ttft,
        e2e=e2e,
        queue=0.01,
        prefill=ttft * 0.8,
        decode=max(e2e - ttft, 0.0),
        inference=e2e * 0.95,
        max_tokens=256,
        top_p=0.9,
        temperature=0.7,
        model=model,
    )


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
    """vLLM 0.33.0's attributes of a request whose stages are what its TTFT and e2e leave: prefill the TTFT less
    the queue and 2 ms, decode the rest less 1 ms (none for a single token), top_p 1.0."""
    prefill = max(ttft - queue - 0.002, 0.0)
    decode = max(e2e - ttft - 0.001, 0.0) if completion_tokens > 1 else 0.0
    return llm_request_attributes(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        ttft=ttft,
        e2e=e2e,
        queue=queue,
        prefill=prefill,
        decode=decode,
        inference=prefill + decode,
        max_tokens=max_tokens,
        top_p=1.0,
        temperature=temperature,
    )
