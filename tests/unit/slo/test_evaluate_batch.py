"""The vectorized SLO evaluation against :func:`evaluate`, row by row, and the joined batch's schema."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sloscope import conventions as c
from sloscope.columnar.batch import Batch, FloatColumn, IntColumn, LabelColumn, TextColumn, labels_of, texts_of
from sloscope.loading import default_spec
from sloscope.processors import joined_batch
from sloscope.records import Evaluation, JoinedRequest
from sloscope.slo.evaluate import evaluate
from sloscope.slo.evaluate_batch import TARGET_SOURCES, evaluate_batch
from sloscope.slo.spec import SLOSpec
from tests.support.joined_requests import SPEC, joined_requests


def same(a: Evaluation, b: Evaluation) -> bool:
    """Equal field for field, NaN nowhere (results are None or numbers), floats to the bit."""
    return repr(a) == repr(b) and a == b


@pytest.mark.parametrize("spec", [SPEC, default_spec()], ids=["test spec", "default spec"])
@pytest.mark.parametrize("seed", range(3))
def test_every_verdict_equals_evaluate_row_by_row(spec: SLOSpec, seed: int) -> None:
    requests = joined_requests(seed=seed, count=4000)
    evaluations = evaluate_batch(joined_batch.from_requests(requests), spec).evaluations()
    wrong = [(r, e) for r, e in zip(requests, evaluations, strict=True) if not same(e, evaluate(r, spec))]
    assert wrong == []
    # the generated requests reach every class, target source, failure reason and invalid field
    assert {e.slo_class for e in evaluations} == {*(k.name for k in spec.classes), spec.default_class}
    assert {e.target_source for e in evaluations} >= {"request", "none"}
    assert {r.failure_reason for r in requests} == {None, *c.FAILURE_REASONS}
    assert {f for e in evaluations for f in e.invalid_fields} == set(c.INVALID_FIELDS)
    assert (c.FIELD_COMPLETION_TOKENS, c.FIELD_TTFT_SECONDS) in {e.invalid_fields for e in evaluations}


def test_targets_come_from_headers_else_from_the_class_default() -> None:
    base = JoinedRequest("a" * 32, "b" * 16, "joined", target_model="m", ttft_seconds=0.5, e2e_seconds=1.0)
    rows = [
        dataclasses.replace(base, slo_tpot_ms=40.0),  # streaming: TTFT from its default (2000 ms), TPOT from header
        dataclasses.replace(base, target_model="tiny1"),  # tiny: no header, TPOT default 30 ms
        dataclasses.replace(base, slo_ttft_ms=math.nan, slo_tpot_ms=-1.0),  # invalid headers are no headers
    ]
    verdicts = evaluate_batch(joined_batch.from_requests(rows), SPEC)
    assert [verdicts.class_names[i] for i in verdicts.slo_class] == ["streaming", "tiny", "none"]
    assert [TARGET_SOURCES[i] for i in verdicts.target_source] == ["request", "class_default", "none"]
    assert verdicts.ttft.target.tolist()[:2] == [2.0, pytest.approx(math.nan, nan_ok=True)]
    assert verdicts.tpot.target.tolist()[:2] == [0.04, 0.03]


def test_a_failed_request_is_a_bad_event_for_every_slo_it_carried_and_a_client_error_for_none() -> None:
    base = JoinedRequest("a" * 32, "b" * 16, "joined", slo_ttft_ms=200.0, slo_tpot_ms=50.0, ttft_seconds=0.1)
    reasons = [reason for reason in c.FAILURE_REASONS if reason != c.FAILURE_ABORTED]  # judged by its deadline
    rows = [dataclasses.replace(base, failure_reason=reason) for reason in reasons]
    verdicts = evaluate_batch(joined_batch.from_requests(rows), SPEC)
    bad = [reason != c.FAILURE_INVALID for reason in reasons]
    for slo in c.SLOS:
        assert verdicts.verdict(slo).eligible.tolist() == bad
        assert not verdicts.verdict(slo).met.any()
    assert np.isnan(verdicts.ttft_seconds).all()  # a failed request's latency is no sample
    assert verdicts.ttft.actual.tolist()[0] == 0.1  # what it measured stays on record


def test_the_verdicts_as_an_arrow_record_batch() -> None:
    requests = joined_requests(seed=5, count=50)
    verdicts = evaluate_batch(joined_batch.from_requests(requests), SPEC)
    table = verdicts.to_record_batch()
    assert table.num_rows == 50
    assert table.column("slo_class").to_pylist() == [e.slo_class for e in verdicts.evaluations()]
    assert table.column("goodput_eligible").to_pylist() == [e.goodput.eligible for e in verdicts.evaluations()]
    assert table.column("ttft_seconds").to_pylist() == [e.ttft_seconds for e in verdicts.evaluations()]


def test_the_batch_has_a_column_per_field_and_round_trips_through_objects_and_arrow() -> None:
    fields = dataclasses.fields(JoinedRequest)
    assert list(joined_batch.NAMES) == [f.name for f in fields]
    assert joined_batch.KINDS["slo_ttft_ms"] == (FloatColumn, True)
    assert joined_batch.KINDS["pool"] == (LabelColumn, True)
    assert joined_batch.KINDS["trace_id"] == (TextColumn, False)
    assert joined_batch.KINDS["start_ns"] == (IntColumn, False)
    requests = joined_requests(seed=9, count=300)
    batch = joined_batch.from_requests(requests)
    back = joined_batch.to_requests(batch)
    assert repr(back) == repr(requests)  # NaN and infinities kept as values, None as null
    arrow = joined_batch.to_arrow(batch)  # the joined part of the records
    assert arrow.schema.names == list(joined_batch.NAMES)
    assert repr([JoinedRequest(*row.values()) for row in arrow.to_pylist()]) == repr(requests)
    assert len(joined_batch.from_requests([])) == 0


def test_a_batch_of_other_columns_is_refused_with_its_column_named() -> None:
    batch = joined_batch.from_requests(joined_requests(seed=1, count=3))
    wrong_kind = batch.with_column("slo_ttft_ms", labels_of(["200"] * 3))
    with pytest.raises(ValueError, match="slo_ttft_ms is LabelColumn, not FloatColumn"):
        joined_batch.check(wrong_kind)
    with pytest.raises(ValueError, match="columns"):
        joined_batch.check(Batch(3, {name: column for name, column in batch.columns.items() if name != "pod"}))
    nulls = batch.with_column("trace_id", texts_of([None, "a", "b"]))
    with pytest.raises(ValueError, match="trace_id has 1 null"):
        joined_batch.check(nulls)


def test_the_batch_path_leaves_pyarrow_and_pandas_unimported() -> None:
    """The batch path is numpy columns (sloscope.columnar.batch): pyarrow (39 MiB of serve's resident set with its
    compute kernels) comes only with a record sink, and pandas (which pyarrow imports, when installed, on
    ``pa.array`` or ``to_numpy``: some 30 MiB more) only with the review."""
    script = """
import sys
from prometheus_client import generate_latest
from tests.support.joined_requests import SPEC, joined_requests
from tests.support.stage import stage
evaluator = stage(SPEC)
for size in (1, 299):  # a batch of one is a batch too
    evaluator.publish(*joined_requests(seed=size, count=size))
assert b"sloscope_requests_total" in generate_latest(evaluator.registry)
print(sorted({"pandas", "pyarrow"} & set(sys.modules)))
"""
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "exporter"), str(root)])}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"
