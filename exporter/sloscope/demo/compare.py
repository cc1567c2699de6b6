"""The end-of-run check: sloscope's published counts against the simulator's ground truth, key by key."""

from __future__ import annotations

from sloscope.demo.readout import Readout
from sloscope.demo.truth import GroundTruth

__all__ = ["COMPARED", "differences"]

COMPARED = ("requests", "eligible", "violations", "failed", "per_pod")
"""The counts compared: per (class, routing); eligible and violations per (class, routing, slo); failed per
(class, routing, reason); requests per pod."""


def differences(truth: GroundTruth, readout: Readout) -> list[str]:
    """One line per count that differs (a missing key counts as zero); empty when sloscope is right."""
    lines = []
    for name in COMPARED:
        mine, theirs = truth.counts(name), getattr(readout, name)
        for key in sorted(set(mine) | set(theirs), key=repr):
            if mine[key] != theirs[key]:
                lines.append(f"{name} {key}: sloscope {theirs[key]}, truth {mine[key]}")
    return lines
