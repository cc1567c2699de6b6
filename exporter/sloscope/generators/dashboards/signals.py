"""The two latency signals a prediction panel is drawn for, and what each panel's query selects.

A pool whose EPP runs its latency plugin with streaming off predicts its end-to-end latency where TTFT would be
(``signal="e2e"``, docs/predictions.md#streaming-mode) and nothing for TPOT. A pool is one or the other, so the TTFT
panels select both signals: such a pool's series appear there rather than on no panel at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from sloscope import conventions as c
from sloscope.generators.dashboards.promql import eq, regex

__all__ = ["SIGNAL_PANELS", "SignalPanel"]


@dataclass(frozen=True)
class SignalPanel:
    matcher: str  # the label matcher of the panel's query
    name: str  # how titles and descriptions call the signal
    note: str  # appended to the description ("" or a sentence with its leading space)


SIGNAL_PANELS = (
    SignalPanel(
        regex(c.SIGNAL, f"{c.SIGNAL_TTFT}|{c.SIGNAL_E2E}"),
        "TTFT",
        " A pool whose EPP runs with streaming off has its end-to-end latency here (signal e2e): that EPP predicts "
        "it in TTFT's place and holds it against the TTFT target.",
    ),
    SignalPanel(eq(c.SIGNAL, c.SIGNAL_TPOT), "TPOT", ""),
)
