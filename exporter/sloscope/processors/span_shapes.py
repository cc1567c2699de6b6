"""What the upstream span shapes mean: gateway spans, P/D legs, scheduling, failures.

Pure functions over decoded spans, used by the trace assembler. The shapes are those of
llm-d-router (``gateway.request`` and its scheduling spans, ``pkg/epp/handlers/server.go`` and
``pkg/epp/scheduling/scheduler_profile.go``), of its P/D routing sidecar (``pkg/sidecar/proxy``)
and of the error codes it puts in span status messages (``pkg/common/error/error.go``,
``pkg/epp/requestcontrol/admission.go``), all at llm-d-router ebab6879; docs/sending-traces.md
says what each generation sends.
"""

from __future__ import annotations

from collections.abc import Iterable

from sloscope import conventions as c
from sloscope.records import Span

# The routing sidecar's leg spans: NIXL and sglang connectors name them prefill/decode, the concurrent
# (P2P, mooncake) and MoRI-IO paths llm_d.pd_proxy.prefill/.decode.
PREFILL_LEGS = frozenset({"prefill", "llm_d.pd_proxy.prefill"})
DECODE_LEGS = frozenset({"decode", "llm_d.pd_proxy.decode"})
# The sidecar's own server spans: forward_request and otelhttp's "llm_d.pd_proxy.<METHOD> <path>".
_SIDECAR_ROUTING = "forward_request"
_SIDECAR_SERVER_PREFIX = "llm_d.pd_proxy."
# The EPP's scheduling spans: one of them in a request means the scheduler ran for it.
_SCHEDULING = frozenset({"run_scheduler_profile", "filter_endpoints", "llm_d.epp.scoring", "pick_endpoints"})
_SCORER_PREFIX = "llm_d.epp.scorer."

DISAGGREGATION_USED = "llm_d.epp.pd.disaggregation_used"
SCORER_TYPE = "llm_d.epp.scorer.type"
# run_scheduler_profile's profile name (pkg/epp/scheduling/scheduler.go:153): under the coordinator's
# header-profile-handler the phase its EPP-Profile header named.
PROFILE_NAME = "llm_d.epp.scheduling.profile.name"
_PROFILE_SPAN = "run_scheduler_profile"
HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")
# The EPP's client-error codes (pkg/common/error/error.go), lower-cased as in "inference error: BadRequest - ...":
# the client's fault, so not a bad event of any SLO (reason "invalid").
_CLIENT_ERROR_CODES = (
    "error: badrequest",
    "error: unauthorized",
    "error: forbidden",
    "error: notfound",
    "error: preconditionfailed",
)
_PROBE_REFUSED = "error: preconditionfailed"
_PRECONDITION_FAILED = 412
_NOT_CLIENT = frozenset({408, 429, 499})  # 4xx codes that are the service's doing: timeout, shed, abort
# Span attributes read here beyond the attribute mapping's fields: the decoder must keep them.
KEYS = frozenset({DISAGGREGATION_USED, SCORER_TYPE, PROFILE_NAME, *HTTP_STATUS_KEYS})


def leg(span: Span) -> str | None:
    """ "prefill" or "decode" for a sidecar leg span, else None."""
    if span.name in DECODE_LEGS:
        return "decode"
    if span.name in PREFILL_LEGS:
        return "prefill"
    return None


def is_sidecar_routing(span: Span) -> bool:
    """The sidecar's server spans, where the client's request reaches the decode pod."""
    name = span.name
    return name == _SIDECAR_ROUTING or (name.startswith(_SIDECAR_SERVER_PREFIX) and " " in name)


def is_scheduling(span: Span) -> bool:
    """The EPP's scheduling spans, which say whether and how a request was routed."""
    return span.name in _SCHEDULING or span.name.startswith(_SCORER_PREFIX)


def disaggregated(spans: Iterable[Span]) -> bool:
    """True when the EPP chose P/D for the request or the sidecar ran a prefill or decode leg."""
    return any(leg(s) is not None or s.attributes.get(DISAGGREGATION_USED) is True for s in spans)


def routing(spans: Iterable[Span], latency_scorers: frozenset[str]) -> str | None:
    """predicted when the latency scorer scored the request, default when scheduling ran without it, else None.

    The profile's name says nothing here: llm-d-router's chart names its only profile "default".
    """
    scheduled = False
    for span in spans:
        name = span.name
        if name.startswith(_SCORER_PREFIX):
            scheduled = True
            if name[len(_SCORER_PREFIX) :] in latency_scorers or span.attributes.get(SCORER_TYPE) in latency_scorers:
                return c.ROUTING_PREDICTED
        elif name in _SCHEDULING:
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
        if span.name != _PROFILE_SPAN:
            continue
        name = span.attributes.get(PROFILE_NAME)
        if not isinstance(name, str) or (found is not None and name != found):
            return None
        found = name
    return found if found in c.PHASES else None


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
    for key in HTTP_STATUS_KEYS:
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
        if span.failed and _PROBE_REFUSED in span.status_message.lower():
            return True
        if http_status(span) == _PRECONDITION_FAILED:
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
    if any(code in text for code in _CLIENT_ERROR_CODES) or any(
        400 <= code < 500 and code not in _NOT_CLIENT for code in codes
    ):
        return c.FAILURE_INVALID
    # A queue timeout is answered 429 too (ResourceExhausted): its message says it timed out, so look first.
    if "timed out" in text or "deadline exceeded" in text or 504 in codes or 408 in codes:
        return c.FAILURE_TIMEOUT
    if 429 in codes or "cannot be admitted" in text or "resourceexhausted" in text:
        return c.FAILURE_SHED
    if "client disconnected" in text or "context canceled" in text or 499 in codes:
        return c.FAILURE_ABORTED
    if messages or any(code >= 500 for code in codes):
        return c.FAILURE_ERROR
    return None if answered else c.FAILURE_ABORTED
