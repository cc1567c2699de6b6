"""Fuzz target: ``decompress`` (the ``Content-Encoding`` of OTLP/HTTP bodies).

Contract: a body comes back decompressed whole, or is refused with :class:`MalformedPayloadError` or
:class:`PayloadTooLargeError`, nothing else; never more than the limit. Oracles: Python's ``gzip`` and
``zlib`` modules. A gzip body made of any number of members decompresses to their concatenation (as Go's
``gzip.Reader``, the Collector's, reads it); whatever sloscope accepts, ``gzip.decompress`` (which reads
members the same way, and also skips zero padding) reads to the same bytes.
"""

from __future__ import annotations

import gzip
import zlib

from hypothesis import given
from hypothesis import strategies as st

from sloscope.receivers.otlp_decode import MalformedPayloadError, PayloadTooLargeError, decompress
from tests.fuzz.budget import fuzz_settings
from tests.fuzz.mutate import mutated_bytes
from tests.fuzz.seeds import json_bodies, protobuf_bodies

_PAYLOADS = (*protobuf_bodies(), *json_bodies(), b"", bytes(3000))
_ENCODINGS = st.sampled_from(["gzip", "deflate", "", "identity", " GZIP ", "br", "x-gzip"])


def _compress(payload: bytes, encoding: str, level: int) -> bytes:
    if encoding == "gzip":
        return gzip.compress(payload, compresslevel=level, mtime=0)
    return zlib.compress(payload, level)


_SEEDS = tuple(_compress(p, e, 6) for p in _PAYLOADS for e in ("gzip", "deflate"))

members = st.lists(st.sampled_from(_PAYLOADS) | st.binary(max_size=64), min_size=1, max_size=4)


@fuzz_settings()
@given(parts=members, level=st.integers(0, 9), limit=st.integers(0, 12_000))
def test_gzip_members_decompress_to_their_concatenation_within_the_limit(
    parts: list[bytes], level: int, limit: int
) -> None:
    body = b"".join(_compress(p, "gzip", level) for p in parts)
    whole = b"".join(parts)
    if len(whole) > limit:
        try:
            decompress(body, "gzip", limit)
        except PayloadTooLargeError as error:
            assert str(error) == f"decompressed body exceeds the limit of {limit} bytes"
        else:
            raise AssertionError("a body larger than the limit was accepted")
    else:
        assert decompress(body, "gzip", limit) == whole


@fuzz_settings()
@given(payload=st.sampled_from(_PAYLOADS) | st.binary(max_size=256), level=st.integers(0, 9))
def test_deflate_round_trips(payload: bytes, level: int) -> None:
    assert decompress(_compress(payload, "deflate", level), "deflate", 10_000) == payload


@fuzz_settings()
@given(body=mutated_bytes(_SEEDS), encoding=_ENCODINGS, limit=st.sampled_from([0, 100, 3000, 100_000]))
def test_any_body_decompresses_or_is_refused(body: bytes, encoding: str, limit: int) -> None:
    try:
        out = decompress(body, encoding, limit)
    except (MalformedPayloadError, PayloadTooLargeError):
        return
    assert len(out) <= limit
    kind = encoding.strip().lower()
    if kind == "gzip":
        assert gzip.decompress(body) == out
    elif kind == "deflate":
        inflater = zlib.decompressobj()
        assert inflater.decompress(body) == out and inflater.eof and not inflater.unused_data
    else:
        assert out == body
