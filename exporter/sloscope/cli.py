"""The ``sloscope`` command line: ``serve``, ``check-config`` and ``demo`` (more arrive with their features)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from pathlib import Path

from sloscope import __version__
from sloscope.allocator import arrow_system_pool, limit_arenas
from sloscope.lean_imports import skip_httpx_command_line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sloscope",
        description="SLO observability for prediction-based routing of LLM inference.",
    )
    parser.add_argument("--version", action="version", version=f"sloscope {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="run the exporter: OTLP receivers, trace join, SLO series on /metrics",
        description="Run the exporter until SIGTERM or SIGINT, then drain, flush and exit 0 "
        "(1 when the pipeline could not drain in time, 2 on a configuration error, 3 when accepted records "
        "could not be written by the record store or the OTLP export; docs/operations.md).",
    )
    serve.add_argument("--config", type=Path, help="runtime settings YAML (default: built-in settings)")
    serve.add_argument("--slo-spec", type=Path, help="SLO spec YAML (default: the settings' slo_spec, else built-in)")

    check = commands.add_parser(
        "check-config",
        help="validate settings and SLO spec files, printing every error",
        description="Validate each FILE (an SLO spec when it has a top-level 'version', else settings). "
        "Prints FILE: path: reason for every problem; exits 1 if any.",
    )
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")

    build = commands.add_parser(
        "build",
        help="generate the Grafana dashboards, Prometheus rules and rule tests from the SLO spec",
        description="Write dashboards/*.json, alerts/sloscope-rules.yaml, alerts/sloscope-prometheusrule.yaml and "
        "alerts/tests/sloscope-rules.test.yaml under --out, from the SLO spec (the settings' slo_spec, --slo-spec, "
        "else the built-in spec). See docs/dashboards-and-alerts.md.",
    )
    build.add_argument("--config", type=Path, help="runtime settings YAML (for its slo_spec)")
    build.add_argument("--slo-spec", type=Path, help="SLO spec YAML (default: the settings' slo_spec, else built-in)")
    build.add_argument("--out", type=Path, default=Path("."), help="output folder (default: the current folder)")
    build.add_argument(
        "--runbook-base-url",
        default="docs/runbooks",
        help="prefix of the alerts' runbook_url: <prefix>/<AlertName>.md (default: docs/runbooks, relative: give "
        "the URL where you publish docs/runbooks so that alert receivers can open the links)",
    )
    build.add_argument(
        "--severity",
        action="append",
        default=[],
        metavar="CLASS=VALUE",
        help="the severity label value of an alert class, page or ticket (default: page=critical, ticket=warning, "
        "as kube-prometheus-stack routes and inhibits on them); repeatable",
    )
    build.add_argument(
        "--alert-label",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a label every alert carries (team=inference); repeatable",
    )
    build.add_argument(
        "--rule-label",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a label of the PrometheusRule object, for the Prometheus resource's ruleSelector; repeatable",
    )

    demo = commands.add_parser(
        "demo",
        help="run a simulated fleet (pods, latency predictor, EPP-like router) against a real sloscope",
        description="Start simulated vLLM pods, a learning latency predictor and an EPP-like router, a real "
        "'sloscope serve' scraping them and receiving their OTLP spans; drive bursty traffic from several SLO "
        "classes, show sloscope's figures live beside the simulator's truth, and compare them at the end. "
        "Exits 0 when sloscope counted exactly the requests the simulator served. See docs/demo.md.",
    )
    demo.add_argument("--duration", type=float, default=120.0, help="seconds of traffic (default 120)")
    demo.add_argument("--pods", type=int, default=4, help="simulated model-server pods (default 4)")
    demo.add_argument("--rate", type=float, default=6.5, help="base arrival rate, requests/s (default 6.5)")
    demo.add_argument("--burst-factor", type=float, default=2.0, help="arrival rate multiplier in bursts (default 2)")
    demo.add_argument("--prediction-servers", type=int, default=2, help="prediction servers (default 2)")
    demo.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    demo.add_argument(
        "--upstream",
        choices=("llm-d", "gie-2025"),
        default="llm-d",
        help="what the gateway and the pods are: llm-d-router with vLLM 0.33 and agent clients (default), or the "
        "late-2025 gateway's spans (gie-2025)",
    )
    demo.add_argument(
        "--workdir", type=Path, help="folder for sloscope's settings, spec and log (default: a new temp folder)"
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep sloscope (and Prometheus) serving after the traffic, until Ctrl-C"
    )
    demo.add_argument("--no-view", action="store_true", help="a line every 10 s instead of the live view")
    demo.add_argument(
        "--store",
        type=Path,
        metavar="DIR",
        help="have sloscope write its record store into DIR (for sloscope review; see docs/review.md)",
    )
    demo.add_argument(
        "--with-prometheus",
        nargs="?",
        const="",
        metavar="BINARY",
        help="also run Prometheus scraping sloscope (the given binary, else prometheus on PATH or in .tools/bin)",
    )
    _add_review(commands)
    return parser


def _add_review(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    review = commands.add_parser(
        "review",
        help="write the SLO review report (HTML, Markdown, CSV) from the record store or Prometheus",
        description="The weekly SLO review: the report's findings first, then attainment against objective per SLO, "
        "class, pool and model with the share of the period's error budget the window spent (and the mean burn "
        "rate beside it), the error-budget policy status, the trend against the previous period, budget burn over "
        "time, worst periods, pods and requests, violations by cause (queueing, prefill, decode), prediction "
        "accuracy (coverage of a quantile predictor, bias and MAE of a mean one), headroom at routing, the alerts "
        "that fired (with --prometheus) and data quality. Writes --out (HTML, "
        "charts embedded), the same name with .md (charts in <stem>-charts/) and CSV tables in <stem>-tables/. "
        "Exits 0 on success, 2 on bad options, 1 when the store or Prometheus gives nothing to review. Needs the "
        "review extra: pip install 'sloscope[review]'. See docs/review.md.",
    )
    review.add_argument(
        "--store", type=Path, metavar="DIR", help="the record store folder (store.directory in the settings)"
    )
    review.add_argument(
        "--prometheus",
        metavar="URL",
        help="Prometheus: the alerts that fired and the exporter's drop counts; without --store also the "
        "attainment, burn, routing and worst-pod tables (at least one of --store and --prometheus)",
    )
    review.add_argument(
        "--since",
        default="7d",
        metavar="DURATION",
        help="review the window of this length ending now: 30m, 24h, 7d, 4w (default 7d)",
    )
    review.add_argument("--from", dest="start", metavar="TIME", help="window start, ISO 8601 (UTC when no offset)")
    review.add_argument("--to", dest="end", metavar="TIME", help="window end, ISO 8601 (default: now)")
    review.add_argument(
        "--out",
        type=Path,
        default=Path("sloscope-review.html"),
        metavar="FILE",
        help="the HTML report to write (default sloscope-review.html); the Markdown, charts and CSVs go beside it",
    )
    review.add_argument("--config", type=Path, metavar="FILE", help="runtime settings YAML (for its slo_spec)")
    review.add_argument(
        "--slo-spec",
        type=Path,
        metavar="FILE",
        help="SLO spec YAML with the objectives (default: the settings' slo_spec, else the built-in spec)",
    )
    review.add_argument(
        "--title", metavar="TEXT", help="the report's title (default: SLO review: <service of the spec>)"
    )
    review.add_argument(
        "--memory-limit",
        default="2GB",
        metavar="SIZE",
        help="the most memory DuckDB may take for the store's queries, beyond which it spills to disk "
        "(DuckDB's size syntax: 2GB, 512MB; default 2GB)",
    )
    review.add_argument(
        "--threads", type=int, metavar="N", help="DuckDB's threads for the store's queries (default: every core)"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check-config":
        return _check_config(args.files)
    if args.command == "demo":
        return _demo(args)
    if args.command == "build":
        return _build(args)
    if args.command == "review":
        return _review(args)
    return _serve(args.config, args.slo_spec)


def _build(args: argparse.Namespace) -> int:
    from sloscope.generators.build import build
    from sloscope.generators.rules import DEFAULT_CONVENTIONS, Conventions
    from sloscope.loading import ConfigError, load

    try:
        loaded = load(args.config, args.slo_spec)
        severities = {**DEFAULT_CONVENTIONS.severities, **_pairs(args.severity, "--severity")}
        conventions = Conventions(severities, _pairs(args.alert_label, "--alert-label"), args.runbook_base_url)
        rule_labels = _pairs(args.rule_label, "--rule-label")
    except ConfigError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"sloscope build: {exc}", file=sys.stderr)
        return 2
    for path in build(loaded.spec, args.out, conventions=conventions, rule_labels=rule_labels):
        print(path)
    return 0


def _pairs(items: list[str], option: str) -> dict[str, str]:
    """NAME=VALUE options as a mapping; a malformed one is a ValueError naming the option."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{option} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from sloscope.demo.main import run_demo
    from sloscope.demo.prometheus import find_prometheus
    from sloscope.demo.runner import DemoOptions

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    prometheus = None
    if args.with_prometheus is not None:
        prometheus = find_prometheus(args.with_prometheus or None)
        if prometheus is None:
            print(
                "--with-prometheus: no Prometheus binary found (give its path, put it on PATH, or run make test)",
                file=sys.stderr,
            )
            return 2
    if args.pods < 1 or args.duration <= 0 or args.rate <= 0 or args.prediction_servers < 1:
        print(
            "demo: --pods and --prediction-servers must be at least 1, --duration and --rate positive", file=sys.stderr
        )
        return 2
    options = DemoOptions(
        duration=args.duration,
        pods=args.pods,
        prediction_servers=args.prediction_servers,
        seed=args.seed,
        rate=args.rate,
        burst_factor=args.burst_factor,
        upstream=args.upstream,
        workdir=args.workdir,
        store=args.store.resolve() if args.store is not None else None,
    )
    return asyncio.run(
        run_demo(options, console=Console(), view=not args.no_view, keep=args.keep, prometheus=prometheus)
    )


def _review(args: argparse.Namespace) -> int:
    """The review lives in an optional extra: imported here only, with a clear message when it is missing."""
    try:
        from sloscope.review.cli import review
    except ImportError as exc:
        if exc.name not in ("pandas", "matplotlib", "numpy"):
            raise
        from sloscope.review import MISSING_EXTRA

        print(f"review: {MISSING_EXTRA} ({exc.name} is not installed)", file=sys.stderr)
        return 1
    return review(args)


def _check_config(files: list[Path]) -> int:
    from sloscope.loading import check_file

    failed = False
    for path in files:
        problems = check_file(path)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            failed = True
        else:
            print(f"{path}: ok")
    return 1 if failed else 0


def _tune_gc() -> None:
    """The join allocates a few small objects per span and frees them within seconds. With CPython's
    default thresholds the cyclic collector ran every ~700 allocations and took about 7% of the
    server's CPU (measured with py-spy under ``make bench``); objects from start-up are frozen out of
    collection and young collections run less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def _tune_gil() -> None:
    """Decoding threads and the pipeline worker are CPU-bound Python; the event loop serving ``/healthz``
    and both receivers must win the GIL back after every ``select``, and with the default 5 ms switch
    interval a probe waited up to that long at each of the loop iterations it takes. Measured with the
    largest bodies of each encoding (tests/integration/test_ingest_limits.py), 1 ms took the slowest
    ``/healthz`` probe from 172 ms to 96 ms and the median from 9-16 ms to 5-9 ms."""
    sys.setswitchinterval(0.001)


def _serve(config: Path | None, spec: Path | None) -> int:
    limit_arenas()  # before any thread allocates
    arrow_system_pool()  # before pyarrow is imported
    skip_httpx_command_line()  # before httpx is imported
    from sloscope.loading import ConfigError, load
    from sloscope.redaction import RedactingFilter, redact_text
    from sloscope.service.listeners import ListenerFilesError
    from sloscope.service.server import Service

    try:
        loaded = load(config, spec)
    except ConfigError as exc:
        for line in exc.lines:
            print(redact_text(line), file=sys.stderr)
        return 2
    logging.basicConfig(
        level=loaded.settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for handler in logging.getLogger().handlers:  # a URL's user:password never reaches the log
        handler.addFilter(RedactingFilter())
    # httpx logs every scrape and prediction call at INFO; sloscope counts them in its own series instead.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLevelName(loaded.settings.log_level)))
    _tune_gc()
    _tune_gil()
    try:
        service = Service(loaded.settings, loaded.spec)
    except ListenerFilesError as exc:
        print(f"sloscope: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(service.run_until_signal())
