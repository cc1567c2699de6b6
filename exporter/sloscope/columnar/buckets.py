"""Histogram bucket boundaries of the published histograms, defined once.

The publishers build their histograms with them and the dashboard generator writes ``le`` matchers
against them (a matcher on a boundary that does not exist would select nothing), so they live here, apart
from both.
"""

from __future__ import annotations

__all__ = ["HEADROOM_BUCKETS", "RATIO_BUCKETS", "TOKEN_BUCKETS", "TPOT_BUCKETS", "TTFT_BUCKETS"]

# vLLM's TTFT buckets (seconds) and its inter-token-latency buckets, so the two line up in Grafana.
# fmt: off
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
# fmt: on

# actual / predicted: fine around 1, where a quantile model's calibration shows; le=1 is "covered".
RATIO_BUCKETS = (0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
# seconds, symmetric around 0: le=0 counts the requests routed with no headroom left.
# fmt: off
HEADROOM_BUCKETS = (-10.0, -5.0, -2.5, -1.0, -0.5, -0.25, -0.1, -0.05, -0.025, -0.01, 0.0,
                    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# fmt: on

# tokens per request: a 1-2-5 series from 1 to a million, wide enough for any context length.
TOKEN_BUCKETS = (*(float(m * 10**e) for e in range(6) for m in (1, 2, 5)), 1_000_000.0)
