"""Pages per second of sloscope's targeted exposition parser versus prometheus_client's parser, in one run.

Run from the repository root as ``.venv/bin/python bench/parser.py`` (any Python with sloscope
installed will do). It reads the vLLM 0.33 page of ``../shared/fixtures`` and measures, on that page:

1. ``list(prometheus_client.parser.text_string_to_metric_families(text))``: the whole page parsed,
   every family built (``list()`` so that the generator does all its work);
2. ``ExpositionParser(families).parse(text)`` with the families a model-server scrape needs: waiting,
   running, KV-cache usage under its current and its old name, LoRA info;
3. the same parser wanting every family on the page, for scale: the cost when nothing can be skipped.

The machine's speed drifts (docs/performance.md), so the measurements take turns, repetition after
repetition, and the number to compare is the ratio of 2 to 1 measured in this one run, not a rate from
another day. Each measurement repeats the parse for about ``--seconds`` (a loop count found once, before
the repetitions) with the garbage collector off, as ``timeit`` does; the best repetition counts. It
asserts nothing about speed; it does check that both parsers return the same samples for the wanted
families before timing anything.
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from sloscope.receivers.exposition import SUFFIXES, ExpositionParser

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT.parent / "shared" / "fixtures" / "vllm" / "metrics-vllm-0.33.0.txt"
MODEL_SERVER_FAMILIES = frozenset(
    {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",  # the name before vLLM 0.10/0.11
        "vllm:lora_requests_info",
    }
)
GOAL_RATIO = 20


def timed(parse: Callable[[], object], loops: int) -> float:
    """Seconds for ``loops`` parses, with the garbage collector off (as ``timeit`` does)."""
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(loops):
            parse()
        return time.perf_counter() - start
    finally:
        gc.enable()


def calibrate(parse: Callable[[], object], seconds: float) -> int:
    """How many parses take about ``seconds``; every repetition then times that many."""
    loops = 1
    while (elapsed := timed(parse, loops)) < seconds / 10:
        loops *= 10
    return max(1, math.ceil(loops * seconds / elapsed))


def check_agreement(text: str, parser: ExpositionParser) -> int:
    """The number of wanted samples, after checking that both parsers find the same ones."""

    def selected(name: str) -> bool:
        return name in parser.families or any(name == f + s for f in parser.families for s in SUFFIXES)

    reference = [
        (s.name, s.labels, repr(float(s.value)))  # repr: NaN equals NaN
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if selected(s.name)
    ]
    mine = [(s.name, s.labels, repr(s.value)) for s in parser.parse(text)]
    if mine != reference:
        sys.exit(f"the parsers disagree on the wanted samples:\n  prometheus_client: {reference}\n  sloscope: {mine}")
    return len(mine)


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("--page", type=Path, default=PAGE, help="exposition text to parse (default: %(default)s)")
    arguments.add_argument("--repetitions", type=int, default=7, help="turns of every measurement (default: 7)")
    arguments.add_argument("--seconds", type=float, default=0.5, help="minimum seconds per measurement")
    options = arguments.parse_args()
    if not options.page.is_file():
        sys.exit(f"{options.page} is missing: the benchmark reads ../shared/fixtures beside the clone ({ROOT})")
    text = options.page.read_text()

    targeted = ExpositionParser(MODEL_SERVER_FAMILIES)
    everything = ExpositionParser({f.name for f in text_string_to_metric_families(text)})
    wanted_samples = check_agreement(text, targeted)
    all_samples = check_agreement(text, everything)
    measurements: dict[str, Callable[[], object]] = {
        "prometheus_client text_string_to_metric_families": lambda: list(text_string_to_metric_families(text)),
        f"ExpositionParser, model-server families ({len(targeted.families)})": lambda: targeted.parse(text),
        f"ExpositionParser, every family on the page ({len(everything.families)})": lambda: everything.parse(text),
    }
    names = list(measurements)
    reference_name, targeted_name = names[0], names[1]

    print(f"page: {options.page} ({len(text.encode()):,} bytes, {text.count(chr(10)):,} lines)")
    print(f"wanted: {', '.join(sorted(targeted.families))} ({wanted_samples} samples on this page; all: {all_samples})")
    print(f"Python {platform.python_version()}, {options.repetitions} repetitions of about {options.seconds} s")
    print("per measurement, in rotating order, garbage collector off while timing\n")

    loops = {name: calibrate(measurements[name], options.seconds) for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    for repetition in range(options.repetitions):
        shift = repetition % len(names)
        for name in names[shift:] + names[:shift]:
            rates[name].append(loops[name] / timed(measurements[name], loops[name]))

    width = max(map(len, names))
    print(f"{'measurement':<{width}}  {'pages/s (best)':>14}  {'µs per page':>11}")
    for name in names:
        best = max(rates[name])
        print(f"{name:<{width}}  {best:>14,.1f}  {1e6 / best:>11,.1f}")
    ratio = max(rates[targeted_name]) / max(rates[reference_name])
    per_repetition = [t / r for t, r in zip(rates[targeted_name], rates[reference_name], strict=True)]
    print(
        f"\nratio targeted / prometheus_client: {ratio:,.0f}x (best of each); per repetition: "
        f"min {min(per_repetition):,.0f}x, median {statistics.median(per_repetition):,.0f}x, "
        f"max {max(per_repetition):,.0f}x"
    )
    print(f"goal >= {GOAL_RATIO}x: {'met' if ratio >= GOAL_RATIO else 'NOT met'}")


if __name__ == "__main__":
    main()
