"""The live terminal view of the demo: what sloscope publishes, beside the simulator's own truth.

Rendered with rich a few times a second while the demo runs (a plain one-line report every 10 s when the
output is not a terminal). Every "sloscope" figure is read from sloscope's /metrics (see
:mod:`sloscope.demo.readout`); every "truth" figure is the simulator's own count.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sloscope import conventions as c
from sloscope.demo.readout import Readout
from sloscope.demo.truth import GroundTruth
from sloscope.demo.workload import CLASSES

__all__ = ["Status", "render", "render_pods", "summary_line"]

SLO_COLUMNS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("goodput", "goodput"))


@dataclass
class Status:
    """The demo's own progress, refreshed by the runner."""

    elapsed: float
    duration: float
    sent: int
    done: int
    rate: float  # the load curve's current arrival rate, requests/s
    metrics_url: str
    prometheus_url: str | None
    truth: GroundTruth
    readout: Readout | None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:5.1f}%"


def _milliseconds(value: float | None) -> Text:
    """A headroom in seconds, shown in ms: green with room, red without."""
    if value is None:
        return Text("—")
    return Text(f"{value * 1000:+.0f} ms", style="green" if value > 0 else "red")


def render(status: Status, *, pods: bool = True) -> RenderableType:
    readout, truth = status.readout, status.truth
    header = Text.assemble(
        ("sloscope demo", "bold"),
        f"   {status.elapsed:5.0f} s of {status.duration:.0f} s   load {status.rate:4.1f} req/s   ",
        f"sent {status.sent}  done {status.done}  in flight {status.sent - status.done}   ",
        f"sloscope counted {readout.total if readout else '—'}",
    )
    bar = ProgressBar(total=status.duration, completed=min(status.elapsed, status.duration), width=60)
    where = Text(
        f"metrics: {status.metrics_url}" + (f"   Prometheus: {status.prometheus_url}" if status.prometheus_url else "")
    )
    parts: list[RenderableType] = [header, bar, where, _attainment(truth, readout), _predictions(truth, readout)]
    if pods:
        parts.append(_pods(readout))
    return Group(*parts)


def render_pods(readout: Readout) -> RenderableType:
    return _pods(readout)


def _attainment(truth: GroundTruth, readout: Readout | None) -> Table:
    table = Table(title="SLO attainment: sloscope / simulator truth", title_justify="left")
    table.add_column("class")
    for _, title in SLO_COLUMNS:
        table.add_column(title, justify="right")
    for cls in CLASSES:
        if cls.slo_ttft_ms is None:
            continue
        cells = [
            f"{_pct(readout.attainment(cls.name, slo) if readout else None)} / {_pct(truth.attainment(cls.name, slo))}"
            for slo, _ in SLO_COLUMNS
        ]
        table.add_row(f"{cls.name} ({cls.slo_ttft_ms:g} ms / {cls.slo_tpot_ms:g} ms)", *cells)
    return table


def _bias_mae(pair: tuple[float, float] | None) -> str:
    """A mean predictor's (bias, MAE), seconds, shown in ms."""
    return "—" if pair is None else f"{pair[0] * 1000:+.1f} / {pair[1] * 1000:.1f} ms"


def _predictions(truth: GroundTruth, readout: Readout | None) -> Table:
    if readout is not None and readout.objective == c.OBJECTIVE_MEAN:
        return _mean_predictions(truth, readout)
    quantile = readout.quantile if readout and readout.quantile is not None else None
    title = "Prediction coverage" + (f" (target: the predictor's quantile, {quantile:g})" if quantile else "")
    table = Table(title=title, title_justify="left")
    table.add_column("signal")
    table.add_column("sloscope, shadow", justify="right")
    table.add_column("compared", justify="right")
    table.add_column("truth (router's predictions)", justify="right")
    for signal in ("ttft", "tpot"):
        compared = readout.predictions[(signal, "shadow")] if readout else 0
        table.add_row(
            signal.upper(),
            _pct(readout.coverage(signal) if readout else None),
            str(compared),
            _pct(truth.coverage(signal)),
        )
    return table


def _mean_predictions(truth: GroundTruth, readout: Readout) -> Table:
    """A mean predictor is judged by its bias and MAE, not by coverage against a quantile it does not predict."""
    table = Table(title="Mean predictions: bias (actual - predicted) / MAE", title_justify="left")
    table.add_column("signal")
    table.add_column("sloscope, shadow", justify="right")
    table.add_column("compared", justify="right")
    table.add_column("truth (router's predictions)", justify="right")
    for signal in ("ttft", "tpot"):
        table.add_row(
            signal.upper(),
            _bias_mae(readout.bias_and_mae(signal)),
            str(readout.mean_predictions[(signal, "shadow")]),
            _bias_mae(truth.bias_and_mae(signal)),
        )
    return table


def _pods(readout: Readout | None) -> Table:
    classes = [c.name for c in CLASSES if c.slo_ttft_ms is not None]
    table = Table(title="Pods (sloscope's view)", title_justify="left")
    for column in ("pod", "up", "waiting", "running", "KV cache"):
        table.add_column(column, justify="right" if column != "pod" else "left")
    for cls in classes:
        table.add_column(f"{cls} headroom TTFT / TPOT", justify="right")
    if readout is None:
        return table
    for pod in sorted(readout.pods):
        gauges = readout.pods[pod]
        cells: list[Text | str] = [
            pod,
            "yes" if gauges.get("up") == 1 else "no",
            f"{gauges.get('waiting', 0):.0f}",
            f"{gauges.get('running', 0):.0f}",
            _pct(gauges.get("kv")),
        ]
        for cls in classes:
            cells.append(
                Text.assemble(
                    _milliseconds(readout.headroom.get((pod, cls, "ttft"))),
                    " / ",
                    _milliseconds(readout.headroom.get((pod, cls, "tpot"))),
                )
            )
        table.add_row(*cells)
    with_room = ", ".join(f"{cls} {readout.pods_with_headroom.get(cls, 0):.0f}/{len(readout.pods)}" for cls in classes)
    table.caption = f"pods with headroom: {with_room}"
    return table


def summary_line(status: Status) -> str:
    """One line for logs and non-terminal output."""
    readout, truth = status.readout, status.truth
    parts = [f"{status.elapsed:4.0f}s", f"sent={status.sent}", f"done={status.done}"]
    if readout is not None:
        parts.append(f"sloscope={readout.total}")
        for cls in CLASSES:
            if cls.slo_ttft_ms is not None:
                parts.append(f"{cls.name}.ttft={_pct(readout.attainment(cls.name, 'ttft')).strip()}")
        if readout.objective == c.OBJECTIVE_MEAN:
            shadow, own = _bias_mae(readout.bias_and_mae("ttft")), _bias_mae(truth.bias_and_mae("ttft"))
            parts.append(f"bias/mae.ttft={shadow.replace(' ', '')} (truth {own.replace(' ', '')})")
        else:
            parts.append(
                f"coverage.ttft={_pct(readout.coverage('ttft')).strip()} (truth {_pct(truth.coverage('ttft')).strip()})"
            )
    return " ".join(parts)
