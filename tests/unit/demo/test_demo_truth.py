"""The llm-d demo's ground truth on exact inputs: P/D counted once with the client's TTFT, n > 1 choices merged,
failed requests as bad events for every SLO they carried; and the comparison with sloscope's /metrics page."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from sloscope.demo.agents import Call
from sloscope.demo.calls import CallRecord, Scheduling, outcome
from sloscope.demo.compare import differences
from sloscope.demo.readout import Readout, parse
from sloscope.demo.records import ns
from sloscope.demo.truth import FailedOutcome, GroundTruth, Outcome
from tests.support.demo_calls import T0, Captured, choices, decision, disaggregated, request, session, single


def truth_of(*records: CallRecord) -> GroundTruth:
    truth = GroundTruth(default_class="batch")
    for record in records:
        truth.add(outcome(record))
    return truth


def test_a_p_d_request_has_the_clients_ttft_from_the_gateway_span() -> None:
    record = disaggregated("nixl")
    found = outcome(record)
    assert isinstance(found, Outcome)
    decode = record.completions[0]
    expected = (ns(decode.arrived) - ns(record.arrival)) / 1e9 + decode.ttft
    assert found.ttft == expected  # exactly: the integers the spans carry, converted as sloscope does
    assert found.ttft == pytest.approx(0.0886 + 0.03, abs=1e-6)  # unix-time floats hold about 0.2 µs
    assert found.tpot == (decode.e2e - decode.ttft) / 99  # the decode stage's own
    assert found.completion.pod == "vllm-1"


def test_the_p_d_ttft_is_the_one_the_exported_spans_give() -> None:
    record = disaggregated("nixl")
    spans = Captured().spans(record)
    gateway = next(s for s in spans if s.name == "gateway.request")
    decode = next(s for s in spans if s.name == "llm_request" and s.resource.attributes["k8s.pod.name"] == "vllm-1")
    assert gateway.start_time is not None and decode.start_time is not None and decode.attributes is not None
    from_spans = (decode.start_time - gateway.start_time) / 1e9 + decode.attributes[
        "gen_ai.latency.time_to_first_token"
    ]
    found = outcome(record)
    assert isinstance(found, Outcome) and found.ttft == from_spans


def test_without_sidecar_spans_the_p_d_ttft_starts_at_the_gateway() -> None:
    record = disaggregated("off")
    found = outcome(record)
    decode = record.completions[0]
    assert isinstance(found, Outcome)
    assert found.ttft == (ns(decode.arrived) - ns(T0)) / 1e9 + decode.ttft


def test_p_d_counts_once_on_the_decode_pod_and_misses_on_the_clients_ttft() -> None:
    # the decode pod's own TTFT (30 ms) meets a 100 ms target; the client's (118.6 ms) does not
    tight = disaggregated("nixl")
    tight = replace(tight, call=replace(tight.call, request=request(ttft_ms=100.0)))
    truth = truth_of(tight, disaggregated("p2p"))
    assert truth.requests == Counter({("interactive", "predicted"): 2})
    assert truth.per_pod == Counter({"vllm-1": 2})
    assert truth.eligible == Counter({("interactive", "predicted", slo): 2 for slo in ("ttft", "tpot", "goodput")})
    assert truth.violations == Counter(
        {("interactive", "predicted", "ttft"): 1, ("interactive", "predicted", "goodput"): 1}
    )
    assert truth.failed == Counter()


def test_n_3_is_one_request_with_the_fastest_first_token_and_the_slowest_pace() -> None:
    record = choices()
    found = outcome(record)
    assert isinstance(found, Outcome)
    paces = [(c.e2e - c.ttft) / (c.completion_tokens - 1) for c in record.completions]
    fastest = min(record.completions, key=lambda c: c.ttft)
    assert fastest.ttft == 0.25  # from the gateway span's start to the fastest choice's first token:
    assert found.ttft == (ns(fastest.arrived) - ns(record.arrival)) / 1e9 + 0.25
    assert found.tpot == max(paces) == pytest.approx(0.045)
    truth = truth_of(record)
    assert truth.requests == Counter({("interactive", "predicted"): 1}) and truth.per_pod == Counter({"vllm-1": 1})
    assert truth.violations == Counter()  # 250 ms <= 500 ms, 45 ms <= 50 ms
    tight = replace(record, call=replace(record.call, request=request(tpot_ms=44.0)))
    assert truth_of(tight).violations == Counter(
        {("interactive", "predicted", "tpot"): 1, ("interactive", "predicted", "goodput"): 1}
    )


def failed_record(failure: str, routing: str | None, slo_class: str = "interactive") -> CallRecord:
    slo = (None, None) if slo_class == "batch" else (500.0, 50.0)
    call = Call(request(slo_class, *slo), "chat", failure=failure)  # type: ignore[arg-type]
    schedules = () if routing is None else (Scheduling("default", T0, T0 + 0.004, decision(routing=routing)),)
    return CallRecord(session(call), call, T0, T0 + 0.01, T0 + 0.004, schedules, aborted=failure == "aborted")


@pytest.mark.parametrize(
    ("failure", "routing", "reason", "label"),
    [
        pytest.param("shed", None, "shed", "none", id="shed by flow control"),
        pytest.param("refused", None, "shed", "none", id="refused by the admitter is shed"),
        pytest.param("timeout", None, "timeout", "none", id="timed out in the queue"),
        pytest.param("error", "predicted", "error", "predicted", id="model server error after scheduling"),
    ],
)
def test_a_failed_request_is_a_bad_event_for_every_slo_it_carried(
    failure: str, routing: str | None, reason: str, label: str
) -> None:
    found = outcome(failed_record(failure, routing))
    assert found == FailedOutcome(found.request, label, reason)
    truth = truth_of(failed_record(failure, routing), failed_record(failure, routing, "batch"))
    assert truth.requests == Counter({("interactive", label): 1, ("batch", label): 1})
    assert truth.failed == Counter({("interactive", label, reason): 1, ("batch", label, reason): 1})
    every_slo = Counter({("interactive", label, slo): 1 for slo in ("ttft", "tpot", "goodput")})
    assert truth.eligible == truth.violations == every_slo  # the batch request carried no SLO
    assert truth.per_pod == Counter()  # it reached no pod
    assert truth.predictions == Counter()


@pytest.mark.parametrize(("left_after", "missed"), [(0.01, ()), (0.5, ("ttft", "goodput")), (1.2, ("ttft", "goodput"))])
def test_a_client_disconnect_misses_only_the_ttft_target_it_outwaited(
    left_after: float, missed: tuple[str, ...]
) -> None:
    """500 ms TTFT and 50 ms TPOT targets: gone after 10 ms, nothing was missed yet; after 500 ms or more, the first
    token was late (goodput with it); TPOT is never known."""
    record = replace(failed_record("aborted", "default"), end=T0 + left_after)
    found = outcome(record)
    assert found == FailedOutcome(found.request, "default", "aborted", waited=pytest.approx(left_after))
    truth = truth_of(record)
    assert truth.failed == Counter({("interactive", "default", "aborted"): 1})
    assert truth.eligible == truth.violations == Counter({("interactive", "default", slo): 1 for slo in missed})


def test_an_aborted_plan_that_completed_first_is_a_normal_request() -> None:
    call = Call(request(), "chat", failure="aborted", abort_after=5.0)
    record = replace(single(call), call=call)
    assert record.failure is None and isinstance(outcome(record), Outcome)


def test_a_request_with_only_a_tpot_target_fails_tpot_and_goodput() -> None:
    truth = GroundTruth(default_class="batch")
    truth.add(FailedOutcome(request("batch", None, 80.0), "none", "shed"))
    assert truth.violations == Counter({("batch", "none", "tpot"): 1, ("batch", "none", "goodput"): 1})


PAGE = """\
# TYPE sloscope_requests counter
sloscope_requests_total{model="m",pool="p",slo_class="interactive",routing="predicted"} 2
sloscope_requests_total{model="m",pool="p",slo_class="interactive",routing="none"} 1
# TYPE sloscope_slo_requests counter
sloscope_slo_requests_total{model="m",pool="p",slo_class="interactive",routing="predicted",slo="ttft"} 2
sloscope_slo_requests_total{model="m",pool="p",slo_class="interactive",routing="none",slo="ttft"} 1
# TYPE sloscope_slo_violations counter
sloscope_slo_violations_total{model="m",pool="p",slo_class="interactive",routing="none",slo="ttft"} 1
# TYPE sloscope_requests_failed counter
sloscope_requests_failed_total{model="m",pool="p",slo_class="interactive",routing="none",reason="shed"} 1
sloscope_requests_failed_total{model="m",pool="p",slo_class="interactive",routing="none",reason="error"} 0
# TYPE sloscope_pod_requests counter
sloscope_pod_requests_total{pool="p",pod="vllm-1"} 2
sloscope_pod_requests_total{pool="p",pod="vllm-2"} 0
"""


def test_the_readout_reads_failures_and_pods() -> None:
    figures = parse(PAGE)
    assert figures.failed == Counter({("interactive", "none", "shed"): 1, ("interactive", "none", "error"): 0})
    assert figures.per_pod == Counter({"vllm-1": 2, "vllm-2": 0})
    assert figures.requests == Counter({("interactive", "predicted"): 2, ("interactive", "none"): 1})


MEAN_PAGE = """\
# TYPE sloscope_mean_predictions counter
sloscope_mean_predictions_total{model="m",pool="p",signal="ttft",source="shadow"} 2
# TYPE sloscope_mean_prediction_underestimate_seconds counter
sloscope_mean_prediction_underestimate_seconds_total{model="m",pool="p",signal="ttft",source="shadow"} 0.005
# TYPE sloscope_mean_prediction_overestimate_seconds counter
sloscope_mean_prediction_overestimate_seconds_total{model="m",pool="p",signal="ttft",source="shadow"} 0.01
"""


def test_the_readout_takes_bias_and_mae_from_the_two_error_sums() -> None:
    """Predictions 20 and 100 ms against actuals 25 and 90 ms: too low by 5 ms, too high by 10 ms."""
    figures = parse(MEAN_PAGE)
    assert figures.bias_and_mae("ttft") == pytest.approx((-0.0025, 0.0075), abs=1e-12)
    assert figures.mean_absolute("ttft") == pytest.approx(0.015, abs=1e-12)
    assert figures.bias_and_mae("tpot") is None


def test_the_comparison_lists_every_count_that_differs() -> None:
    truth = GroundTruth(default_class="batch")
    truth.add(FailedOutcome(request(ttft_ms=500.0, tpot_ms=None), "none", "shed"))
    assert differences(truth, parse(PAGE)) == [
        "requests ('interactive', 'predicted'): sloscope 2, truth 0",
        "eligible ('interactive', 'none', 'goodput'): sloscope 0, truth 1",
        "eligible ('interactive', 'predicted', 'ttft'): sloscope 2, truth 0",
        "violations ('interactive', 'none', 'goodput'): sloscope 0, truth 1",
        "per_pod vllm-1: sloscope 2, truth 0",
    ]
    figures = Readout(
        requests=Counter({("interactive", "none"): 1}),
        eligible=Counter({("interactive", "none", "ttft"): 1, ("interactive", "none", "goodput"): 1}),
        violations=Counter({("interactive", "none", "ttft"): 1, ("interactive", "none", "goodput"): 1}),
        failed=Counter({("interactive", "none", "shed"): 1, ("interactive", "none", "error"): 0}),
    )
    assert differences(truth, figures) == []  # a series at 0 equals a count never made
