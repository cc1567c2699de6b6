"""sloscope's join, in process, fed with the demo's spans: what sloscope would count for a set of call records.

The spans are made by the demo's emitter, encoded by the OpenTelemetry OTLP encoder and decoded by sloscope's
decoder, then handed to a real trace assembler, evaluator and Prometheus publisher (a fresh registry) with the
demo's settings and SLO spec, on a clock the caller advances. Each simulated process's spans arrive as one
batch, in the order the caller gives: independent exporters deliver in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from prometheus_client import generate_latest

from sloscope.attributes import Mapping
from sloscope.config import load_settings
from sloscope.demo.calls import CallRecord
from sloscope.demo.readout import Readout, parse
from sloscope.demo.sloscope_process import demo_settings
from sloscope.demo.workload import demo_spec
from sloscope.processors import span_shapes
from sloscope.processors.assembler import TraceAssembler
from sloscope.receivers.otlp_decode import decode_request
from sloscope.records import Span
from sloscope.slo.spec import SLOSpec
from tests.support.demo_calls import PODS, Captured
from tests.support.stage import stage

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def process_of(span: ReadableSpan) -> str:
    resource = span.resource.attributes
    return f"{resource.get('service.name')}/{resource.get('k8s.pod.name', '')}"


class InProcessSloscope:
    """A trace assembler with the llm-d demo's settings, publishing to its own registry."""

    def __init__(self, upstream: str = "llm-d") -> None:
        targets = [(pod, f"127.0.0.1:{9000 + i}") for i, pod in enumerate(PODS)]
        settings = load_settings(None, demo_settings("demo-pool", targets, "", [], upstream=upstream))
        spec = SLOSpec.model_validate(demo_spec(MODEL))
        self.now = 0.0
        mapping = Mapping(settings.attributes)
        evaluator = stage(spec, settings.limits, default_pool=mapping.default_pool)  # each request as a batch of one
        self.registry, telemetry = evaluator.registry, evaluator.telemetry
        self.assembler = TraceAssembler(
            settings.join,
            mapping,
            evaluator.publish,
            count_dropped=telemetry.dropped,
            count_outcome=telemetry.outcome,
            clock=lambda: self.now,
        )
        self.keep = mapping.span_keys(settings.join.anchor_attribute, *span_shapes.KEYS)
        self.windows = settings.join.window_seconds, settings.join.failure_window_seconds

    def decode(self, spans: Sequence[ReadableSpan]) -> list[Span]:
        decoded = decode_request(encode_spans(spans), self.keep)
        assert not decoded.rejected, decoded.message
        return decoded.spans

    def deliver(self, spans: Sequence[ReadableSpan], order: Callable[[list[str]], list[str]] = sorted) -> None:
        """One batch per process, in ``order`` of their names."""
        batches: dict[str, list[ReadableSpan]] = {}
        for span in spans:
            batches.setdefault(process_of(span), []).append(span)
        for name in order(list(batches)):
            self.assembler.consume(self.decode(batches[name]))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.assembler.expire(self.now)

    def readout(self) -> Readout:
        return parse(generate_latest(self.registry).decode())


def counted(records: Sequence[CallRecord], order: Callable[[list[str]], list[str]] = sorted) -> Readout:
    """sloscope's counts for the records, each call's spans delivered a second after the previous call's."""
    sloscope, captured = InProcessSloscope(), Captured()
    for record in records:
        sloscope.deliver(captured.spans(record), order)
        sloscope.advance(1.0)
    sloscope.advance(max(sloscope.windows) + 1.0)
    return sloscope.readout()
