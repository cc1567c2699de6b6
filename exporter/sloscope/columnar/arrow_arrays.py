"""Arrow arrays of the records (the record store's and the OTLP export's), to numpy and back through their buffers,
never through pyarrow's pandas shim. The batch path itself is numpy (:mod:`sloscope.columnar.batch`): this module,
and pyarrow with it, is imported only where records are built or kept.

``pyarrow.array``, ``Array.to_numpy`` and Python scalars passed to ``pyarrow.compute`` all ask pyarrow's
pandas shim whether their argument is a pandas object, which imports pandas when it is installed (the
``review`` extra): some 30 MiB of resident memory in ``serve`` for nothing. Building arrays from buffers
(``Array.from_buffers``) and reading their buffers with ``numpy.frombuffer`` does the same work without it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sloscope.columnar.batch import FloatColumn
from sloscope.columnar.columns import Codes, Floats, Mask


def present(array: pa.Array) -> Mask:
    """Rows that are not null."""
    n = len(array)
    bitmap = array.buffers()[0]
    if bitmap is None or not array.null_count:
        return np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[array.offset : array.offset + n].astype(bool)


def floats(array: pa.Array) -> Floats:
    """A float64 array's values, null as NaN (a copy: the caller may write to it)."""
    data = np.frombuffer(array.buffers()[1], dtype=np.float64, count=len(array), offset=array.offset * 8).copy()
    if array.null_count:
        data[~present(array)] = np.nan
    return data


def ints(array: pa.Array) -> npt.NDArray[np.int64]:
    """A non-null int64 array's values (a view of its buffer: read only)."""
    return np.frombuffer(array.buffers()[1], dtype=np.int64, count=len(array), offset=array.offset * 8)


def bools(array: pa.Array) -> Mask:
    """A boolean array's values, null as False."""
    n = len(array)
    if not n:
        return np.zeros(0, dtype=bool)
    bits = np.unpackbits(np.frombuffer(array.buffers()[1], dtype=np.uint8), bitorder="little")
    values: Mask = bits[array.offset : array.offset + n].astype(bool)
    return values & present(array) if array.null_count else values


def nonempty(array: pa.Array) -> Mask:
    """Rows of a string array that hold a string of at least one character (null and "" do not)."""
    n = len(array)
    if not n:
        return np.zeros(0, dtype=bool)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=array.offset * 4)
    held: Mask = np.diff(offsets) > 0
    return held & present(array) if array.null_count else held


def float_array(values: Floats, null: Mask | None = None) -> pa.Array:
    """float64 values as an array, null where ``null`` (NaN stays a value otherwise)."""
    data = np.ascontiguousarray(values, dtype=np.float64)
    return pa.Array.from_buffers(pa.float64(), len(data), [_bitmap(null), pa.py_buffer(data)])


def float_column(column: FloatColumn) -> pa.Array:
    """A batch's float column as an array, null in the rows that hold no value."""
    return float_array(column.values, ~column.held)


def int_array(values: npt.ArrayLike, null: Mask | None = None) -> pa.Array:
    """int64 values as an array, null where ``null``."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [_bitmap(null), pa.py_buffer(data)])


def dictionary_array(codes: Codes, values: Sequence[str]) -> pa.Array:
    """Codes into ``values`` as a dictionary array (how a column of a few distinct strings is best held)."""
    indices = np.ascontiguousarray(codes, dtype=np.int32)
    index_array = pa.Array.from_buffers(pa.int32(), len(indices), [None, pa.py_buffer(indices)])
    return pa.DictionaryArray.from_arrays(index_array, string_array(values))


def bool_array(values: Mask, null: Mask | None = None) -> pa.Array:
    """Booleans as an array, null where ``null``."""
    bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [_bitmap(null), pa.py_buffer(bits)])


def string_array(values: Sequence[str | None]) -> pa.Array:
    """Python strings (None: null) as a string array."""
    null = _nulls(values)
    texts: Sequence[str] = [v or "" for v in values] if null.any() else values  # type: ignore[assignment]  # no None left
    encoded = list(map(str.encode, texts))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(list(map(len, encoded)), out=offsets[1:])
    data = pa.py_buffer(b"".join(encoded))
    return pa.Array.from_buffers(pa.string(), len(values), [_bitmap(null), pa.py_buffer(offsets), data])


def coded_strings(codes: Codes, values: Sequence[str]) -> pa.Array:
    """Codes into ``values`` (-1: null) as a string array: what :func:`strings` reads, written back."""
    return string_array(values).take(int_array(np.maximum(codes, 0), null=codes < 0))


def text_array(offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8], held: Mask) -> pa.Array:
    """UTF-8 ``data`` cut at ``offsets`` (a text column of the numpy batch) as a string array, null where not held."""
    return pa.Array.from_buffers(
        pa.string(), len(held), [_bitmap(~held), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def string_lists(lists: Sequence[Sequence[str]]) -> pa.Array:
    """Lists of strings (none null) as a list array."""
    offsets = np.zeros(len(lists) + 1, dtype=np.int32)
    np.cumsum(list(map(len, lists)), out=offsets[1:])
    values = string_array([value for one in lists for value in one])
    index_array = pa.Array.from_buffers(pa.int32(), len(offsets), [None, pa.py_buffer(offsets)])
    return pa.ListArray.from_arrays(index_array, values)


def optional_floats(values: Sequence[float | None]) -> pa.Array:
    """Python floats (None: null; NaN and infinities stay values) as a float64 array."""
    return float_array(np.array(values, dtype=np.float64), _nulls(values))  # None becomes NaN, then null


def _nulls(values: Sequence[object]) -> Mask:
    return np.fromiter((v is None for v in values), dtype=bool, count=len(values))


def _bitmap(null: Mask | None) -> pa.Buffer | None:
    if null is None or not null.any():
        return None
    return pa.py_buffer(np.packbits(~null, bitorder="little"))
