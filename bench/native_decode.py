"""What decoding costs per span, Python reference vs the native core, on the payloads of ``bench/payloads.py``.

Run from the repository root (``.venv/bin/python bench/native_decode.py``). Both sides do the whole intake
decode: the Python side ``decode_protobuf`` (upb parses, Python flattens) and ``Mapping.check`` per span, as
``Intake.submit`` runs them; the native side ``NativeDecoder.protobuf``, which does both and returns a
``SpanBatch``. Also timed: the native decode in 2 threads at once (the GIL is released while it works), as
CPU seconds per span over the process, ``SpanBatch.to_spans`` (what the Python assembler is given
until the join is native), and the same payloads as OTLP/JSON (``decode_json`` vs ``NativeDecoder.json``).
Best of several rounds, taking turns, CPU time of the process; asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

# A sibling module in bench/: the script's folder is first on sys.path.
from payloads import build, build_llmd
from sloscope.attributes import Mapping
from sloscope.config import Attributes
from sloscope.processors import span_shapes
from sloscope.receivers.native_decode import NativeDecoder
from sloscope.receivers.otlp_decode import decode_json, decode_protobuf
from sloscope.testing import to_otlp_json


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spans", type=int, default=40_000)
    parser.add_argument("--batch-spans", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--llmd", action="store_true", help="agent sessions with P/D requests (build_llmd)")
    args = parser.parse_args()
    payloads = (build_llmd if args.llmd else build)(args.spans, args.batch_spans).payloads
    spans = sum(len(decode_protobuf(p).spans) for p in payloads)
    mapping = Mapping(Attributes())
    keep = mapping.span_keys("gen_ai.request.id", *span_shapes.KEYS)
    native = NativeDecoder(mapping, keep)
    batches = [native.protobuf(p).batch for p in payloads]
    bodies = [to_otlp_json(ExportTraceServiceRequest.FromString(p)) for p in payloads]
    assert all(native.json_natively(b) is not None for b in bodies)

    def python() -> None:
        check = mapping.check
        for payload in payloads:
            for span in decode_protobuf(payload, keep).spans:
                check(span)

    def native_one() -> None:
        for payload in payloads:
            native.protobuf(payload)

    def native_two() -> None:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(native.protobuf, payloads))

    def to_spans() -> None:
        for batch in batches:
            assert batch is not None
            batch.to_spans()

    def python_json() -> None:
        check = mapping.check
        for body in bodies:
            for span in decode_json(body, keep).spans:
                check(span)

    def native_json() -> None:
        for body in bodies:
            native.json(body)

    cases = {
        "python decode + check": python,
        "native decode (1 thread)": native_one,
        "native decode (2 threads)": native_two,
        "SpanBatch.to_spans": to_spans,
        "python JSON decode + check": python_json,
        "native JSON decode": native_json,
    }
    best = dict.fromkeys(cases, float("inf"))
    wall = {"native decode (1 thread)": float("inf"), "native decode (2 threads)": float("inf")}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            started = time.perf_counter()
            best[name] = min(best[name], _cpu(fn))
            if name in wall:
                wall[name] = min(wall[name], time.perf_counter() - started)
    print(f"{spans} spans in {len(payloads)} payloads of {args.batch_spans} spans")
    print(f"CPU µs per span (best of {args.rounds}):")
    for name, seconds in best.items():
        print(f"  {name:28} {seconds / spans * 1e6:8.3f}")
    print("wall-clock µs per span (the GIL released: two threads decode at once, given two free cores):")
    for name, seconds in wall.items():
        print(f"  {name:28} {seconds / spans * 1e6:8.3f}")
    print(f"  protobuf: python / native    {best['python decode + check'] / best['native decode (1 thread)']:8.1f}x")
    print(f"  JSON: python / native        {best['python JSON decode + check'] / best['native JSON decode']:8.1f}x")


if __name__ == "__main__":
    main()
