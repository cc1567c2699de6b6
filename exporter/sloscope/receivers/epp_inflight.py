"""The llm-d EPP's own in-flight counts per endpoint, read from its ``/metrics`` page.

The llm-d-router EPP's in-flight load producer (``pkg/epp/framework/plugins/requestcontrol/
dataproducer/inflightload/``) tracks, per endpoint, the requests it has routed there and not yet
seen end, and their uncached prompt tokens. The latency predictor plugin reads exactly these at
routing time as ``num_request_running`` and ``prefill_tokens_in_flight`` (``predictedlatency/
plugin.go`` ``readInFlightLoad``), and the producer publishes them as two gauges::

    llm_d_epp_inflight_requests{endpoint_name, namespace, producer_name, fairness_id, priority}
    llm_d_epp_inflight_tokens{endpoint_name, namespace, producer_name, fairness_id, priority}

(``inflightload/metrics.go:32-48`` at llm-d-router ebab6879). The producer's tracker holds one total
per endpoint; the gauges split it by flow (``fairness_id``, ``priority``), so the per-endpoint value
the plugin reads is the sum over those two labels (``producer.go:436-441``). ``endpoint_name`` is the
endpoint ID ``<pod>-rank-<i>`` (``datastore/datastore.go:521-526``), one per data-parallel rank.

Series appear only once a request has been routed to an endpoint (a GaugeVec child is created by its
first ``Inc``) and stay at 0 afterwards, so an endpoint missing from an llm-d page had nothing in
flight: its load is zero, as the producer's tracker answers for an endpoint it never saw.

Whether the page is an llm-d EPP's at all is told by ``llm_d_epp_ready_endpoints``, which its data
layer sets on every metrics refresh from start-up (``metrics/llm_d_router_metrics.go:238``), or by
either in-flight family. Pure: reads only its arguments.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sloscope.receivers.exposition import Sample

__all__ = [
    "DEFAULT_PRODUCER",
    "INFLIGHT_FAMILIES",
    "INFLIGHT_REQUESTS",
    "INFLIGHT_TOKENS",
    "EndpointLoad",
    "InflightPage",
    "parse_inflight",
]

INFLIGHT_REQUESTS = "llm_d_epp_inflight_requests"
INFLIGHT_TOKENS = "llm_d_epp_inflight_tokens"
_LLM_D_MARKER = "llm_d_epp_ready_endpoints"
INFLIGHT_FAMILIES: frozenset[str] = frozenset({INFLIGHT_REQUESTS, INFLIGHT_TOKENS, _LLM_D_MARKER})
"""The families to select on the EPP's page for :func:`parse_inflight`."""

DEFAULT_PRODUCER = "inflight-load-producer"
"""The producer the latency plugin reads when its ``inFlightLoadProducerName`` is empty (the plugin type name)."""

_ENDPOINT = re.compile(r"^(?P<pod>.+)-rank-(?P<rank>\d+)$")
_MAX_ENDPOINTS = 100_000  # a page beyond this is not a pool's EPP; the rest is ignored (memory stays bounded)


@dataclass(frozen=True, slots=True)
class EndpointLoad:
    """One endpoint's in-flight load as the EPP's producer counts it."""

    requests: int
    tokens: int  # uncached prompt tokens (plus estimated output when the producer is configured so)


_IDLE = EndpointLoad(0, 0)


@dataclass(frozen=True)
class InflightPage:
    """What one EPP page says about in-flight load: per pod, per data-parallel rank."""

    llm_d: bool  # the page is an llm-d EPP's (it carries llm_d_epp_ready_endpoints or an in-flight family)
    pods: Mapping[str, Mapping[int, EndpointLoad]]
    gie_v15: bool = False  # the page is GIE v1.5.0's EPP's (told by the EPP page's reader, EPPPage.gie_v15)

    def load(self, pod: str, rank: int | None = None) -> EndpointLoad:
        """The load of the pod's endpoint of ``rank`` (None: its first rank, the endpoint a single-rank pod has);
        zero when not listed."""
        ranks = self.pods.get(pod)
        if not ranks:
            return _IDLE
        if rank is None:
            return ranks[min(ranks)]
        return ranks.get(rank, _IDLE)


def parse_inflight(samples: Iterable[Sample], producer: str = DEFAULT_PRODUCER) -> InflightPage:
    """The in-flight load on an EPP page, summed over flows, of ``producer`` (else of the first producer named).

    Samples of other families are ignored; a non-finite value drops its series; a negative one (a
    gauge decremented past zero) counts as 0, since the predictor refuses negative features.
    """
    llm_d = False
    by_producer: dict[str, dict[tuple[str, int], list[float]]] = {}
    for sample in samples:
        if sample.family == _LLM_D_MARKER:
            llm_d = True
            continue
        if sample.family not in (INFLIGHT_REQUESTS, INFLIGHT_TOKENS) or sample.name != sample.family:
            continue
        llm_d = True
        match = _ENDPOINT.match(sample.labels.get("endpoint_name", ""))
        if match is None or not math.isfinite(sample.value):
            continue
        endpoints = by_producer.setdefault(sample.labels.get("producer_name", ""), {})
        key = (match["pod"], int(match["rank"]))
        if key not in endpoints and len(endpoints) >= _MAX_ENDPOINTS:
            continue
        totals = endpoints.setdefault(key, [0.0, 0.0])
        totals[0 if sample.family == INFLIGHT_REQUESTS else 1] += max(sample.value, 0.0)
    chosen = by_producer.get(producer) if producer in by_producer else _first(by_producer)
    pods: dict[str, dict[int, EndpointLoad]] = {}
    for (pod, rank), (requests, tokens) in (chosen or {}).items():
        pods.setdefault(pod, {})[rank] = EndpointLoad(round(requests), round(tokens))
    return InflightPage(llm_d, pods)


def _first(by_producer: Mapping[str, dict[tuple[str, int], list[float]]]) -> dict[tuple[str, int], list[float]] | None:
    return by_producer[min(by_producer)] if by_producer else None
