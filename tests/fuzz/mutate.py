"""Hypothesis strategies that damage real inputs: byte and text edits, and edits of parsed JSON trees.

Each strategy draws a seed (a real page or body) and applies a few edits chosen by hypothesis, so a
failure shrinks to the seed with the fewest, smallest edits. Random inputs with no seed are included
too, for the decoders' first bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

__all__ = ["json_bodies", "json_documents", "json_value", "mutated_bytes", "mutated_text", "nasty_json_values"]

# Bytes that mean something to the decoders: protobuf tags and varint continuations, gzip magic, JSON.
_INTERESTING_BYTES = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\x0a", b"\x12", b"\x1f\x8b", b"\x78\x9c", b"{", b"}", b'"']


def _edit(draw: st.DrawFn, data: Any, seeds: Sequence[Any], pieces: st.SearchStrategy[Any]) -> Any:
    """One edit of ``data`` (bytes or str): replace, insert, delete, duplicate, truncate or splice."""
    size = len(data)
    start = draw(st.integers(0, size))
    end = draw(st.integers(start, min(size, start + 64)))
    op = draw(st.sampled_from(["replace", "insert", "delete", "duplicate", "truncate", "splice"]))
    if op == "replace":
        return data[:start] + draw(pieces) + data[end:]
    if op == "insert":
        return data[:start] + draw(pieces) + data[start:]
    if op == "delete":
        return data[:start] + data[end:]
    if op == "duplicate":
        return data[:end] + data[start:end] * draw(st.integers(1, 8)) + data[end:]
    if op == "truncate":
        return data[:start]
    other = draw(st.sampled_from(seeds))
    cut = draw(st.integers(0, len(other)))
    return data[:start] + other[cut:]


@st.composite
def _mutant(draw: st.DrawFn, seeds: Sequence[Any], pieces: st.SearchStrategy[Any], max_edits: int) -> Any:
    data = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, max_edits))):
        data = _edit(draw, data, seeds, pieces)
    return data


def mutated_bytes(seeds: Sequence[bytes], max_edits: int = 4) -> st.SearchStrategy[bytes]:
    """Seeds with a few byte edits, the seeds as they are, and random bytes."""
    pieces = st.one_of(st.binary(min_size=1, max_size=8), st.sampled_from(_INTERESTING_BYTES))
    return st.one_of(
        _mutant(seeds, pieces, max_edits),
        st.sampled_from(seeds),
        st.binary(max_size=256),
    )


def mutated_text(seeds: Sequence[str], tokens: Sequence[str], max_edits: int = 4) -> st.SearchStrategy[str]:
    """Seeds with a few text edits (pieces drawn from ``tokens`` and from any characters), and random text."""
    pieces = st.one_of(
        st.sampled_from(tokens),
        st.text(alphabet=st.sampled_from("".join(tokens)), min_size=1, max_size=6),
        st.text(min_size=1, max_size=3),
    )
    return st.one_of(
        _mutant(seeds, pieces, max_edits), st.text(alphabet=st.sampled_from("".join(tokens)), max_size=200)
    )


# ---- JSON ----------------------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["", "NaN", "Infinity", "-1", "1e999", "00" * 8, "ff" * 16, "prefill", "mean", "quantile"]),
)
json_value = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value (small)."""


@st.composite
def nasty_json_values(draw: st.DrawFn) -> str:
    """JSON text that stresses a decoder rather than a schema: deep nesting, huge numbers, odd literals."""
    kind = draw(st.sampled_from(["deep", "huge_int", "huge_float", "literal", "long_string"]))
    if kind == "deep":
        depth = draw(st.sampled_from([50, 99, 100, 101, 500, 1000, 5000, 50_000]))
        opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('{"kvlistValue":{"values":[', "]}}")]))
        return opening * depth + "1" * (opening == '{"a":') + closing * depth
    if kind == "huge_int":
        return draw(st.sampled_from(["", "-"])) + "9" * draw(st.sampled_from([20, 4300, 4301, 10_000]))
    if kind == "huge_float":
        return draw(st.sampled_from(["1e999", "-1e999", "1e-999", "1" + "0" * 400 + ".5", "1.7976931348623159e308"]))
    if kind == "literal":
        return draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "true", "null", '"\\ud800"']))
    return json.dumps("x" * draw(st.integers(0, 100_000)))


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            out.extend(_paths(child, (*path, key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            out.extend(_paths(child, (*path, index)))
    return out


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, *rest = path
    if isinstance(node, dict):
        return {**node, head: _replace(node[head], tuple(rest), value)}
    copy = list(node)
    copy[head] = _replace(node[head], tuple(rest), value)
    return copy


_RAW = "\x00raw\x00"  # marks a node whose JSON text is spliced in as it is (for text json.dumps cannot write)


@st.composite
def json_documents(draw: st.DrawFn, seeds: Sequence[Any], max_edits: int = 3) -> bytes:
    """Seed documents with a few nodes replaced (by any JSON value, a nasty one, or a near miss), as bytes."""
    document = draw(st.sampled_from(seeds))
    raw: list[str] = []
    for _ in range(draw(st.integers(1, max_edits))):
        path = draw(st.sampled_from(_paths(document)))
        choice = draw(st.sampled_from(["value", "nasty", "drop", "number"]))
        if choice == "value":
            document = _replace(document, path, draw(json_value))
        elif choice == "nasty":
            raw.append(draw(nasty_json_values()))
            document = _replace(document, path, _RAW + str(len(raw) - 1))
        elif choice == "number":
            document = _replace(
                document,
                path,
                draw(st.sampled_from([0, -1, 1.5, 2**63, 2**64, -(2**63) - 1, 1e308, 10**400, -(10**309)])),
            )
        elif path and isinstance(parent := _get(document, path[:-1]), dict):
            document = _replace(document, path[:-1], {k: v for k, v in parent.items() if k != path[-1]})
    text = json.dumps(document)
    for index, piece in enumerate(raw):
        text = text.replace(json.dumps(_RAW + str(index)), piece, 1)
    return text.encode()


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def json_bodies(seeds: Sequence[Any]) -> st.SearchStrategy[bytes]:
    """Bodies for a JSON reader: damaged seed documents, seed bytes with byte edits, and nasty JSON alone."""
    return st.one_of(
        json_documents(seeds),
        mutated_bytes([json.dumps(s).encode() for s in seeds]),
        nasty_json_values().map(str.encode),
    )
