//! What the upstream span shapes mean: P/D legs, sidecar routing, scheduling, failure reasons.
//!
//! The native twin of `sloscope.processors.span_shapes` (llm-d-router ebab6879: the EPP's
//! `gateway.request` and scheduling spans, the P/D routing sidecar's spans in `pkg/sidecar/proxy`,
//! the error codes of `pkg/common/error/error.go` and `pkg/epp/requestcontrol/admission.go`). The words
//! (span names, attribute keys, status phrases and codes) are the `Vocabulary`'s, given by Python
//! (`sloscope.upstream.vocabulary`); the shapes they make are written here and there alike.

use crate::join::held::{HeldSpan, ValueRef};
use crate::join::vocabulary::{Vocabulary, Word};

type Span = HeldSpan;

/// The flags of `HeldSpan::shape`.
pub mod shape {
    pub const PREFILL_LEG: u8 = 1;
    pub const DECODE_LEG: u8 = 2;
    pub const SIDECAR_ROUTING: u8 = 4;
    /// One of the EPP's scheduling spans by name.
    pub const SCHEDULING: u8 = 8;
    /// A scorer's span (its name starts with the scorer prefix): scheduling too.
    pub const SCORER: u8 = 16;
    /// `run_scheduler_profile`, which names the profile it ran.
    pub const PROFILE: u8 = 32;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leg {
    Prefill,
    Decode,
}

impl Vocabulary {
    /// The `shape` flags of a span named `name`: which of the vocabulary's names it bears.
    pub fn classify(&self, name: &str) -> u8 {
        let mut flags = 0;
        if self.decode_legs.has(name) {
            flags |= shape::DECODE_LEG;
        } else if self.prefill_legs.has(name) {
            flags |= shape::PREFILL_LEG;
        }
        if name == self.sidecar_routing
            || (name.starts_with(self.sidecar_server_prefix.as_str()) && name.contains(' '))
        {
            flags |= shape::SIDECAR_ROUTING;
        }
        if self.scheduling.has(name) {
            flags |= shape::SCHEDULING;
        }
        if name.starts_with(self.scorer_prefix.as_str()) {
            flags |= shape::SCORER;
        }
        if name == self.profile_span {
            flags |= shape::PROFILE;
        }
        flags
    }

    /// The P/D leg a sidecar leg span runs, else None.
    pub fn leg(&self, span: &Span) -> Option<Leg> {
        if span.shape & shape::DECODE_LEG != 0 {
            Some(Leg::Decode)
        } else if span.shape & shape::PREFILL_LEG != 0 {
            Some(Leg::Prefill)
        } else {
            None
        }
    }

    /// The sidecar's server spans, where the client's request reaches the decode pod.
    pub fn is_sidecar_routing(&self, span: &Span) -> bool {
        span.shape & shape::SIDECAR_ROUTING != 0
    }

    /// The EPP's scheduling spans.
    pub fn is_scheduling(&self, span: &Span) -> bool {
        span.shape & (shape::SCHEDULING | shape::SCORER) != 0
    }

    /// The EPP chose P/D for the request, or the sidecar ran a leg.
    pub fn disaggregated<'a>(&self, mut spans: impl Iterator<Item = &'a Span>) -> bool {
        spans.any(|s| {
            self.leg(s).is_some()
                || s.attribute(self.disaggregation_used) == Some(ValueRef::Bool(true))
        })
    }

    /// predicted when the latency scorer scored the request, default when scheduling ran without it.
    pub fn routing<'a>(
        &self,
        spans: impl Iterator<Item = &'a Span>,
        latency_scorers: &[String],
    ) -> Option<Word> {
        let mut scheduled = false;
        for span in spans {
            if span.shape & shape::SCORER != 0 {
                let scorer = &span.name()[self.scorer_prefix.len()..];
                scheduled = true;
                let typed = match span.attribute(self.scorer_type) {
                    Some(ValueRef::Str(t)) => latency_scorers.iter().any(|s| s == t),
                    _ => false,
                };
                if typed || latency_scorers.iter().any(|s| s == scorer) {
                    return Some(self.routings.predicted);
                }
            } else if span.shape & shape::SCHEDULING != 0 {
                scheduled = true;
            }
        }
        scheduled.then_some(self.routings.default)
    }

    /// The coordinator phase an EPP call was scheduled for (`span_shapes.phase`): the one profile its
    /// scheduler ran, when that profile is named for a phase, else None.
    pub fn phase<'a>(&self, spans: impl Iterator<Item = &'a Span>) -> Option<Word> {
        let mut found: Option<Word> = None;
        for span in spans {
            if span.shape & shape::PROFILE == 0 {
                continue;
            }
            let Some(ValueRef::Str(name)) = span.attribute(self.profile_name) else {
                return None;
            };
            let known = self.phases.all().into_iter().find(|p| p.0 == name)?;
            if found.is_some_and(|f| f != known) {
                return None;
            }
            found = Some(known);
        }
        found
    }

    /// The span's HTTP status: an integer attribute or a string of digits, the first key that has one.
    pub fn http_status(&self, span: &Span) -> Option<i64> {
        for &key in &self.http_status_keys {
            match span.attribute(key) {
                Some(ValueRef::Int(i)) => return Some(i),
                Some(ValueRef::Str(s))
                    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    // Python's int() has no bound: anything past i64 is some huge (>= 500) code.
                    return Some(s.parse().unwrap_or(i64::MAX));
                }
                _ => {}
            }
        }
        None
    }

    /// The coordinator's conditional-decode probe, refused with the EPP's only 412
    /// (`span_shapes.is_conditional_probe`): a step of a call that goes on, not a call.
    pub fn is_conditional_probe<'a>(&self, mut spans: impl Iterator<Item = &'a Span>) -> bool {
        spans.any(|span| {
            (span.failed()
                && span
                    .status_message()
                    .to_lowercase()
                    .contains(self.probe_refused.as_str()))
                || self.http_status(span) == Some(self.precondition_failed)
        })
    }

    /// Why a request failed, from its spans' statuses and HTTP codes (`span_shapes.failure_reason`):
    /// the first reason that matches, in the order of docs/sending-traces.md; None when nothing says
    /// it failed and a model server answered.
    pub fn failure_reason<'a>(
        &self,
        spans: impl Iterator<Item = &'a Span>,
        answered: bool,
    ) -> Option<Word> {
        let mut messages: Vec<String> = Vec::new();
        let mut codes: Vec<i64> = Vec::new();
        for span in spans {
            if span.failed() {
                messages.push(span.status_message().to_lowercase());
            }
            if let Some(code) = self.http_status(span) {
                codes.push(code);
            }
        }
        let text = messages.join(" "); // joined as Python joins them: a phrase may span two messages
        let f = &self.failures;
        if self
            .client_error_codes
            .iter()
            .any(|c| text.contains(c.as_str()))
            || codes
                .iter()
                .any(|c| (400..500).contains(c) && !self.not_client.has(*c))
        {
            return Some(f.invalid);
        }
        let says = |said: &crate::join::vocabulary::Says| {
            said.phrases.iter().any(|p| text.contains(p.as_str()))
                || codes.iter().any(|c| said.codes.has(*c))
        };
        if says(&self.timeout) {
            return Some(f.timeout);
        }
        if says(&self.shed) {
            return Some(f.shed);
        }
        if says(&self.aborted) {
            return Some(f.aborted);
        }
        if !messages.is_empty() || codes.iter().any(|c| *c >= 500) {
            return Some(f.error);
        }
        if answered {
            None
        } else {
            Some(f.aborted)
        }
    }
}

/// A multimodal item the routing sidecar sent to an encoder pod, x-request-id `<id>-enc-<n>`
/// (`span_shapes.is_encoder_part`): a part of the call, never a choice or a stage of it.
pub fn is_encoder_part(request_id: Option<&str>) -> bool {
    let Some(id) = request_id.filter(|s| !s.is_empty()) else {
        return false;
    };
    match id.rsplit_once("-enc-") {
        Some((head, index)) => {
            !head.is_empty() && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// (call id, turn) of one of the engine requests vLLM's Responses API makes for a call whose model
/// uses built-in tools, `<id>_<n>` (`span_shapes.turn_of`); at most nine digits.
pub fn turn_of(request_id: Option<&str>) -> Option<(&str, u32)> {
    let (base, index) = request_id?.rsplit_once('_')?;
    if base.is_empty() || index.is_empty() || index.len() > 9 {
        return None;
    }
    if !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, index.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join::held::Keys;
    use crate::join::vocabulary::testing;
    use crate::span::tests::span_with;
    use crate::span::Value;

    fn words() -> Vocabulary {
        testing::llm_d(&mut Keys::default())
    }

    /// A span held by a join whose keys were interned as the assembler interns them.
    fn span(name: &str, attrs: Vec<(&str, Value)>, status: i32, message: &str) -> Span {
        let (span, names) = span_with(name, status, message, attrs);
        let mut keys = Keys::default();
        let words = testing::llm_d(&mut keys);
        let ids = keys.ids_of(&names);
        let mut held = HeldSpan::pack(span, &ids, &keys);
        held.shape = words.classify(held.name());
        held
    }

    fn reason(spans: &[Span], answered: bool) -> Option<&'static str> {
        words().failure_reason(spans.iter(), answered).map(|w| w.0)
    }

    #[test]
    fn reasons_in_documented_order() {
        let error = |m: &str| span("gateway.request", vec![], 2, m);
        let code = |c: i64| {
            span(
                "envoy",
                vec![("http.response.status_code", Value::Int(c))],
                0,
                "",
            )
        };
        assert_eq!(
            reason(
                &[error(
                    "inference error: Internal - request cannot be admitted: x"
                )],
                true
            ),
            Some("shed")
        );
        assert_eq!(
            reason(&[error("ResourceExhausted - queue timed out")], true),
            Some("timeout")
        );
        assert_eq!(
            reason(&[error("inference error: BadRequest - no")], true),
            Some("invalid")
        );
        assert_eq!(reason(&[code(429)], true), Some("shed"));
        assert_eq!(reason(&[code(404)], true), Some("invalid"));
        assert_eq!(reason(&[code(499)], true), Some("aborted"));
        assert_eq!(reason(&[code(503)], true), Some("error"));
        assert_eq!(reason(&[error("context canceled")], true), Some("aborted"));
        assert_eq!(reason(&[error("boom")], true), Some("error"));
        assert_eq!(
            reason(&[error("timed"), error("out")], true),
            Some("timeout")
        );
        assert_eq!(reason(&[code(200)], true), None);
        assert_eq!(reason(&[code(200)], false), Some("aborted"));
    }

    #[test]
    fn status_codes_as_python_reads_them() {
        let with = |v: Value| span("s", vec![("http.status_code", v)], 0, "");
        assert_eq!(
            words().http_status(&with(Value::Str("504".into()))),
            Some(504)
        );
        assert_eq!(words().http_status(&with(Value::Str("5x".into()))), None);
        assert_eq!(words().http_status(&with(Value::Bool(true))), None);
        let both = span(
            "s",
            vec![
                ("http.response.status_code", Value::Double(1.0)),
                ("http.status_code", Value::Int(429)),
            ],
            0,
            "",
        );
        assert_eq!(words().http_status(&both), Some(429)); // a non-integer first key falls through
    }

    #[test]
    fn the_phase_is_the_one_profile_named_for_one() {
        let ran = |name: &str| {
            span(
                "run_scheduler_profile",
                vec![("llm_d.epp.scheduling.profile.name", Value::Str(name.into()))],
                0,
                "",
            )
        };
        assert_eq!(
            words().phase([ran("prefill")].iter()),
            Some(Word::of("prefill"))
        );
        assert_eq!(
            words().phase([ran("decode"), ran("decode")].iter()),
            Some(Word::of("decode"))
        );
        assert_eq!(words().phase([ran("decode"), ran("prefill")].iter()), None); // the sidecar's P/D
        assert_eq!(words().phase([ran("default")].iter()), None);
        assert_eq!(
            words().phase([span("pick_endpoints", vec![], 0, "")].iter()),
            None
        );
    }

    #[test]
    fn encoder_parts_and_responses_turns_by_their_ids() {
        assert!(is_encoder_part(Some("chatcmpl-abc-enc-0")));
        assert!(is_encoder_part(Some("abc-enc-12")));
        assert!(!is_encoder_part(Some("-enc-1")));
        assert!(!is_encoder_part(Some("abc-enc-")));
        assert!(!is_encoder_part(Some("abc-enc-1x")));
        assert!(!is_encoder_part(None));
        assert_eq!(turn_of(Some("resp_abc_2")), Some(("resp_abc", 2)));
        assert_eq!(turn_of(Some("resp_abc_1234567890")), None); // ten digits: no turn count
        assert_eq!(turn_of(Some("_3")), None);
        assert_eq!(turn_of(Some("chatcmpl-abc")), None);
        assert_eq!(turn_of(Some("abc_")), None);
    }

    #[test]
    fn shapes_of_the_sidecar_and_scheduler() {
        assert_eq!(
            words().leg(&span("llm_d.pd_proxy.decode", vec![], 0, "")),
            Some(Leg::Decode)
        );
        assert!(words().is_sidecar_routing(&span(
            "llm_d.pd_proxy.POST /v1/chat/completions",
            vec![],
            0,
            ""
        )));
        assert!(!words().is_sidecar_routing(&span("llm_d.pd_proxy.prefill", vec![], 0, "")));
        let scorers = vec!["latency-scorer".to_string()];
        let scorer = span("llm_d.epp.scorer.latency-scorer", vec![], 0, "");
        assert_eq!(
            words().routing([&scorer].into_iter(), &scorers),
            Some(Word::of("predicted"))
        );
        let other = span("run_scheduler_profile", vec![], 0, "");
        assert_eq!(
            words().routing([&other].into_iter(), &scorers),
            Some(Word::of("default"))
        );
    }
}
