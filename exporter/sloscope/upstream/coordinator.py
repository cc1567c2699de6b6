"""llm-d's coordinator (llm-d-router ebab6879, ``pkg/coordinator``): the EPP calls one client call becomes.

The coordinator has no tracing of its own: it sends the client's call to the gateway once per phase with the
client's ``x-request-id`` and headers (``steps/prefill.go:101-102``, ``steps/decode_proxy.go:67-74``,
``pipeline/context.go:45-60``), so its calls carry the client's ``traceparent`` or none. First a conditional decode
(``Prefer: if-available``, ``steps/conditional_decode.go:61-85``) that the EPP schedules and refuses with 412 when
the chosen decode pod lacks the prompt's KV cache (``pkg/epp/requestcontrol/director.go:348-361``, the error's text
``pkg/common/error/error.go:72-74``); then one call per phase. The EPP's ``header-profile-handler`` runs the profile
the ``EPP-Profile`` header names (``.../profilehandler/headerprofile/header_profile_handler.go``), which
``run_scheduler_profile`` records (``pkg/epp/scheduling/scheduler.go:153``). Each call is drawn by
:class:`~sloscope.upstream.llmd_router.Epp`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic

from sloscope.upstream.llmd_router import DEFAULT_SCORERS, Epp
from sloscope.upstream.writer import Handle

__all__ = ["PROBE_REFUSED", "Coordinator"]

PROBE_REFUSED = "inference error: PreconditionFailed - no decode worker has the requested KV cache"


class Coordinator(Generic[Handle]):
    """One client call's EPP calls, drawn by ``epp``; times are Unix nanoseconds."""

    def __init__(self, epp: Epp[Handle]) -> None:
        self.epp = epp

    def probe(
        self,
        parent: Handle | None,
        start_ns: int,
        end_ns: int,
        *,
        request_id: str,
        model: str | None,
        scorers: Sequence[str] = DEFAULT_SCORERS,
    ) -> Handle:
        """The conditional decode the EPP scheduled with the decode profile and refused (gateway.request's Error
        status); returns its gateway span."""
        return self.leg(
            parent, "decode", start_ns, end_ns, request_id=request_id, model=model, scorers=scorers,
            status=PROBE_REFUSED,
        )  # fmt: skip

    def leg(
        self,
        parent: Handle | None,
        phase: str,
        start_ns: int,
        end_ns: int,
        *,
        request_id: str,
        model: str | None,
        scorers: Sequence[str] = DEFAULT_SCORERS,
        status: str | None = None,
    ) -> Handle:
        """The EPP call of one phase (encode, prefill, decode), scheduled by that phase's profile; returns its
        gateway span, the parent of the model server's span when the EPP's traceparent won."""
        return self.epp.call(
            parent, start_ns, end_ns, request_id=request_id, model=model, profile=phase, scorers=scorers,
            status=status,
        )  # fmt: skip
