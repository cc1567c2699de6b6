//! The span vocabulary of the upstreams: generated from `sloscope.upstream.vocabulary` by `make generate`.
//! Do not edit: change the Python vocabulary and regenerate.

/// A field of the vocabulary: a word, words (sets sorted), HTTP codes, or one code.
pub enum Word {
    Str(&'static str),
    Strs(&'static [&'static str]),
    Codes(&'static [i64]),
    Code(i64),
}

pub const PREFILL_LEGS: [&str; 2] = ["llm_d.pd_proxy.prefill", "prefill"];
pub const DECODE_LEGS: [&str; 2] = ["decode", "llm_d.pd_proxy.decode"];
pub const SIDECAR_ROUTING: &str = "forward_request";
pub const SIDECAR_SERVER_PREFIX: &str = "llm_d.pd_proxy.";
pub const SCHEDULING: [&str; 4] = ["filter_endpoints", "llm_d.epp.scoring", "pick_endpoints", "run_scheduler_profile"];
pub const SCORER_PREFIX: &str = "llm_d.epp.scorer.";
pub const PROFILE_SPAN: &str = "run_scheduler_profile";
pub const PROFILE_NAME: &str = "llm_d.epp.scheduling.profile.name";
pub const PHASES: [&str; 3] = ["encode", "prefill", "decode"];
pub const EARLY_PHASES: [&str; 2] = ["encode", "prefill"];
pub const DISAGGREGATION_USED: &str = "llm_d.epp.pd.disaggregation_used";
pub const SCORER_TYPE: &str = "llm_d.epp.scorer.type";
pub const HTTP_STATUS_KEYS: [&str; 2] = ["http.response.status_code", "http.status_code"];
pub const CLIENT_ERROR_CODES: [&str; 5] = ["error: badrequest", "error: unauthorized", "error: forbidden", "error: notfound", "error: preconditionfailed"];
pub const NOT_CLIENT: [i64; 3] = [408, 429, 499];
pub const PROBE_REFUSED: &str = "error: preconditionfailed";
pub const PRECONDITION_FAILED: i64 = 412;
pub const TIMEOUT_PHRASES: [&str; 2] = ["timed out", "deadline exceeded"];
pub const TIMEOUT_CODES: [i64; 2] = [408, 504];
pub const SHED_PHRASES: [&str; 2] = ["cannot be admitted", "resourceexhausted"];
pub const SHED_CODES: [i64; 1] = [429];
pub const ABORTED_PHRASES: [&str; 2] = ["client disconnected", "context canceled"];
pub const ABORTED_CODES: [i64; 1] = [499];
pub const FAILURE_REASONS: [&str; 5] = ["error", "shed", "timeout", "aborted", "invalid"];
pub const ROUTINGS: [&str; 4] = ["predicted", "default", "unknown", "none"];

/// Every field by its Python name, for `sloscope._native.vocabulary()`.
pub const WORDS: [(&str, Word); 25] = [
    ("prefill_legs", Word::Strs(&PREFILL_LEGS)),
    ("decode_legs", Word::Strs(&DECODE_LEGS)),
    ("sidecar_routing", Word::Str(SIDECAR_ROUTING)),
    ("sidecar_server_prefix", Word::Str(SIDECAR_SERVER_PREFIX)),
    ("scheduling", Word::Strs(&SCHEDULING)),
    ("scorer_prefix", Word::Str(SCORER_PREFIX)),
    ("profile_span", Word::Str(PROFILE_SPAN)),
    ("profile_name", Word::Str(PROFILE_NAME)),
    ("phases", Word::Strs(&PHASES)),
    ("early_phases", Word::Strs(&EARLY_PHASES)),
    ("disaggregation_used", Word::Str(DISAGGREGATION_USED)),
    ("scorer_type", Word::Str(SCORER_TYPE)),
    ("http_status_keys", Word::Strs(&HTTP_STATUS_KEYS)),
    ("client_error_codes", Word::Strs(&CLIENT_ERROR_CODES)),
    ("not_client", Word::Codes(&NOT_CLIENT)),
    ("probe_refused", Word::Str(PROBE_REFUSED)),
    ("precondition_failed", Word::Code(PRECONDITION_FAILED)),
    ("timeout_phrases", Word::Strs(&TIMEOUT_PHRASES)),
    ("timeout_codes", Word::Codes(&TIMEOUT_CODES)),
    ("shed_phrases", Word::Strs(&SHED_PHRASES)),
    ("shed_codes", Word::Codes(&SHED_CODES)),
    ("aborted_phrases", Word::Strs(&ABORTED_PHRASES)),
    ("aborted_codes", Word::Codes(&ABORTED_CODES)),
    ("failure_reasons", Word::Strs(&FAILURE_REASONS)),
    ("routings", Word::Strs(&ROUTINGS)),
];

pub const FAILURE_ERROR: &str = "error";
pub const FAILURE_SHED: &str = "shed";
pub const FAILURE_TIMEOUT: &str = "timeout";
pub const FAILURE_ABORTED: &str = "aborted";
pub const FAILURE_INVALID: &str = "invalid";
pub const ROUTING_PREDICTED: &str = "predicted";
pub const ROUTING_DEFAULT: &str = "default";
pub const ROUTING_UNKNOWN: &str = "unknown";
pub const ROUTING_NONE: &str = "none";
pub const PHASE_ENCODE: &str = "encode";
pub const PHASE_PREFILL: &str = "prefill";
pub const PHASE_DECODE: &str = "decode";
