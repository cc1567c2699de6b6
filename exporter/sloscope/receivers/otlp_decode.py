"""Pure decoding of OTLP trace exports into :class:`~sloscope.records.Span`, shared by both transports.

Protobuf bytes go straight through ``ExportTraceServiceRequest``. OTLP/JSON differs from the
protobuf JSON mapping in one way that matters: trace and span ids are hex, not base64, so the
ids are rewritten before ``ParseDict`` (which handles lowerCamelCase names, 64-bit integers as
strings and enum numbers). Nothing here does I/O.

What is refused, and why (``docs/operations.md``, "Decoders"): every failure is a
:class:`MalformedPayloadError` or a :class:`PayloadTooLargeError` with a message that says what is wrong,
never another exception, because anything else becomes a 500 with a traceback in the log.

- JSON nested deeper than Python's recursion limit (``json.loads`` raises ``RecursionError``) or
  than the protobuf JSON parser's 100 levels, integers longer than Python's 4300 digits (``ValueError``
  from the int conversion, Python >= 3.11), and the non-JSON constants ``NaN``/``Infinity`` that
  ``json.loads`` would otherwise accept. A number too large for its field (``1e999``) is refused by
  ``ParseDict`` (an enum field raises ``OverflowError`` then), and so is a name or value holding a lone
  surrogate escape (``"\\ud800"``: a ``SystemError`` from upb's field-name lookup).
- Protobuf nested deeper than the runtime's limit: upb decodes with a depth limit of 100 messages
  (``kUpb_WireFormat_DefaultDepthLimit``, upb/wire/internal/constants.h:11 at protobuf 354069cc, used by
  ``PyUpb_Message_MergeFromString`` in python/message.c at 01f51aab), which is 32 levels of
  ``AnyValue.kvlist_value`` in a span attribute; deeper raises ``DecodeError``.
- gzip bodies are read member after member, as RFC 1952 section 2.2 allows and as the OpenTelemetry
  Collector reads them (``config/confighttp/compression.go:69-75`` at opentelemetry-collector 934999fb uses
  Go's ``gzip.NewReader``, multistream by default: ``compress/gzip/gunzip.go:117-135,273-281`` in go1.26.8);
  bytes after the last member that are not another member are refused, as Go refuses them
  (``gzip: invalid header``). Go's zlib reader ignores bytes after a deflate stream; here they are refused
  too, since a sender that appends data to a compressed body has a bug worth reporting.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import zlib
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.records import AttributeValue, Span

if TYPE_CHECKING:
    from sloscope._native import SpanBatch


class MalformedPayloadError(ValueError):
    """The whole payload is unusable: answered with HTTP 400 / gRPC INVALID_ARGUMENT."""


class PayloadTooLargeError(ValueError):
    """The payload, or its decompressed form, exceeds the configured limit: HTTP 413."""


@dataclass
class Decoded:
    """Spans that decoded, plus how many were rejected and why (for OTLP partial success).

    The native decoder (:mod:`sloscope.receivers.native_decode`) leaves ``spans`` empty and gives its
    spans as ``batch`` instead, already type-checked as ``Mapping.check`` checks them.
    """

    spans: list[Span] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    batch: SpanBatch | None = None

    def reject(self, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < 5:  # enough to say what is wrong without echoing a whole batch back
            self.errors.append(message)

    @property
    def message(self) -> str:
        if not self.rejected:
            return ""
        more = self.rejected - len(self.errors)
        tail = f"; and {more} more" if more > 0 else ""
        return f"rejected {self.rejected} span(s): " + "; ".join(self.errors) + tail


_INVALID_TRACE_ID = bytes(16)
_INVALID_SPAN_ID = bytes(8)


_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ERROR_CHARS = 300  # of a reason quoted back to the client: enough to locate the fault


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo ``Content-Encoding`` without ever holding more than ``limit`` bytes (no zip bombs).

    gzip may hold several members, decoded one after another into one body; anything after the last
    member that is not another member, and anything after a deflate stream, is refused.
    """
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        if len(body) > limit:
            raise PayloadTooLargeError(f"body of {len(body)} bytes exceeds the limit of {limit}")
        return body
    if encoding == "deflate":
        out, rest = _inflate(body, zlib.MAX_WBITS, limit, "deflate")
        if rest:
            raise MalformedPayloadError(f"{len(rest)} bytes of trailing data after the deflate stream")
        return out
    if encoding != "gzip":
        raise MalformedPayloadError(f"unsupported Content-Encoding {encoding!r}; use gzip or none")
    chunks: list[bytes] = []
    size = 0
    rest = body
    member = 1
    while True:
        what = "gzip" if member == 1 else f"gzip (member {member})"
        out, rest = _inflate(rest, _GZIP_WBITS, limit, what, size)
        chunks.append(out)
        size += len(out)
        if not rest:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if not rest.startswith(_GZIP_MAGIC):
            raise MalformedPayloadError(
                f"{len(rest)} bytes of trailing data after gzip member {member} (not another gzip member)"
            )
        member += 1


def _inflate(data: bytes, wbits: int, limit: int, what: str, used: int = 0) -> tuple[bytes, bytes]:
    """The first compressed stream of ``data``: (its output, the bytes after it).

    ``used`` bytes of the body's ``limit`` are taken by earlier gzip members.
    """
    budget = limit - used
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, budget + 1)
    except zlib.error as exc:
        raise MalformedPayloadError(f"body is not valid {what}: {exc}") from exc
    if len(out) > budget:
        raise PayloadTooLargeError(f"decompressed body exceeds the limit of {limit} bytes")
    if not inflater.eof:  # every input byte was read (the budget was not reached) and the stream goes on
        raise MalformedPayloadError(f"body is truncated {what}")
    return out, inflater.unused_data


def decode_protobuf(payload: bytes, keep: frozenset[str] | None = None) -> Decoded:
    try:
        request = ExportTraceServiceRequest.FromString(payload)
    except DecodeError as exc:
        raise MalformedPayloadError(f"not a valid OTLP ExportTraceServiceRequest protobuf: {exc}") from exc
    return decode_request(request, keep)


def decode_json(payload: bytes, keep: frozenset[str] | None = None) -> Decoded:
    return decode_request(parse_json(payload), keep)


def parse_json(payload: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON to the protobuf message (the part of :func:`decode_json` that can run in another process)."""
    try:
        document = json.loads(payload, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise MalformedPayloadError("not valid JSON: nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise MalformedPayloadError(f"not valid JSON: {_json_reason(exc)}") from exc
    if not isinstance(document, dict):
        raise MalformedPayloadError("OTLP/JSON body must be an object with 'resourceSpans'")
    try:
        _hex_ids_to_base64(document)
        request = json_format.ParseDict(document, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except RecursionError as exc:
        raise MalformedPayloadError("not a valid OTLP/JSON ExportTraceServiceRequest: nested too deeply") from exc
    except (json_format.ParseError, ValueError, TypeError, AttributeError, OverflowError) as exc:
        # OverflowError: an enum given a number too large for a float ("kind": 1e999).
        raise MalformedPayloadError(f"not a valid OTLP/JSON ExportTraceServiceRequest: {_parse_reason(exc)}") from exc
    except SystemError as exc:
        # upb's field-name lookup fails this way on a name holding a lone surrogate escape ({"\\ud800": 1}):
        # the UnicodeEncodeError underneath is the reason.
        if not isinstance(exc.__cause__, UnicodeError):
            raise
        raise MalformedPayloadError(
            "not a valid OTLP/JSON ExportTraceServiceRequest: a name or value is not valid Unicode "
            f"(a lone surrogate escape): {exc.__cause__}"
        ) from exc
    return request


def _refuse_constant(name: str) -> Any:
    """``json.loads`` reads ``NaN``, ``Infinity`` and ``-Infinity``, which JSON (RFC 8259) does not have."""
    raise ValueError(f"{name} is not a JSON number")


def _json_reason(exc: ValueError) -> str:
    """The reason, short; the int conversion's own message tells the server's operator, not the client, what to do."""
    if not isinstance(exc, json.JSONDecodeError) and "integer string conversion" in str(exc):
        return f"a number has more than {sys.get_int_max_str_digits()} digits"
    return str(exc)[:_ERROR_CHARS]


_FIELD_CHAIN = re.compile(r"(?:Failed to parse \w+ field: )+")
_TOO_DEEP = re.compile(r"Message too deep\. Max recursion depth is (\d+)")


def _parse_reason(exc: Exception) -> str:
    """``ParseDict``'s reason without its "Failed to parse X field: " chain (one per level), which for a
    deeply nested body is thousands of characters saying nothing the path at its end does not."""
    reason = _FIELD_CHAIN.sub("", str(exc))
    depth = _TOO_DEEP.search(reason)
    if depth:
        return f"nested more than {depth.group(1)} levels deep"
    return reason[:_ERROR_CHARS]


def _hex_ids_to_base64(document: dict[str, Any]) -> None:
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans"):
                if not isinstance(span, dict):
                    raise MalformedPayloadError("each entry of 'spans' must be an object")
                _rewrite_ids(span)
                for link in _list(span, "links"):
                    if isinstance(link, dict):
                        _rewrite_ids(link)


def _list(obj: Any, *keys: str) -> list[Any]:
    if not isinstance(obj, dict):
        raise MalformedPayloadError(f"expected an object holding {keys[0]!r}, got {type(obj).__name__}")
    for key in keys:
        value = obj.get(key)
        if value is not None:
            if not isinstance(value, list):
                raise MalformedPayloadError(f"{key!r} must be an array, got {type(value).__name__}")
            return value
    return []


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _rewrite_ids(obj: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        value = obj.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise MalformedPayloadError(f"{key} must be a hex string, got {type(value).__name__}")
        try:
            raw = bytes.fromhex(value)
        except ValueError as exc:
            raise MalformedPayloadError(f"{key} {value!r} is not hex (OTLP/JSON ids are hex, not base64)") from exc
        obj[key] = base64.b64encode(raw).decode("ascii")


def decode_request(request: ExportTraceServiceRequest, keep: frozenset[str] | None = None) -> Decoded:
    """Flatten resource → scope → span, validating ids; invalid spans are rejected one by one.

    ``keep`` names the span attributes worth converting (those the attribute mapping reads): turning
    OTLP values into Python objects is most of the decoding cost, and a vLLM span carries several
    attributes no sloscope field uses. None keeps every attribute. Resource attributes are always kept
    (they are converted once per resource, not per span).
    """
    span_attributes = attributes if keep is None else partial(_kept_attributes, keep=keep)
    result = Decoded()
    spans = result.spans
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id = span.trace_id
                span_id = span.span_id
                parent = span.parent_span_id
                if len(trace_id) != 16 or trace_id == _INVALID_TRACE_ID:
                    result.reject(f"span {span.name!r}: trace_id must be 16 bytes, not all zero")
                    continue
                if len(span_id) != 8 or span_id == _INVALID_SPAN_ID:
                    result.reject(f"span {span.name!r}: span_id must be 8 bytes, not all zero")
                    continue
                if parent and len(parent) != 8:
                    result.reject(f"span {span.name!r}: parent_span_id must be empty or 8 bytes")
                    continue
                spans.append(
                    Span(
                        trace_id.hex(),
                        span_id.hex(),
                        parent.hex(),
                        span.name,
                        span.start_time_unix_nano,
                        span.end_time_unix_nano,
                        span_attributes(span.attributes),
                        resource,
                        span.trace_state,
                        span.status.code,
                        span.status.message,
                    )
                )
    return result


_SCALARS = frozenset({"string_value", "double_value", "int_value", "bool_value", "bytes_value"})


def attributes(key_values: Any) -> dict[str, AttributeValue]:
    """OTLP KeyValues to a dict. The hot path of decoding: scalars are read by field name directly."""
    out: dict[str, AttributeValue] = {}
    for kv in key_values:
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = getattr(value, kind) if kind in _SCALARS else _value(value, kind)
    return out


def _kept_attributes(key_values: Any, keep: frozenset[str]) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    for kv in key_values:
        key = kv.key
        if key in keep:
            value = kv.value
            kind = value.WhichOneof("value")
            out[key] = getattr(value, kind) if kind in _SCALARS else _value(value, kind)
    return out


def _value(value: Any, kind: str | None) -> AttributeValue:
    if kind in _SCALARS:
        return getattr(value, kind)
    if kind == "array_value":  # captured HTTP headers arrive as arrays of strings
        return [
            getattr(v, k) if (k := v.WhichOneof("value")) in _SCALARS else _value(v, k)
            for v in value.array_value.values
        ]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return None
