"""Runs ``sloscope serve`` under cProfile, profiling both threads that do the work.

``python -m cProfile`` sees only the main thread (the event loop: HTTP, decoding, intake), not the
pipeline worker thread (assembler, evaluator, publisher). This wrapper profiles the main thread
and wraps ``Pipeline._run`` so the worker gets its own profiler; both are written as pstats files
(``main.prof``, ``pipeline.prof``) in OUTDIR when the server exits (SIGTERM drains it normally).

Usage: python bench/profile_server.py OUTDIR serve --config FILE
"""

from __future__ import annotations

import cProfile
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    from sloscope import cli
    from sloscope.pipeline import Pipeline

    run = Pipeline._run

    def profiled_run(self: Any) -> None:
        profiler = cProfile.Profile()
        try:
            profiler.enable()
        except ValueError:  # Python >= 3.12: one profiler per process (sys.monitoring); main thread only
            run(self)
            return
        try:
            run(self)
        finally:
            profiler.disable()
            profiler.dump_stats(out / "pipeline.prof")

    Pipeline._run = profiled_run  # type: ignore[method-assign]
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return cli.main(sys.argv[2:])
    finally:
        profiler.disable()
        profiler.dump_stats(out / "main.prof")


if __name__ == "__main__":
    raise SystemExit(main())
