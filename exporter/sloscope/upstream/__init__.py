"""What the upstream systems send, defined once: the span vocabulary both joins read (:mod:`.vocabulary`), and the
catalogue of span shapes the tests, the demo and the benchmarks draw (:mod:`.llmd_router`, :mod:`.vllm`,
:mod:`.gie_2025`, written through :mod:`.writer`)."""

from sloscope.upstream.writer import AttributeValue, Drawn, Kind, Process, Scope, SpanWriter

__all__ = ["AttributeValue", "Drawn", "Kind", "Process", "Scope", "SpanWriter"]
