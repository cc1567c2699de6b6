"""The client's truth: each request sent through the fleet's gateway, with what the client itself saw.

Status, time to the first content chunk, time to the last, the completion tokens of the usage chunk, the pod
that served it (the front's ``x-fleet-upstream-host``, Envoy's upstream host), all measured here and never asked
of sloscope, so a test compares sloscope's numbers with an independent account.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from tests.support.fleet.fleet import MODEL


@dataclass(frozen=True)
class Call:
    """One request to send: its SLO headers (ms, None: not sent), objective and size."""

    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    objective: str | None = None
    max_tokens: int = 16
    prompt_words: int = 32
    stream: bool = True
    abort_after_chunks: int | None = None  # the client leaves after this many content chunks
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass
class Seen:
    call: Call
    status: int
    started: float
    upstream: str | None = None
    first_token: float | None = None
    last_token: float | None = None
    completion_tokens: int = 0
    chunks: int = 0
    aborted: bool = False
    body: str = ""

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    @property
    def tpot(self) -> float | None:
        if self.first_token is None or self.last_token is None or self.completion_tokens < 2:
            return None
        return (self.last_token - self.first_token) / (self.completion_tokens - 1)


def headers(call: Call) -> dict[str, str]:
    out = {"x-request-id": call.request_id, "content-type": "application/json"}
    if call.slo_ttft_ms is not None:
        out["x-slo-ttft-ms"] = f"{call.slo_ttft_ms:g}"
    if call.slo_tpot_ms is not None:
        out["x-slo-tpot-ms"] = f"{call.slo_tpot_ms:g}"
    if call.objective is not None:
        out["x-gateway-inference-objective"] = call.objective
    return out


def body(call: Call) -> dict[str, object]:
    # each prompt its own (the request id first): with one shared prompt the EPP's prefix-cache scorer and
    # affinity filters would send every request to the pod that served the first
    prompt = " ".join([call.request_id, *(f"word{i}" for i in range(call.prompt_words))])
    out: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": call.max_tokens,
        "ignore_eos": True,  # exactly max_tokens tokens (llm-d-inference-sim, as vLLM)
        "stream": call.stream,
    }
    if call.stream:
        out["stream_options"] = {"include_usage": True}
    return out


def send(client: httpx.Client, url: str, call: Call) -> Seen:
    started = time.time()
    with client.stream("POST", f"{url}/v1/chat/completions", json=body(call), headers=headers(call)) as response:
        seen = Seen(call, response.status_code, started, response.headers.get("x-fleet-upstream-host"))
        if response.status_code != 200 or not call.stream:
            seen.body = response.read().decode(errors="replace")
            if response.status_code == 200:
                seen.completion_tokens = int(json.loads(seen.body)["usage"]["completion_tokens"])
                seen.last_token = time.time()
            return seen
        for line in response.iter_lines():
            if not line.startswith("data: ") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            now = time.time()
            if any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices") or []):
                seen.first_token = seen.first_token or now
                seen.last_token = now
                seen.chunks += 1
                if call.abort_after_chunks is not None and seen.chunks >= call.abort_after_chunks:
                    seen.aborted = True
                    return seen  # leaving the block closes the connection mid-stream
            if chunk.get("usage"):
                seen.completion_tokens = int(chunk["usage"]["completion_tokens"])
    return seen


def send_all(url: str, calls: Sequence[Call], concurrency: int = 8) -> list[Seen]:
    """Every call, ``concurrency`` at a time, each on its own connection; in the order given."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    timeout = httpx.Timeout(120.0, connect=5.0)
    with httpx.Client(timeout=timeout, limits=limits) as client, ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda call: send(client, url, call), calls))
