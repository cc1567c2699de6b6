"""A pod's role under prefill/decode disaggregation, and which of the engine's own latency signals it counts.

In a P/D pool every request runs on two engines: its prefill on a prefill pod (which answers one token), then its
decode on a decode pod, and each engine observes the request into its own histograms. Summed over the pool, every
request would count twice per signal. So each signal is taken from the pods of the role that serves that phase:
queue time and TTFT from prefill pods, inter-token latency, time per output token and end-to-end latency from decode
pods; a pod with both phases (no role, or an interleaved one) counts every signal; an encoder counts none.

The role is the pod's ``llm-d.ai/role`` label, with the values llm-d-router's role filters and its flow control read
(``pkg/epp/framework/plugins/scheduling/filter/bylabel/roles.go:11-25`` and
``pkg/epp/flowcontrol/controller/internal/processor.go:545-575`` at ebab6879): ``prefill``, ``encode-prefill``,
``decode``, ``prefill-decode``, ``both`` (deprecated), ``encode-prefill-decode``, ``encode``; a pod without the label
serves whatever it is sent. A value the EPP does not know gets no traffic from it, and no signal here.

A limit: a request whose prefill the EPP skipped (``skip_prefill``: a short prompt, a prefix-cache hit) runs on its
decode pod alone, and its TTFT is in no histogram counted here.
"""

from __future__ import annotations

from sloscope import conventions as c

__all__ = ["ROLE_LABEL", "latency_signals"]

ROLE_LABEL = "llm-d.ai/role"

_ALL = frozenset({c.SIGNAL_QUEUE, c.SIGNAL_TTFT, c.SIGNAL_ITL, c.SIGNAL_TPOT, c.SIGNAL_E2E})
_PREFILL = frozenset({c.SIGNAL_QUEUE, c.SIGNAL_TTFT})
_SIGNALS_OF_ROLE = {
    "prefill": _PREFILL,
    "encode-prefill": _PREFILL,
    "decode": _ALL - _PREFILL,
    "prefill-decode": _ALL,
    "both": _ALL,
    "encode-prefill-decode": _ALL,
    "encode": frozenset(),
}


def latency_signals(role: str | None) -> frozenset[str]:
    """The engine latency signals a pod of ``role`` (its ``llm-d.ai/role`` value, None without one) counts."""
    if role is None or role == "":
        return _ALL
    return _SIGNALS_OF_ROLE.get(role, frozenset())
