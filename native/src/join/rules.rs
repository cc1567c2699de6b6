//! The configured attribute mapping (`Mapping.rules()`) and how request fields are read from a
//! view of spans, exactly as `sloscope.attributes.Mapping` and `View` read them.
//!
//! A view is a list of spans, nearest first: for each configured key in order, the first span of
//! the list that carries it gives the value (Python merges the dicts so the nearest one wins).

use std::borrow::Cow;

use crate::join::held::{KeyId, ValueRef};
use crate::join::trace::Held;
use crate::span::Value;

/// The request fields the mapping names, in `Mapping`'s order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    PrefixCacheScore,
    PredictedTtftMs,
    PredictedTpotMs,
    GatewayTtftSeconds,
    GatewayTtftMs,
    TtftSeconds,
    E2eSeconds,
    QueueSeconds,
    PrefillSeconds,
    DecodeSeconds,
    PromptTokens,
    CompletionTokens,
    RequestedModel,
    TargetModel,
    Pool,
    Pod,
    Endpoint,
    RequestId,
    SloTtftMs,
    SloTpotMs,
    PredictionBasedScheduling,
    PredictionBasedSchedulingOff,
    Gateway,
}

/// The Python names of the fields, index for index with [`Field`].
pub const FIELD_NAMES: [&str; 23] = [
    "prefix_cache_score",
    "predicted_ttft_ms",
    "predicted_tpot_ms",
    "gateway_ttft_seconds",
    "gateway_ttft_ms",
    "ttft_seconds",
    "e2e_seconds",
    "queue_seconds",
    "prefill_seconds",
    "decode_seconds",
    "prompt_tokens",
    "completion_tokens",
    "requested_model",
    "target_model",
    "pool",
    "pod",
    "endpoint",
    "request_id",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "prediction_based_scheduling",
    "prediction_based_scheduling_off",
    "gateway",
];

/// One configured source of a field: a span attribute, or a resource attribute.
#[derive(Clone, Debug)]
pub struct Source {
    pub resource: bool,
    pub key: Box<str>,
    /// The key's interned id (span attributes are read by id).
    pub id: KeyId,
}

/// The compiled mapping: each field's sources in configured order.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    pub order: Vec<Vec<Source>>, // indexed by Field as usize
}

pub type View<'a> = [&'a Held];

impl Rules {
    pub fn new(order: Vec<Vec<Source>>) -> Rules {
        Rules { order }
    }

    /// The value of the first configured attribute the view holds (`Value::Empty` when it holds
    /// None), or None when it holds none of them.
    pub fn raw<'a>(&self, field: Field, view: &View<'a>) -> Option<ValueRef<'a>> {
        for source in &self.order[field as usize] {
            for held in view {
                let found = if source.resource {
                    held.span.resource_attribute(&source.key)
                } else {
                    held.span.attribute(source.id)
                };
                if found.is_some() {
                    return found;
                }
            }
        }
        None
    }

    pub fn number(&self, field: Field, view: &View<'_>) -> Option<f64> {
        match self.raw(field, view)? {
            ValueRef::Int(i) => Some(i as f64),
            ValueRef::Double(d) => Some(d),
            _ => None,
        }
    }

    pub fn string<'a>(&self, field: Field, view: &View<'a>) -> Option<&'a str> {
        as_string(self.raw(field, view)?)
    }

    pub fn identifier<'a>(&self, field: Field, view: &View<'a>) -> Option<Cow<'a, str>> {
        as_id(self.raw(field, view)?)
    }

    pub fn present(&self, field: Field, view: &View<'_>) -> bool {
        !matches!(self.raw(field, view), None | Some(ValueRef::Empty))
    }

    /// A header such as x-slo-ttft-ms: a number, or a float in a string; None if unusable.
    pub fn header_number(&self, field: Field, view: &View<'_>) -> Option<f64> {
        let value = self.raw(field, view)?;
        match value {
            ValueRef::Int(i) => return Some(i as f64),
            ValueRef::Double(d) => return Some(d),
            _ => {}
        }
        let number = python_float(as_string(value)?)?;
        number.is_finite().then_some(number)
    }

    pub fn header_bool(&self, field: Field, view: &View<'_>) -> Option<bool> {
        let value = self.raw(field, view)?;
        if let ValueRef::Bool(b) = value {
            return Some(b);
        }
        let lowered = python_strip(as_string(value)?).to_lowercase();
        match lowered.as_str() {
            "true" | "1" | "t" | "yes" => Some(true),
            "false" | "0" | "f" | "no" => Some(false),
            _ => None,
        }
    }
}

/// A string, or the first of an array of strings (a captured header).
pub fn as_string(value: ValueRef<'_>) -> Option<&str> {
    match value {
        ValueRef::Str(s) => Some(s),
        ValueRef::Other(Value::Array(items)) => match items.first() {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// An identifier: a string, or an integer read as its decimal string.
pub fn as_id(value: ValueRef<'_>) -> Option<Cow<'_, str>> {
    match value {
        ValueRef::Int(i) => Some(Cow::Owned(i.to_string())),
        other => as_string(other).map(Cow::Borrowed),
    }
}

/// Python's `str.isspace` characters: Unicode White_Space plus the ASCII separators 0x1c-0x1f.
fn python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

pub fn python_strip(text: &str) -> &str {
    text.trim_matches(python_space)
}

/// `float(text.strip())` for the ASCII forms Python accepts: Rust's parser plus `_` between digits.
pub fn python_float(text: &str) -> Option<f64> {
    let text = python_strip(text);
    if !text.contains('_') {
        return text.parse().ok();
    }
    let bytes = text.as_bytes();
    let mut cleaned = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if c == '_' {
            let before = i > 0 && bytes[i - 1].is_ascii_digit();
            let after = bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
            if !(before && after) {
                return None;
            }
        } else {
            cleaned.push(c);
        }
    }
    cleaned.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_parse_as_python_parses_them() {
        assert_eq!(python_float(" 200 "), Some(200.0));
        assert_eq!(python_float("1_000.5"), Some(1000.5));
        assert_eq!(python_float("1__0"), None);
        assert_eq!(python_float("_1"), None);
        assert_eq!(python_float("1e3"), Some(1000.0));
        assert_eq!(python_float(".5"), Some(0.5));
        assert_eq!(python_float("abc"), None);
        assert_eq!(python_float("\u{1f}7\u{a0}"), Some(7.0));
        assert!(python_float("inf").unwrap().is_infinite());
    }
}
