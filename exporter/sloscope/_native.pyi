"""Type stubs of the native core (native/, compiled into sloscope._native)."""

from collections.abc import Iterable

from sloscope.records import Span

__version__: str

class SpanBatch:
    """Spans held in native memory until the trace join takes them."""

    @staticmethod
    def from_spans(spans: Iterable[Span]) -> SpanBatch: ...
    def to_spans(self) -> list[Span]: ...
    def __len__(self) -> int: ...

class DecodeError(ValueError):
    """The payload is not a valid OTLP export (raised by Python as MalformedPayloadError)."""

class Decoder:
    """Decodes OTLP trace exports: the span attributes in ``keep`` (None: all) kept, typed ones checked."""

    def __init__(self, keep: Iterable[str] | None, typed: dict[str, tuple[str, str]]) -> None: ...
    def protobuf(self, payload: bytes) -> tuple[SpanBatch, int, list[str]]: ...
    def json(self, payload: bytes) -> tuple[SpanBatch, int, list[str]] | None: ...
