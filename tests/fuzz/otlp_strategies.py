"""Valid OTLP export requests, generated: any ids (valid or not), names, times and attribute values."""

from __future__ import annotations

from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sloscope.records import Span
from sloscope.testing import key_values

__all__ = ["attribute_values", "requests"]

_INT64 = st.integers(-(2**63), 2**63 - 1)
_UINT64 = st.integers(0, 2**64 - 1)
_SCALAR = st.one_of(
    st.text(max_size=12),
    _INT64,
    st.floats(allow_nan=False),  # NaN != NaN would make equal spans compare unequal
    st.booleans(),
    st.binary(max_size=8),
)
attribute_values = st.recursive(
    _SCALAR,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
attributes = st.dictionaries(st.text(max_size=12), attribute_values, max_size=4)


def _id(size: int) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(min_size=size, max_size=size), st.just(bytes(size)), st.binary(max_size=size + 2))


@st.composite
def requests(draw: st.DrawFn) -> tuple[ExportTraceServiceRequest, list[Span], int]:
    """A request, the spans a correct decoder yields for it, and how many spans it must reject.

    The expected spans are built from the drawn Python values, not by reading the request back: OTLP's
    id rules (a 16-byte trace id and an 8-byte span id, neither all zero; a parent id empty or 8 bytes).
    """
    request = ExportTraceServiceRequest()
    expected: list[Span] = []
    rejected = 0
    for _ in range(draw(st.integers(0, 2))):
        resource_spans = request.resource_spans.add()
        resource = draw(attributes)
        resource_spans.resource.attributes.extend(key_values(resource))
        for _ in range(draw(st.integers(0, 2))):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = draw(st.text(max_size=8))
            for _ in range(draw(st.integers(0, 3))):
                trace_id, span_id = draw(_id(16)), draw(_id(8))
                parent = draw(st.one_of(st.just(b""), _id(8)))
                values = Span(
                    trace_id.hex(),
                    span_id.hex(),
                    parent.hex(),
                    draw(st.text(max_size=16)),
                    draw(_UINT64),
                    draw(_UINT64),
                    draw(attributes),
                    resource,
                    draw(st.text(max_size=8)),
                    draw(st.integers(0, 2)),
                    draw(st.text(max_size=8)),
                )
                span = scope_spans.spans.add(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=parent,
                    name=values.name,
                    start_time_unix_nano=values.start_ns,
                    end_time_unix_nano=values.end_ns,
                    trace_state=values.tracestate,
                )
                span.status.code = values.status_code
                span.status.message = values.status_message
                span.attributes.extend(key_values(values.attributes))
                valid = len(trace_id) == 16 and any(trace_id) and len(span_id) == 8 and any(span_id)
                if valid and len(parent) in (0, 8):
                    expected.append(values)
                else:
                    rejected += 1
    return request, expected, rejected
