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
