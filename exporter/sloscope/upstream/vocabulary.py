"""The span vocabulary of the upstreams, defined once: the span names, attribute keys, status phrases and codes
the trace join reads request shapes and failures from.

Read by the Python join (:mod:`sloscope.processors.span_shapes`, the reference) and held against the native one
(``native/src/join/shapes.rs``): ``sloscope._native.vocabulary()`` returns the native join's, and
``tests/unit/processors/test_vocabulary.py`` fails when the two differ in any field, so a word one join learns
and the other lacks cannot pass unnoticed. The values are those of llm-d-router ebab6879: its EPP's
``gateway.request`` and scheduling spans (``pkg/epp/handlers/server.go``, ``pkg/epp/scheduling/
scheduler_profile.go``, ``scheduler.go:153``), its P/D routing sidecar (``pkg/sidecar/proxy``), the error codes
it puts in span status messages (``pkg/common/error/error.go``, ``pkg/epp/requestcontrol/admission.go``) and the
coordinator's conditional-decode probe (``pkg/epp/requestcontrol/director.go:348-361``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sloscope import conventions as c

__all__ = ["VOCABULARY", "SpanVocabulary"]


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
    phases: tuple[str, ...]
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
    # The join's outputs: failure reasons and routings, as the series name them.
    failure_reasons: tuple[str, ...]
    routings: tuple[str, ...]

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
    phases=c.PHASES,
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
    failure_reasons=c.FAILURE_REASONS,
    routings=c.ROUTINGS,
)


def rust_source(vocabulary: SpanVocabulary = VOCABULARY) -> str:
    """The vocabulary as the native join's constants (``native/src/join/vocabulary.rs``, generated, committed).

    Each field becomes a constant of its name in capitals (sets sorted, so the file is stable); the outputs also get
    one constant per value (``FAILURE_SHED``, ``ROUTING_NONE``, ``PHASE_DECODE``), as the join names them.
    ``make generate`` writes it; ``tests/unit/processors/test_vocabulary.py`` fails when it is stale.
    """
    fields = dataclasses.fields(SpanVocabulary)
    lines = [
        "//! The span vocabulary of the upstreams: generated from `sloscope.upstream.vocabulary` by `make generate`.",
        "//! Do not edit: change the Python vocabulary and regenerate.",
        "",
        "/// A field of the vocabulary: a word, words (sets sorted), HTTP codes, or one code.",
        "pub enum Word {",
        "    Str(&'static str),",
        "    Strs(&'static [&'static str]),",
        "    Codes(&'static [i64]),",
        "    Code(i64),",
        "}",
        "",
    ]
    for field in fields:
        lines.append(_rust_const(field.name.upper(), getattr(vocabulary, field.name)))
    lines += [
        "",
        "/// Every field by its Python name, for `sloscope._native.vocabulary()`.",
        f"pub const WORDS: [(&str, Word); {len(fields)}] = [",
    ]
    for field in fields:
        value, name = getattr(vocabulary, field.name), field.name.upper()
        kind = (
            "Str"
            if isinstance(value, str)
            else "Code"
            if isinstance(value, int)
            else "Strs"
            if all(isinstance(v, str) for v in value)
            else "Codes"
        )
        lines.append(f'    ("{field.name}", Word::{kind}({"" if kind in ("Str", "Code") else "&"}{name})),')
    lines += ["];", ""]
    for prefix, values in (
        ("FAILURE", vocabulary.failure_reasons),
        ("ROUTING", vocabulary.routings),
        ("PHASE", vocabulary.phases),
    ):
        lines += [_rust_const(f"{prefix}_{value.upper()}", value) for value in values]
    return "\n".join(lines) + "\n"


def _rust_const(name: str, value: object) -> str:
    if isinstance(value, str):
        return f"pub const {name}: &str = {_rust_str(value)};"
    if isinstance(value, int):
        return f"pub const {name}: i64 = {value};"
    assert isinstance(value, (tuple, frozenset)), value
    items = sorted(value) if isinstance(value, frozenset) else list(value)
    if all(isinstance(item, int) for item in items):
        return f"pub const {name}: [i64; {len(items)}] = [{', '.join(str(i) for i in items)}];"
    return f"pub const {name}: [&str; {len(items)}] = [{', '.join(_rust_str(i) for i in items)}];"


def _rust_str(text: str) -> str:
    if any(ch in text for ch in '"\\') or not text.isprintable():
        raise ValueError(f"not a plain word: {text!r}")
    return f'"{text}"'


if __name__ == "__main__":
    print(rust_source(), end="")
