"""The probability with which a span's trace was kept, as its sampler wrote it in the trace state.

OpenTelemetry's consistent probability sampling (OTEP 235; the specification's "TraceState: Probability
Sampling") has a sampler record what it did in the ``ot`` entry of the W3C ``tracestate``: ``th:<hex>``, the
*rejection threshold* ``T``, 1 to 14 lowercase hex digits read as the top digits of a 56-bit number (trailing zeros
left out: ``th:c`` is ``0xc0000000000000``). A trace is kept when its 56 bits of randomness are at least ``T``, so
with probability ``(2**56 - T) / 2**56``: ``th:0`` is every trace, ``th:8`` one in two, ``th:e666666666666`` about
one in ten. Parent-based samplers pass the entry on, so a model server's span carries its root's threshold.

A sampler that records nothing (the ``traceidratio`` samplers of most SDKs, the EPPs' among them) leaves the
probability unknown: :func:`probability_of` says None, never 1. The native join reads the same entry the same way
(``native/src/join/sampling.rs``).

A kept request stands for ``1 / probability`` requests, its *adjusted count* (the specification's term): counting
each with it makes the totals unbiased estimates of what the gateway served, whatever mix of probabilities a pool
sees. Where a trace recorded none, the publisher assumes the probability it is given for the pool.
"""

from __future__ import annotations

import numpy as np

from sloscope.columnar.columns import Floats

__all__ = ["MAX_THRESHOLD", "adjusted_count", "adjusted_counts", "probability_of", "threshold_of"]

MAX_THRESHOLD = 1 << 56
"""The thresholds' scale: 56 bits of randomness."""

_HEX = frozenset("0123456789abcdefABCDEF")  # upper case read too, as the SDKs' parsers do


def threshold_of(tracestate: str) -> int | None:
    """The rejection threshold in ``tracestate``'s ``ot`` entry, None when there is none or it is malformed.

    The first ``ot`` list member is read (W3C tracestate keys are unique; a repeated one is the writer's error),
    and in it the first ``th`` sub-key. A malformed ``th`` (empty, longer than 14 digits, not hex) says nothing:
    its span is one of an unrecorded probability."""
    for member in tracestate.split(","):
        key, equals, value = member.strip(" \t").partition("=")
        if key != "ot" or not equals:
            continue
        for field in value.split(";"):
            name, colon, digits = field.partition(":")
            if name == "th" and colon:
                if 1 <= len(digits) <= 14 and _HEX.issuperset(digits):
                    return int(digits.ljust(14, "0"), 16)
                return None
        return None
    return None


def probability_of(tracestate: str) -> float | None:
    """The probability the trace was kept with, from its threshold; None when the trace state does not say."""
    threshold = threshold_of(tracestate)
    return None if threshold is None else (MAX_THRESHOLD - threshold) / MAX_THRESHOLD


def adjusted_count(probability: float | None, assumed: float) -> float:
    """How many requests one kept with ``probability`` stands for; ``assumed`` where it is None."""
    return 1.0 / (assumed if probability is None else probability)


def adjusted_counts(probabilities: Floats, assumed: Floats) -> Floats:
    """:func:`adjusted_count` of each row: ``probabilities`` NaN where none was recorded, ``assumed`` per row."""
    return 1.0 / np.where(np.isnan(probabilities), assumed, probabilities)
