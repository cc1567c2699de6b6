"""The SLO maths: exact values from known inputs."""

from __future__ import annotations

import math

import pytest

from sloscope import conventions as c
from sloscope.loading import default_spec
from sloscope.processors import joined_batch
from sloscope.records import JoinedRequest, Verdict
from sloscope.slo.evaluate import evaluate, judge, tpot_seconds
from sloscope.slo.evaluate_batch import evaluate_batch
from sloscope.slo.spec import SLOSpec


def base_request(**changes: object) -> JoinedRequest:
    request = JoinedRequest(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        outcome="joined",
        target_model="llama",
        slo_ttft_ms=200.0,
        slo_tpot_ms=50.0,
        ttft_seconds=0.15,
        ttft_source="model_server",
        e2e_seconds=0.65,
        completion_tokens=11.0,
    )
    for key, value in changes.items():
        setattr(request, key, value)
    return request


@pytest.mark.parametrize(
    ("e2e", "ttft", "tokens", "expected"),
    [
        pytest.param(0.65, 0.15, 11, 0.05, id="ten intervals of 50 ms"),
        pytest.param(0.35, 0.15, 2, 0.2, id="two tokens: one interval"),
        pytest.param(0.15, 0.15, 1, None, id="one token has no TPOT"),
        pytest.param(0.15, 0.15, 0, None, id="no tokens has no TPOT"),
        pytest.param(0.1, 0.15, 5, None, id="e2e before first token is invalid"),
        pytest.param(math.nan, 0.15, 5, None, id="NaN e2e"),
        pytest.param(0.5, -0.1, 5, None, id="negative TTFT"),
        pytest.param(0.5, 0.1, 2.5, None, id="fractional token count"),
        pytest.param(None, 0.1, 5, None, id="missing e2e"),
    ],
)
def test_tpot_seconds(e2e: float | None, ttft: float | None, tokens: float | None, expected: float | None) -> None:
    result = tpot_seconds(e2e, ttft, tokens)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("actual", "target_ms", "expected"),
    [
        pytest.param(0.2, 200.0, Verdict(True, True, 0.2, 0.2), id="equal to the target is met"),
        pytest.param(0.2001, 200.0, Verdict(True, False, 0.2001, 0.2), id="just over is violated"),
        pytest.param(0.1, None, Verdict(False), id="no target: not eligible"),
        pytest.param(0.1, 0.0, Verdict(False), id="zero target is not a target"),
        pytest.param(0.1, -5.0, Verdict(False), id="negative target is not a target"),
        pytest.param(0.1, math.inf, Verdict(False), id="infinite target is not a target"),
        pytest.param(None, 200.0, Verdict(False, target=0.2), id="no actual: not eligible, target kept"),
    ],
)
def test_judge(actual: float | None, target_ms: float | None, expected: Verdict) -> None:
    assert judge(actual, target_ms) == expected


def test_request_meeting_both_slos_is_goodput() -> None:
    evaluation = evaluate(base_request(), default_spec())
    assert evaluation.slo_class == "interactive"
    assert evaluation.ttft == Verdict(True, True, 0.15, 0.2)
    assert evaluation.tpot.eligible and evaluation.tpot.met
    assert evaluation.tpot_seconds == pytest.approx(0.05)
    assert evaluation.goodput == Verdict(True, True)
    assert evaluation.target_source == "request"
    assert evaluation.invalid_fields == ()


def test_one_violation_breaks_goodput() -> None:
    evaluation = evaluate(base_request(e2e_seconds=0.75), default_spec())  # TPOT 60 ms > 50 ms
    assert evaluation.ttft.met
    assert not evaluation.tpot.met
    assert evaluation.goodput == Verdict(True, False)


def test_request_without_slo_headers_carries_no_slo() -> None:
    evaluation = evaluate(base_request(slo_ttft_ms=None, slo_tpot_ms=None), default_spec())
    assert evaluation.slo_class == "none"
    assert not evaluation.ttft.eligible and not evaluation.tpot.eligible and not evaluation.goodput.eligible
    assert evaluation.target_source == "none"
    assert evaluation.ttft_seconds == 0.15  # still observed in the latency histogram


def test_one_token_answer_is_judged_on_ttft_alone() -> None:
    evaluation = evaluate(base_request(completion_tokens=1.0, e2e_seconds=0.15), default_spec())
    assert not evaluation.tpot.eligible
    assert evaluation.goodput == Verdict(True, True)
    assert evaluation.invalid_fields == ()


def test_invalid_ttft_is_counted_and_makes_goodput_ineligible() -> None:
    evaluation = evaluate(base_request(ttft_seconds=-1.0), default_spec())
    assert evaluation.invalid_fields == ("ttft_seconds",)
    assert not evaluation.ttft.eligible
    assert not evaluation.tpot.eligible
    assert not evaluation.goodput.eligible


def test_missing_completion_tokens_is_invalid_for_tpot_only() -> None:
    evaluation = evaluate(base_request(completion_tokens=None), default_spec())
    assert evaluation.invalid_fields == ("completion_tokens",)
    assert evaluation.ttft.eligible and evaluation.ttft.met
    assert not evaluation.tpot.eligible
    assert not evaluation.goodput.eligible  # a carried SLO could not be judged


def test_unparsable_header_target_falls_back_to_class_default() -> None:
    spec = SLOSpec.model_validate(
        {
            "version": "sloscope/v1",
            "classes": [{"name": "chat", "match": {"models": ["llama*"]}, "defaults": {"ttft_ms": 300}}],
        }
    )
    evaluation = evaluate(base_request(slo_ttft_ms=None, slo_tpot_ms=None), spec)
    assert evaluation.slo_class == "chat"
    assert evaluation.target_source == "class_default"
    assert evaluation.ttft == Verdict(True, True, 0.15, 0.3)
    assert not evaluation.tpot.eligible
    assert evaluation.goodput == Verdict(True, True)


@pytest.mark.parametrize(
    ("ttft_ms", "tpot_ms", "expected"),
    [
        pytest.param(1000.0, None, "interactive", id="1 s TTFT target is interactive"),
        pytest.param(1000.5, None, "standard", id="looser TTFT target is standard"),
        pytest.param(None, 30.0, "standard", id="TPOT target alone is standard"),
        pytest.param(None, None, "none", id="no target is the default class"),
    ],
)
def test_default_spec_classification(ttft_ms: float | None, tpot_ms: float | None, expected: str) -> None:
    evaluation = evaluate(base_request(slo_ttft_ms=ttft_ms, slo_tpot_ms=tpot_ms), default_spec())
    assert evaluation.slo_class == expected


def test_tpot_uses_the_model_servers_own_ttft_when_the_gateway_measured_another() -> None:
    request = base_request(ttft_seconds=0.13, ttft_source="gateway", server_ttft_seconds=0.1, e2e_seconds=0.6)
    evaluation = evaluate(request, default_spec())
    assert evaluation.ttft_seconds == 0.13  # judged against the TTFT SLO: the client-side one
    assert evaluation.tpot_seconds == pytest.approx(0.05)  # (0.6 - 0.1) / 10, one clock


def test_an_unusable_model_server_ttft_is_counted_when_tpot_needs_it() -> None:
    request = base_request(ttft_seconds=0.13, ttft_source="gateway", server_ttft_seconds=-1.0)
    evaluation = evaluate(request, default_spec())
    assert evaluation.ttft.eligible  # the gateway's TTFT is fine for the TTFT SLO
    assert not evaluation.tpot.eligible
    assert evaluation.invalid_fields == ("ttft_seconds",)


def test_a_request_of_several_choices_is_judged_on_the_tpot_the_assembler_set() -> None:
    evaluation = evaluate(base_request(tpot_seconds=0.06, completion_tokens=33.0), default_spec())
    assert (evaluation.tpot_seconds, evaluation.tpot.eligible, evaluation.tpot.met) == (0.06, True, False)


@pytest.mark.parametrize("reason", ["error", "shed", "timeout"])
def test_a_failed_request_is_a_bad_event_of_every_slo_it_carried(reason: str) -> None:
    evaluation = evaluate(base_request(failure_reason=reason), default_spec())
    verdicts = [evaluation.verdict(slo) for slo in ("ttft", "tpot", "goodput")]
    assert [(v.eligible, v.met) for v in verdicts] == [(True, False)] * 3
    assert (evaluation.ttft.target, evaluation.tpot.target) == (0.2, 0.05)
    assert (evaluation.ttft_seconds, evaluation.tpot_seconds) == (None, None)  # no latency sample of the service


S = 1_000_000_000  # ns


def aborted(waited: float | None, *, call_started: float | None = None, **changes: object) -> JoinedRequest:
    """A request whose client left ``waited`` seconds after it arrived (None: its spans do not say when)."""
    arrival = 10 * S
    end = 0 if waited is None else arrival + round(waited * S)
    call = 0 if call_started is None else arrival - round(call_started * S)
    return base_request(
        failure_reason="aborted", arrival_ns=arrival, start_ns=arrival, end_ns=end, call_arrival_ns=call, **changes
    )


def spec_with_aborts(rule: str) -> SLOSpec:
    spec = default_spec()
    return spec.model_copy(update={"classes": [k.model_copy(update={"aborts": rule}) for k in spec.classes]})


NOT_COUNTED, MISSED = (False, False), (True, False)


@pytest.mark.parametrize(
    ("request_", "rule", "expected"),
    [
        pytest.param(aborted(0.1), "by_deadline", [NOT_COUNTED] * 3, id="left before the TTFT target: nothing missed"),
        pytest.param(aborted(0.2), "by_deadline", [MISSED, NOT_COUNTED, MISSED], id="left at the TTFT target"),
        pytest.param(aborted(3.0), "by_deadline", [MISSED, NOT_COUNTED, MISSED], id="left late: TTFT and goodput"),
        pytest.param(
            aborted(0.05, call_started=0.3), "by_deadline", [MISSED, NOT_COUNTED, MISSED], id="a call's first leg"
        ),
        pytest.param(aborted(None), "by_deadline", [MISSED, NOT_COUNTED, MISSED], id="when unknown: a miss"),
        pytest.param(aborted(3.0, slo_ttft_ms=None), "by_deadline", [NOT_COUNTED] * 3, id="TPOT alone: never known"),
        pytest.param(aborted(0.1), "always", [MISSED] * 3, id="always: every SLO carried"),
        pytest.param(aborted(3.0), "never", [NOT_COUNTED] * 3, id="never: none"),
    ],
)
def test_an_aborted_request_misses_only_the_slos_whose_deadline_passed_before_the_client_left(
    request_: JoinedRequest, rule: str, expected: list[tuple[bool, bool]]
) -> None:
    spec = spec_with_aborts(rule)
    evaluation = evaluate(request_, spec)
    assert [(evaluation.verdict(slo).eligible, evaluation.verdict(slo).met) for slo in c.SLOS] == expected
    verdicts = evaluate_batch(joined_batch.from_requests([request_]), spec)  # the batch path judges alike
    assert verdicts.evaluations() == [evaluation]


def test_a_failed_request_without_slo_is_eligible_for_none() -> None:
    evaluation = evaluate(base_request(failure_reason="shed", slo_ttft_ms=None, slo_tpot_ms=None), default_spec())
    assert not any(evaluation.verdict(slo).eligible for slo in ("ttft", "tpot", "goodput"))
    assert evaluation.slo_class == default_spec().default_class
