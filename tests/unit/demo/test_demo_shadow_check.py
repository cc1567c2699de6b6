"""The demo's shadow check: sloscope's shadow predictions set beside the router's, request by request."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from sloscope.demo import truth
from sloscope.demo.records import Completion, SimRequest
from sloscope.demo.shadow_check import agreement, format_strays, pairs, read_shadows, strays
from sloscope.demo.truth import RECENT_PREDICTIONS, GroundTruth, Outcome, RoutedPrediction
from sloscope.predictor.features import Features
from sloscope.store.files import write_atomic
from sloscope.store.schema import SCHEMA


def _routed(predicted: float, actual: float, pod: str = "vllm-0") -> RoutedPrediction:
    return RoutedPrediction(pod=pod, arrival=100.0, signal="ttft", predicted=predicted, actual=actual)


def _row(request_id: str, ttft: float | None, tpot: float | None = None, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "request_id": request_id,
        "pod": "vllm-0",
        "prediction_source": "shadow",
        "predicted_ttft_seconds": ttft,
        "predicted_tpot_seconds": tpot,
        "pod_waiting": 2.0,
        "pod_running": 5.0,
        "pod_state_age_seconds": 0.25,
    }
    row.update(extra)
    return row


def test_the_requests_whose_shadow_strayed_farthest_beyond_the_router_come_first() -> None:
    routed = {
        ("a", "ttft"): _routed(0.50, 0.52),  # router 0.02 off
        ("b", "ttft"): _routed(0.30, 0.31),  # router 0.01 off
        ("c", "ttft"): _routed(0.40, 0.40),
    }
    shadows = [_row("a", 0.50), _row("b", 0.91), _row("c", 0.35), _row("unknown", 1.0)]
    found = strays(routed, shadows, worst=2)
    assert [(s.request_id, round(s.gap, 6)) for s in found] == [("b", 0.59), ("c", 0.05)]
    assert found[0].pod_state_age == 0.25 and found[0].pod_waiting == 2.0 and found[0].sloscope_pod == "vllm-0"


def test_late_2025_ids_match_without_vllms_cmpl_prefix_and_both_signals_are_read() -> None:
    routed = {
        ("r1", "ttft"): _routed(0.5, 0.6),
        ("r1", "tpot"): RoutedPrediction("vllm-1", 100.0, "tpot", 0.020, 0.025, waiting=0, running=7),
    }
    found = strays(routed, [_row("cmpl-r1", 0.9, 0.021, pod_state_age_seconds=None)])
    assert [(s.signal, round(s.gap, 6)) for s in found] == [("ttft", 0.2), ("tpot", -0.001)]
    assert format_strays(found).splitlines() == [
        "ttft cmpl-r1: actual 0.6000 router 0.5000 (pod vllm-0, waiting ?, running ?) shadow 0.9000 (pod vllm-0, "
        "waiting 2, running 5, state ? old) gap +0.2000",
        "tpot cmpl-r1: actual 0.0250 router 0.0200 (pod vllm-1, waiting 0, running 7) shadow 0.0210 (pod vllm-0, "
        "waiting 2, running 5, state ? old) gap -0.0010",
    ]


def _on(predicted: float, waiting: int = 2, running: int = 5, kv: float = 0.25) -> RoutedPrediction:
    return RoutedPrediction("vllm-0", 100.0, "ttft", predicted, 0.3, waiting, running, kv)


def test_agreement_counts_the_requests_given_the_routers_pod_state() -> None:
    routed = {
        ("a", "ttft"): _on(0.40),  # same state, same prediction: identical
        ("b", "ttft"): _on(0.40),  # same state, another prediction: a mismatch (the model was meant to be fixed)
        ("c", "ttft"): _on(0.40, waiting=0),  # sloscope saw 2 waiting
        ("d", "ttft"): _on(0.40, kv=0.5),  # another KV-cache utilization
        ("e", "ttft"): _on(0.40),  # not in the measured phase
        ("f", "ttft"): RoutedPrediction("vllm-0", 100.0, "ttft", 0.4, 0.3),  # the router's state unknown
    }
    kv = {"pod_kv_cache_utilization": 0.25}
    shadows = [
        _row("cmpl-a", 0.4 * (1 + 1e-12), **kv),
        _row("b", 0.41, **kv),
        _row("c", 0.4, **kv),
        _row("d", 0.4, **kv),
        _row("e", 0.4, **kv),
        _row("f", 0.4, **kv),
        _row("g", 0.4, **kv),  # no router prediction
    ]
    found = agreement(pairs(routed, shadows), "ttft", {"a", "b", "c", "d", "f", "g"})
    assert (found.compared, found.identical) == (5, 1)
    # the queue the router saw: a, b and d (c's differed; the router did not say f's)
    assert [s.request_id for s in found.same_queue] == ["cmpl-a", "b", "d"]
    shadow, router = found.mean_absolute_errors()
    assert (shadow, router) == (pytest.approx((0.1 + 0.11 + 0.1) / 3), pytest.approx(0.1))
    assert [s.request_id for s in found.mismatched] == ["b"]
    assert agreement(pairs(routed, shadows), "tpot", {"a"}).compared == 0


def test_nothing_to_compare_says_so() -> None:
    assert format_strays(strays({}, [_row("a", 0.5)])) == "(no request has both a shadow and a router prediction)"


def test_shadow_rows_are_read_from_the_record_store(tmp_path: Path) -> None:
    hour = datetime(2026, 12, 3, 14, tzinfo=UTC)
    end = datetime(2026, 12, 3, 14, 30, tzinfo=UTC)
    columns = {field.name: [None, None] for field in SCHEMA}
    columns.update(
        schema_version=[1, 1],
        request_id=["a", "b"],
        pod=["vllm-0", "vllm-1"],
        end_time=[end, end],
        prediction_source=["shadow", "span"],
        predicted_ttft_seconds=[0.5, 0.7],
    )
    write_atomic(tmp_path, hour, pa.Table.from_pydict(columns, schema=SCHEMA), end, "replica-0")
    rows = read_shadows(tmp_path)
    assert [(r["request_id"], r["pod"], r["predicted_ttft_seconds"]) for r in rows] == [("a", "vllm-0", 0.5)]


def test_the_truth_keeps_the_last_predictions_by_request_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(truth, "RECENT_PREDICTIONS", 2)
    ground = GroundTruth(default_class="standard")
    for i in range(3):
        request = SimRequest(f"r{i}", "interactive", "m", 10, 5, 500.0, 50.0, arrival=100.0 + i)
        completion = Completion("vllm-0", 100.0 + i, 100.1 + i, 100.3 + i, 100.7 + i, 10, 5)
        state = Features(
            0.5, 10, num_request_waiting=i, num_request_running=4 + i, num_tokens_generated=1, prefix_cache_score=0.0
        )
        ground.add(Outcome(request, completion, "predicted", 250.0, None, routed_on=state if i else None))
    kept = ground.routed()
    assert list(kept) == [("r1", "ttft"), ("r2", "ttft")]
    # with the pod state the router predicted from
    assert kept[("r2", "ttft")] == RoutedPrediction("vllm-0", 102.0, "ttft", 0.25, pytest.approx(0.3), 2, 6, 0.5)
    assert RECENT_PREDICTIONS == 50_000
