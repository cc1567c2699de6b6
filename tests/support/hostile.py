"""OTLP bodies nested as deep as asked, for the decoders' depth limits (unit tests and a real server alike)."""

from __future__ import annotations

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from sloscope.testing import export_request, span


def kvlist_attribute_json(depth: int) -> bytes:
    """OTLP/JSON with a resource attribute whose value is ``depth`` kvlists inside each other."""
    opening = b'{"kvlistValue":{"values":[{"key":"k","value":' * depth
    closing = b"}]}}" * depth
    return (
        b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":'
        + opening
        + b'{"intValue":"1"}'
        + closing
        + b"}]}}]}"
    )


def kvlist_attribute_protobuf(depth: int) -> bytes:
    """An OTLP request of one span with an attribute ``k`` nested ``depth`` kvlists deep around the int 1."""
    value = AnyValue(int_value=1)
    for _ in range(depth):
        nested = AnyValue()
        nested.kvlist_value.values.add(key="k").value.CopyFrom(value)
        value = nested
    request = export_request([span(1, 1, "s", {})])
    request.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="k").value.CopyFrom(value)
    return bytes(request.SerializeToString())
