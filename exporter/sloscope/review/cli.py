"""The ``review`` subcommand behind :mod:`sloscope.cli`: options to :class:`~sloscope.review.main.Options`,
errors to one line on stderr and an exit status (2 bad options, 1 nothing to review)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from sloscope.loading import ConfigError, load
from sloscope.review import ReviewError, UsageError
from sloscope.review.engine import Engine
from sloscope.review.main import Options, run
from sloscope.review.window import parse_window

__all__ = ["review"]


def review(args: argparse.Namespace, now: datetime | None = None) -> int:
    if args.store is None and args.prometheus is None:
        print("review: give --store DIR, --prometheus URL or both", file=sys.stderr)
        return 2
    try:
        window = parse_window(args.since, args.start, args.end, now or datetime.now(UTC))
    except UsageError as exc:
        print(f"review: {exc}", file=sys.stderr)
        return 2
    try:
        loaded = load(args.config, args.slo_spec)
    except ConfigError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return 2
    spec_source = str(args.slo_spec or loaded.settings.slo_spec or "the built-in spec")
    engine = Engine(memory_limit=args.memory_limit, threads=args.threads)
    try:
        if args.threads is not None and args.threads < 1:
            raise UsageError(f"--threads: must be at least 1, not {args.threads}")
        engine.connect().close()
    except UsageError as exc:
        print(f"review: {exc}", file=sys.stderr)
        return 2
    options = Options(
        window=window,
        spec=loaded.spec,
        out=args.out,
        title=args.title,
        store=args.store,
        prometheus=args.prometheus,
        spec_source=spec_source,
        engine=engine,
    )
    try:
        written = run(options)
    except ReviewError as exc:
        print(f"review: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
