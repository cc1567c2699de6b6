"""``sloscope demo``: run the simulated fleet against a real sloscope, show it live, check it at the end."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from sloscope import conventions as c
from sloscope.demo.compare import differences
from sloscope.demo.prometheus import PrometheusServer
from sloscope.demo.readout import Readout
from sloscope.demo.runner import Demo, DemoOptions
from sloscope.demo.truth import SLOS, GroundTruth
from sloscope.demo.view import render, render_pods, summary_line

__all__ = ["run_demo"]

_READ_EVERY = 1.0
_LOG_EVERY = 10.0
_MISMATCHES_SHOWN = 20


async def run_demo(
    options: DemoOptions, *, console: Console, view: bool = True, keep: bool = False, prometheus: Path | None = None
) -> int:
    """Exit status 0 when sloscope counted exactly what the simulator served, else 1."""
    demo = Demo(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server: PrometheusServer | None = None
    try:
        console.print(
            f"[bold]sloscope demo[/]: {options.pods} pods, {options.prediction_servers} prediction servers, "
            f"{options.duration:.0f} s, seed {options.seed}, upstream {options.upstream}; "
            "starting the fleet and sloscope ..."
        )
        await demo.start()
        if prometheus is not None:
            server = PrometheusServer(prometheus, demo.workdir, demo.sloscope.metrics_port)
            await server.start()
        prometheus_url = server.url if server else None
        console.print(f"sloscope is serving {demo.sloscope.metrics_url} (its files and log: {demo.workdir})")
        last = await _traffic(demo, stop, console, view and console.is_terminal, prometheus_url)
        console.print("traffic done; waiting for requests in flight and for sloscope to count them ...")
        counted_all = await demo.drain()
        final = await demo.read()
        _summary(console, demo, final=final, last=last, counted_all=counted_all, prometheus_url=prometheus_url)
        if keep and not stop.is_set():
            console.print(
                "[bold]still running[/]: the fleet is idle, sloscope and Prometheus keep serving. Ctrl-C stops."
            )
            await stop.wait()
        return 0 if counted_all else 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if server is not None:
            await server.stop()
        await demo.stop()


async def _traffic(
    demo: Demo, stop: asyncio.Event, console: Console, live_view: bool, prometheus_url: str | None
) -> Readout | None:
    """Drive the traffic while showing it; returns sloscope's figures as the traffic ended."""
    traffic = asyncio.create_task(demo.run_traffic(stop))
    figures: Readout | None = None
    if live_view:
        with Live(render(demo.status(None, prometheus_url)), console=console, refresh_per_second=4) as live:
            while not traffic.done():
                figures = await demo.read() or figures
                live.update(render(demo.status(figures, prometheus_url)))
                await asyncio.wait({traffic}, timeout=_READ_EVERY)
    else:
        while not traffic.done():
            await asyncio.wait({traffic}, timeout=_LOG_EVERY)
            figures = await demo.read() or figures
            console.print(summary_line(demo.status(figures, prometheus_url)))
    with contextlib.suppress(asyncio.CancelledError):
        await traffic
    return await demo.read() or figures


def _summary(
    console: Console,
    demo: Demo,
    *,
    final: Readout | None,
    last: Readout | None,
    counted_all: bool,
    prometheus_url: str | None,
) -> None:
    truth = demo.truth
    if last is not None:
        console.print("[bold]As the traffic ended[/] (pods and their headroom):")
        console.print(render_pods(last))
    console.print("[bold]After the drain[/] (every request counted):")
    console.print(render(demo.status(final, prometheus_url), pods=False))
    if final is None:
        console.print(f"[red]sloscope's /metrics could not be read; see {demo.sloscope.log_path}[/]")
        return
    console.print(_counts_table(truth, final))
    failed = _failed_table(truth, final)
    if failed.row_count:
        console.print(failed)
    pods = truth.counts("per_pod")
    console.print(
        "requests per pod (sloscope / truth): "
        + ", ".join(_pair(final.per_pod[pod], pods[pod]) + f" {pod}" for pod in sorted(set(pods) | set(final.per_pod)))
    )
    if demo.shapes:
        console.print("calls served: " + ", ".join(f"{shape} {n}" for shape, n in sorted(demo.shapes.items())))
    verdict = "[green]equal[/]" if counted_all else "[red]not equal[/]"
    console.print(f"requests: the simulator served {truth.total}, sloscope counted {final.total}: {verdict}")
    mismatches = differences(truth, final)
    for line in mismatches[:_MISMATCHES_SHOWN]:
        console.print(f"[red]differs[/]: {line}")
    if len(mismatches) > _MISMATCHES_SHOWN:
        console.print(f"[red]... and {len(mismatches) - _MISMATCHES_SHOWN} more counts differ[/]")
    for signal_name in ("ttft", "tpot"):
        if final.objective == c.OBJECTIVE_MEAN:  # a mean predictor: bias and MAE, no coverage
            mean, own = final.bias_and_mae(signal_name), truth.bias_and_mae(signal_name)
            if mean is not None and own is not None:
                console.print(
                    f"{signal_name.upper()} mean predictions (bias actual - predicted / MAE): shadow predictions "
                    f"{mean[0] * 1000:+.1f} / {mean[1] * 1000:.1f} ms, the router's own {own[0] * 1000:+.1f} / "
                    f"{own[1] * 1000:.1f} ms (see docs/predictions.md on mean predictions)"
                )
            continue
        shadow, real = final.coverage(signal_name), truth.coverage(signal_name)
        if shadow is not None and real is not None:
            console.print(
                f"{signal_name.upper()} coverage: shadow predictions {shadow:.3f}, the router's own predictions "
                f"{real:.3f} (difference {shadow - real:+.3f}; see docs/predictions.md on shadow predictions)"
            )
    console.print(
        f"where to look: settings, SLO spec and sloscope's log in {demo.workdir}; "
        + (f"Prometheus at {prometheus_url}; " if prometheus_url else "")
        + "run with --keep to browse /metrics after the traffic, --with-prometheus to query it."
    )
    store = demo.options.store
    if store is not None:
        console.print(
            f"record store in {store}; the SLO review of this run: "
            f"sloscope review --store {store} --slo-spec {demo.workdir / 'slo.yaml'}"
        )


def _counts_table(truth: GroundTruth, final: Readout) -> Table:
    table = Table(title="Counts: sloscope / simulator truth", title_justify="left")
    for column in (
        "class",
        "routing",
        "requests",
        *(f"{slo} eligible" for slo in SLOS),
        *(f"{slo} missed" for slo in SLOS),
    ):
        table.add_column(column, justify="left" if column in ("class", "routing") else "right")
    for cls, routing in sorted(set(truth.requests) | set(final.requests)):
        row = [cls, routing, _pair(final.requests[(cls, routing)], truth.requests[(cls, routing)])]
        row += [_pair(final.eligible[(cls, routing, s)], truth.eligible[(cls, routing, s)]) for s in SLOS]
        row += [_pair(final.violations[(cls, routing, s)], truth.violations[(cls, routing, s)]) for s in SLOS]
        table.add_row(*row)
    return table


def _failed_table(truth: GroundTruth, final: Readout) -> Table:
    table = Table(title="Failed requests: sloscope / simulator truth", title_justify="left")
    for column in ("class", "routing", "reason", "failed"):
        table.add_column(column, justify="right" if column == "failed" else "left")
    expected = truth.counts("failed")
    for key in sorted(set(expected) | set(final.failed)):
        if final.failed[key] or expected[key]:  # sloscope starts every reason of a label set at 0
            table.add_row(*key, _pair(final.failed[key], expected[key]))
    return table


def _pair(measured: int, expected: int) -> str:
    style = "green" if measured == expected else "red"
    return f"[{style}]{measured} / {expected}[/]"
