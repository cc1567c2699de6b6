"""The upstream-contract checks (processors/contracts.py) on constructed cases, the span window on a clock, and the
span tap's batch path against its one-request path and an independent count."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Limits
from sloscope.predictor.generation import GIE_2025, GIE_V15, LLM_D
from sloscope.processors import contracts
from sloscope.processors.contracts import SpanCounts, SpanWindow, span_checks
from sloscope.processors.streaming_modes import StreamingModes
from sloscope.publishers.upstream_contract import SpanContractTap, UpstreamContractCollector
from sloscope.records import JoinedRequest
from tests.support.joined_requests import SPEC, joined_requests
from tests.unit.publishers.test_batch_publisher import Side, batches


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def counts(n: int, **fields: int) -> SpanCounts:
    """``n`` requests, anchored, answered and joined to a gateway span, each carrying everything unless said."""
    full = {"anchored": n, "with_request_id": n, "answered": n, "with_tokens": n, "gateway": n, "with_slo_header": n}
    return SpanCounts(**{**full, **fields})


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (counts(19, with_request_id=0, with_tokens=0), (None, None)),  # too few to judge
        (counts(20, with_request_id=18, with_tokens=18), (True, True)),  # 90 % holds
        (counts(20, with_request_id=17, with_tokens=17), (False, False)),
        (counts(40, with_request_id=40, answered=20, with_tokens=17), (True, False)),  # tokens of answered only
        (counts(40, with_request_id=35, answered=19, with_tokens=0), (False, None)),
    ],
)
def test_span_shares_are_judged_from_20_requests_on_at_90_percent(
    window: SpanCounts, expected: tuple[bool | None, bool | None]
) -> None:
    judged = span_checks(window, headers_seen=True)
    assert (judged[c.CHECK_SPAN_REQUEST_ID], judged[c.CHECK_SPAN_TOKEN_COUNTS]) == expected


@pytest.mark.parametrize(
    ("window", "seen", "expected"),
    [
        (counts(30, with_slo_header=0), False, None),  # clients that never sent a header break nothing
        (counts(30, with_slo_header=0), True, False),  # headers vanished
        (counts(30, with_slo_header=1), True, True),
        (counts(19, with_slo_header=0), True, None),  # too few gateway spans to say
        (counts(30, gateway=0, with_slo_header=0), True, None),  # no gateway span at all: nothing to judge
    ],
)
def test_slo_headers_break_only_once_seen(window: SpanCounts, seen: bool, expected: bool | None) -> None:
    assert span_checks(window, headers_seen=seen)[c.CHECK_GATEWAY_SLO_HEADERS] is expected


def test_the_window_forgets_what_is_older_than_ten_minutes_but_not_that_headers_were_seen() -> None:
    clock = Clock()
    window = SpanWindow(clock=clock)
    window.add("pool-a", counts(25))  # a gateway that captured the headers
    clock.now += 300
    window.add("pool-a", counts(25, with_slo_header=0))  # an upgrade stopped it five minutes later
    assert span_checks(window.totals("pool-a"), window.headers_seen("pool-a"))[c.CHECK_GATEWAY_SLO_HEADERS] is True
    clock.now += 301  # the first minute's requests left the window
    assert window.totals("pool-a") == counts(25, with_slo_header=0)
    assert span_checks(window.totals("pool-a"), window.headers_seen("pool-a"))[c.CHECK_GATEWAY_SLO_HEADERS] is False
    clock.now += 600
    assert window.totals("pool-a") == SpanCounts()
    assert window.pools() == ["pool-a"] and window.headers_seen("pool-a")
    assert window.totals("pool-b") == SpanCounts() and not window.headers_seen("pool-b")


@pytest.mark.parametrize(
    ("generation", "speaks", "expected"),
    [
        (LLM_D, True, True),
        (GIE_V15, True, True),
        (LLM_D, False, False),  # llm-d's /status always states objective_type (prediction_server.py:966-995)
        (GIE_V15, False, False),
        (GIE_2025, False, True),  # the late-2025 predictor states none: quantile is right
        (LLM_D, None, None),  # no /status answered yet
    ],
)
def test_the_objective_must_be_stated_where_the_generation_states_it(
    generation: str, speaks: bool | None, expected: bool | None
) -> None:
    assert contracts.predictor_objective(generation, speaks) is expected  # type: ignore[arg-type]


def test_predictor_answers_generation_and_families() -> None:
    assert contracts.predictor_answers(None) is None
    assert contracts.predictor_answers(()) is True
    assert contracts.predictor_answers(("/status",)) is False
    assert contracts.epp_generation("auto", LLM_D, served=True) is None
    assert contracts.epp_generation(LLM_D, None, served=True) is None
    assert contracts.epp_generation(LLM_D, LLM_D, served=False) is True  # llm-d's page says so from start-up
    assert contracts.epp_generation(GIE_V15, GIE_2025, served=True) is False
    # an idle GIE v1.5.0 EPP's page looks late-2025 until it has scheduled a request: nothing to judge by yet
    assert contracts.epp_generation(GIE_V15, GIE_2025, served=False) is None
    assert contracts.epp_families(None, 100) is None
    assert contracts.epp_families((), 19) is None  # an EPP that served too few requests may have written nothing
    assert contracts.epp_families((), 20) is False
    assert contracts.epp_families(("llm_d_epp_scheduler_attempts",), 20) is True


def test_the_streaming_check_compares_the_page_with_the_setting_only() -> None:
    modes = StreamingModes({"set-on": True, "unset": None}, default=None)
    assert [modes.contradicted(p) for p in ("set-on", "unset", "other")] == [None, None, None]  # no page yet
    for pool in ("set-on", "unset", "other"):
        modes.tell(pool, False)
    assert [modes.contradicted(p) for p in ("set-on", "unset", "other")] == [True, None, None]
    assert contracts.streaming_mode(modes.contradicted("set-on")) is False
    modes.tell("set-on", True)  # the EPP reconfigured as the setting says
    assert contracts.streaming_mode(modes.contradicted("set-on")) is True
    everywhere = StreamingModes({"a": None}, default=False)  # predictions.streaming_mode names every pool's
    everywhere.tell("a", True)
    everywhere.tell("b", True)
    assert (everywhere.contradicted("a"), everywhere.contradicted("b")) == (True, True)


def expected_counts(requests: list[JoinedRequest], pools: dict[str, str]) -> dict[str, SpanCounts]:
    """An independent count: each request's fields read one by one, under the pool label it was published with."""
    out: dict[str, Counter[str]] = {}
    for r in requests:
        tally = out.setdefault(pools[r.trace_id], Counter())
        anchored = r.outcome in (
            c.OUTCOME_JOINED,
            c.OUTCOME_JOINED_BY_REQUEST_ID,
            c.OUTCOME_ANCHOR_ONLY,
            c.OUTCOME_EVICTED,
        )
        gateway = r.outcome in (c.OUTCOME_JOINED, c.OUTCOME_JOINED_BY_REQUEST_ID, c.OUTCOME_FAILED)
        tally["anchored"] += anchored
        tally["with_request_id"] += anchored and r.request_id is not None
        tally["answered"] += anchored and r.failure_reason is None
        tally["with_tokens"] += anchored and r.failure_reason is None and r.completion_tokens is not None
        tally["gateway"] += gateway
        tally["with_slo_header"] += gateway and (r.slo_ttft_ms is not None or r.slo_tpot_ms is not None)
    return {pool: SpanCounts(**tally) for pool, tally in out.items()}


@pytest.mark.parametrize("seed", range(3))
def test_the_tap_counts_each_request_under_the_pool_label_it_was_published_with(seed: int) -> None:
    rng = random.Random(seed)
    requests = joined_requests(seed=500 + seed, count=1500)
    for r in requests:  # every outcome and missing field in the mix
        r.outcome = rng.choice((c.OUTCOME_JOINED, c.OUTCOME_ANCHOR_ONLY, c.OUTCOME_FAILED, c.OUTCOME_EVICTED))
        r.request_id = r.request_id if rng.random() < 0.7 else None
    one = Side(Limits(), SPEC, discovery=True, reference=True)
    for request in requests:
        one.reference(request)
    pools = {trace: labels.pool for trace, labels, _ in one.reference.seen}  # as the reference published them
    windows = []
    for sizes in (lambda: 1, lambda: rng.randint(1, 400)):
        many, window = Side(Limits(), SPEC, discovery=True, reference=False), SpanWindow()
        many.evaluator.add(SpanContractTap(window))
        for batch in batches(requests, sizes):
            many.evaluator.batch(batch)
        windows.append(window)
    expected = expected_counts(requests, pools)
    assert len(expected) > 1 and all(n.anchored and n.gateway and n.with_slo_header for n in expected.values())
    for window in windows:
        assert {pool: window.totals(pool) for pool in window.pools()} == expected


def test_vanished_headers_publish_0_and_checks_without_evidence_no_series() -> None:
    clock = Clock()
    window = SpanWindow(clock=clock)

    def judge() -> dict[tuple[str, str], bool]:
        judged = {
            (p, check): holds
            for p in window.pools()
            for check, holds in span_checks(window.totals(p), window.headers_seen(p)).items()
        }
        return {key: holds for key, holds in judged.items() if holds is not None}

    registry = CollectorRegistry()
    registry.register(UpstreamContractCollector(judge))

    def value(check: str) -> float | None:
        return registry.get_sample_value(c.UPSTREAM_CONTRACT.name, {c.POOL: "pool-a", c.CHECK: check})

    window.add("pool-a", counts(5))
    assert [value(check) for check in c.CONTRACT_CHECKS] == [None] * len(c.CONTRACT_CHECKS)  # too few to judge
    window.add("pool-a", counts(20))
    assert value(c.CHECK_GATEWAY_SLO_HEADERS) == 1.0
    clock.now += 660
    window.add("pool-a", counts(20, with_slo_header=0))
    assert (value(c.CHECK_GATEWAY_SLO_HEADERS), value(c.CHECK_SPAN_REQUEST_ID)) == (0.0, 1.0)
