"""SGLang's request spans (0.5.23, unified mode; the cp311 wheel, sha256 00b3cd5b265a...): what the catalogue draws
of an SGLang server.

The request's root span ``" Req <rid[:8]>"`` (leading space in unified mode; ``srt/observability/trace.py``
L563-569), INTERNAL, the child of the incoming traceparent (L558-573), scope ``sglang server`` (L263), with ``rid``
and ``module`` at its start (L565-567) and the ``gen_ai.*`` latencies, usage, request and response attributes at
its finish (``req_time_stats.py`` L535-562, ``tokenizer_manager.py`` L3944-4011): ``finish_reasons`` a JSON string,
and no ``gen_ai.latency.time_in_queue`` (trace.py L865 never writes it). ``rid`` is ``uuid4().hex``
(``io_struct.py`` L564). Under it, the tokenizer process's thread span with ``tokenize`` and
``api_server_dispatch`` (trace.py L384-396, req_time_stats.py L413-474) and the scheduler process's thread span
with its slices (req_time_stats.py L791-952), each top-level slice linked to the one before (trace.py L649-650).
Resource: ``service.name`` only (``--otlp-service-name``, L237-241), the pod named through
``OTEL_RESOURCE_ATTRIBUTES``. No capture of SGLang's spans is among the fixtures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic

from sloscope.upstream.writer import Drawn, Event, Handle, Process, Scope, SpanWriter

__all__ = ["SCOPE", "SchedulerSlices", "SglangServer", "request_attributes", "request_name", "sglang_process"]

SCOPE = Scope("sglang server")  # srt/observability/trace.py L263


def sglang_process(pod: str) -> Process:
    """The resource an SGLang pod's spans carry (without the SDK's defaults, which a writer may add)."""
    return Process({"service.name": "sglang", "k8s.pod.name": pod})


def request_name(rid: str) -> str:
    return f" Req {rid[:8]}"


def request_attributes(
    *,
    rid: str,
    ttft: float,
    e2e: float,
    prefill: float,
    decode: float,
    inference: float,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    max_tokens: int,
    top_p: float,
    temperature: float,
    top_k: int,
    model: str,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    """The root span's attributes at the request's finish, in the order SGLang sets them: seconds as floats, the
    finish reasons as a JSON string, n = 1."""
    return {
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_model_prefill": prefill,
        "gen_ai.latency.time_in_model_decode": decode,
        "gen_ai.latency.time_in_model_inference": inference,
        "gen_ai.usage.prompt_tokens": prompt_tokens,
        "gen_ai.usage.completion_tokens": completion_tokens,
        "gen_ai.usage.cached_tokens": cached_tokens,
        "gen_ai.request.id": rid,
        "gen_ai.request.max_tokens": max_tokens,
        "gen_ai.request.top_p": top_p,
        "gen_ai.request.temperature": temperature,
        "gen_ai.request.top_k": top_k,
        "gen_ai.request.n": 1,
        "gen_ai.response.model": model,
        "gen_ai.response.finish_reasons": f'["{finish_reason}"]',
    }


@dataclass(frozen=True)
class SchedulerSlices:
    """When the scheduler's slices of one request ran (Unix nanoseconds): received until ``waiting``, waiting for
    prefill until ``prefill``, prefill (batch ``bid`` of ``batch_size``) until ``decode_waiting``, waiting for decode
    until ``decode``, decoding until ``end``, with a ``decode_loop`` per (start, end) of ``loops``."""

    start: int
    waiting: int
    prefill: int
    decode_waiting: int
    decode: int
    end: int
    loops: Sequence[tuple[int, int]]
    bid: int = 7
    batch_size: int = 3


class SglangServer(Generic[Handle]):
    """One SGLang server: its tokenizer (the HTTP server's process) and scheduler processes write through their
    own writers, with one resource."""

    def __init__(self, tokenizer: SpanWriter[Handle], scheduler: SpanWriter[Handle], process: Process) -> None:
        self.tokenizer, self.scheduler, self.process = tokenizer, scheduler, process

    def _span(self, writer: SpanWriter[Handle], drawn: Drawn[Handle]) -> Handle:
        return writer.span(self.process, SCOPE, drawn)

    def request(
        self, parent: Handle | None, start_ns: int, end_ns: int, *, rid: str, attributes: dict[str, Any]
    ) -> Handle:
        """The root span, ``attributes`` (:func:`request_attributes`) after ``rid`` and ``module``."""
        started: dict[str, Any] = {"rid": rid, "module": "sglang::request", **attributes}
        return self._span(self.tokenizer, Drawn(request_name(rid), parent, start_ns, end_ns, attributes=started))

    def tokenizer_thread(
        self, root: Handle, start_ns: int, tokenized_ns: int, end_ns: int, *, host_id: str, pid: int
    ) -> Handle:
        """The tokenizer thread's span with tokenize then api_server_dispatch; returns the dispatch."""
        thread: dict[str, Any] = {"host_id": host_id, "pid": pid, "thread_label": "Tokenizer"}
        name = f"Tokenizer (host:{host_id[:8]} | pid:{pid})"
        span = self._span(self.tokenizer, Drawn(name, root, start_ns, end_ns, attributes=thread))
        self._span(self.tokenizer, Drawn("tokenize", span, start_ns, tokenized_ns))
        return self._span(self.tokenizer, Drawn("api_server_dispatch", span, tokenized_ns, end_ns))

    def scheduler_thread(
        self, root: Handle, dispatch: Handle, slices: SchedulerSlices, *, host_id: str, pid: int, tp_rank: int = 0
    ) -> None:
        """The scheduler thread's span and its slices, each top-level slice linked to the one before (the first to
        the tokenizer's dispatch); prefill_forward with its schedule event and chunked_prefill, decode_forward with
        its decode loops."""
        s, writer = slices, self.scheduler
        thread: dict[str, Any] = {"host_id": host_id, "pid": pid, "thread_label": "Scheduler", "tp_rank": tp_rank}
        name = f"Scheduler [TP {tp_rank}] (host:{host_id[:8]} | pid:{pid})"
        span = self._span(writer, Drawn(name, root, s.start, s.end, attributes=thread))
        schedule = Event("schedule", s.prefill, {"bid": s.bid, "batch_size": s.batch_size, "forward_mode": "EXTEND"})
        previous = dispatch
        forward = decoding = previous
        for slice_name, start, end in (
            ("request_process", s.start, s.waiting),
            ("prefill_waiting", s.waiting, s.prefill),
            ("prefill_forward", s.prefill, s.decode_waiting),
            ("decode_waiting", s.decode_waiting, s.decode),
            ("decode_forward", s.decode, s.end),
        ):
            events = (schedule,) if slice_name == "prefill_forward" else ()
            previous = self._span(writer, Drawn(slice_name, span, start, end, links=(previous,), events=events))
            if slice_name == "prefill_forward":
                forward = previous
            elif slice_name == "decode_forward":
                decoding = previous
        self._span(writer, Drawn("chunked_prefill", forward, s.prefill, s.decode_waiting))
        for i, (start, end) in enumerate(s.loops):
            self._span(writer, Drawn("decode_loop", decoding, start, end, attributes={"decode_ct": i + 1}))
