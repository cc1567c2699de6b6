"""Settings of trace sampling: what to assume where a trace does not record the probability it was kept with."""

from __future__ import annotations

from pydantic import Field

from sloscope.config._section import _Section


class TraceSampling(_Section):
    """How sampled requests are counted (docs/sending-traces.md#sampling-and-what-it-does-to-counts)."""

    assumed_probability: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="The probability a request's trace was kept with where its spans record none (no th in the ot "
        "entry of their tracestate, as the traceidratio samplers write none): the EPP's sampler ratio. Each request "
        "counts 1 / this; 1 counts each once. A pool's trace_sampling_probability overrides it.",
    )
