"""What the native trace join costs per span, on the OTLP payloads the ingest bench sends.

Run from the repository root (``.venv/bin/python bench/native_join.py``); docs/performance.md explains the
numbers. The payloads of ``bench/payloads.py`` (the late-2025 ``gateway.request`` and ``llm_request`` pairs,
``build``; today's llm-d agent sessions with P/D calls, ``build_llmd``) are decoded natively as the receivers
decode them, outside the timing; then one ``NativeTraceAssembler`` consumes every batch and flushes, and the
CPU time of that (the join and the Arrow batches it writes, taken as the pipeline takes them, the GIL released or
not) is divided by the spans.
Best of several repetitions; it prints microseconds per span and per request and asserts nothing.

With ``--steady N``, one assembler joins N sets of fresh two-span requests in turn instead, on a clock that runs
at ``--rate`` spans a second: a fresh assembler never reaches the state of a server that has run a while (its
memory of emitted traces full, generations forgotten, the windows' queues at their length), which the later sets
measure. It prints µs a span of each set and the mean of the later half.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

# A sibling module in bench/: the script's folder is first on sys.path.
import payloads
from sloscope._native import SpanBatch
from sloscope.attributes import Mapping
from sloscope.config import Attributes, Join
from sloscope.processors import span_shapes
from sloscope.processors.native_assembler import NativeTraceAssembler
from sloscope.receivers.native_decode import NativeDecoder


def decoded(payload_set: payloads.PayloadSet) -> Callable[[], list[SpanBatch]]:
    """A maker of the payloads' span batches, decoded afresh each time (the join takes their spans)."""
    join = Join()
    mapping = Mapping(Attributes())
    decoder = NativeDecoder(mapping, mapping.span_keys(join.anchor_attribute, *span_shapes.KEYS))

    def make() -> list[SpanBatch]:
        return [decoder.protobuf(p).batch for p in payload_set.payloads]  # type: ignore[misc]

    return make


def native_assembler(join: Join, clock: Callable[[], float]) -> NativeTraceAssembler:
    """An assembler whose requests are only taken, its counters dropped."""
    return NativeTraceAssembler(
        join,
        Mapping(Attributes()),
        lambda _: None,
        count_dropped=lambda *_: None,
        count_outcome=lambda *_: None,
        gathered=lambda _: None,
        clock=clock,
    )


def run(batches: list[SpanBatch]) -> tuple[float, int]:
    """CPU seconds to join every batch with a fresh assembler, and the requests it emitted, taken as record
    batches of up to ``join.batch_requests`` as the pipeline takes them."""
    join = Join()
    emitted: list[int] = []
    assembler = native_assembler(join, time.monotonic)

    def take() -> None:
        records = assembler.take()
        emitted.append(0 if records is None else len(records))

    started = time.process_time()
    for batch in batches:
        assembler.consume(batch)
        if assembler.gathered >= join.batch_requests:
            take()
    assembler.flush()
    take()
    return time.process_time() - started, sum(emitted)


def steady(count: int, spans: int, rate: float) -> list[float]:
    """CPU µs a span of each of ``count`` sets of ``spans`` two-span spans, joined by one assembler in turn."""
    join = Join()
    clock = [0.0]
    assembler = native_assembler(join, lambda: clock[0])
    makers = [decoded(payloads.build(spans, first_request=k * spans)) for k in range(count)]
    out = []
    for make in makers:
        batches = make()
        step = spans / len(batches) / rate
        started = time.process_time()
        for batch in batches:
            clock[0] += step
            assembler.consume(batch)
            if assembler.gathered >= join.batch_requests:
                assembler.take()
        out.append((time.process_time() - started) / spans * 1e6)
    return out


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("--spans", type=int, default=100_000, help="spans per payload set (default 100000)")
    arguments.add_argument("--repetitions", type=int, default=5, help="turns of each payload set (default 5)")
    arguments.add_argument("--steady", type=int, metavar="N", help="join N sets with one assembler (see above)")
    arguments.add_argument("--rate", type=float, default=100_000.0, help="spans a second of --steady's clock")
    options = arguments.parse_args()
    if options.steady:
        each = steady(options.steady, options.spans, options.rate)
        later = each[len(each) // 2 :]
        print("µs/span of each set:", " ".join(f"{x:.2f}" for x in each))
        print(f"later half: {sum(later) / len(later):.2f} µs/span")
        return
    sets = {"gie-2025": payloads.build(options.spans), "llm-d": payloads.build_llmd(options.spans)}
    makers = {name: decoded(s) for name, s in sets.items()}
    best: dict[str, tuple[float, int]] = {}
    for _ in range(options.repetitions):
        for name, make in makers.items():
            seconds, requests = run(make())
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, requests)
    print(f"{'payloads':<10} {'spans':>8} {'requests':>9} {'µs/span':>8} {'µs/request':>11}")
    for name, (seconds, requests) in best.items():
        spans = sets[name].spans
        print(f"{name:<10} {spans:>8} {requests:>9} {seconds / spans * 1e6:>8.2f} {seconds / requests * 1e6:>11.1f}")


if __name__ == "__main__":
    main()
