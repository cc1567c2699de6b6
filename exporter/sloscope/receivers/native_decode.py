"""The native OTLP decoder (``sloscope._native.Decoder``, native/src/decode/) behind the receivers when
``join.engine`` is ``native``.

It decodes what :func:`~sloscope.receivers.otlp_decode.decode_protobuf` and ``decode_json`` decode, with
the same spans, rejections and refusals, and also does ``Mapping.check``'s per-span type check, so its
batch goes to the queue as it is (a :class:`~sloscope._native.SpanBatch`, spans in native memory). It
releases the GIL while it works, so the decoding threads of :mod:`sloscope.receivers.decode_pool` run in
parallel. An OTLP/JSON body it is not sure of (malformed, or written in a way only Python's own parsers
read exactly: native/src/decode/json.rs) is parsed by ``parse_json``, the reference, and its protobuf
decoded natively, so refusals keep the reference's words.
"""

from __future__ import annotations

from sloscope import _native
from sloscope.attributes import Mapping
from sloscope.receivers.otlp_decode import Decoded, MalformedPayloadError, parse_json


def decoded(outcome: _native.Outcome) -> Decoded:
    """The native decoder's outcome as the receivers take every decoded export."""
    return Decoded(rejected=outcome.rejected, errors=outcome.reasons, batch=outcome.spans)


class NativeDecoder:
    def __init__(self, mapping: Mapping, keep: frozenset[str] | None) -> None:
        typed = mapping.rules()["typed"]
        assert isinstance(typed, dict)
        self._decoder = _native.Decoder(keep, typed)

    @property
    def decoder(self) -> _native.Decoder:
        """The native decoder itself (the native gRPC front decodes with it on its own threads)."""
        return self._decoder

    def protobuf(self, payload: bytes) -> Decoded:
        """An ``ExportTraceServiceRequest`` in protobuf; raises :class:`MalformedPayloadError`."""
        try:
            return decoded(self._decoder.protobuf(payload))
        except _native.DecodeError as exc:
            raise MalformedPayloadError(str(exc)) from exc

    def json_natively(self, payload: bytes) -> Decoded | None:
        """OTLP/JSON decoded natively, or None for a body the native decoder leaves to ``parse_json``: one
        that is malformed or written in a way only the reference reads exactly (native/src/decode/json.rs)."""
        outcome = self._decoder.json(payload)
        return None if outcome is None else decoded(outcome)

    def json_by_reference(self, payload: bytes) -> Decoded:
        """OTLP/JSON parsed by ``parse_json`` (raising its :class:`MalformedPayloadError`), decoded natively."""
        return self.protobuf(parse_json(payload).SerializeToString())

    def json(self, payload: bytes) -> Decoded:
        """OTLP/JSON, natively when the body allows; raises :class:`MalformedPayloadError`."""
        decoded = self.json_natively(payload)
        return self.json_by_reference(payload) if decoded is None else decoded
