"""The numpy batch (``sloscope/columnar/batch.py``): rows taken, filtered and put together keep every value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sloscope.columnar.batch import (
    Batch,
    FloatColumn,
    IntColumn,
    LabelColumn,
    labels_of,
    texts_of,
)

NAN = float("nan")


def batch_of(floats: list[float | None], ints: list[int], labels: list[str | None], texts: list[str | None]) -> Batch:
    return Batch(
        len(ints),
        {
            "f": FloatColumn.of(floats),
            "i": IntColumn(np.array(ints, dtype=np.int64)),
            "l": labels_of(labels),
            "t": texts_of(texts),
        },
    )


def rows(batch: Batch) -> list[tuple[object, ...]]:
    """Each row's values, NaN as a string so that rows compare equal."""
    columns = [batch.pylist(name) for name in batch.names]
    return [
        tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row) for row in zip(*columns, strict=True)
    ]


def test_taken_rows_keep_nan_apart_from_none_and_labels_in_order_of_first_appearance() -> None:
    batch = batch_of(
        [0.5, None, NAN, 2.0],
        [10, 11, 12, 13],
        ["vllm-0", None, "vllm-1", "vllm-0"],
        ["chatcmpl-1", None, "", "é→✓"],
    )
    taken = batch.take(np.array([3, 2, 1, 3]))
    assert rows(taken) == [
        (2.0, 13, "vllm-0", "é→✓"),
        ("nan", 12, "vllm-1", ""),
        (None, 11, None, None),
        (2.0, 13, "vllm-0", "é→✓"),
    ]
    assert taken.held("f").tolist() == [True, True, False, True]
    labels = taken.labels("l")
    assert (labels.codes.tolist(), labels.values) == ([0, 1, -1, 0], ["vllm-0", "vllm-1"])
    assert taken.texts("t", [3, 0]) == ["é→✓", "é→✓"]


def test_labels_taken_drop_the_values_no_row_uses_any_more() -> None:
    batch = batch_of([None] * 4, [0] * 4, ["a", "b", "c", "b"], [None] * 4)
    labels = batch.filter(np.array([False, False, True, True])).labels("l")
    assert (labels.codes.tolist(), labels.values) == ([0, 1], ["c", "b"])


def test_a_label_column_rebuilt_with_a_value_twice_reads_it_once() -> None:
    rebuilt = LabelColumn(np.array([2, 0, -1, 1, 2]), ["pool-a", "pool-b", "pool-a"], ordered=False)
    batch = Batch(5, {"l": rebuilt})
    assert batch.coded("l")[0].tolist() == [0, 0, -1, 1, 0]
    assert batch.coded("l")[1] == ["pool-a", "pool-b"]
    assert batch.pylist("l") == ["pool-a", "pool-a", None, "pool-b", "pool-a"]


def test_filter_of_every_row_is_the_batch_itself_and_slice_stops_at_its_end() -> None:
    batch = batch_of([1.0, 2.0], [1, 2], ["a", "b"], ["x", "y"])
    assert batch.filter(np.array([True, True])) is batch
    assert rows(batch.slice(1, 5)) == [(2.0, 2, "b", "y")]


def test_a_column_of_another_length_or_kind_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="column l has 1 rows, the batch 2"):
        Batch(2, {"l": labels_of(["a"])})
    batch = batch_of([1.0], [1], ["a"], ["x"])
    with pytest.raises(TypeError, match="column l is LabelColumn, not FloatColumn"):
        batch.floats("l")
    with pytest.raises(KeyError):
        batch.with_column("missing", LabelColumn(np.zeros(1, dtype=np.intp), ["a"]))


def test_floats_read_are_a_copy_and_a_replaced_column_changes_only_itself() -> None:
    batch = batch_of([1.0, None], [1, 2], ["a", "b"], ["x", "y"])
    values = batch.floats("f")
    values[0] = 9.0
    assert batch.pylist("f") == [1.0, None]
    replaced = batch.with_column("l", labels_of(["c", None]))
    assert rows(replaced) == [(1.0, 1, "c", "x"), (None, 2, None, "y")]
    assert rows(batch) == [(1.0, 1, "a", "x"), (None, 2, "b", "y")]


_texts = st.one_of(st.none(), st.text(max_size=6))
_labels = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "pod-é"]))
_floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
_row = st.tuples(_floats, st.integers(-(2**63), 2**63 - 1), _labels, _texts)


@given(st.lists(_row, max_size=12), st.data())
def test_any_rows_taken_from_a_batch_are_those_rows_with_label_values_in_order(
    given_rows: list[tuple], data: st.DataObject
) -> None:
    batch = batch_of(*map(list, zip(*given_rows, strict=True))) if given_rows else batch_of([], [], [], [])
    expected = rows(batch)
    assert expected == [
        tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row) for row in given_rows
    ]
    picked = data.draw(st.lists(st.integers(0, len(expected) - 1), max_size=12)) if expected else []
    taken = batch.take(np.array(picked, dtype=np.intp))
    assert rows(taken) == [expected[i] for i in picked]
    labels = taken.labels("l")
    seen = [v for v in taken.pylist("l") if v is not None]
    assert labels.values == list(dict.fromkeys(seen))
