//! Reading one joined request out of the spans the assembler grouped for it: the twin of
//! `processors/joined_request.py` (the model server's numbers from its own span, the gateway's
//! facts from the companions nearest first, P/D stages, `n > 1` choices, failed requests).

use std::sync::Arc;

use crate::join::rules::{Field, Rules};
use crate::join::sampling;
use crate::join::shapes::{self, Leg};
use crate::join::trace::{Held, SpanId, Spans, Trace, TraceId};
use crate::join::vocabulary::{Vocabulary, Word};

/// `sloscope.records.JoinedRequest`, field for field.
#[derive(Clone, Debug, Default)]
pub struct Joined {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub outcome: Word,
    pub request_id: Option<Text>,
    pub requested_model: Option<Text>,
    pub target_model: Option<Text>,
    pub pool: Option<Text>,
    pub pod: Option<Text>,
    pub endpoint: Option<Text>,
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
    pub routing: Word,
    pub predicted_ttft_ms: Option<f64>,
    pub predicted_tpot_ms: Option<f64>,
    pub ttft_seconds: Option<f64>,
    pub ttft_source: Option<Word>,
    pub server_ttft_seconds: Option<f64>,
    pub e2e_seconds: Option<f64>,
    pub queue_seconds: Option<f64>,
    pub prefill_seconds: Option<f64>,
    pub decode_seconds: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub completion_tokens: Option<f64>,
    pub prefix_cache_score: Option<f64>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub arrival_ns: u64,
    pub failure_reason: Option<Word>,
    pub tpot_seconds: Option<f64>,
    pub choices: u32,
    pub prefill_pod: Option<Text>,
    pub prefill_queue_seconds: Option<f64>,
    pub prefill_seconds_on_prefill_pod: Option<f64>,
    pub phase: Option<Word>,
    /// A coordinator call's first leg's arrival: set by the call joiner in Python, never here.
    pub call_arrival_ns: u64,
    pub gateway: Option<Text>,
    /// The probability its trace was kept with: the anchor's tracestate, else its companions' nearest first.
    pub sampling_probability: Option<f64>,
}

/// A string of a built request: where it lies in the text the builder's requests share (one buffer
/// for a call's requests, not a string each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Text {
    start: u32,
    len: u32,
}

/// `value` appended to the requests' shared `text`.
fn put(text: &mut String, value: Option<&str>) -> Option<Text> {
    let value = value?;
    let start = text.len();
    text.push_str(value);
    // A call's requests hold far below 4 GiB of text; past it a string reads as empty.
    match (u32::try_from(start), u32::try_from(value.len())) {
        (Ok(start), Ok(len)) => Some(Text { start, len }),
        _ => Some(Text::default()),
    }
}

impl Text {
    pub fn read(self, text: &str) -> &str {
        let start = self.start as usize;
        &text[start..start + self.len as usize]
    }
}

/// Reads requests out of grouped spans with the configured mapping.
pub struct Builder {
    pub rules: Arc<Rules>,
    pub words: Arc<Vocabulary>,
    pub latency_scorers: Vec<String>,
    pub unanswered_are_aborted: bool,
}

/// The first element with the largest key (Python's `max(..., key=...)`).
fn first_max<'a, K: PartialOrd>(items: &[&'a Held], key: impl Fn(&Held) -> K) -> Option<&'a Held> {
    let mut best: Option<&'a Held> = None;
    for item in items {
        if best.is_none_or(|b| key(item) > key(b)) {
            best = Some(item);
        }
    }
    best
}

fn first_min<'a, K: PartialOrd>(items: &[&'a Held], key: impl Fn(&Held) -> K) -> Option<&'a Held> {
    let mut best: Option<&'a Held> = None;
    for item in items {
        if best.is_none_or(|b| key(item) < key(b)) {
            best = Some(item);
        }
    }
    best
}

/// Python's `min` / `max` over floats: the first value kept unless a later one compares past it.
fn py_min(values: &[f64]) -> Option<f64> {
    values
        .iter()
        .copied()
        .reduce(|a, b| if b < a { b } else { a })
}

fn py_max(values: &[f64]) -> Option<f64> {
    values
        .iter()
        .copied()
        .reduce(|a, b| if b > a { b } else { a })
}

/// The sum, or None (unknown) when any value is.
fn total(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let mut sum = 0.0;
    for value in values {
        sum += value?;
    }
    Some(sum)
}

fn seconds_between(later: u64, earlier: u64) -> f64 {
    (later as i128 - earlier as i128) as f64 / 1e9
}

/// `slo.evaluate.tpot_seconds`: time per output token after the first; None when undefined.
pub fn tpot_seconds(e2e: Option<f64>, ttft: Option<f64>, tokens: Option<f64>) -> Option<f64> {
    let valid_seconds = |v: f64| v.is_finite() && v >= 0.0;
    let (e2e, ttft, tokens) = (e2e?, ttft?, tokens?);
    let valid_tokens = tokens.is_finite() && tokens >= 0.0 && tokens.fract() == 0.0;
    if !(valid_seconds(e2e) && valid_seconds(ttft) && valid_tokens) || tokens < 2.0 || e2e < ttft {
        return None;
    }
    Some((e2e - ttft) / (tokens - 1.0))
}

/// The shapes of a trace's requests, in the vocabulary's words.
impl Vocabulary {
    /// The P/D leg an anchor ran in: its nearest sidecar leg span above it.
    pub fn leg_of(&self, trace: &Trace, anchor: &Held) -> Option<Leg> {
        trace.above(anchor).find_map(|h| self.leg(&h.span))
    }

    /// A P/D request: the EPP chose P/D, or a leg span is among its companions or above its anchors.
    pub fn disaggregated_in(&self, trace: &Trace, anchors: &[&Held], companions: &[&Held]) -> bool {
        let above = anchors.iter().flat_map(|a| trace.above(a));
        self.disaggregated(companions.iter().copied().chain(above).map(|h| &h.span))
    }

    /// The decode stage: under the decode leg (its first chunk), else the last to end.
    pub fn decode_stage<'a>(&self, trace: &Trace, anchors: &[&'a Held]) -> Option<&'a Held> {
        let legs: Spans<'_> = anchors
            .iter()
            .copied()
            .filter(|a| self.leg_of(trace, a) == Some(Leg::Decode))
            .collect();
        if !legs.is_empty() {
            return first_min(&legs, |s| (s.span.start_ns, s.span.end_ns));
        }
        if anchors.iter().any(|a| self.leg_of(trace, a).is_some()) || anchors.len() < 2 {
            return None;
        }
        first_max(anchors, |s| (s.span.end_ns, s.span.start_ns))
    }

    pub fn primary_anchor<'a>(&self, trace: &Trace, anchors: &[&'a Held]) -> &'a Held {
        self.decode_stage(trace, anchors).unwrap_or(anchors[0])
    }
}

/// The model server's TTFT counted from `origin`'s start, the request's arrival in front of it,
/// when both clocks agree that it came first (`joined_request._count_from`).
fn count_from(
    words: &Vocabulary,
    request: &mut Joined,
    origin: Option<&Held>,
    served_ns: u64,
    source: Word,
) -> bool {
    let (Some(ttft), Some(origin)) = (request.ttft_seconds, origin) else {
        return false;
    };
    if request.ttft_source != Some(words.ttft_sources.model_server)
        || origin.span.start_ns == 0
        || served_ns < origin.span.start_ns
    {
        return false;
    }
    request.ttft_seconds = Some(seconds_between(served_ns, origin.span.start_ns) + ttft);
    request.ttft_source = Some(source);
    true
}

fn arrival(trace: &Trace, primary: &Held, anchors: &[&Held], gateway: Option<&Held>) -> u64 {
    if let Some(g) = gateway.filter(|g| g.span.start_ns > 0) {
        return g.span.start_ns;
    }
    if let Some(top) = trace
        .ancestors(primary)
        .last()
        .filter(|t| t.span.start_ns > 0)
    {
        return top.span.start_ns;
    }
    anchors
        .iter()
        .map(|a| a.span.start_ns)
        .filter(|s| *s > 0)
        .min()
        .unwrap_or(primary.span.start_ns)
}

impl Builder {
    /// One request of model-server spans: P/D stages, `n > 1` choices, or a single span.
    pub fn request(
        &self,
        text: &mut String,
        trace: &Trace,
        anchors: &[&Held],
        companions: &[&Held],
        outcome: Word,
        gateway: Option<&Held>,
    ) -> Joined {
        let own: Spans<'_> = anchors
            .iter()
            .copied()
            .filter(|a| {
                let raw = self.rules.identifier(Field::RequestId, &[a]);
                !shapes::is_encoder_part(raw.as_deref())
            })
            .collect();
        if own.is_empty() {
            // The sidecar's encoder requests alone (in a trace of their own): a leg of a call, not one.
            let mut request = self.call(text, trace, anchors, companions, outcome, gateway);
            request.phase = Some(self.words.phases.encode);
            request.outcome = self.words.outcomes.encoder_part;
            return request;
        }
        // Encoder requests came before the call's own: parts of it, neither choices nor stages.
        self.call(text, trace, &own, companions, outcome, gateway)
    }

    fn call(
        &self,
        text: &mut String,
        trace: &Trace,
        anchors: &[&Held],
        companions: &[&Held],
        outcome: Word,
        gateway: Option<&Held>,
    ) -> Joined {
        if self.words.disaggregated_in(trace, anchors, companions) {
            let Some(decode) = self.words.decode_stage(trace, anchors) else {
                // The decode stage never came: the client got no answer from a decode pod.
                let scope: Spans<'_> = anchors.iter().chain(companions).copied().collect();
                let reason = self
                    .words
                    .failure_reason(scope.iter().map(|h| &h.span), !self.unanswered_are_aborted);
                return self.failed(
                    text,
                    gateway.unwrap_or(anchors[0]),
                    &scope,
                    reason.unwrap_or(self.words.failures.aborted),
                );
            };
            let request = self.build(text, decode, companions, outcome);
            return self.disaggregated_request(text, request, trace, decode, anchors, gateway);
        }
        let turns = if anchors.len() > 1 {
            self.turns(anchors)
        } else {
            None
        };
        let primary = match &turns {
            Some(turns) => turns[0],
            None => self.words.primary_anchor(trace, anchors),
        };
        let mut request = self.build(text, primary, companions, outcome);
        if let Some(turns) = &turns {
            self.merge_sequence(&mut request, primary, turns);
        } else if anchors.len() > 1 {
            self.merge_choices(&mut request, anchors);
        }
        request.arrival_ns = arrival(trace, primary, anchors, gateway);
        let served = if anchors.len() > 1 && turns.is_none() {
            self.fastest(anchors)
        } else {
            primary
        };
        count_from(
            &self.words,
            &mut request,
            gateway,
            served.span.start_ns,
            self.words.ttft_sources.gateway_arrival,
        );
        if anchors.iter().any(|a| a.span.failed()) {
            let reason = self
                .words
                .failure_reason(anchors.iter().map(|h| &h.span), true);
            request.failure_reason = Some(reason.unwrap_or(self.words.failures.error));
        }
        request
    }

    /// `n > 1`: the first choice with the smallest TTFT, the one whose first token the request's TTFT
    /// is (`joined_request._fastest`).
    fn fastest<'a>(&self, anchors: &[&'a Held]) -> &'a Held {
        let mut best: Option<(f64, &'a Held)> = None;
        for anchor in anchors {
            if let Some(ttft) = self.rules.number(Field::TtftSeconds, &[anchor]) {
                if best.is_none_or(|(least, _)| ttft < least) {
                    best = Some((ttft, anchor));
                }
            }
        }
        best.map_or(anchors[0], |(_, anchor)| anchor)
    }

    /// `request`, built from the decode stage, with the P/D stages' facts.
    fn disaggregated_request(
        &self,
        text: &mut String,
        mut request: Joined,
        trace: &Trace,
        decode: &Held,
        anchors: &[&Held],
        gateway: Option<&Held>,
    ) -> Joined {
        let rules = &self.rules;
        request.arrival_ns = arrival(trace, decode, anchors, gateway);
        let mut chunks: Spans<'_> = anchors
            .iter()
            .copied()
            .filter(|a| self.words.leg_of(trace, a) == Some(Leg::Decode))
            .collect();
        if chunks.is_empty() {
            chunks.push(decode);
        }
        if chunks.len() > 1 {
            // Chunked decode (--decode-chunk-size): one vLLM request per chunk.
            self.merge_sequence(&mut request, decode, &chunks);
        }
        let prefill: Spans<'_> = anchors
            .iter()
            .copied()
            .filter(|a| !chunks.iter().any(|c| std::ptr::eq(*c, *a)))
            .collect();
        if let Some(stage) = first_max(&prefill, |s| s.span.end_ns) {
            let view = [stage];
            request.prefill_pod = put(text, rules.string(Field::Pod, &view));
            request.prefill_queue_seconds = rules.number(Field::QueueSeconds, &view);
            request.prefill_seconds_on_prefill_pod = rules.number(Field::PrefillSeconds, &view);
        }
        if !count_from(
            &self.words,
            &mut request,
            gateway,
            decode.span.start_ns,
            self.words.ttft_sources.pd_gateway,
        ) {
            let routing = trace
                .above(decode)
                .find(|h| self.words.is_sidecar_routing(&h.span));
            count_from(
                &self.words,
                &mut request,
                routing,
                decode.span.start_ns,
                self.words.ttft_sources.pd_sidecar,
            );
        }
        if decode.span.failed() {
            let reason = self
                .words
                .failure_reason(std::iter::once(&decode.span), true);
            request.failure_reason = Some(reason.unwrap_or(self.words.failures.error));
        }
        request
    }

    /// Engine requests one after another that answer one call (chunks, Responses-API turns;
    /// `joined_request._merge_sequence`): every one's tokens, from the first one's start to the last one's end.
    fn merge_sequence(&self, request: &mut Joined, first: &Held, parts: &[&Held]) {
        let rules = &self.rules;
        request.completion_tokens = total(
            parts
                .iter()
                .map(|p| rules.number(Field::CompletionTokens, &[p])),
        );
        request.decode_seconds = total(
            parts
                .iter()
                .map(|p| rules.number(Field::DecodeSeconds, &[p])),
        );
        request.end_ns = parts.iter().map(|p| p.span.end_ns).max().unwrap_or(0);
        request.e2e_seconds = Some(seconds_between(request.end_ns, first.span.start_ns));
    }

    /// The anchors in turn order when they are the turns of one Responses-API call
    /// (`RequestBuilder._turns`): each `<id>_<n>` of one call id, each turn once. Else None.
    fn turns<'a>(&self, anchors: &[&'a Held]) -> Option<Spans<'a>> {
        let mut numbered: Vec<(u32, &'a Held)> = Vec::with_capacity(anchors.len());
        let mut call: Option<String> = None;
        for anchor in anchors {
            let raw = self.rules.identifier(Field::RequestId, &[anchor]);
            let (base, turn) = shapes::turn_of(raw.as_deref())?;
            if call.as_deref().is_some_and(|c| c != base)
                || numbered.iter().any(|(n, _)| *n == turn)
            {
                return None;
            }
            call.get_or_insert_with(|| base.to_owned());
            numbered.push((turn, anchor));
        }
        numbered.sort_by_key(|(n, _)| *n);
        Some(numbered.into_iter().map(|(_, a)| a).collect())
    }

    /// The coordinator's refused conditional-decode probe: a leg of its call, neither a request nor a
    /// failure (`RequestBuilder.probe`).
    pub fn probe(&self, text: &mut String, gateway: &Held, scope: &[&Held]) -> Joined {
        let mut request = self.failed(text, gateway, scope, self.words.failures.invalid);
        request.outcome = self.words.outcomes.probe;
        request.failure_reason = None;
        request.phase = Some(self.words.phases.decode);
        request
    }

    /// A request that reached no model server (or whose decode stage never came).
    pub fn failed(&self, text: &mut String, head: &Held, scope: &[&Held], reason: Word) -> Joined {
        let companions: Spans<'_> = scope
            .iter()
            .copied()
            .filter(|s| !std::ptr::eq(*s, head))
            .collect();
        let mut request = self.build(text, head, &companions, self.words.outcomes.failed);
        // The gateway's own numbers are no model server's.
        request.ttft_seconds = None;
        request.ttft_source = None;
        request.server_ttft_seconds = None;
        request.e2e_seconds = None;
        request.queue_seconds = None;
        request.prefill_seconds = None;
        request.decode_seconds = None;
        request.completion_tokens = None;
        request.prompt_tokens = None;
        request.pod = None;
        if request.routing == self.words.routings.unknown {
            request.routing = self.words.routings.none; // refused before it was scheduled
        }
        request.failure_reason = Some(reason);
        request.arrival_ns = head.span.start_ns;
        request
    }

    fn merge_choices(&self, request: &mut Joined, anchors: &[&Held]) {
        let rules = &self.rules;
        let (mut ttfts, mut tpots, mut e2es, mut tokens) = (vec![], vec![], vec![], vec![]);
        for anchor in anchors {
            let view = [*anchor];
            let ttft = rules.number(Field::TtftSeconds, &view);
            let e2e = rules.number(Field::E2eSeconds, &view);
            let completion = rules.number(Field::CompletionTokens, &view);
            ttfts.extend(ttft);
            e2es.extend(e2e);
            tokens.push(completion);
            tpots.extend(tpot_seconds(e2e, ttft, completion));
        }
        request.choices = anchors.len() as u32;
        if request.ttft_source == Some(self.words.ttft_sources.model_server) && !ttfts.is_empty() {
            request.ttft_seconds = py_min(&ttfts);
        }
        if !ttfts.is_empty() {
            request.server_ttft_seconds = py_min(&ttfts);
        }
        if !e2es.is_empty() {
            request.e2e_seconds = py_max(&e2es);
        }
        request.completion_tokens = total(tokens.into_iter());
        request.tpot_seconds = py_max(&tpots);
    }

    /// Every field: model-server facts from the anchor alone, gateway facts from companions first.
    pub fn build(
        &self,
        text: &mut String,
        anchor: &Held,
        companions: &[&Held],
        outcome: Word,
    ) -> Joined {
        let rules = &self.rules;
        let own: [&Held; 1] = [anchor];
        let gateway: Spans<'_> = companions.iter().copied().chain([anchor]).collect();
        let gw = &gateway[..];
        let mut gateway_ttft = rules.number(Field::GatewayTtftSeconds, gw);
        if gateway_ttft.is_none() {
            gateway_ttft = rules.number(Field::GatewayTtftMs, gw).map(|ms| ms / 1000.0);
        }
        let server_ttft = rules.number(Field::TtftSeconds, &own);
        let (ttft, ttft_source) = match (gateway_ttft, server_ttft) {
            (Some(g), _) => (Some(g), Some(self.words.ttft_sources.gateway)),
            (None, Some(s)) => (Some(s), Some(self.words.ttft_sources.model_server)),
            _ => (None, None),
        };
        fn non_empty(s: Option<&str>) -> Option<&str> {
            s.filter(|s| !s.is_empty())
        }
        let routing = self
            .words
            .routing(companions.iter().map(|h| &h.span), &self.latency_scorers)
            .unwrap_or_else(|| self.header_routing(gw));
        Joined {
            trace_id: TraceId::default(), // the assembler's: held spans do not carry it
            span_id: anchor.span.span_id,
            outcome,
            request_id: put(text, rules.identifier(Field::RequestId, gw).as_deref()),
            requested_model: put(text, non_empty(rules.string(Field::RequestedModel, gw))),
            target_model: put(
                text,
                non_empty(rules.string(Field::TargetModel, &own))
                    .or_else(|| non_empty(rules.string(Field::TargetModel, gw))),
            ),
            pool: put(text, rules.string(Field::Pool, gw)),
            pod: put(text, rules.string(Field::Pod, &own)),
            endpoint: put(text, rules.string(Field::Endpoint, gw)),
            slo_ttft_ms: rules.header_number(Field::SloTtftMs, gw),
            slo_tpot_ms: rules.header_number(Field::SloTpotMs, gw),
            routing,
            predicted_ttft_ms: rules.number(Field::PredictedTtftMs, gw),
            predicted_tpot_ms: rules.number(Field::PredictedTpotMs, gw),
            ttft_seconds: ttft,
            ttft_source,
            server_ttft_seconds: server_ttft,
            e2e_seconds: rules.number(Field::E2eSeconds, &own),
            queue_seconds: rules.number(Field::QueueSeconds, &own),
            prefill_seconds: rules.number(Field::PrefillSeconds, &own),
            decode_seconds: rules.number(Field::DecodeSeconds, &own),
            prompt_tokens: rules.number(Field::PromptTokens, &own),
            completion_tokens: rules.number(Field::CompletionTokens, &own),
            prefix_cache_score: rules.number(Field::PrefixCacheScore, gw),
            start_ns: anchor.span.start_ns,
            end_ns: anchor.span.end_ns,
            arrival_ns: anchor.span.start_ns,
            failure_reason: None,
            tpot_seconds: None,
            choices: 1,
            prefill_pod: None,
            prefill_queue_seconds: None,
            prefill_seconds_on_prefill_pod: None,
            phase: self.words.phase(companions.iter().map(|h| &h.span)),
            call_arrival_ns: 0,
            sampling_probability: std::iter::once(anchor)
                .chain(companions.iter().copied())
                .find_map(|h| sampling::probability(h.span.threshold)),
            // The gateway's identity from its own spans: a model server's resource is not the gateway's.
            gateway: put(
                text,
                rules.string(
                    Field::Gateway,
                    if outcome == self.words.outcomes.failed {
                        gw
                    } else {
                        companions
                    },
                ),
            ),
        }
    }

    /// The late-2025 EPP profile headers: x-prediction-based-scheduling, or presence of ...-off.
    fn header_routing(&self, view: &[&Held]) -> Word {
        match self
            .rules
            .header_bool(Field::PredictionBasedScheduling, view)
        {
            Some(true) => self.words.routings.predicted,
            Some(false) => self.words.routings.default,
            None if self
                .rules
                .present(Field::PredictionBasedSchedulingOff, view) =>
            {
                self.words.routings.default
            }
            None => self.words.routings.unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpot_as_the_evaluator_defines_it() {
        assert_eq!(tpot_seconds(Some(1.1), Some(0.1), Some(11.0)), Some(0.1));
        assert_eq!(tpot_seconds(Some(1.0), Some(0.1), Some(1.0)), None);
        assert_eq!(tpot_seconds(Some(0.05), Some(0.1), Some(5.0)), None);
        assert_eq!(tpot_seconds(Some(1.0), None, Some(5.0)), None);
        assert_eq!(tpot_seconds(Some(1.0), Some(0.1), Some(2.5)), None);
    }

    #[test]
    fn python_min_and_max_keep_the_first() {
        assert_eq!(py_min(&[2.0, 1.0, 3.0]), Some(1.0));
        assert!(py_max(&[f64::NAN, 1.0]).unwrap().is_nan());
        assert_eq!(py_max(&[]), None);
    }
}
