"""The hand-off both OTLP transports share: decode off the loop, validate mapped attributes, count, queue.

``receive`` decodes a body and submits its spans in a decoding thread, off the event loop: ``submit``
does not block and does not raise, and is safe from any thread (the queue and counters lock).
It returns what the transport needs to answer: accepted, partially accepted (OTLP partial
success with ``rejected_spans`` and a message), or refused because the queue is full (the
transport answers 429 / RESOURCE_EXHAUSTED with a retry delay and the client keeps the batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Literal

from sloscope import conventions as c
from sloscope.attributes import Mapping
from sloscope.config import Limits
from sloscope.receivers.consumers import SpanConsumer
from sloscope.receivers.decode_pool import Decoder
from sloscope.receivers.in_flight import InFlightBytes
from sloscope.receivers.native_decode import NativeDecoder
from sloscope.receivers.otlp_decode import Decoded
from sloscope.records import Span
from sloscope.telemetry import Telemetry


class Status(Enum):
    ACCEPTED = "accepted"
    QUEUE_FULL = "queue_full"
    TOO_MANY_SPANS = "too_many_spans"
    SHUTTING_DOWN = "shutting_down"


@dataclass(frozen=True)
class Result:
    status: Status
    rejected: int = 0
    message: str = ""


class Intake:
    def __init__(
        self,
        mapping: Mapping,
        queue: SpanConsumer,
        telemetry: Telemetry,
        retry_after_seconds: int,
        keep: frozenset[str] | None = None,
        *,
        limits: Limits | None = None,
        engine: Literal["native", "python"] = "python",
    ) -> None:
        limits = limits if limits is not None else Limits()
        self._mapping = mapping
        self.keep = keep  # the span attributes the transports' decoder converts (None: all)
        native = NativeDecoder(mapping, keep) if engine == "native" else None
        self.native_decoder = native.decoder if native is not None else None  # for the native gRPC front
        # Shared by both transports: decoding off the event loop, and the bytes they may hold at once.
        self.decoder = Decoder(
            keep,
            limits.max_request_bytes,
            threads=limits.decode_threads,
            json_processes=limits.json_decode_processes,
            native=native,
        )
        self.in_flight = InFlightBytes(limits.max_bytes_in_flight)
        telemetry.otlp_bytes_in_flight.set_function(lambda: self.in_flight.held)  # the native front's too
        self._queue = queue
        self._telemetry = telemetry
        self.retry_after_seconds = retry_after_seconds
        self._received = {t: telemetry.spans_received.labels(t) for t in ("grpc", "http")}
        self._requests = {
            (t, r): telemetry.otlp_requests.labels(t, r) for t in ("grpc", "http") for r in c.OTLP_RESULTS
        }

    def count_request(self, transport: str, result: str) -> None:
        self._requests[(transport, result)].inc()

    def close(self) -> None:
        self.decoder.close()

    async def receive(self, body: bytes, encoding: str, *, is_json: bool, transport: str) -> Result:
        """Decodes and submits one request body off the event loop; raises what the decoder raises."""
        then = partial(self.submit, transport=transport)
        return await self.decoder.decode(body, encoding, is_json=is_json, then=then)

    def submit(self, decoded: Decoded, transport: str) -> Result:
        self.in_flight.quiet.touched()
        spans = decoded.batch if decoded.batch is not None else self._checked(decoded)
        count = len(spans)  # now: once queued, a native batch's spans move (to a shard, to the join)
        offered = count + decoded.rejected  # a refused batch is refused whole, invalid spans included
        if self._queue.closed:
            self._telemetry.dropped(c.DROP_SHUTDOWN, offered)
            self.count_request(transport, "shutting_down")
            return Result(Status.SHUTTING_DOWN)
        if count > self._queue.capacity:  # would never fit: retrying cannot help, so no 429
            self._telemetry.dropped(c.DROP_INVALID, offered)
            self.count_request(transport, "too_large")
            return Result(
                Status.TOO_MANY_SPANS,
                message=f"batch of {count} spans exceeds the queue capacity of {self._queue.capacity}; "
                "send smaller batches",
            )
        if not self._queue.offer(spans):
            self._telemetry.dropped(c.DROP_QUEUE_FULL, offered)
            self.count_request(transport, "queue_full")
            return Result(Status.QUEUE_FULL)
        self._received[transport].inc(count)
        self._telemetry.dropped(c.DROP_INVALID, decoded.rejected)
        self.count_request(transport, "partial" if decoded.rejected else "accepted")
        return Result(Status.ACCEPTED, decoded.rejected, decoded.message)

    def _checked(self, decoded: Decoded) -> list[Span]:
        """The spans whose mapped attributes have usable types; the others rejected (a native batch was
        checked as it was decoded)."""
        check = self._mapping.check
        spans = []
        for span in decoded.spans:
            problem = check(span)
            if problem is None:
                spans.append(span)
            else:
                decoded.reject(problem)
        return spans
