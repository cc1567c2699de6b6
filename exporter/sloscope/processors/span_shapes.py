"""What the upstream span shapes mean: gateway spans, P/D legs, scheduling, failures.

Pure functions over decoded spans, used by the trace assembler. The shapes are those of
llm-d-router (``gateway.request`` and its scheduling spans, ``pkg/epp/handlers/server.go`` and
``pkg/epp/scheduling/scheduler_profile.go``), of its P/D routing sidecar (``pkg/sidecar/proxy``)
and of the error codes it puts in span status messages (``pkg/common/error/error.go``,
``pkg/epp/requestcontrol/admission.go``), all at llm-d-router ebab6879; docs/sending-traces.md
says what each generation sends. The words themselves (span names, attribute keys, status phrases and codes)
are :data:`~sloscope.upstream.vocabulary.VOCABULARY`'s, which the native join is held to.
"""

from __future__ import annotations

from collections.abc import Iterable

from sloscope import conventions as c
from sloscope.records import Span
from sloscope.upstream.vocabulary import VOCABULARY

V = VOCABULARY
KEYS = V.keys  # span attributes read here beyond the attribute mapping's fields: the decoder must keep them


def leg(span: Span) -> str | None:
    """ "prefill" or "decode" for a sidecar leg span, else None."""
    if span.name in V.decode_legs:
        return "decode"
    if span.name in V.prefill_legs:
        return "prefill"
    return None


def is_sidecar_routing(span: Span) -> bool:
    """The sidecar's server spans, where the client's request reaches the decode pod."""
    name = span.name
    return name == V.sidecar_routing or (name.startswith(V.sidecar_server_prefix) and " " in name)


def is_scheduling(span: Span) -> bool:
    """The EPP's scheduling spans, which say whether and how a request was routed."""
    return span.name in V.scheduling or span.name.startswith(V.scorer_prefix)


def disaggregated(spans: Iterable[Span]) -> bool:
    """True when the EPP chose P/D for the request or the sidecar ran a prefill or decode leg."""
    return any(leg(s) is not None or s.attributes.get(V.disaggregation_used) is True for s in spans)


def routing(spans: Iterable[Span], latency_scorers: frozenset[str]) -> str | None:
    """predicted when the latency scorer scored the request, default when scheduling ran without it, else None.

    The profile's name says nothing here: llm-d-router's chart names its only profile "default".
    """
    scheduled = False
    for span in spans:
        name = span.name
        if name.startswith(V.scorer_prefix):
            scheduled = True
            if name[len(V.scorer_prefix) :] in latency_scorers or span.attributes.get(V.scorer_type) in latency_scorers:
                return c.ROUTING_PREDICTED
        elif name in V.scheduling:
            scheduled = True
    return c.ROUTING_DEFAULT if scheduled else None


def phase(spans: Iterable[Span]) -> str | None:
    """The coordinator phase an EPP call was scheduled for: the one profile its scheduler ran, when that profile
    is named for a phase (``encode``, ``prefill``, ``decode``), else None.

    llm-d-router's coordinator makes one EPP call per phase and its ``header-profile-handler`` runs exactly the
    profile the call's ``EPP-Profile`` header names (``pkg/epp/framework/plugins/scheduling/profilehandler/
    headerprofile/header_profile_handler.go``, ``pkg/coordinator/gateway/paths.go`` at llm-d-router ebab6879).
    The sidecar's ``disagg-profile-handler`` runs ``decode`` and then ``prefill`` in one call: two profiles, no
    phase; a call it did not disaggregate runs ``decode`` alone, which reads as the decode phase, a call of its own.
    """
    found: str | None = None
    for span in spans:
        if span.name != V.profile_span:
            continue
        name = span.attributes.get(V.profile_name)
        if not isinstance(name, str) or (found is not None and name != found):
            return None
        found = name
    return found if found in V.phases else None


def is_encoder_part(request_id: str | None) -> bool:
    """A multimodal item llm-d's routing sidecar sent to an encoder pod: a request of its own with the x-request-id
    ``<id>-enc-<n>`` (``pkg/sidecar/proxy/connector_ec_common.go:212`` at llm-d-router ebab6879), made before the
    call's prefill and decode. A part of the call, never a choice or a stage of it."""
    if not request_id:
        return False
    head, sep, index = request_id.rpartition("-enc-")
    return bool(sep and head and index.isascii() and index.isdigit())


def turn_of(request_id: str | None) -> tuple[str, int] | None:
    """(call id, turn) of one of the engine requests vLLM's Responses API makes, one after another, for a call whose
    model uses built-in tools: ``<id>_<n>`` (``_generate_with_builtin_tools`` in ``vllm/entrypoints/openai/
    responses/serving.py``, 0.33 and 0.34). Else None. At most nine digits: a longer tail is no turn count."""
    if not request_id:
        return None
    base, sep, index = request_id.rpartition("_")
    if not (sep and base and index.isascii() and index.isdigit() and len(index) <= 9):
        return None
    return base, int(index)


def http_status(span: Span) -> int | None:
    for key in V.http_status_keys:
        value = span.attributes.get(key)
        if type(value) is int:
            return value
        if type(value) is str and value.isdigit():
            return int(value)
    return None


def is_conditional_probe(spans: Iterable[Span]) -> bool:
    """The coordinator's conditional-decode probe, refused: a decode call sent with ``Prefer: if-available`` that the
    llm-d EPP answers 412 when the chosen decode pod does not hold the prompt's KV cache, after which the coordinator
    runs the call's prefill and decode (llm-d-router ebab6879 ``pkg/epp/requestcontrol/director.go:348-361``,
    ``pkg/coordinator/steps/conditional_decode.go:61-85``). Its spans say ``PreconditionFailed`` (the EPP's status
    message) or 412 (a gateway's HTTP status): the EPP's only 412."""
    for span in spans:
        if span.failed and V.probe_refused in span.status_message.lower():
            return True
        if http_status(span) == V.precondition_failed:
            return True
    return False


def failure_reason(spans: Iterable[Span], *, answered: bool) -> str | None:
    """Why a request failed, from its spans' statuses and HTTP codes; None when nothing says it failed.

    ``invalid`` (a client error: 4xx, or the EPP's BadRequest and kin) is the client's fault; the others
    (shed, timeout, aborted, error) are bad events for every SLO the request carried.

    ``answered`` is False when no model-server span came: then a request with no error anywhere was
    aborted (vLLM emits no span for an aborted request, and a client disconnect leaves the EPP's span
    status unset). The first reason that matches wins, in the order of docs/sending-traces.md.
    """
    messages: list[str] = []
    codes: list[int] = []
    for span in spans:
        if span.failed:
            messages.append(span.status_message.lower())
        code = http_status(span)
        if code is not None:
            codes.append(code)
    text = " ".join(messages)
    if any(code in text for code in V.client_error_codes) or any(
        400 <= code < 500 and code not in V.not_client for code in codes
    ):
        return c.FAILURE_INVALID

    def says(phrases: tuple[str, ...], coded: frozenset[int]) -> bool:
        return any(phrase in text for phrase in phrases) or any(code in coded for code in codes)

    if says(V.timeout_phrases, V.timeout_codes):  # before shed: a queue timeout is answered 429 too
        return c.FAILURE_TIMEOUT
    if says(V.shed_phrases, V.shed_codes):
        return c.FAILURE_SHED
    if says(V.aborted_phrases, V.aborted_codes):
        return c.FAILURE_ABORTED
    if messages or any(code >= 500 for code in codes):
        return c.FAILURE_ERROR
    return None if answered else c.FAILURE_ABORTED
