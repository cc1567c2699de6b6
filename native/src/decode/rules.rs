//! What the decoder keeps and checks, from `Mapping.span_keys()` and `Mapping.rules()["typed"]`
//! (exporter/sloscope/attributes.py): the span attributes worth converting, and for each span
//! key a mapped field reads, the type its value must have. The check is `Mapping.check`'s, so a
//! native batch needs no second pass in Python.

use std::collections::{HashMap, HashSet};

use crate::packed::In;
use crate::span::Value;

/// The kinds `Mapping` names (its `_typed` values), with the words its messages use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    Number,
    String,
    StringOrInteger,
}

impl Expected {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "a number" => Some(Expected::Number),
            "a string" => Some(Expected::String),
            "a string or an integer" => Some(Expected::StringOrInteger),
            _ => None,
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            Expected::Number => "a number",
            Expected::String => "a string",
            Expected::StringOrInteger => "a string or an integer",
        }
    }

    /// Whether `value` is usable: `Mapping.check`'s `_NUMBER_TYPES` (int or float, never bool),
    /// `_as_string` (a string, or an array whose first element is one: a captured header) and
    /// `_as_id` (an integer, else as a string).
    pub fn accepts(self, value: &Value) -> bool {
        let string = || match value {
            Value::Str(_) => true,
            Value::Array(items) => matches!(items.first(), Some(Value::Str(_))),
            _ => false,
        };
        match self {
            Expected::Number => matches!(value, Value::Int(_) | Value::Double(_)),
            Expected::String => string(),
            Expected::StringOrInteger => matches!(value, Value::Int(_)) || string(),
        }
    }

    /// `accepts` for a value in packed form.
    pub fn accepts_in(self, value: &In<'_>) -> bool {
        match value {
            In::Whole(whole) => self.accepts(whole),
            In::Str(_) | In::Header(_) => self != Expected::Number,
            In::Int(_) => self != Expected::String,
            In::Double(_) => self == Expected::Number,
            In::Bool(_) | In::Empty => false,
        }
    }
}

/// One typed span key: the field it feeds and the type it must have.
#[derive(Clone, Debug)]
pub struct Rule {
    pub field: Box<str>,
    pub expected: Expected,
}

#[derive(Default)]
pub struct Rules {
    /// None keeps every span attribute (resource attributes are always kept).
    pub keep: Option<HashSet<Box<str>>>,
    /// Typed span keys, to their rule in `list` (looked up once per distinct key of a payload).
    pub typed: HashMap<Box<str>, u32>,
    pub list: Vec<Rule>,
}

impl Rules {
    pub fn kept(&self, key: &str) -> bool {
        self.keep.as_ref().is_none_or(|keep| keep.contains(key))
    }

    pub fn add(&mut self, key: Box<str>, rule: Rule) {
        self.typed.insert(key, self.list.len() as u32);
        self.list.push(rule);
    }

    pub fn rule_of(&self, key: &str) -> Option<u32> {
        self.typed.get(key).copied()
    }
}

/// The first wrong-typed attribute of a span, in the span's own order (as `Mapping.check` names
/// the first bad key of the dict, which keeps each key's first position). `typed` holds the
/// span's typed keys (interned, so equal keys compare at once) with their rules; `accepts` is
/// `Expected::accepts` for the value's type.
pub fn first_wrong<'a, K: PartialEq, V>(
    rules: &'a Rules,
    attrs: &'a [(K, V)],
    typed: &[(K, u32)],
    accepts: impl Fn(Expected, &V) -> bool,
) -> Option<(&'a K, &'a Rule, &'a V)> {
    if typed.is_empty() {
        return None;
    }
    attrs.iter().find_map(|(key, value)| {
        let (_, index) = typed.iter().find(|(k, _)| k == key)?;
        let rule = &rules.list[*index as usize];
        (!accepts(rule.expected, value)).then_some((key, rule, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_as_mapping_check_does() {
        let header = Value::Array(vec![Value::Str("200".into())].into_boxed_slice());
        let ints = Value::Array(vec![Value::Int(1)].into_boxed_slice());
        let empty = Value::Array(Vec::new().into_boxed_slice());
        assert!(Expected::Number.accepts(&Value::Int(1)));
        assert!(Expected::Number.accepts(&Value::Double(0.5)));
        assert!(!Expected::Number.accepts(&Value::Bool(true)));
        assert!(!Expected::Number.accepts(&Value::Str("1".into())));
        assert!(!Expected::Number.accepts(&Value::Empty));
        assert!(Expected::String.accepts(&header));
        assert!(!Expected::String.accepts(&ints));
        assert!(!Expected::String.accepts(&empty));
        assert!(!Expected::String.accepts(&Value::Int(1)));
        assert!(Expected::StringOrInteger.accepts(&Value::Int(1)));
        assert!(Expected::StringOrInteger.accepts(&header));
        assert!(!Expected::StringOrInteger.accepts(&Value::Double(1.0)));
    }

    #[test]
    fn packed_values_are_accepted_as_their_owned_form_is() {
        let values = [
            Value::Str("x".into()),
            Value::Array(vec![Value::Str("200".into())].into_boxed_slice()),
            Value::Array(vec![Value::Str("".into())].into_boxed_slice()),
            Value::Array(vec![Value::Int(1)].into_boxed_slice()),
            Value::Int(1),
            Value::Double(0.5),
            Value::Bool(true),
            Value::Empty,
            Value::Bytes(Box::new([1])),
        ];
        let kinds = [
            Expected::Number,
            Expected::String,
            Expected::StringOrInteger,
        ];
        for value in &values {
            for kind in kinds {
                let packed = In::of(value);
                assert_eq!(
                    kind.accepts_in(&packed),
                    kind.accepts(value),
                    "{kind:?} {value:?}"
                );
            }
        }
    }
}
