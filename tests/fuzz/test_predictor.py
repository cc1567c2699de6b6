"""Fuzz target: reading the latency predictor's answers (training ``/metrics``, ``/status``, ``/models/list``,
``/predict`` and ``/predict/bulk/strict``), as the health poller and the prediction client read them.

Contract: each reader raises only ``ValueError`` (``ShapeError``, ``ExpositionError``) for a body that is
not the documented shape, which the poller counts as ``parse_error``; the bulk reader of the prediction
client never raises and answers None or one entry per request. Bytes go through ``read_json`` first, as
the callers do. Oracle for the training page: where prometheus_client accepts a damaged page and sloscope
does too, the quantile and the samples held per signal are those of the reference's samples.

Seeds: the captured answers of the llm-d latency predictor (b5d19f17, quantile and mean mode) and of the
late-2025 predictor in ``fixtures/predictor/``.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from sloscope import conventions as c
from sloscope.predictor.client import _parse_bulk, _speaks_objective
from sloscope.predictor.status import parse_last_modified, probe_answer, read_status
from sloscope.predictor.training_page import read_training_page
from sloscope.receivers.http_fetch import read_json
from tests.fuzz.budget import fuzz_settings
from tests.fuzz.mutate import json_bodies, mutated_text
from tests.fuzz.seeds import FIXTURES, TRAINING_PAGES, fixture_jsons, fixture_text


def _models_lists() -> list[Any]:
    """The ``/models/list`` bodies recorded in the training servers' GET transcripts."""
    out = []
    for path in sorted(FIXTURES.glob("predictor/**/training-server-get-endpoints.txt")):
        match = re.search(r"^== GET /models/list -> 200 .*\n(.*)$", path.read_text(), re.MULTILINE)
        if match:
            out.append(json.loads(match.group(1)))
    return out


STATUS = fixture_jsons("predictor/**/*status.json")
MODELS = _models_lists()
PREDICT = [d for d in fixture_jsons("predictor/**/*predict-response*.json") if "ttft_ms" in d]
BULK = fixture_jsons("predictor/**/predict-bulk*response*.json")
READERS: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
    "status": (read_status, STATUS),
    "models": (parse_last_modified, MODELS),
    "predict": (probe_answer, PREDICT),
}
TRAINING = tuple(fixture_text(name) for name in TRAINING_PAGES)
TOKENS = (
    "{",
    "}",
    '"',
    ",",
    "=",
    " ",
    "\n",
    "#",
    "idx",
    'idx="-1"',
    'idx="01"',
    "NaN",
    "+Inf",
    "-1",
    "1e999",
    'model="ttft"',
    'type="mean"',
    'type="median"',
    "_total",
    "ttft_",
    "\\",
)


def test_every_seed_reads() -> None:
    assert len(STATUS) >= 5 and len(MODELS) >= 2 and len(PREDICT) >= 5 and len(BULK) >= 6
    for reader, seeds in READERS.values():
        for document in seeds:
            reader(document)
    for document in BULK:
        result, predictions = _parse_bulk(document, len(document["predictions"]))
        assert result == c.RESULT_SUCCESS and predictions is not None
    for page in TRAINING:
        read_training_page(page)


def _read_or_value_error(reader: Callable[[Any], Any], body: bytes) -> None:
    with contextlib.suppress(ValueError):
        reader(read_json(body))


@fuzz_settings()
@given(which=st.sampled_from(sorted(READERS)), data=st.data())
def test_damaged_documents_read_or_raise_value_error(which: str, data: st.DataObject) -> None:
    reader, seeds = READERS[which]
    body = data.draw(json_bodies(seeds))
    _read_or_value_error(reader, body)


@fuzz_settings()
@given(data=st.data(), size=st.integers(0, 4))
def test_damaged_bulk_answers_give_none_or_one_entry_per_request(data: st.DataObject, size: int) -> None:
    body = data.draw(json_bodies(BULK))
    try:
        document = read_json(body)
    except ValueError:
        return  # counted parse_error by the client
    result, predictions = _parse_bulk(document, size)
    assert result in (c.RESULT_SUCCESS, c.RESULT_PARSE_ERROR, c.RESULT_INVALID_ANSWER)
    if predictions is None:
        assert result != c.RESULT_SUCCESS
        return
    assert len(predictions) == size
    for prediction in predictions:
        if prediction is not None:  # an answer out of range is discarded whole (invalid_answer)
            assert math.isfinite(prediction.ttft_ms) and prediction.ttft_ms >= 0
            assert math.isfinite(prediction.tpot_ms) and prediction.tpot_ms >= 0
    if isinstance(document, dict) and isinstance(document.get("predictions"), list):
        _speaks_objective(document)


def _reference(text: str) -> tuple[float | None, dict[str, float]] | None:
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except Exception:  # the oracle refuses
        return None
    quantiles = [float(s.value) for s in samples if s.name == "model_quantile"]
    held: dict[str, float] = {}
    for s in samples:
        model = s.labels.get("model")
        if s.name == "training_samples_count" and model in c.SIGNALS and s.value >= 0:
            held[model] = held.get(model, 0.0) + float(s.value)
    return (quantiles[0] if quantiles else None), held


@fuzz_settings()
@given(text=mutated_text(TRAINING, TOKENS), openmetrics=st.booleans())
def test_damaged_training_pages_read_or_raise_value_error(text: str, openmetrics: bool) -> None:
    try:
        page = read_training_page(text, openmetrics)
    except ValueError:
        return
    expected = None if openmetrics else _reference(text)
    if expected is not None:
        quantile, held = expected
        assert page.quantile == quantile or (
            page.quantile is not None and quantile is not None and math.isnan(page.quantile) and math.isnan(quantile)
        )
        assert dict(page.samples) == held
