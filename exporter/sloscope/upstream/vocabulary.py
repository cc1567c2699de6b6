"""The span vocabulary of the upstreams, defined once: the span names, attribute keys, status phrases and codes
the trace join reads request shapes and failures from.

Read by the Python join (:mod:`sloscope.processors.span_shapes`, the reference) and given to the native one,
which builds its vocabulary from this object when an assembler is made (``native/src/join/vocabulary.rs`` reads
each field by its name, and a field missing or mistyped fails then): no word is written twice, so a word one
join learns the other knows. Only the shapes (what a leg, a probe or a shed request looks like) are written in
both languages, and the differential tests hold them to the same requests.

The values are those of llm-d-router ebab6879: its EPP's ``gateway.request`` and scheduling spans
(``pkg/epp/handlers/server.go``, ``pkg/epp/scheduling/ scheduler_profile.go``, ``scheduler.go:153``), its P/D
routing sidecar (``pkg/sidecar/proxy``), the error codes it puts in span status messages
(``pkg/common/error/error.go``, ``pkg/epp/requestcontrol/admission.go``) and the coordinator's conditional-decode
probe (``pkg/epp/requestcontrol/director.go:348-361``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from sloscope import conventions as c

__all__ = ["VOCABULARY", "Drops", "Failures", "Outcomes", "Phases", "Routings", "SpanVocabulary", "TtftSources"]


@dataclass(frozen=True)
class Words:
    """Words the join writes, each under the name the joins give its meaning; iterated in field order."""

    @functools.cached_property
    def values(self) -> tuple[str, ...]:
        return tuple(getattr(self, field.name) for field in dataclasses.fields(self))

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __contains__(self, word: object) -> bool:
        return word in self.values


@dataclass(frozen=True)
class Failures(Words):
    """Why a request failed, as ``sloscope_requests_failed_total{reason}`` names it."""

    error: str = c.FAILURE_ERROR
    shed: str = c.FAILURE_SHED
    timeout: str = c.FAILURE_TIMEOUT
    aborted: str = c.FAILURE_ABORTED
    invalid: str = c.FAILURE_INVALID


@dataclass(frozen=True)
class Routings(Words):
    """How a request was routed, as the ``routing`` label names it."""

    predicted: str = c.ROUTING_PREDICTED
    default: str = c.ROUTING_DEFAULT
    unknown: str = c.ROUTING_UNKNOWN
    none: str = c.ROUTING_NONE


@dataclass(frozen=True)
class Phases(Words):
    """The coordinator's phases, which are also the names of the scheduling profiles it asks for."""

    encode: str = c.PHASE_ENCODE
    prefill: str = c.PHASE_PREFILL
    decode: str = c.PHASE_DECODE


@dataclass(frozen=True)
class Outcomes(Words):
    """How a request's spans were joined, as the ``outcome`` label of ``sloscope_traces_joined_total`` names it."""

    joined: str = c.OUTCOME_JOINED
    joined_by_request_id: str = c.OUTCOME_JOINED_BY_REQUEST_ID
    anchor_only: str = c.OUTCOME_ANCHOR_ONLY
    no_anchor: str = c.OUTCOME_NO_ANCHOR
    evicted: str = c.OUTCOME_EVICTED
    failed: str = c.OUTCOME_FAILED
    probe: str = c.OUTCOME_PROBE
    encoder_part: str = c.OUTCOME_ENCODER_PART


@dataclass(frozen=True)
class TtftSources(Words):
    """Where a request's TTFT was measured from, as the record's ``ttft_source`` names it."""

    gateway: str = c.TTFT_GATEWAY
    gateway_arrival: str = c.TTFT_GATEWAY_ARRIVAL
    pd_gateway: str = c.TTFT_PD_GATEWAY
    pd_sidecar: str = c.TTFT_PD_SIDECAR
    model_server: str = c.TTFT_MODEL_SERVER


@dataclass(frozen=True)
class Drops(Words):
    """Why the join dropped a span, as the ``reason`` label of ``sloscope_spans_dropped_total`` names it."""

    duplicate: str = c.DROP_DUPLICATE
    late: str = c.DROP_LATE
    pending_cap: str = c.DROP_PENDING_CAP
    trace_too_large: str = c.DROP_TRACE_TOO_LARGE


@dataclass(frozen=True)
class SpanVocabulary:
    """Every word of the upstreams' spans the join reads; each field's comment says where it comes from."""

    # The routing sidecar's leg spans: NIXL and sglang connectors name them prefill/decode, the concurrent (P2P,
    # mooncake) and MoRI-IO paths llm_d.pd_proxy.prefill/.decode.
    prefill_legs: frozenset[str]
    decode_legs: frozenset[str]
    # The sidecar's own server spans: forward_request, and otelhttp's "llm_d.pd_proxy.<METHOD> <path>".
    sidecar_routing: str
    sidecar_server_prefix: str
    # The EPP's scheduling spans: one of them in a request means the scheduler ran for it; its scorers' spans.
    scheduling: frozenset[str]
    scorer_prefix: str
    # run_scheduler_profile and its profile's name: under the coordinator, the phase its EPP-Profile header named.
    profile_span: str
    profile_name: str
    phases: Phases
    early_phases: tuple[str, ...]  # the coordinator's legs that are never the call's answer
    # Attributes: the EPP chose P/D; a scorer's type; the HTTP status, by its current then its old key.
    disaggregation_used: str
    scorer_type: str
    http_status_keys: tuple[str, ...]
    # The EPP's client-error codes, lower-cased as in "inference error: BadRequest - ...": the client's fault.
    client_error_codes: tuple[str, ...]
    not_client: frozenset[int]  # 4xx codes that are the service's doing: timeout, shed, abort
    # The coordinator's conditional-decode probe, refused: the EPP's only 412.
    probe_refused: str
    precondition_failed: int
    # What a failed span's status message or HTTP code says, checked in this order after the client's errors.
    timeout_phrases: tuple[str, ...]
    timeout_codes: frozenset[int]
    shed_phrases: tuple[str, ...]
    shed_codes: frozenset[int]
    aborted_phrases: tuple[str, ...]
    aborted_codes: frozenset[int]
    # The join's outputs, as the series and the record name them: failure reasons, routings, how requests were
    # joined, where their TTFT was measured from, why spans were dropped.
    failures: Failures
    routings: Routings
    outcomes: Outcomes
    ttft_sources: TtftSources
    drops: Drops

    @property
    def keys(self) -> frozenset[str]:
        """Span attributes the shapes read beyond the attribute mapping's fields: the decoder must keep them."""
        return frozenset({self.disaggregation_used, self.scorer_type, self.profile_name, *self.http_status_keys})


VOCABULARY = SpanVocabulary(
    prefill_legs=frozenset({"prefill", "llm_d.pd_proxy.prefill"}),
    decode_legs=frozenset({"decode", "llm_d.pd_proxy.decode"}),
    sidecar_routing="forward_request",
    sidecar_server_prefix="llm_d.pd_proxy.",
    scheduling=frozenset({"run_scheduler_profile", "filter_endpoints", "llm_d.epp.scoring", "pick_endpoints"}),
    scorer_prefix="llm_d.epp.scorer.",
    profile_span="run_scheduler_profile",
    profile_name="llm_d.epp.scheduling.profile.name",
    phases=Phases(),
    early_phases=c.EARLY_PHASES,
    disaggregation_used="llm_d.epp.pd.disaggregation_used",
    scorer_type="llm_d.epp.scorer.type",
    http_status_keys=("http.response.status_code", "http.status_code"),
    client_error_codes=(
        "error: badrequest",
        "error: unauthorized",
        "error: forbidden",
        "error: notfound",
        "error: preconditionfailed",
    ),
    not_client=frozenset({408, 429, 499}),
    probe_refused="error: preconditionfailed",
    precondition_failed=412,
    # A queue timeout is answered 429 too (ResourceExhausted): its message says it timed out, so it is read first.
    timeout_phrases=("timed out", "deadline exceeded"),
    timeout_codes=frozenset({504, 408}),
    shed_phrases=("cannot be admitted", "resourceexhausted"),
    shed_codes=frozenset({429}),
    aborted_phrases=("client disconnected", "context canceled"),
    aborted_codes=frozenset({499}),
    failures=Failures(),
    routings=Routings(),
    outcomes=Outcomes(),
    ttft_sources=TtftSources(),
    drops=Drops(),
)
