"""The batch group-by (columnar/columns.py) against the plain Python one: rows numbered by their label
combination in order of first appearance, whether the combinations are numbered by a table (few) or sorted
(many)."""

from __future__ import annotations

import numpy as np
import pytest

from sloscope.columnar.columns import appearance, group, stable_order


def reference(columns: list[list[int]], selected: list[bool]) -> tuple[list[int], list[int], list[int]]:
    """Per row its group (-1: not selected), per group its first row and its count: one row at a time."""
    index: dict[tuple[int, ...], int] = {}
    ids, first, counts = [], [], []
    for row, key in enumerate(zip(*columns, strict=True)):
        if not selected[row]:
            ids.append(-1)
            continue
        if key not in index:
            index[key] = len(index)
            first.append(row)
            counts.append(0)
        ids.append(index[key])
        counts[index[key]] += 1
    return ids, first, counts


@pytest.mark.parametrize("radix", [3, 40, 5000])  # 3**3 and 40**3 combinations fit the table; 5000**3 are sorted
def test_group_numbers_combinations_by_first_appearance(radix: int) -> None:
    rng = np.random.default_rng(radix)
    n = 2000
    columns = [rng.integers(0, radix, n).astype(np.intp) for _ in range(3)]
    selected = rng.random(n) < 0.8
    groups = group(columns, selected)
    ids, first, counts = reference([c.tolist() for c in columns], selected.tolist())
    assert groups.ids.tolist() == ids
    assert groups.first.tolist() == first
    assert groups.counts == counts
    by_group = sorted((i, row) for row, i in enumerate(ids) if i >= 0)
    assert groups.rows().tolist() == [row for _, row in by_group]  # by group, then by row


def test_appearance_recodes_values_in_order_of_first_use() -> None:
    column = appearance(np.array([2, 2, 0, 3, 0, 2], dtype=np.intp), ["a", "b", "c", "d"])
    assert column.values == ["c", "a", "d"]  # "b" is never used
    assert column.codes.tolist() == [0, 0, 1, 2, 1, 0]


@pytest.mark.parametrize("size", [7, 40_000])  # int16 (radix sort) and wider keys
def test_stable_order_is_a_stable_argsort(size: int) -> None:
    keys = np.random.default_rng(size).integers(0, size, 5000).astype(np.intp)
    assert stable_order(keys, size).tolist() == sorted(range(len(keys)), key=lambda i: int(keys[i]))
