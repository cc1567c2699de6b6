"""A traced proxy in front of one llm-d-inference-sim: the simulator serves, the proxy emits vLLM 0.33's span.

llm-d's vLLM simulator speaks vLLM's API and metrics but emits no spans, so each simulated pod is this proxy on the
pod's address, forwarding every request to its simulator, and exporting for each completion request the span vLLM
0.33.0 exports (``../shared/fixtures/vllm/llm_request-span-0.33.0.md``, read from the wheel's
``vllm/v1/engine/output_processor.py:941-1001`` and ``vllm/tracing/otel.py``), built from what the proxy measures:

- ``llm_request``, SERVER, instrumentation scope ``vllm.tracing.otel``, parent the request's ``traceparent``;
- started at the request's arrival, ended when its last byte was relayed; TTFT is the first content chunk's
  arrival (the proxy always asks the simulator to stream, and answers a non-streaming client with the assembled
  body, so TTFT is measured for both kinds);
- ``gen_ai.request.id``: ``chatcmpl-<x-request-id>`` or ``cmpl-<x-request-id>-0``; token counts from the
  simulator's usage chunk; queue time 0 (the simulator's queue is not visible from outside: its prefill and
  decode times are the TTFT and the rest);
- no span for a request the client abandoned, or that the simulator refused, as vLLM
  (``output_processor.py:869-889``: only finished requests are traced);
- the resource of vLLM's frontend process (``tracing/otel.py:76-81``) plus ``k8s.pod.name`` and
  ``k8s.namespace.name``, which a deployment adds through ``OTEL_RESOURCE_ATTRIBUTES``;
- the SDK's default batch processor (5 s delay unless ``OTEL_BSP_SCHEDULE_DELAY`` says otherwise), as vLLM.

Run: ``python -m tests.support.fleet.vllm_proxy --listen 127.0.0.2:8000 --upstream 127.0.0.1:18001 --pod p0
--namespace fleet --otlp 127.0.0.1:4317``. It prints ``serving`` on standard error once bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

COMPLETION_PATHS = {"/v1/chat/completions": "chatcmpl", "/v1/completions": "cmpl"}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length", "host"}
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass
class Measured:
    """What the proxy saw of one completion request."""

    arrival: float
    first_token: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    response_id: str = ""
    created: int = 0
    model: str = ""


def tracer(otlp: str, pod: str, namespace: str) -> tuple[TracerProvider, Tracer]:
    resource = Resource.create(
        {
            "vllm.instrumenting_module_name": "vllm.llm_engine",
            "vllm.process_id": str(os.getpid()),
            "k8s.pod.name": pod,
            "k8s.namespace.name": namespace,
        }
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp, insecure=True)))
    return provider, provider.get_tracer("vllm.tracing.otel")


def span_attributes(kind: str, request_id: str, body: dict[str, Any], seen: Measured, end: float) -> dict[str, Any]:
    """vLLM 0.33's ``llm_request`` attributes (``output_processor.py:957-993``), in seconds."""
    ttft = (seen.first_token - seen.arrival) if seen.first_token is not None else 0.0
    e2e = end - seen.arrival
    external_id = f"chatcmpl-{request_id}" if kind == "chatcmpl" else f"cmpl-{request_id}-0"
    attributes: dict[str, Any] = {
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_queue": 0.0,
        "gen_ai.usage.prompt_tokens": seen.prompt_tokens,
        "gen_ai.usage.completion_tokens": seen.completion_tokens,
        "gen_ai.latency.time_in_model_prefill": ttft,
        "gen_ai.latency.time_in_model_decode": e2e - ttft,
        "gen_ai.latency.time_in_model_inference": e2e,
        "gen_ai.request.id": external_id,
        "gen_ai.request.n": 1,
    }
    top_p = body.get("top_p", 1.0)
    if top_p:
        attributes["gen_ai.request.top_p"] = float(top_p)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens:
        attributes["gen_ai.request.max_tokens"] = int(max_tokens)
    temperature = body.get("temperature", 1.0)
    if temperature:
        attributes["gen_ai.request.temperature"] = float(temperature)
    return attributes


def _content(kind: str, choice: dict[str, Any]) -> str:
    if kind == "chatcmpl":
        return str((choice.get("delta") or {}).get("content") or "")
    return str(choice.get("text") or "")


def observe(kind: str, chunk: dict[str, Any], seen: Measured, now: float) -> None:
    """Fold one streamed chunk into what was seen: the first token's time, the text, the usage."""
    seen.response_id = seen.response_id or str(chunk.get("id", ""))
    seen.created = seen.created or int(chunk.get("created", 0))
    seen.model = seen.model or str(chunk.get("model", ""))
    for choice in chunk.get("choices") or []:
        content = _content(kind, choice)
        if content and seen.first_token is None:
            seen.first_token = now
        seen.text.append(content)
        seen.finish_reason = choice.get("finish_reason") or seen.finish_reason
    usage = chunk.get("usage")
    if usage:
        seen.prompt_tokens = int(usage.get("prompt_tokens", 0))
        seen.completion_tokens = int(usage.get("completion_tokens", 0))


def assembled(kind: str, seen: Measured) -> dict[str, Any]:
    """The non-streaming answer made of the streamed chunks, as the simulator would have answered it."""
    text = "".join(seen.text)
    if kind == "chatcmpl":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text}
        obj = "text_completion"
    choice["finish_reason"] = seen.finish_reason
    total = seen.prompt_tokens + seen.completion_tokens
    return {
        "id": seen.response_id,
        "object": obj,
        "created": seen.created,
        "model": seen.model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": seen.prompt_tokens,
            "completion_tokens": seen.completion_tokens,
            "total_tokens": total,
        },
    }


class Proxy:
    def __init__(self, upstream: str, tracer: Tracer) -> None:
        self._client = httpx.AsyncClient(base_url=f"http://{upstream}", timeout=httpx.Timeout(300.0, connect=5.0))
        self._tracer = tracer

    async def close(self) -> None:
        await self._client.aclose()

    async def handle(self, request: Request) -> Response:
        path = request.url.path
        kind = COMPLETION_PATHS.get(path)
        raw = await request.body()
        if request.method != "POST" or kind is None:
            return await self._plain(request, raw)
        arrival = time.time()  # vLLM takes arrival_time after HTTP parsing
        body = json.loads(raw)
        client_streams = bool(body.get("stream"))
        client_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        upstream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        headers = _forwarded(request.headers)
        upstream = await self._client.send(
            self._client.build_request("POST", path, json=upstream_body, headers=headers), stream=True
        )
        if upstream.status_code != 200:
            content = await upstream.aread()
            await upstream.aclose()
            return Response(content, upstream.status_code, _forwarded(upstream.headers))
        seen = Measured(arrival)
        request_id = request.headers.get("x-request-id", "")
        context = _PROPAGATOR.extract(dict(request.headers))

        def finish() -> None:
            end = time.time()
            span = self._tracer.start_span(
                "llm_request",
                context=context,
                kind=SpanKind.SERVER,
                start_time=round(seen.arrival * 1e9),
                attributes=span_attributes(kind, request_id, body, seen, end),
            )
            span.end(end_time=round(end * 1e9))

        if client_streams:
            return StreamingResponse(
                self._relay(upstream, kind, seen, client_usage, finish),
                status_code=200,
                headers=_forwarded(upstream.headers),
                media_type="text/event-stream",
            )
        async for _ in self._relay(upstream, kind, seen, False, None):
            pass
        answer = json.dumps(assembled(kind, seen)).encode()
        finish()
        return Response(answer, 200, media_type="application/json")

    async def _relay(
        self, upstream: httpx.Response, kind: str, seen: Measured, keep_usage: bool, finish: Any
    ) -> AsyncIterator[bytes]:
        """The simulator's events, each folded into ``seen``; the usage-only chunk only if the client asked for it.

        The span is emitted after the last event was handed on; a client that left before (the generator closed
        early) gets none, as vLLM traces no aborted request."""
        try:
            async for line in upstream.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: ") :]
                if data.strip() == "[DONE]":
                    yield b"data: [DONE]\n\n"
                    continue
                chunk = json.loads(data)
                observe(kind, chunk, seen, time.time())
                if chunk.get("choices") or keep_usage:
                    yield f"data: {data}\n\n".encode()
            if finish is not None:
                finish()
        finally:
            await upstream.aclose()

    async def _plain(self, request: Request, raw: bytes) -> Response:
        upstream = await self._client.request(
            request.method,
            request.url.path,
            params=request.query_params,
            content=raw,
            headers=_forwarded(request.headers),
        )
        return Response(upstream.content, upstream.status_code, _forwarded(upstream.headers))


def _forwarded(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP and k.lower() != "content-encoding"}


async def serve(args: argparse.Namespace) -> None:
    provider, span_tracer = tracer(args.otlp, args.pod, args.namespace)
    proxy = Proxy(args.upstream, span_tracer)
    methods = ["GET", "POST", "PUT", "DELETE"]
    app = Starlette(routes=[Route("/{path:path}", proxy.handle, methods=methods)])
    host, port = args.listen.rsplit(":", 1)
    config = uvicorn.Config(app, host=host, port=int(port), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            return
        await asyncio.sleep(0.02)
    print("serving", flush=True, file=sys.stderr)
    try:
        await task
    finally:
        await proxy.close()
        provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--listen", required=True, help="host:port of the pod")
    parser.add_argument("--upstream", required=True, help="host:port of the simulator")
    parser.add_argument("--pod", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--otlp", required=True, help="OTLP/gRPC host:port")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
