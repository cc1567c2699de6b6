"""Hand-made request records for the OTLP export's tests: every value chosen, nothing computed by sloscope."""

from __future__ import annotations

from typing import Any

from sloscope.records import Evaluation, JoinedRequest, PodStateAtArrival, RequestRecord, Verdict

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SPAN_ID = "b7ad6b7169203331"
ARRIVAL_NS = 1_700_000_000_000_000_000
START_NS = ARRIVAL_NS + 100_000_000  # the model server started 100 ms after the gateway saw the request
END_NS = ARRIVAL_NS + 1_100_000_000


def violating_record(trace_id: str = TRACE_ID, span_id: str = SPAN_ID, **request: Any) -> RequestRecord:
    """Interactive request on vllm-0: TTFT 250 ms against 200 ms (missed), TPOT 50 ms against 50 ms (met).

    Shadow-predicted 180 ms / 40 ms at the p90, so 20 ms / 10 ms of headroom at routing; the pod had
    3 waiting, 5 running and 42 % of its KV cache in use, in a sample 700 ms old.
    """
    joined = JoinedRequest(
        trace_id=trace_id,
        span_id=span_id,
        outcome="joined",
        request_id="req-1",
        requested_model="llama",
        target_model="llama-3-8b",
        pool="pool-a",
        pod="vllm-0",
        slo_ttft_ms=200.0,
        slo_tpot_ms=50.0,
        routing="predicted",
        ttft_seconds=0.25,
        ttft_source="gateway",
        start_ns=START_NS,
        end_ns=END_NS,
        arrival_ns=ARRIVAL_NS,
        **request,
    )
    evaluation = Evaluation(
        slo_class="interactive",
        ttft=Verdict(eligible=True, met=False, actual=0.25, target=0.2),
        tpot=Verdict(eligible=True, met=True, actual=0.05, target=0.05),
        goodput=Verdict(eligible=True, met=False),
        ttft_seconds=0.25,
        tpot_seconds=0.05,
        target_source="request",
    )
    return RequestRecord(
        request=joined,
        evaluation=evaluation,
        pool="pool-a",
        prediction_source="shadow",
        predicted_ttft_seconds=0.18,
        predicted_tpot_seconds=0.04,
        prediction_quantile=0.9,
        ttft_headroom_seconds=0.02,
        tpot_headroom_seconds=0.01,
        pod_state=PodStateAtArrival(waiting=3.0, running=5.0, kv_cache_utilization=0.42, age_seconds=0.7),
    )


def met_record(trace_id: str = TRACE_ID, span_id: str = SPAN_ID) -> RequestRecord:
    """Standard request with only a TTFT SLO of 2000 ms, met at 1500 ms; no prediction (no pod state)."""
    joined = JoinedRequest(
        trace_id=trace_id,
        span_id=span_id,
        outcome="joined",
        requested_model="mistral",
        pool="pool-a",
        pod="vllm-1",
        slo_ttft_ms=2000.0,
        ttft_seconds=1.5,
        ttft_source="model_server",
        start_ns=START_NS,
        end_ns=END_NS,
        arrival_ns=ARRIVAL_NS,
    )
    evaluation = Evaluation(
        slo_class="standard",
        ttft=Verdict(eligible=True, met=True, actual=1.5, target=2.0),
        tpot=Verdict(eligible=False),
        goodput=Verdict(eligible=True, met=True),
        ttft_seconds=1.5,
        tpot_seconds=None,
        target_source="request",
    )
    return RequestRecord(
        request=joined,
        evaluation=evaluation,
        pool="pool-a",
        prediction_source="none",
        prediction_skipped="no_pod_state",
    )


def bare_record(trace_id: str = TRACE_ID, span_id: str = SPAN_ID) -> RequestRecord:
    """An anchor-only request with no SLO, no model, no pod, no prediction: the least sloscope can know."""
    joined = JoinedRequest(trace_id=trace_id, span_id=span_id, outcome="anchor_only", start_ns=START_NS, end_ns=END_NS)
    evaluation = Evaluation(
        slo_class="none",
        ttft=Verdict(eligible=False),
        tpot=Verdict(eligible=False),
        goodput=Verdict(eligible=False),
        ttft_seconds=None,
        tpot_seconds=None,
        target_source="none",
        invalid_fields=("ttft_seconds",),
    )
    return RequestRecord(request=joined, evaluation=evaluation, pool="default", prediction_source="none")


# The attributes of violating_record()'s evaluation span, value by value.
VIOLATING_ATTRIBUTES = {
    "sloscope.slo_class": "interactive",
    "sloscope.model": "llama-3-8b",
    "sloscope.pool": "pool-a",
    "sloscope.pod": "vllm-0",
    "sloscope.routing": "predicted",
    "sloscope.request.id": "req-1",
    "sloscope.join.outcome": "joined",
    "sloscope.target_source": "request",
    "sloscope.ttft.target_ms": 200.0,
    "sloscope.ttft.actual_ms": 250.0,
    "sloscope.ttft.source": "gateway",
    "sloscope.ttft.predicted_ms": 180.0,
    "sloscope.ttft.headroom_ms": 20.0,
    "sloscope.ttft.met": False,
    "sloscope.tpot.target_ms": 50.0,
    "sloscope.tpot.actual_ms": 50.0,
    "sloscope.tpot.predicted_ms": 40.0,
    "sloscope.tpot.headroom_ms": 10.0,
    "sloscope.tpot.met": True,
    "sloscope.goodput.met": False,
    "sloscope.violated": ["ttft", "goodput"],
    "sloscope.prediction.source": "shadow",
    "sloscope.prediction.quantile": 0.9,
    "sloscope.pod.waiting": 3.0,
    "sloscope.pod.running": 5.0,
    "sloscope.pod.kv_cache_utilization": 0.42,
    "sloscope.pod.state_age_ms": 700.0,
}


# The attributes of met_record()'s evaluation span: unknown values are left out.
MET_ATTRIBUTES = {
    "sloscope.slo_class": "standard",
    "sloscope.model": "mistral",
    "sloscope.pool": "pool-a",
    "sloscope.pod": "vllm-1",
    "sloscope.routing": "unknown",
    "sloscope.join.outcome": "joined",
    "sloscope.target_source": "request",
    "sloscope.ttft.target_ms": 2000.0,
    "sloscope.ttft.actual_ms": 1500.0,
    "sloscope.ttft.source": "model_server",
    "sloscope.ttft.met": True,
    "sloscope.goodput.met": True,
    "sloscope.prediction.source": "none",
    "sloscope.prediction.skipped": "no_pod_state",
}
