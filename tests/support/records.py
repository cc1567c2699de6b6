"""Request records built through the real evaluator, for tests of the record sinks."""

from __future__ import annotations

from typing import Any

from sloscope.loading import default_spec
from sloscope.records import JoinedRequest, PodStateAtArrival, RequestRecord
from sloscope.slo.evaluate import evaluate

HOUR_NS = 3_600_000_000_000
BASE_NS = 1_796_032_800 * 1_000_000_000  # 2026-11-30T10:00:00Z, the start of an hour


def joined(n: int = 0, *, end_ns: int | None = None, **fields: Any) -> JoinedRequest:
    """A joined interactive request: TTFT 0.2 s against 500 ms, TPOT 0.03 s against 50 ms, unless overridden."""
    end = end_ns if end_ns is not None else BASE_NS + (n + 1) * 1_000_000_000
    values: dict[str, Any] = {
        "trace_id": f"{n:032x}",
        "span_id": f"{n:016x}",
        "outcome": "joined",
        "request_id": f"req-{n}",
        "requested_model": "llama",
        "target_model": "llama",
        "pool": "pool-a",
        "pod": "vllm-0",
        "endpoint": "10.0.0.1:8000",
        "slo_ttft_ms": 500.0,
        "slo_tpot_ms": 50.0,
        "routing": "predicted",
        "ttft_seconds": 0.2,
        "ttft_source": "gateway",
        "server_ttft_seconds": 0.2,
        "e2e_seconds": 0.5,
        "queue_seconds": 0.05,
        "prefill_seconds": 0.15,
        "decode_seconds": 0.3,
        "prompt_tokens": 100.0,
        "completion_tokens": 11.0,
        "start_ns": end - 500_000_000,
        "end_ns": end,
        "arrival_ns": end - 510_000_000,
    }
    values.update(fields)
    return JoinedRequest(**values)


def record(
    n: int = 0, *, end_ns: int | None = None, pod_state: PodStateAtArrival | None = None, **fields: Any
) -> RequestRecord:
    request = joined(n, end_ns=end_ns, **fields)
    return RequestRecord(
        request,
        evaluate(request, default_spec()),
        pool=request.pool or "unknown",
        prediction_source="none",
        pod_state=pod_state,
    )
