//! A span as the join holds it while its trace waits: compact, because a pending trace's bytes are
//! what `join.max_pending_bytes` bounds.
//!
//! Against the decoder's `Span`: no trace id (the trace map's key says it), no tracestate (the join
//! never reads it), and the attributes packed as 16-byte records with an interned key id: numbers
//! and booleans in place, strings (with the name and the status message) in one text buffer per
//! span, and only the rare value that is neither (an array, a map, bytes) kept as a `Value`. Keys are read by id: the mapping's keys and
//! the span-shape keys are interned when the assembler is made, so reading a field compares integers.

use std::mem::size_of;
use std::sync::Arc;

use crate::join::hash::HashMap;
use crate::join::shapes;
use crate::span::{get, Key, Resource, Span, Value, STATUS_ERROR};

/// An interned attribute key.
pub type KeyId = u16;

/// The span-shape keys, at fixed ids (interned first, in this order).
pub const SHAPE_KEYS: [&str; 4] = [
    shapes::HTTP_STATUS_KEYS[0],
    shapes::HTTP_STATUS_KEYS[1],
    shapes::SCORER_TYPE,
    shapes::DISAGGREGATION_USED,
];
pub const HTTP_STATUS_KEYS: [KeyId; 2] = [0, 1];
pub const SCORER_TYPE: KeyId = 2;
pub const DISAGGREGATION_USED: KeyId = 3;

/// The ids of the span-shape keys whose string and array-of-string values the shapes read apart
/// (`shapes::READS_STRINGS_APART`).
const READS_STRINGS_APART: [KeyId; 3] = [HTTP_STATUS_KEYS[0], HTTP_STATUS_KEYS[1], SCORER_TYPE];

/// A captured header (an array of one non-empty string) held as the string: every reader of the join
/// sees the same (`as_string` takes the first element either way, and neither is a number, None or
/// ""), and the array's allocation is saved. The span-shape keys read arrays and strings apart
/// (an HTTP status "429" counts, ["429"] does not), so they keep their form.
fn collapse_header(value: Value) -> Value {
    match value {
        Value::Array(items) if matches!(&*items, [Value::Str(text)] if !text.is_empty()) => {
            match items.into_vec().pop() {
                Some(text) => text,
                None => Value::Empty, // never: the array holds one string
            }
        }
        other => other,
    }
}

/// Keys beyond this many distinct ones share one of two ids (`gen_ai.` or not): the decoder keeps only
/// the mapped keys, so only spans built by hand with thousands of keys get there.
const MAX_KEYS: usize = 4096;
const REQUEST_ID_KEY: &str = "gen_ai.request.id";

/// Slots of the cache of recent keys by address.
const RECENT: usize = 64;

/// The attribute keys seen, each with an id.
#[derive(Default)]
pub struct Keys {
    ids: HashMap<Key, KeyId>,
    gen_ai: Vec<bool>,
    /// The decoder shares one `Arc` per key name, so most keys are found here by address, without
    /// hashing their text. Each slot holds its `Arc`, so its address cannot be reused by another key.
    recent: Vec<Option<(Key, KeyId)>>,
}

impl Keys {
    pub fn new() -> Keys {
        let mut keys = Keys::default();
        for key in SHAPE_KEYS {
            keys.id(key);
        }
        keys
    }

    /// The id of a shared key: by its address when it was seen lately, else by its text.
    pub fn shared_id(&mut self, key: &Key) -> KeyId {
        if self.recent.is_empty() {
            self.recent = vec![None; RECENT];
        }
        let slot = (Arc::as_ptr(key) as *const u8 as usize >> 4) % RECENT;
        if let Some((seen, id)) = &self.recent[slot] {
            if Arc::ptr_eq(seen, key) {
                return *id;
            }
        }
        let id = self.id(key);
        self.recent[slot] = Some((key.clone(), id));
        id
    }

    /// The key's id, interning it when new.
    pub fn id(&mut self, key: &str) -> KeyId {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let gen_ai = is_gen_ai(key);
        if self.ids.len() >= MAX_KEYS {
            return if gen_ai { 0xfffe } else { 0xffff };
        }
        let id = self.ids.len() as KeyId;
        self.ids.insert(key.into(), id);
        self.gen_ai.push(gen_ai);
        id
    }

    fn is_gen_ai(&self, id: KeyId) -> bool {
        self.gen_ai
            .get(id as usize)
            .copied()
            .unwrap_or(id == 0xfffe)
    }

    /// How many keys have an id of their own.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// A `gen_ai.` attribute beyond the request id (`is_llm_call` asks for one).
fn is_gen_ai(key: &str) -> bool {
    key.starts_with("gen_ai.") && key != REQUEST_ID_KEY
}

const STR: u8 = 0;
const BOOL: u8 = 1;
const INT: u8 = 2;
const DOUBLE: u8 = 3;
const EMPTY: u8 = 4;
const OTHER: u8 = 5;

/// One packed attribute: for a string `aux` is its start in the text and `bits` its length; for
/// another value `bits` holds it (an index into `others` for OTHER).
#[derive(Clone, Copy, Debug)]
struct Attr {
    key: KeyId,
    kind: u8,
    gen_ai: bool,
    aux: u32,
    bits: u64,
}

/// A value read from a held span: the forms the join tells apart, borrowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRef<'a> {
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Empty,
    /// An array, a map or bytes, as decoded.
    Other(&'a Value),
}

impl<'a> From<&'a Value> for ValueRef<'a> {
    fn from(value: &'a Value) -> ValueRef<'a> {
        match value {
            Value::Str(s) => ValueRef::Str(s),
            Value::Bool(b) => ValueRef::Bool(*b),
            Value::Int(i) => ValueRef::Int(*i),
            Value::Double(d) => ValueRef::Double(*d),
            Value::Empty => ValueRef::Empty,
            other => ValueRef::Other(other),
        }
    }
}

pub struct HeldSpan {
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    /// OTLP StatusCode (0 unset, 1 ok, 2 error).
    pub status_code: u8,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Where the name and the status message end in `text` (they come first).
    name_end: u32,
    message_end: u32,
    pub resource: Arc<Resource>,
    /// Which key ids its attributes have (bit `id` for ids below 63, bit 63 for any other), so that
    /// looking up a key it lacks, which most lookups are (a field's other keys, the view's other spans),
    /// costs a test rather than a scan.
    present: u64,
    attrs: Box<[Attr]>,
    text: Box<str>,
    /// The values kept whole, boxed apart (a pointer, not a slice's two words: most spans have none,
    /// and the word saved pays for `present`).
    others: Option<Box<Vec<Value>>>,
}

/// A key id's bit in `HeldSpan::present`.
fn key_bit(id: KeyId) -> u64 {
    1 << u32::from(id).min(63)
}

impl HeldSpan {
    /// The span packed, its keys interned in `keys`. The last of duplicate keys is the one read.
    pub fn pack(span: Span, keys: &mut Keys) -> HeldSpan {
        let mut attrs = Vec::with_capacity(span.attributes.len());
        let strings: usize = span
            .attributes
            .iter()
            .map(|(_, v)| match v {
                Value::Str(s) => s.len(),
                // A captured header, collapsed to its string below.
                Value::Array(items) => match &**items {
                    [Value::Str(s)] => s.len(),
                    _ => 0,
                },
                _ => 0,
            })
            .sum();
        let mut text = String::with_capacity(span.name.len() + span.status_message.len() + strings);
        text.push_str(&span.name);
        let name_end = text.len() as u32;
        text.push_str(&span.status_message);
        let message_end = text.len() as u32;
        let mut others = Vec::new();
        let mut present = 0;
        for (key, value) in span.attributes {
            let id = keys.shared_id(&key);
            let value = if READS_STRINGS_APART.contains(&id) {
                value
            } else {
                collapse_header(value)
            };
            let (kind, aux, bits) = match value {
                Value::Str(s) => {
                    let start = text.len();
                    text.push_str(&s);
                    (STR, start as u32, s.len() as u64)
                }
                Value::Bool(b) => (BOOL, 0, u64::from(b)),
                Value::Int(i) => (INT, 0, i as u64),
                Value::Double(d) => (DOUBLE, 0, d.to_bits()),
                Value::Empty => (EMPTY, 0, 0),
                other => {
                    others.push(other);
                    (OTHER, 0, (others.len() - 1) as u64)
                }
            };
            let gen_ai = keys.is_gen_ai(id);
            present |= key_bit(id);
            attrs.push(Attr {
                key: id,
                kind,
                gen_ai,
                aux,
                bits,
            });
        }
        HeldSpan {
            span_id: span.span_id,
            parent_span_id: span.parent_span_id,
            status_code: u8::try_from(span.status_code).unwrap_or(u8::MAX),
            start_ns: span.start_ns,
            end_ns: span.end_ns,
            name_end,
            message_end,
            resource: span.resource,
            present,
            attrs: attrs.into_boxed_slice(),
            text: text.into_boxed_str(),
            others: (!others.is_empty()).then(|| Box::new(others)),
        }
    }

    pub fn name(&self) -> &str {
        &self.text[..self.name_end as usize]
    }

    pub fn status_message(&self) -> &str {
        &self.text[self.name_end as usize..self.message_end as usize]
    }

    fn read(&self, attr: &Attr) -> ValueRef<'_> {
        match attr.kind {
            STR => {
                let start = attr.aux as usize;
                ValueRef::Str(&self.text[start..start + attr.bits as usize])
            }
            BOOL => ValueRef::Bool(attr.bits != 0),
            INT => ValueRef::Int(attr.bits as i64),
            DOUBLE => ValueRef::Double(f64::from_bits(attr.bits)),
            EMPTY => ValueRef::Empty,
            _ => match &self.others {
                Some(others) => ValueRef::Other(&others[attr.bits as usize]),
                None => ValueRef::Empty, // never: an OTHER attribute's value is in `others`
            },
        }
    }

    /// The attribute of key `id` (the last one when the span carried the key twice).
    pub fn attribute(&self, id: KeyId) -> Option<ValueRef<'_>> {
        if self.present & key_bit(id) == 0 {
            return None;
        }
        self.attrs
            .iter()
            .rev()
            .find(|a| a.key == id)
            .map(|a| self.read(a))
    }

    pub fn resource_attribute(&self, key: &str) -> Option<ValueRef<'_>> {
        get(&self.resource.attributes, key).map(ValueRef::from)
    }

    /// The ids of its `gen_ai.` attributes beyond the request id, in order.
    pub fn gen_ai_keys(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.attrs.iter().filter(|a| a.gen_ai).map(|a| a.key)
    }

    pub fn has_attributes(&self) -> bool {
        !self.attrs.is_empty()
    }

    pub fn failed(&self) -> bool {
        i32::from(self.status_code) == STATUS_ERROR
    }

    /// Its heap parts: packed attributes, the text, the values kept whole.
    pub fn heap_bytes(&self, value_heap: impl Fn(&Value) -> usize) -> usize {
        self.attrs.len() * size_of::<Attr>()
            + self.text.len()
            + self.others.as_ref().map_or(0, |others| {
                size_of::<Vec<Value>>()
                    + others.capacity() * size_of::<Value>()
                    + others.iter().map(&value_heap).sum::<usize>()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed span named "s" with these attributes.
    fn span_with(attributes: Vec<(Key, Value)>) -> Span {
        Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: None,
            name: "s".into(),
            start_ns: 0,
            end_ns: 0,
            attributes,
            resource: Arc::new(Resource::default()),
            tracestate: "ts".into(),
            status_code: 2,
            status_message: "boom".into(),
        }
    }

    #[test]
    fn packed_attributes_read_back_and_the_last_duplicate_wins() {
        let mut keys = Keys::new();
        let span = span_with(vec![
            (Key::from("gen_ai.latency.e2e"), Value::Double(1.5)),
            (Key::from("a"), Value::Str("x".into())),
            (Key::from("a"), Value::Str("yz".into())),
            (Key::from("gen_ai.request.id"), Value::Int(-3)),
            (Key::from("h"), Value::Array(Box::new([Value::Bool(true)]))),
        ]);
        let held = HeldSpan::pack(span, &mut keys);
        assert_eq!((held.name(), held.status_message()), ("s", "boom"));
        assert_eq!(size_of::<Attr>(), 16);
        assert_eq!(held.attribute(keys.id("a")), Some(ValueRef::Str("yz")));
        assert_eq!(
            held.attribute(keys.id("gen_ai.latency.e2e")),
            Some(ValueRef::Double(1.5))
        );
        assert_eq!(
            held.attribute(keys.id("gen_ai.request.id")),
            Some(ValueRef::Int(-3))
        );
        assert!(matches!(
            held.attribute(keys.id("h")),
            Some(ValueRef::Other(Value::Array(_)))
        ));
        assert_eq!(held.attribute(keys.id("missing")), None);
        assert_eq!(held.gen_ai_keys().count(), 1);
        assert!(held.failed());
    }

    #[test]
    fn keys_past_the_bitmap_are_found_by_scanning() {
        let mut keys = Keys::new();
        let names: Vec<String> = (0..70).map(|i| format!("k{i}")).collect();
        let ids: Vec<KeyId> = names.iter().map(|n| keys.id(n)).collect();
        let span = span_with(vec![
            (Key::from("k3"), Value::Int(3)),
            (Key::from("k61"), Value::Int(61)),
            (Key::from("k66"), Value::Int(66)),
        ]);
        let held = HeldSpan::pack(span, &mut keys);
        for (i, id) in ids.iter().enumerate() {
            let expected = [3, 61, 66].contains(&i).then_some(ValueRef::Int(i as i64));
            assert_eq!(held.attribute(*id), expected, "k{i} (id {id})");
        }
    }

    #[test]
    fn captured_headers_are_strings_but_shape_keys_keep_their_arrays() {
        let mut keys = Keys::new();
        let ids: Vec<KeyId> = shapes::READS_STRINGS_APART
            .iter()
            .map(|k| keys.id(k))
            .collect();
        assert_eq!(ids, READS_STRINGS_APART);
        let header = |v: &str| Value::Array(Box::new([Value::Str(v.into())]));
        let span = Span {
            status_code: 0,
            status_message: "".into(),
            ..span_with(vec![
                (Key::from("x-slo-ttft-ms"), header("200")),
                (Key::from("empty"), header("")),
                (Key::from(shapes::HTTP_STATUS_KEYS[1]), header("429")),
            ])
        };
        let held = HeldSpan::pack(span, &mut keys);
        assert_eq!(
            held.attribute(keys.id("x-slo-ttft-ms")),
            Some(ValueRef::Str("200"))
        );
        assert!(matches!(
            held.attribute(keys.id("empty")),
            Some(ValueRef::Other(_))
        ));
        assert!(matches!(held.attribute(ids[1]), Some(ValueRef::Other(_))));
    }
}
