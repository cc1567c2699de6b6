"""Decoding off the event loop (threads, and a worker process for OTLP/JSON) and the bytes-in-flight budget."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sloscope.receivers.decode_pool import Decoder
from sloscope.receivers.in_flight import TRIM_FROM_BYTES, InFlightBytes, Lease, MemoryTrimmer, QuietTrim
from sloscope.receivers.otlp_decode import Decoded, MalformedPayloadError, PayloadTooLargeError, decode_protobuf
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes

REQUEST = export_request(
    [
        span(1, 1, "gateway.request", gateway_attributes(slo_ttft_ms="200"), resource={"service.name": "epp"}),
        span(1, 2, "llm_request", vllm_attributes(), parent=1),
    ]
)
PROTOBUF = REQUEST.SerializeToString()
JSON = to_otlp_json(REQUEST)


@pytest.fixture(params=[1, 0], ids=["json-in-a-process", "json-in-a-thread"])
def decoder(request: pytest.FixtureRequest) -> Iterator[Decoder]:
    decoder = Decoder(None, 1024 * 1024, threads=2, json_processes=request.param)
    yield decoder
    decoder.close()


def _decode(decoder: Decoder, body: bytes, encoding: str = "", *, is_json: bool) -> Decoded:
    return asyncio.run(decoder.decode(body, encoding, is_json=is_json, then=lambda decoded: decoded))


@pytest.mark.parametrize("encoding", ["", "gzip"])
@pytest.mark.parametrize("is_json", [False, True], ids=["protobuf", "json"])
def test_every_encoding_decodes_to_the_same_spans(decoder: Decoder, encoding: str, is_json: bool) -> None:
    body = JSON if is_json else PROTOBUF
    body = gzip.compress(body) if encoding else body
    assert _decode(decoder, body, encoding, is_json=is_json).spans == decode_protobuf(PROTOBUF).spans


def test_decoding_errors_cross_the_thread_and_the_process(decoder: Decoder) -> None:
    with pytest.raises(MalformedPayloadError, match="not valid JSON"):
        _decode(decoder, b"{", is_json=True)
    with pytest.raises(MalformedPayloadError, match="not a valid OTLP ExportTraceServiceRequest"):
        _decode(decoder, b"\xff\xff", is_json=False)
    with pytest.raises(PayloadTooLargeError):
        _decode(decoder, gzip.compress(bytes(2 * 1024 * 1024)), "gzip", is_json=True)


def test_then_runs_with_the_decoded_spans() -> None:
    decoder = Decoder(None, 1024 * 1024, threads=1, json_processes=1)
    try:
        count = asyncio.run(decoder.decode(JSON, "", is_json=True, then=lambda decoded: len(decoded.spans)))
    finally:
        decoder.close()
    assert count == 2


def test_the_budget_refuses_past_its_cap_but_always_admits_one_request() -> None:
    gauge: list[float] = []
    budget = InFlightBytes(100, gauge.append)
    first, second = Lease(budget), Lease(budget)
    assert first.take(150)  # larger than the cap, but nothing else is held
    assert not second.take(1)
    first.release()
    first.release()  # released once, whatever happens
    assert second.take(60)
    assert second.take(40)
    assert not Lease(budget).take(1)
    second.release()
    assert (budget.held, gauge) == (0, [150, 0, 60, 100, 0])


def test_a_body_let_go_while_a_trim_waits_gets_one_more_trim_after_it() -> None:
    """gRPC frees a message after its handler returns, later than the handler says it lets it go: the trim that
    was already waiting may run before that, so one more follows it; a quiet trimmer then stays quiet."""
    calls: list[float] = []

    async def scenario() -> int:
        trimmer = MemoryTrimmer(interval=0.02, trim=lambda _: calls.append(time.monotonic()) or 0)
        trimmer.request()  # schedules the first trim
        await asyncio.sleep(0.005)
        trimmer.request()  # while it waits: one more after it
        trimmer.request()  # coalesced with that one
        await asyncio.sleep(0.2)
        return trimmer.trims

    assert asyncio.run(scenario()) == 2
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.02


def test_a_lone_body_gets_one_trim() -> None:
    calls: list[int] = []

    async def scenario() -> int:
        trimmer = MemoryTrimmer(interval=0.01, trim=lambda pad: calls.append(pad) or 0)
        trimmer.request()
        await asyncio.sleep(0.15)
        return trimmer.trims

    assert asyncio.run(scenario()) == 1
    assert calls == [0]


def test_a_large_body_let_go_on_a_native_front_thread_is_trimmed_on_the_event_loop() -> None:
    """The native fronts let bodies go on their own threads; the trim is still the loop's one coalesced trimmer."""
    trimmed_on: list[str] = []

    async def scenario() -> int:
        trimmer = MemoryTrimmer(interval=0.01, trim=lambda _: trimmed_on.append(threading.current_thread().name) or 0)
        budget = InFlightBytes(100, trimmer=trimmer)
        freed = budget.freed_from_threads()
        fronts = [threading.Thread(target=freed, args=(size,)) for size in (TRIM_FROM_BYTES - 1, TRIM_FROM_BYTES)]
        for front in fronts:
            front.start()
        for front in fronts:
            front.join()
        await asyncio.sleep(0.15)
        return trimmer.trims

    assert asyncio.run(scenario()) == 1  # the smaller body asked for none
    assert len(trimmed_on) == 1 and trimmed_on[0] != threading.main_thread().name  # in an executor thread


def test_a_burst_gets_one_trim_once_the_requests_and_the_join_stand_still() -> None:
    """Requests (from threads, as the fronts take them) arm the watch; the trim waits until neither they nor the
    join's pending traces change over the quiet time; an idle server gets none, and the next burst one more."""
    trims: list[float] = []
    pending = [16]

    async def scenario() -> list[int]:
        trimmer = MemoryTrimmer(interval=0.01, trim=lambda _: trims.append(time.monotonic()) or 0)
        quiet = QuietTrim(trimmer, quiet=0.05)
        quiet.start(lambda: pending[0])
        seen = []
        await asyncio.sleep(0.2)
        seen.append(trimmer.trims)  # idle from the start: nothing to give back
        fronts = [threading.Thread(target=quiet.touched) for _ in range(4)]
        for front in fronts:
            front.start()
        for front in fronts:
            front.join()
        for _ in range(16):  # the join lets its traces go over a while: not quiet yet
            await asyncio.sleep(0.01)
            pending[0] -= 1
        seen.append(trimmer.trims)
        await asyncio.sleep(0.3)
        seen.append(trimmer.trims)  # quiet: one trim
        await asyncio.sleep(0.2)
        seen.append(trimmer.trims)  # and no more while idle
        quiet.touched()  # the next burst
        await asyncio.sleep(0.3)
        seen.append(trimmer.trims)
        quiet.stop()
        quiet.touched()  # stopped: arms nothing
        await asyncio.sleep(0.2)
        seen.append(trimmer.trims)
        return seen

    assert asyncio.run(scenario()) == [0, 0, 1, 1, 2, 2]


class VirtualLoop:
    """The two calls :class:`QuietTrim` makes of its event loop, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self._due: list[tuple[float, int, Callable[[], None]]] = []

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        self.call_later(0.0, callback)

    def call_later(self, delay: float, callback: Callable[[], None]) -> VirtualLoop:
        self._due.append((self.now + delay, len(self._due), callback))
        return self  # the handle: QuietTrim cancels one only when stopped, which this test does not

    def cancel(self) -> None:
        raise AssertionError("not stopped here")

    def run_until(self, until: float) -> None:
        while self._due:
            when, order, callback = min(self._due)
            if when > until:
                break
            self._due.remove((when, order, callback))
            self.now = when
            callback()
        self.now = until


def test_a_burst_is_trimmed_within_a_quarter_of_the_quiet_time_after_its_last_change() -> None:
    """The watch looks four times per quiet time: the trim comes 60 to 75 s after the last change (request or
    pending trace), not up to 120 s as when it looked once a minute."""
    loop = VirtualLoop()
    trims: list[float] = []

    class Trimmer(MemoryTrimmer):
        def request(self) -> None:
            trims.append(loop.now)

    quiet = QuietTrim(Trimmer(), quiet=60.0)
    pending = [3]
    quiet.start(lambda: pending[0], loop)  # type: ignore[arg-type]
    quiet.touched()  # armed at 0; looks at 15, 30, 45...
    for at in (10.0, 20.0, 37.0):  # the join lets its traces go
        loop.run_until(at)
        pending[0] -= 1
    loop.run_until(300.0)
    assert trims == [105.0]  # seen still at 60, 75, 90 and 105: 68 s after the last change
    quiet.touched()  # the next burst: armed at 300
    loop.run_until(310.0)
    quiet.touched()  # another request, taken while armed
    loop.run_until(600.0)
    assert trims == [105.0, 375.0]  # 65 s after it
