"""Types of the native core (native/, Rust with PyO3), for mypy; ``make lint`` holds it to the compiled module with
``mypy.stubtest``. PyO3 classes are built by ``__new__`` (``#[new]``) and cannot be subclassed (``@final``)."""

import re
from collections.abc import Callable, Iterable
from typing import Protocol, Self, final

from sloscope.config import Join
from sloscope.records import Span
from sloscope.upstream.vocabulary import SpanVocabulary

__version__: str
__all__ = [
    "ByteBudget",
    "DecodeError",
    "Decoder",
    "GatewayMemory",
    "GrpcFront",
    "HttpFront",
    "JoinStep",
    "NativeAssembler",
    "Outcome",
    "SpanBatch",
    "__version__",
]

@final
class SpanBatch:
    """Spans held in native memory until the trace join takes them."""

    @staticmethod
    def from_spans(spans: Iterable[Span]) -> SpanBatch: ...
    def to_spans(self) -> list[Span]: ...
    def split(self, n: int) -> list[SpanBatch]: ...
    def __len__(self) -> int: ...

class DecodeError(ValueError):
    """The payload is not a valid OTLP export (raised by Python as MalformedPayloadError)."""

@final
class Outcome:
    """What decoding one export gave: the spans kept, how many were rejected, the first five reasons."""

    @property
    def spans(self) -> SpanBatch: ...
    @property
    def rejected(self) -> int: ...
    @property
    def reasons(self) -> list[str]: ...

@final
class Decoder:
    """Decodes OTLP trace exports: the span attributes in ``keep`` (None: all) kept, typed ones checked."""

    def __new__(cls, keep: Iterable[str] | None, typed: dict[str, tuple[str, str]]) -> Self: ...
    def protobuf(self, payload: bytes) -> Outcome: ...
    def json(self, payload: bytes) -> Outcome | None: ...

@final
class ByteBudget:
    """Bytes of OTLP requests held at once across the receivers; one request is always admitted alone."""

    def __new__(cls, cap: int) -> Self: ...
    def reserve(self, size: int) -> bool: ...
    def release(self, size: int) -> None: ...
    @property
    def held(self) -> int: ...
    @property
    def cap(self) -> int: ...

# (certificate chain, key, client CA, client_auth_type) in PEM
_Pems = tuple[bytes, bytes, bytes | None, str]
# (status code, message, trailing metadata, response message)
_Wire = tuple[int, str, list[tuple[str, bytes]], bytes]

@final
class GrpcFront:
    """The OTLP/gRPC TraceService/Export listener of the native core (native/src/front), serving ``fd``."""

    def __new__(
        cls,
        fd: int,
        decoder: Decoder,
        budget: ByteBudget,
        export: Callable[[Outcome | str], _Wire],
        refused: Callable[[str, int, str], _Wire],
        authorize: Callable[[str | None], _Wire | None] | None,
        tls: _Pems | None,
        tls_changed: Callable[[], _Pems | None] | None,
        *,
        max_request_bytes: int,
        max_connections: int,
        max_concurrent_streams: int,
        keepalive_time: float,
        keepalive_timeout: float,
        min_ping_interval: float,
        permit_without_calls: bool,
        handshake_timeout: float,
        max_idle: float,
        max_age: float,
        max_age_grace: float,
        handler_threads: int,
        freed: Callable[[int], None] | None = None,
        trim_from: int = ...,
    ) -> Self: ...
    def stop(self, grace: float) -> None: ...

@final
class HttpFront:
    """The OTLP/HTTP POST /v1/traces listener of the native core (native/src/front/http.rs), serving ``fd``.
    ``receiver`` answers and counts: ``sloscope.receivers.otlp_http_native.NativeHttpReceiver``."""

    def __new__(
        cls,
        fd: int,
        decoder: Decoder,
        budget: ByteBudget,
        receiver: object,
        authorize: bool,
        tls: _Pems | None,
        tls_changed: Callable[[], _Pems | None] | None,
        *,
        name: str,
        max_request_bytes: int,
        max_connections: int,
        header_timeout: float,
        idle_timeout: float,
        body_timeout: float,
        handler_threads: int,
        trim_from: int,
    ) -> Self: ...
    def stop(self, grace: float) -> None: ...

# The trace join (native/src/join): (kind "dropped" or "outcome", reason, count) in first-seen order.
_Counts = list[tuple[str, str, int]]

# A column of the joined requests taken (native/src/join/columns.rs), its buffers as bytes: float (values f64, held
# bytes or None: every row holds one), int (values i64), label (codes i64, -1 none; values in order of first
# appearance), text (offsets i64, UTF-8 data, held bytes or None).
_ColumnParts = tuple[bytes, bytes | None] | tuple[bytes] | tuple[bytes, list[str]] | tuple[bytes, bytes, bytes | None]
# The requests taken: how many, and a column each in JoinedRequest's field order.
_JoinedColumns = tuple[int, list[_ColumnParts]]

@final
class JoinStep:
    """What one call of the join did: requests emitted (gathered until ``take``), anchors a flush let go (0 for
    the other calls), and the counts in order."""

    @property
    def emitted(self) -> int: ...
    @property
    def flushed(self) -> int: ...
    @property
    def counts(self) -> _Counts: ...

@final
class GatewayMemory:
    """When a gateway span last arrived, shared by the native join's shards."""

    def __new__(cls) -> Self: ...
    @property
    def seen(self) -> float | None: ...

class _JoinSpec(Protocol):
    """What the native join reads of ``sloscope.processors.join_spec.JoinSpec``, each part by its name."""

    @property
    def join(self) -> Join: ...
    @property
    def rules(self) -> dict[str, object]: ...
    @property
    def vocabulary(self) -> SpanVocabulary: ...
    @property
    def pattern(self) -> re.Pattern[str]: ...

@final
class NativeAssembler:
    def __new__(
        cls,
        spec: _JoinSpec,
        python_bytes: bool = False,
        gateway_memory: GatewayMemory | None = None,
    ) -> Self: ...
    @staticmethod
    def columns() -> list[tuple[str, str]]: ...
    def consume(self, batch: SpanBatch, now: float) -> JoinStep: ...
    def expire(self, now: float) -> JoinStep: ...
    def flush(self) -> JoinStep: ...
    # The gathered requests as columns (joined_batch.from_columns), None for none.
    def take(self) -> _JoinedColumns | None: ...
    @property
    def gathered(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def pending_bytes(self) -> int: ...
