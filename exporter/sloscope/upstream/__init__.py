"""What the upstream systems send, defined once: the span vocabulary both joins read (:mod:`.vocabulary`), and the
catalogue of span shapes the tests, the demo and the benchmarks draw (one module per upstream generation and
engine: :mod:`.llmd_router`, :mod:`.pd_sidecar`, :mod:`.coordinator`, :mod:`.vllm`, :mod:`.sglang`, :mod:`.gie_2025`,
:mod:`.envoy`), written through :mod:`.writer`."""

from sloscope.upstream.writer import AttributeValue, Drawn, Event, Kind, Process, Scope, SpanWriter

__all__ = ["AttributeValue", "Drawn", "Event", "Kind", "Process", "Scope", "SpanWriter"]
