"""Reading the predictor servers' health bodies: the recorded fixtures, and the cases they leave open."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sloscope.predictor.status import (
    newest_coverage,
    parse_last_modified,
    parse_status,
    parse_training_metrics,
    parse_training_samples,
    probe_answer,
    read_status,
)
from sloscope.receivers.http_fetch import read_json


def predictor_fixture(shared: Path, name: str) -> str:
    return (shared / "fixtures" / "predictor" / name).read_text()


def recorded_get(shared: Path, path: str) -> str:
    """One body of training-server-get-endpoints.txt (a line ``== GET <path>`` before it)."""
    lines = predictor_fixture(shared, "training-server-get-endpoints.txt").splitlines()
    return lines[lines.index(f"== GET {path}") + 1]


def test_coverage_and_quantile_from_the_recorded_training_metrics_page(shared: Path) -> None:
    quantile, coverage = parse_training_metrics(predictor_fixture(shared, "training-server-metrics-xgboost.txt"))
    assert quantile == 0.9
    assert coverage == {"ttft": 86.909091 / 100, "tpot": 90.526316 / 100}
    assert coverage == {"ttft": 0.86909091, "tpot": 0.90526316}


def ring(values: dict[int, float], family: str = "ttft_coverage_percent") -> str:
    return "".join(f'{family}{{idx="{idx}"}} {value:.6f}\n' for idx, value in values.items())


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        pytest.param(ring({0: 80.0, 1: 85.0, 2: 90.0}), 0.9, id="the highest idx is the newest evaluation"),
        pytest.param(
            ring({3: 88.0, 0: 70.0, 4: 91.0, 1: 75.0, 2: 80.0}), 0.91, id="line order does not matter, idx does"
        ),
        pytest.param(ring({0: 50.0, 10: 60.0, 9: 99.0}), 0.6, id="idx compares as a number, not as text"),
        pytest.param(ring({0: 100.0}), 1.0, id="one evaluation"),
    ],
)
def test_the_newest_coverage_of_a_ring(page: str, expected: float) -> None:
    _, coverage = parse_training_metrics(page + ring({0: 90.0}, "tpot_coverage_percent"))
    assert coverage == {"ttft": expected, "tpot": 0.9}


def test_a_page_without_rings_has_no_coverage_and_no_quantile() -> None:
    # After /flush the training server's rings are empty and it writes no coverage lines.
    assert parse_training_metrics('model_type{type="xgboost"} 1\ntarget_coverage_percent{} 90.0\n') == (None, {})


def test_similar_families_are_not_taken_for_coverage() -> None:
    page = ring({0: 80.0}, "ttft_coverage_percent_total") + ring({5: 10.0}, "ttft_violation_rate_percent")
    assert parse_training_metrics(page) == (None, {})


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({"idx": "x"}, id="idx not a number"),
        pytest.param({"idx": "-1"}, id="negative idx"),
        pytest.param({"idx": "\u00b2"}, id="a digit that int() refuses"),
        pytest.param({}, id="no idx"),
    ],
)
def test_a_coverage_sample_without_a_usable_idx_is_an_error(labels: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        newest_coverage([({"idx": "0"}, 1.0), (labels, 2.0)])


def test_a_malformed_coverage_line_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_training_metrics('ttft_coverage_percent{idx="0"} high\n')


def test_model_write_times_from_the_recorded_models_list(shared: Path) -> None:
    written = parse_last_modified(json.loads(recorded_get(shared, "/models/list")))
    assert written == {
        "ttft": datetime(2026, 11, 30, 10, 22, 8, 208881, tzinfo=UTC).timestamp(),
        "tpot": datetime(2026, 11, 30, 10, 22, 8, 407796, tzinfo=UTC).timestamp(),
    }


def models_list(ttft: object, tpot: object = None) -> dict[str, object]:
    def entry(stamp: object) -> dict[str, object]:
        return {"exists": stamp is not None, "size_bytes": 1 if stamp else 0, "last_modified": stamp}

    return {"models": {"ttft": entry(ttft), "tpot": entry(tpot)}, "model_type": "xgboost", "quantile": 0.9}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param(models_list(None, None), {}, id="no model yet: no write time"),
        pytest.param(
            models_list("2026-11-30T12:22:08+02:00"),
            {"ttft": datetime(2026, 11, 30, 10, 22, 8, tzinfo=UTC).timestamp()},
            id="another offset",
        ),
        pytest.param(
            models_list("2026-11-30T10:22:08Z"),
            {"ttft": datetime(2026, 11, 30, 10, 22, 8, tzinfo=UTC).timestamp()},
            id="Z for UTC",
        ),
        pytest.param(
            models_list("2026-11-30T10:22:08"),
            {"ttft": datetime(2026, 11, 30, 10, 22, 8, tzinfo=UTC).timestamp()},
            id="no offset is read as UTC",
        ),
        pytest.param({"models": {}}, {}, id="no signal listed"),
    ],
)
def test_model_write_times(document: object, expected: dict[str, float]) -> None:
    assert parse_last_modified(document) == expected


@pytest.mark.parametrize(
    "document",
    [
        pytest.param([], id="not an object"),
        pytest.param({"model_type": "xgboost"}, id="no models"),
        pytest.param({"models": {"ttft": "yes"}}, id="entry not an object"),
        pytest.param(models_list(1764000000), id="a number for a timestamp"),
        pytest.param(models_list("yesterday"), id="not ISO 8601"),
    ],
)
def test_a_models_list_of_another_shape_is_an_error(document: object) -> None:
    with pytest.raises(ValueError):
        parse_last_modified(document)


def test_status_from_the_recorded_body(shared: Path) -> None:
    assert parse_status(json.loads(predictor_fixture(shared, "prediction-server-status.json"))) == (True, 0.9)


def test_a_status_says_whether_its_predictor_states_an_objective(shared: Path) -> None:
    """The llm-d predictor's /status carries objective_type (prediction_server.py:966-995 at b5d19f1), the
    late-2025 GIE one's does not (fixtures/predictor/): read at the first health poll, before any shadow call."""
    llm_d = json.loads((shared / "fixtures/predictor/llm-d/mean/prediction-server-status.json").read_text())
    late = json.loads(predictor_fixture(shared, "prediction-server-status.json"))
    assert (read_status(llm_d).states_objective, read_status(llm_d).objective) == (True, "mean")
    assert (read_status(late).states_objective, read_status(late).objective) == (False, "quantile")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param({"is_ready": False, "quantile": 0.95}, (False, 0.95), id="not ready still tells its quantile"),
        pytest.param({"is_ready": True}, (True, None), id="no quantile"),
    ],
)
def test_status(document: object, expected: tuple[bool, float | None]) -> None:
    assert parse_status(document) == expected


@pytest.mark.parametrize(
    "document",
    [
        pytest.param({"quantile": 0.9}, id="no is_ready"),
        pytest.param({"is_ready": "true", "quantile": 0.9}, id="is_ready a string"),
        pytest.param({"is_ready": True, "quantile": "p90"}, id="quantile not a number"),
        # LATENCY_QUANTILE_ALPHA is a probability (prediction/prediction_server.py:78, llm-d-latency-predictor b5d19f1)
        pytest.param({"is_ready": True, "quantile": 90}, id="quantile 90 for 0.9"),
        pytest.param({"is_ready": True, "quantile": float("nan")}, id="quantile NaN"),
        pytest.param(None, id="null"),
        # Found by tests/fuzz/test_predictor.py: float() of an integer beyond the largest float raised
        # OverflowError, which the health poller does not catch.
        pytest.param({"is_ready": True, "quantile": 10**400}, id="an integer too large for a float"),
    ],
)
def test_a_status_of_another_shape_is_an_error(document: object) -> None:
    with pytest.raises(ValueError):
        parse_status(document)


def test_training_samples_are_summed_per_model_over_their_buckets(shared: Path) -> None:
    page = predictor_fixture(shared, "training-server-metrics-xgboost.txt")
    # the fixture keeps the first 6 of 800 bucket lines, all of the ttft model: 17 + 4 + 6 + 15 + 11 + 11
    assert parse_training_samples(page) == {"ttft": 64.0}
    page += 'training_samples_count{model="tpot",queue_bucket="0",cache_bucket="0",prefix_bucket="0"} 9\n'
    assert parse_training_samples(page) == {"ttft": 64.0, "tpot": 9.0}
    assert parse_training_samples("model_quantile{} 0.9\n") == {}


def test_a_recorded_probe_answer_is_read(shared: Path) -> None:
    document = json.loads(predictor_fixture(shared, "llm-d/quantile/predict-response-old-fields.json"))
    ttft, tpot, objective = probe_answer(document)
    assert (ttft, tpot, objective) == (document["ttft_ms"], document["tpot_ms"], "quantile")


@pytest.mark.parametrize(
    "fields",
    [
        # the server clips at 0 (prediction/prediction_server.py:1002-1003 at llm-d-latency-predictor b5d19f1)
        pytest.param({"ttft_ms": -1.0}, id="negative ttft"),
        pytest.param({"tpot_ms": float("inf")}, id="infinite tpot"),
        pytest.param({"ttft_ms": float("nan")}, id="NaN ttft"),
        pytest.param({"quantile": 90}, id="quantile 90"),
    ],
)
def test_a_probe_answer_out_of_range_is_an_error(shared: Path, fields: dict[str, float]) -> None:
    document = json.loads(predictor_fixture(shared, "llm-d/quantile/predict-response-old-fields.json"))
    with pytest.raises(ValueError):
        probe_answer({**document, **fields})


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[" * 100_000, id="nested too deeply"),  # RecursionError from json.loads
        pytest.param(b'{"is_ready":' + b"9" * 5000 + b"}", id="an integer of 5000 digits"),
        pytest.param(b"\xff", id="not UTF-8"),
    ],
)
def test_an_unreadable_json_answer_is_a_value_error(body: bytes) -> None:
    # The poller's JSON GETs and /predict probes, and the prediction client, catch ValueError only.
    with pytest.raises(ValueError, match=r"nested too deeply|4300|utf-8"):
        read_json(body)


def test_a_probe_answer_with_an_integer_too_large_for_a_float_is_an_error() -> None:
    with pytest.raises(ValueError, match="no numeric ttft_ms and tpot_ms"):
        probe_answer({"ttft_ms": 10**400, "tpot_ms": 1})
