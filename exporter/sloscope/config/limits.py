"""Settings of the bounds: request sizes, queue, label and series caps."""

from __future__ import annotations

from pydantic import Field, field_validator

from sloscope.config._section import _Section

_CAPPED_LABELS = {"model": 50, "pool": 50, "slo_class": 20, "pod": 2000}


class Limits(_Section):
    """Bounds that keep memory and label cardinality finite whatever clients send."""

    max_request_bytes: int = Field(
        default=8 * 1024 * 1024, gt=0, description="Largest OTLP request body, after gzip decompression."
    )
    queue_spans: int = Field(
        default=200_000, gt=0, description="Spans the receiver-to-assembler queue holds before answering 429."
    )
    retry_after_seconds: int = Field(
        default=2, ge=1, description="Retry-After / RetryInfo delay sent when the queue is full."
    )
    max_bytes_in_flight: int = Field(
        default=64 * 1024 * 1024,
        gt=0,
        description="Bytes of OTLP requests being read or decoded at once across both receivers (a compressed "
        "HTTP body counts its inflated worst case, max_request_bytes, too); beyond it 429 / RESOURCE_EXHAUSTED "
        "with a retry delay. One request is always admitted when nothing else is held.",
    )
    decode_threads: int = Field(
        default=2, ge=1, le=64, description="Threads decoding OTLP bodies off the event loop (both receivers)."
    )
    json_decode_processes: int = Field(
        default=1,
        ge=0,
        le=16,
        description="Worker processes parsing OTLP/JSON bodies (json.loads holds the GIL for ~200 ms per 8 MiB, "
        "which a thread cannot hide from the event loop); 0 parses JSON in the decoding threads.",
    )
    max_label_values: dict[str, int] = Field(
        default_factory=lambda: dict(_CAPPED_LABELS),
        description="Distinct values admitted per label, first come first served; later values fold into "
        "__other__. Labels left out keep their default cap.",
    )
    max_series_per_family: int = Field(
        default=50_000,
        ge=1,
        description="Series one family of sloscope's own may hold (a histogram label set counts its buckets, "
        "_sum and _count), first come first served; later label sets are counted into the family's series "
        "whose capped labels (model, pool, slo_class, pod, target_model) are __other__.",
    )
    max_series_total: int = Field(
        default=400_000,
        ge=1,
        description="Series all capped families may hold together; past it, new label sets of any family fold "
        "as above.",
    )

    @field_validator("max_label_values")
    @classmethod
    def _known_labels(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(_CAPPED_LABELS))
        if unknown:
            raise ValueError(f"unknown label(s) {', '.join(unknown)}; capped labels are {', '.join(_CAPPED_LABELS)}")
        small = sorted(label for label, cap in value.items() if cap < 1)
        if small:
            raise ValueError(f"caps must be at least 1: {', '.join(small)}")
        return {**_CAPPED_LABELS, **value}
