"""The SLO maths, as pure functions of one joined request and the spec.

Definitions (docs/configuration.md repeats them for users):

* TTFT: the gateway's measurement when a span carries one, else the model server's
  ``gen_ai.latency.time_to_first_token``. The assembler records which.
* TPOT: ``(e2e - ttft) / (completion_tokens - 1)`` for requests with at least two completion
  tokens (the ``vllm bench serve`` definition), with the model server's own TTFT and e2e so both
  come from one clock. Fewer tokens: no TPOT, not eligible for a TPOT SLO.
* Targets: the request's own (``x-slo-*`` headers, milliseconds) when valid, else the class's
  opt-in default, else none. An SLO is met when actual <= target.
* Goodput: eligible when the request carries at least one SLO and every SLO it carries could be
  evaluated; met when all of them were met.
* A value that is missing, negative or not finite makes the request ineligible for the SLOs that
  need it and is reported in ``invalid_fields``; nothing raises.
* A failed, shed or timed-out request is a bad event (the SRE workbook's "errors are bad events"):
  eligible for every SLO it carried, and violated, goodput too. A client error (``invalid``) is the
  client's fault and eligible for none.
* An aborted request (the client left first) is judged by what its user saw (its class's ``aborts``,
  ``by_deadline`` by default): a miss of its TTFT SLO, and so of goodput, when the TTFT target had
  passed when the client left without an answer; of nothing when the client left earlier (no SLO could
  have been missed yet). Its TPOT is never known. An unknown wait counts as a miss.
* Several model-server spans of one request (``n > 1``) bring their own TPOT: the slowest choice's.
"""

from __future__ import annotations

import math
from typing import TypeGuard

from sloscope import conventions as c
from sloscope.records import Evaluation, JoinedRequest, Verdict
from sloscope.slo.spec import ABORTS_ALWAYS, ABORTS_BY_DEADLINE, ABORTS_NEVER, SLOSpec, is_valid_target

_NOT_ELIGIBLE = Verdict(eligible=False)


def valid_seconds(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value) and value >= 0


def tpot_seconds(e2e: float | None, ttft: float | None, completion_tokens: float | None) -> float | None:
    """Time per output token after the first; None when undefined (fewer than 2 tokens) or invalid."""
    if not (valid_seconds(e2e) and valid_seconds(ttft) and valid_tokens(completion_tokens)):
        return None
    assert e2e is not None and ttft is not None and completion_tokens is not None
    if completion_tokens < 2 or e2e < ttft:
        return None
    return (e2e - ttft) / (completion_tokens - 1)


def valid_tokens(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value) and value >= 0 and value == int(value)


def judge(actual: float | None, target_ms: float | None) -> Verdict:
    """Verdict for one SLO: eligible only with a valid target and a valid actual value."""
    if not is_valid_target(target_ms):
        return _NOT_ELIGIBLE
    assert target_ms is not None
    target = target_ms / 1000.0
    if actual is None:  # the target stays on record (the record store shows what could not be judged)
        return Verdict(eligible=False, target=target)
    return Verdict(eligible=True, met=actual <= target, actual=actual, target=target)


def evaluate(request: JoinedRequest, spec: SLOSpec) -> Evaluation:
    """Classify the request, resolve its targets and judge each SLO."""
    header_ttft = request.slo_ttft_ms if is_valid_target(request.slo_ttft_ms) else None
    header_tpot = request.slo_tpot_ms if is_valid_target(request.slo_tpot_ms) else None
    model = request.model or ""
    cls = spec.classify(model, header_ttft, header_tpot)
    slo_class = cls.name if cls is not None else spec.default_class
    defaults = cls.defaults if cls is not None else None
    target_ttft = header_ttft if header_ttft is not None else (defaults.ttft_ms if defaults else None)
    target_tpot = header_tpot if header_tpot is not None else (defaults.tpot_ms if defaults else None)
    if header_ttft is not None or header_tpot is not None:
        target_source = "request"
    elif target_ttft is not None or target_tpot is not None:
        target_source = "class_default"
    else:
        target_source = "none"

    if request.failure_reason is not None:
        aborts = cls.aborts if cls is not None else ABORTS_BY_DEADLINE
        return _failed(request, slo_class, target_ttft, target_tpot, target_source, aborts=aborts)
    invalid: list[str] = []
    ttft = request.ttft_seconds if valid_seconds(request.ttft_seconds) else None
    if ttft is None:
        invalid.append(c.FIELD_TTFT_SECONDS)
    # TPOT subtracts TTFT from e2e: both must come from the same clock, the model server's.
    server_ttft = request.server_ttft_seconds if request.server_ttft_seconds is not None else request.ttft_seconds
    server_ttft = server_ttft if valid_seconds(server_ttft) else None
    if request.tpot_seconds is not None:  # the assembler's, for a request of several choices
        tpot = request.tpot_seconds if valid_seconds(request.tpot_seconds) else None
    else:
        tpot = tpot_seconds(request.e2e_seconds, server_ttft, request.completion_tokens)
    tpot_needed = target_tpot is not None
    if tpot_needed and tpot is None:
        invalid.extend(_tpot_problems(request, server_ttft))
        if server_ttft is None and c.FIELD_TTFT_SECONDS not in invalid:
            invalid.append(c.FIELD_TTFT_SECONDS)  # the model server's own TTFT, needed for TPOT, is unusable

    ttft_verdict = judge(ttft, target_ttft)
    tpot_verdict = judge(tpot, target_tpot)
    return Evaluation(
        slo_class=slo_class,
        ttft=ttft_verdict,
        tpot=tpot_verdict,
        goodput=_goodput(target_ttft, ttft_verdict, target_tpot, tpot_verdict, request.completion_tokens),
        ttft_seconds=ttft,
        tpot_seconds=tpot,
        target_source=target_source,
        invalid_fields=tuple(invalid),
    )


def _tpot_problems(request: JoinedRequest, ttft: float | None) -> list[str]:
    """Which inputs made TPOT undefined, leaving out the legitimate case of fewer than two tokens."""
    e2e, tokens = request.e2e_seconds, request.completion_tokens
    if not valid_seconds(e2e):
        return [c.FIELD_E2E_SECONDS, *([] if valid_tokens(tokens) else [c.FIELD_COMPLETION_TOKENS])]
    if not valid_tokens(tokens):
        return [c.FIELD_COMPLETION_TOKENS]
    assert e2e is not None and tokens is not None
    if ttft is not None and tokens >= 2 and e2e < ttft:
        return [c.FIELD_E2E_SECONDS]  # the last token cannot come before the first
    return []


def _goodput(
    target_ttft: float | None,
    ttft: Verdict,
    target_tpot: float | None,
    tpot: Verdict,
    completion_tokens: float | None,
) -> Verdict:
    carried = []
    if target_ttft is not None:
        carried.append(ttft)
    if target_tpot is not None:
        single_token = valid_tokens(completion_tokens) and (completion_tokens or 0) < 2
        if not single_token:  # a TPOT SLO does not apply to a one-token answer
            carried.append(tpot)
    if not carried or not all(v.eligible for v in carried):
        return _NOT_ELIGIBLE
    return Verdict(eligible=True, met=all(v.met for v in carried))


def client_waited(request: JoinedRequest) -> float | None:
    """Seconds from the call's arrival to the end of its last span (when the client of a failed request was let go,
    or left); None when the spans do not say."""
    start = request.call_arrival_ns or request.arrival_ns
    if start <= 0 or request.end_ns < start:
        return None
    return (request.end_ns - start) / 1e9


def _failed(
    request: JoinedRequest,
    slo_class: str,
    target_ttft: float | None,
    target_tpot: float | None,
    target_source: str,
    *,
    aborts: str,
) -> Evaluation:
    """A failed request misses every SLO it carried; an aborted one by its class's rule; what it measured, if
    anything, stays on record."""
    ttft = request.ttft_seconds if valid_seconds(request.ttft_seconds) else None
    reason = request.failure_reason
    if reason == c.FAILURE_INVALID or (reason == c.FAILURE_ABORTED and aborts == ABORTS_NEVER):
        ttft_verdict, tpot_verdict, goodput = _NOT_ELIGIBLE, _NOT_ELIGIBLE, _NOT_ELIGIBLE
    elif reason == c.FAILURE_ABORTED and aborts != ABORTS_ALWAYS:
        waited = client_waited(request)
        late = target_ttft is not None and (waited is None or waited * 1000.0 >= target_ttft)
        ttft_verdict = _missed(ttft, target_ttft) if late else _NOT_ELIGIBLE
        tpot_verdict = _NOT_ELIGIBLE
        goodput = Verdict(eligible=True, met=False) if late else _NOT_ELIGIBLE
    else:
        ttft_verdict = _missed(ttft, target_ttft)
        tpot_verdict = _missed(None, target_tpot)
        carried = target_ttft is not None or target_tpot is not None
        goodput = Verdict(eligible=True, met=False) if carried else _NOT_ELIGIBLE
    return Evaluation(
        slo_class=slo_class,
        ttft=ttft_verdict,
        tpot=tpot_verdict,
        goodput=goodput,
        ttft_seconds=None,  # a failed request's latency is no sample of the service's
        tpot_seconds=None,
        target_source=target_source,
    )


def _missed(actual: float | None, target_ms: float | None) -> Verdict:
    if target_ms is None:
        return _NOT_ELIGIBLE
    return Verdict(eligible=True, met=False, actual=actual, target=target_ms / 1000.0)
