"""A real ``sloscope serve`` with ``join.workers: 2`` counts what one worker counts, over real sockets.

The traffic and the comparison are the scale-out test's (test_collector_scale_out.py: agent sessions of five
LLM calls per trace in the llm-d demo's shapes, P/D through the routing sidecar, a model-server error and a
shed call, exported with the OpenTelemetry SDK's OTLP/gRPC exporter one export per simulated process): every
request series (counters, SLO requests and violations, failures, histogram buckets, counts and sums, join
outcomes, spans received) of the two-worker server equals the one-worker server's. Every call's spans are in
its session's trace, which is what ``join.workers`` promises to count alike (docs/configuration.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from sloscope.conventions import REQUESTS

from .conftest import Server, wait_until
from .test_collector_scale_out import CALLS, JOIN, SESSIONS, differences, request_series, rounds, send, settled

pytestmark = pytest.mark.integration


def test_two_join_workers_count_what_one_counts(serve: Callable[..., Server]) -> None:
    batches = rounds()
    one = serve(join=JOIN)
    two = serve(join={**JOIN, "workers": 2})
    spans = send(one.otlp_grpc, batches)
    assert send(two.otlp_grpc, batches) == spans
    wait_until(settled([one], spans), timeout=60, what="the one-worker server to emit every request")
    want = request_series(one)
    assert one.total(REQUESTS.exposed_name) == SESSIONS * CALLS
    wait_until(settled([two], spans), timeout=60, what="the two-worker server to emit every request")
    with contextlib.suppress(AssertionError):  # the assertion below shows what differs
        wait_until(lambda: not differences(request_series(two), want), timeout=10, what="the same series")
    assert differences(request_series(two), want) == []
    assert any("join.workers is 2" in line for line in two.log)  # joining by request id is on: the limit is said
