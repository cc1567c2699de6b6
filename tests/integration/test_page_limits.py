"""Scraped pages of the largest size through a real ``sloscope serve``: ``/healthz`` stays under 100 ms.

A model-server page and an EPP page, each just under ``MAX_PAGE_BYTES`` (16 MiB), are scraped every
0.2 s while ``/healthz`` is probed every 50 ms from a process of its own (tests/support/prober.py).
Each page is the recorded one (vLLM 0.33's, llm-d-router's at ebab6879) followed by filler:
``WANTED_SHARE`` of the bytes are series of a family the scraper reads, whose values leave the read
values as they are (``vllm:num_requests_waiting`` of further data-parallel engines with empty queues,
which are summed; ``llm_d_epp_inflight_requests`` of another producer than the one read,
epp_inflight.py), the rest lines of a family nobody reads. Either kind costs the parser in its own
way: a wanted line is a sample built in Python, an unread one is skipped inside one regex scan.

The machine is shared, so the bound is measured in up to ``ROUNDS`` rounds of ``ROUND_SECONDS`` and
holds when one round meets it; each round's slowest probe is printed. A parse on the event loop (the
code before pages were parsed off it) misses by hundreds of ms in every round.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sloscope import conventions as c
from sloscope.receivers.http_fetch import MAX_PAGE_BYTES
from tests.support import prober
from tests.support.page_server import PageServer, llmd_epp_page, vllm_page

from .conftest import Server

pytestmark = pytest.mark.integration

PROBE_INTERVAL = 0.05  # the acceptance: /healthz every 50 ms ...
PROBE_BOUND = 0.1  # ... and no probe slower than 100 ms
ROUNDS = 3
ROUND_SECONDS = 4.0
WANTED_SHARE = 0.25  # of the filler bytes
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def padded(page: str, wanted: Callable[[int], str], *, size: int = MAX_PAGE_BYTES - 1024) -> str:
    """``page`` and then filler lines up to ``size`` bytes: ``WANTED_SHARE`` of them ``wanted(i)``."""
    lines, total, n = [page], len(page.encode()), 0
    wanted_bytes = int((size - total) * WANTED_SHARE)
    while total < size:
        line = wanted(n) if total - len(page) < wanted_bytes else f'app_unread_total{{path="/api/{n}"}} {n}\n'
        if total + len(line) > size:
            break
        lines.append(line)
        total += len(line)
        n += 1
    return "".join(lines)


def model_server_page(shared: Path) -> str:
    return padded(
        vllm_page(shared), lambda n: f'vllm:num_requests_waiting{{engine="{n + 1}",model_name="{MODEL}"}} 0\n'
    )


def epp_page(shared: Path) -> str:
    labels = 'fairness_id="default-flow",namespace="llm-d",priority="0",producer_name="other-producer"'
    return padded(
        llmd_epp_page(shared), lambda n: f'llm_d_epp_inflight_requests{{endpoint_name="x-{n}-rank-0",{labels}}} 3\n'
    )


def successes(server: Server) -> tuple[float, float]:
    return (
        server.value("sloscope_scrapes_total", kind=c.KIND_MODEL_SERVER, result=c.RESULT_SUCCESS),
        server.value("sloscope_scrapes_total", kind=c.KIND_EPP, result=c.RESULT_SUCCESS),
    )


def test_largest_pages_keep_healthz_under_100ms_and_are_read(serve: Callable[..., Server], shared: Path) -> None:
    pod_page, epp_text = model_server_page(shared), epp_page(shared)
    assert MAX_PAGE_BYTES - 4096 < len(pod_page.encode()) < MAX_PAGE_BYTES
    assert MAX_PAGE_BYTES - 4096 < len(epp_text.encode()) < MAX_PAGE_BYTES
    with PageServer(pod_page) as pod, PageServer(epp_text) as epp:
        server = serve(
            scrape={"interval_seconds": 0.2, "timeout_seconds": 10.0, "stale_after_seconds": 120},
            pools=[
                {
                    "name": "p",
                    "model": MODEL,
                    "targets": {"static": [{"address": pod.address, "pod": "vllm-0"}]},
                    "epp": {"metrics_url": f"http://{epp.address}/metrics"},
                }
            ],
            self_tracing={"enabled": False},
        )
        slowest: list[float] = []
        for round_ in range(ROUNDS):
            before = successes(server)
            probe = prober.start(server.url("/healthz"), PROBE_INTERVAL)
            try:
                time.sleep(ROUND_SECONDS)  # no /metrics reads of the test's own while the probe runs
            finally:
                latencies = prober.stop(probe)
            after = successes(server)
            worst = sorted(latencies)[-5:]
            print(
                f"round {round_ + 1}: {len(latencies)} probes; slowest {[round(s * 1000, 1) for s in worst]} ms; "
                f"pages read: model server {after[0] - before[0]:g}, EPP {after[1] - before[1]:g}"
            )
            assert len(latencies) > 10
            assert after[0] > before[0] and after[1] > before[1], "each page was read during the round"
            slowest.append(max(latencies))
            if slowest[-1] <= PROBE_BOUND:
                break
        assert min(slowest) <= PROBE_BOUND, f"slowest probe of each round: {slowest}"

        pool, pod_labels = {"pool": "p"}, {"pool": "p", "pod": "vllm-0"}
        assert server.value("sloscope_pod_requests_running", **pod_labels) == 27.0
        assert server.value("sloscope_pod_requests_waiting", **pod_labels) == 3.0  # 3 + the filler engines' 0
        assert server.value("sloscope_epp_inflight_requests", **pool, pod="llama-decode-1") == 1.0
        assert server.value("sloscope_epp_inflight_tokens", **pool, pod="llama-decode-1") == 2100.0
        for kind in (c.KIND_MODEL_SERVER, c.KIND_EPP):
            assert server.value("sloscope_scrapes_total", kind=kind, result=c.RESULT_PARSE_ERROR) == 0
