//! The span vocabulary of the upstreams, as the join is given it: read from the Python object
//! `sloscope.upstream.vocabulary.VOCABULARY` (a frozen `SpanVocabulary`) when an assembler is made.
//!
//! No word is written here. Each field of `Spec` is read from the attribute of its name, so a field
//! the Python vocabulary lacks or types otherwise fails when the assembler is made, by name; the
//! words the shapes read (`shapes.rs`) and write (failure reasons, routings, phases) are the ones
//! Python passed. The shapes (what a leg, a probe or a shed request looks like) are written in
//! `shapes.rs` and in `sloscope.processors.span_shapes` alike.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use pyo3::Borrowed;

use crate::join::held::{KeyId, Keys};

/// A word the join writes into a joined request (a label of the series): interned for the life of
/// the process, so a request carries a `&'static str` as it did when the words were constants. The
/// words of all the vocabularies ever given are kept once each: a handful.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Word(pub &'static str);

impl Word {
    pub fn of(text: &str) -> Word {
        static WORDS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
        let mut words = WORDS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(word) = words.get(text) {
            return Word(word);
        }
        let word: &'static str = Box::leak(text.into());
        words.insert(word);
        Word(word)
    }
}

impl FromPyObject<'_, '_> for Word {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Word> {
        Ok(Word::of(&obj.extract::<String>()?))
    }
}

/// A few words or codes, looked up by scanning: the sets of the vocabulary hold two to five, where comparing
/// strings beats hashing one (a span's name is looked up in several on every span held).
#[derive(Debug, Default)]
pub struct Few<T>(Vec<T>);

impl<T: Ord> From<HashSet<T>> for Few<T> {
    fn from(set: HashSet<T>) -> Few<T> {
        let mut items: Vec<T> = set.into_iter().collect();
        items.sort();
        Few(items)
    }
}

impl Few<String> {
    pub fn has(&self, word: &str) -> bool {
        self.0.iter().any(|w| w == word)
    }
}

impl Few<i64> {
    pub fn has(&self, code: i64) -> bool {
        self.0.contains(&code)
    }
}

/// Why a request failed (`sloscope.upstream.vocabulary.Failures`).
#[derive(FromPyObject, Clone, Copy, Debug)]
pub struct Failures {
    pub error: Word,
    pub shed: Word,
    pub timeout: Word,
    pub aborted: Word,
    pub invalid: Word,
}

/// How a request was routed (`Routings`).
#[derive(FromPyObject, Clone, Copy, Debug)]
pub struct Routings {
    pub predicted: Word,
    pub default: Word,
    pub unknown: Word,
    pub none: Word,
}

/// The coordinator's phases, which are also its scheduling profiles' names (`Phases`).
#[derive(FromPyObject, Clone, Copy, Debug)]
pub struct Phases {
    pub encode: Word,
    pub prefill: Word,
    pub decode: Word,
}

impl Phases {
    pub fn all(&self) -> [Word; 3] {
        [self.encode, self.prefill, self.decode]
    }
}

/// How a request was joined (`Outcomes`): the `outcome` label of `sloscope_traces_joined_total`.
#[derive(FromPyObject, Clone, Copy, Debug)]
pub struct Outcomes {
    pub joined: Word,
    pub joined_by_request_id: Word,
    pub anchor_only: Word,
    pub no_anchor: Word,
    pub evicted: Word,
    pub failed: Word,
    pub probe: Word,
    pub encoder_part: Word,
}

/// Where a request's TTFT was measured from (`TtftSources`).
#[derive(FromPyObject, Clone, Copy, Debug)]
pub struct TtftSources {
    pub gateway: Word,
    pub gateway_arrival: Word,
    pub pd_gateway: Word,
    pub pd_sidecar: Word,
    pub model_server: Word,
}

/// Why the join dropped a span (`Drops`): the `reason` label of `sloscope_spans_dropped_total`.
#[derive(FromPyObject, Clone, Copy, Debug)]
pub struct Drops {
    pub duplicate: Word,
    pub late: Word,
    pub pending_cap: Word,
    pub trace_too_large: Word,
}

/// The Python `SpanVocabulary`, field by field (its docstrings say where each word comes from).
#[derive(FromPyObject)]
pub struct Spec {
    prefill_legs: HashSet<String>,
    decode_legs: HashSet<String>,
    sidecar_routing: String,
    sidecar_server_prefix: String,
    scheduling: HashSet<String>,
    scorer_prefix: String,
    profile_span: String,
    profile_name: String,
    phases: Phases,
    early_phases: Vec<Word>,
    disaggregation_used: String,
    scorer_type: String,
    http_status_keys: Vec<String>,
    client_error_codes: Vec<String>,
    not_client: HashSet<i64>,
    probe_refused: String,
    precondition_failed: i64,
    timeout_phrases: Vec<String>,
    timeout_codes: HashSet<i64>,
    shed_phrases: Vec<String>,
    shed_codes: HashSet<i64>,
    aborted_phrases: Vec<String>,
    aborted_codes: HashSet<i64>,
    failures: Failures,
    routings: Routings,
    outcomes: Outcomes,
    ttft_sources: TtftSources,
    drops: Drops,
}

/// What a failed span's status message or HTTP code says for one reason.
pub struct Says {
    pub phrases: Vec<String>,
    pub codes: Few<i64>,
}

/// The vocabulary as the join reads it: the spec's words, its attribute keys interned.
pub struct Vocabulary {
    pub prefill_legs: Few<String>,
    pub decode_legs: Few<String>,
    pub sidecar_routing: String,
    pub sidecar_server_prefix: String,
    pub scheduling: Few<String>,
    pub scorer_prefix: String,
    pub profile_span: String,
    pub phases: Phases,
    pub early_phases: Vec<Word>,
    pub client_error_codes: Vec<String>,
    pub not_client: Few<i64>,
    pub probe_refused: String,
    pub precondition_failed: i64,
    pub timeout: Says,
    pub shed: Says,
    pub aborted: Says,
    pub failures: Failures,
    pub routings: Routings,
    pub outcomes: Outcomes,
    pub ttft_sources: TtftSources,
    pub drops: Drops,
    /// The attribute keys the shapes read, as ids of the join's `Keys`.
    pub http_status_keys: Vec<KeyId>,
    pub scorer_type: KeyId,
    pub disaggregation_used: KeyId,
    pub profile_name: KeyId,
}

impl Vocabulary {
    /// The vocabulary of `spec`, its keys interned in `keys` (first, so they get the lowest ids);
    /// the HTTP status and scorer type keys are the ones whose string values are read apart from
    /// arrays of strings (`held::HeldSpan::pack`).
    pub fn new(spec: Spec, keys: &mut Keys) -> Vocabulary {
        let http_status_keys: Vec<KeyId> = spec.http_status_keys.iter().map(|k| keys.id(k)).collect();
        let scorer_type = keys.id(&spec.scorer_type);
        let disaggregation_used = keys.id(&spec.disaggregation_used);
        let profile_name = keys.id(&spec.profile_name);
        keys.read_apart(http_status_keys.iter().copied().chain([scorer_type]));
        Vocabulary {
            prefill_legs: spec.prefill_legs.into(),
            decode_legs: spec.decode_legs.into(),
            sidecar_routing: spec.sidecar_routing,
            sidecar_server_prefix: spec.sidecar_server_prefix,
            scheduling: spec.scheduling.into(),
            scorer_prefix: spec.scorer_prefix,
            profile_span: spec.profile_span,
            phases: spec.phases,
            early_phases: spec.early_phases,
            client_error_codes: spec.client_error_codes,
            not_client: spec.not_client.into(),
            probe_refused: spec.probe_refused,
            precondition_failed: spec.precondition_failed,
            timeout: Says {
                phrases: spec.timeout_phrases,
                codes: spec.timeout_codes.into(),
            },
            shed: Says {
                phrases: spec.shed_phrases,
                codes: spec.shed_codes.into(),
            },
            aborted: Says {
                phrases: spec.aborted_phrases,
                codes: spec.aborted_codes.into(),
            },
            failures: spec.failures,
            routings: spec.routings,
            outcomes: spec.outcomes,
            ttft_sources: spec.ttft_sources,
            drops: spec.drops,
            http_status_keys,
            scorer_type,
            disaggregation_used,
            profile_name,
        }
    }
}

/// The llm-d words of `sloscope.upstream.vocabulary.VOCABULARY`, for the native unit tests, which
/// run without Python; the Python tests hold the join to the real object.
#[cfg(test)]
pub mod testing {
    use super::*;

    fn set<T: Copy + Eq + std::hash::Hash + Into<U>, U: Eq + std::hash::Hash>(items: &[T]) -> HashSet<U> {
        items.iter().map(|&i| i.into()).collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    pub fn llm_d(keys: &mut Keys) -> Vocabulary {
        let w = Word::of;
        let spec = Spec {
            prefill_legs: set(&["prefill", "llm_d.pd_proxy.prefill"]),
            decode_legs: set(&["decode", "llm_d.pd_proxy.decode"]),
            sidecar_routing: "forward_request".into(),
            sidecar_server_prefix: "llm_d.pd_proxy.".into(),
            scheduling: set(&["run_scheduler_profile", "filter_endpoints", "llm_d.epp.scoring", "pick_endpoints"]),
            scorer_prefix: "llm_d.epp.scorer.".into(),
            profile_span: "run_scheduler_profile".into(),
            profile_name: "llm_d.epp.scheduling.profile.name".into(),
            phases: Phases {
                encode: w("encode"),
                prefill: w("prefill"),
                decode: w("decode"),
            },
            early_phases: vec![w("encode"), w("prefill")],
            disaggregation_used: "llm_d.epp.pd.disaggregation_used".into(),
            scorer_type: "llm_d.epp.scorer.type".into(),
            http_status_keys: strings(&["http.response.status_code", "http.status_code"]),
            client_error_codes: strings(&[
                "error: badrequest",
                "error: unauthorized",
                "error: forbidden",
                "error: notfound",
                "error: preconditionfailed",
            ]),
            not_client: set(&[408, 429, 499]),
            probe_refused: "error: preconditionfailed".into(),
            precondition_failed: 412,
            timeout_phrases: strings(&["timed out", "deadline exceeded"]),
            timeout_codes: set(&[504, 408]),
            shed_phrases: strings(&["cannot be admitted", "resourceexhausted"]),
            shed_codes: set(&[429]),
            aborted_phrases: strings(&["client disconnected", "context canceled"]),
            aborted_codes: set(&[499]),
            failures: Failures {
                error: w("error"),
                shed: w("shed"),
                timeout: w("timeout"),
                aborted: w("aborted"),
                invalid: w("invalid"),
            },
            routings: Routings {
                predicted: w("predicted"),
                default: w("default"),
                unknown: w("unknown"),
                none: w("none"),
            },
            outcomes: Outcomes {
                joined: w("joined"),
                joined_by_request_id: w("joined_by_request_id"),
                anchor_only: w("anchor_only"),
                no_anchor: w("no_anchor"),
                evicted: w("evicted"),
                failed: w("failed"),
                probe: w("conditional_decode_probe"),
                encoder_part: w("encoder_part"),
            },
            ttft_sources: TtftSources {
                gateway: w("gateway"),
                gateway_arrival: w("gateway_arrival"),
                pd_gateway: w("pd_gateway"),
                pd_sidecar: w("pd_sidecar"),
                model_server: w("model_server"),
            },
            drops: Drops {
                duplicate: w("duplicate"),
                late: w("late"),
                pending_cap: w("pending_cap"),
                trace_too_large: w("trace_too_large"),
            },
        };
        Vocabulary::new(spec, keys)
    }

    #[test]
    fn a_word_is_interned_once() {
        let a = Word::of(&String::from("shed"));
        let b = Word::of("shed");
        assert!(std::ptr::eq(a.0, b.0));
    }
}
