//! A span as the join holds it while its trace waits: compact, because a pending trace's bytes are
//! what `join.max_pending_bytes` bounds.
//!
//! It keeps the decoder's packed fields (`packed::Packed`: the name, the status message and the
//! strings in one text buffer, the attributes as 16-byte records) as they came, with each record's
//! key rewritten to an id interned here. Against the decoder's `Span` it drops the trace id (the
//! trace map's key says it) and the tracestate, of which the join reads only the sampling threshold. Keys are read by id: the
//! mapping's keys and the span-shape keys are interned when the assembler is made, so reading a
//! field compares integers.

use std::sync::Arc;

use crate::join::hash::HashMap;
use crate::join::sampling;
pub use crate::packed::ValueRef;
use crate::packed::{Packed, TextAt};
use crate::span::{get, Key, Resource, Span, Value, STATUS_ERROR};

/// An interned attribute key.
pub type KeyId = u16;

/// Keys beyond this many distinct ones share one of two ids (`gen_ai.` or not): the decoder keeps only
/// the mapped keys, so only spans built by hand with thousands of keys get there.
const MAX_KEYS: usize = 4096;
const REQUEST_ID_KEY: &str = "gen_ai.request.id";

/// The attribute keys seen, each with an id.
#[derive(Default)]
pub struct Keys {
    ids: HashMap<Key, KeyId>,
    gen_ai: Vec<bool>,
    /// The keys whose string and array-of-string values the span shapes read apart (the HTTP
    /// status and scorer type keys of the `Vocabulary`: an HTTP status "429" counts, ["429"] does
    /// not). A captured header (an array of one non-empty string) reads as its string everywhere
    /// else: every other reader of the join sees the same either way (`as_string` takes the first
    /// element, and neither is a number, None or ""), so only these keys get their headers back as
    /// arrays. A bit per id (the vocabulary's keys are interned first, so their ids are small): every
    /// attribute of every span held is checked, and a bit test costs what the constant ids it replaced did.
    apart: u64,
}

impl Keys {
    /// Marks keys whose string values are read apart from arrays of strings (`apart`).
    pub fn read_apart(&mut self, ids: impl Iterator<Item = KeyId>) {
        for id in ids {
            assert!(
                id < 64,
                "a key read apart must be among the first 64 interned"
            );
            self.apart |= 1 << id;
        }
    }

    /// The id of each of a batch's keys (`SpanBatch::keys`), interning the new ones: a batch names
    /// each key once, so its spans' attributes are mapped by index rather than hashed one by one.
    pub fn ids_of(&mut self, keys: &[Key]) -> Vec<KeyId> {
        keys.iter().map(|key| self.id(key)).collect()
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

pub struct HeldSpan {
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    /// OTLP StatusCode (0 unset, 1 ok, 2 error).
    pub status_code: u8,
    /// What its name says of its shape (`shapes::shape` flags), worked out once by the assembler that holds it
    /// (`Vocabulary::classify`): the shapes ask it of every span of a request, many times a request.
    pub shape: u8,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The sampling threshold its tracestate recorded (`sampling::NO_THRESHOLD`: none); the tracestate
    /// itself is not kept.
    pub threshold: u64,
    pub resource: Arc<Resource>,
    /// Which key ids its attributes have (bit `id` for ids below 63, bit 63 for any other), so that
    /// looking up a key it lacks, which most lookups are (a field's other keys, the view's other spans),
    /// costs a test rather than a scan.
    present: u64,
    /// Its name, status message and attributes as decoded, each attribute's key now the join's id.
    fields: Packed,
}

/// A key id's bit in `HeldSpan::present`.
fn key_bit(id: KeyId) -> u64 {
    1 << u32::from(id).min(63)
}

impl HeldSpan {
    /// The span as the join holds it: its packed fields kept as they are, each attribute's key
    /// rewritten from its batch's id to the join's (`ids`, `Keys::ids_of` of the batch's keys).
    /// Nothing is copied or allocated, but for a captured header of a key read apart (rare).
    pub fn pack(span: Span, ids: &[KeyId], keys: &Keys) -> HeldSpan {
        let mut fields = span.fields;
        let mut present = 0;
        for index in 0..fields.attrs().len() {
            let attr = &mut fields.attrs_mut()[index];
            let id = ids[attr.key() as usize];
            attr.set_key(u32::from(id));
            attr.set_gen_ai(keys.is_gen_ai(id));
            present |= key_bit(id);
            if id < 64 && keys.apart & (1 << id) != 0 {
                fields.unfold_header(index);
            }
        }
        HeldSpan {
            span_id: span.span_id,
            parent_span_id: span.parent_span_id,
            status_code: u8::try_from(span.status_code).unwrap_or(u8::MAX),
            shape: 0,
            start_ns: span.start_ns,
            end_ns: span.end_ns,
            threshold: sampling::threshold_of(&span.tracestate),
            resource: span.resource,
            present,
            fields,
        }
    }

    pub fn name(&self) -> &str {
        self.fields.name()
    }

    pub fn status_message(&self) -> &str {
        self.fields.status_message()
    }

    pub fn text_at(&self, at: TextAt) -> &str {
        self.fields.text_at(at)
    }

    /// Where a string read from it lies in its text, None for a string made elsewhere.
    pub fn find(&self, part: &str) -> Option<TextAt> {
        self.fields.find(part)
    }

    /// Adds a string made elsewhere to its text.
    pub fn append(&mut self, part: &str) -> TextAt {
        self.fields.append(part)
    }

    /// The attribute of key `id` (the last one when the span carried the key twice).
    pub fn attribute(&self, id: KeyId) -> Option<ValueRef<'_>> {
        if self.present & key_bit(id) == 0 {
            return None;
        }
        let (fields, key) = (&self.fields, u32::from(id));
        let attr = fields.attrs().iter().rev().find(|a| a.key() == key)?;
        Some(fields.get(attr))
    }

    pub fn resource_attribute(&self, key: &str) -> Option<ValueRef<'_>> {
        get(&self.resource.attributes, key).map(ValueRef::from)
    }

    /// The ids of its `gen_ai.` attributes beyond the request id, in order.
    pub fn gen_ai_keys(&self) -> impl Iterator<Item = KeyId> + '_ {
        let attrs = self.fields.attrs().iter();
        attrs.filter(|a| a.gen_ai()).map(|a| a.key() as KeyId)
    }

    pub fn has_attributes(&self) -> bool {
        !self.fields.attrs().is_empty()
    }

    pub fn failed(&self) -> bool {
        i32::from(self.status_code) == STATUS_ERROR
    }

    /// Its heap parts: packed attributes, the text, the values kept whole.
    pub fn heap_bytes(&self, value_heap: impl Fn(&Value) -> usize) -> usize {
        self.fields.heap_bytes(value_heap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span::tests::span_with;

    /// The span held, its batch's keys interned in `keys`.
    fn held(span: (Span, Vec<Key>), keys: &mut Keys) -> HeldSpan {
        let ids = keys.ids_of(&span.1);
        HeldSpan::pack(span.0, &ids, keys)
    }

    #[test]
    fn packed_attributes_read_back_and_the_last_duplicate_wins() {
        let mut keys = Keys::default();
        let span = span_with(
            "s",
            2,
            "boom",
            vec![
                ("gen_ai.latency.e2e", Value::Double(1.5)),
                ("a", Value::Str("x".into())),
                ("a", Value::Str("yz".into())),
                ("gen_ai.request.id", Value::Int(-3)),
                ("h", Value::Array(Box::new([Value::Bool(true)]))),
            ],
        );
        let held = held(span, &mut keys);
        assert_eq!((held.name(), held.status_message()), ("s", "boom"));
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
        let mut keys = Keys::default();
        let names: Vec<String> = (0..70).map(|i| format!("k{i}")).collect();
        let ids: Vec<KeyId> = names.iter().map(|n| keys.id(n)).collect();
        let attrs = vec![
            ("k3", Value::Int(3)),
            ("k61", Value::Int(61)),
            ("k66", Value::Int(66)),
        ];
        let held = held(span_with("s", 0, "", attrs), &mut keys);
        for (i, id) in ids.iter().enumerate() {
            let expected = [3, 61, 66].contains(&i).then_some(ValueRef::Int(i as i64));
            assert_eq!(held.attribute(*id), expected, "k{i} (id {id})");
        }
    }

    #[test]
    fn captured_headers_are_strings_but_shape_keys_keep_their_arrays() {
        let mut keys = Keys::default();
        let words = crate::join::vocabulary::testing::llm_d(&mut keys);
        let ids = [
            words.http_status_keys[0],
            words.http_status_keys[1],
            words.scorer_type,
        ];
        let header = |v: &str| Value::Array(Box::new([Value::Str(v.into())]));
        let attrs = vec![
            ("x-slo-ttft-ms", header("200")),
            ("empty", header("")),
            ("http.status_code", header("429")),
        ];
        let held = held(span_with("s", 0, "", attrs), &mut keys);
        assert_eq!(
            held.attribute(keys.id("x-slo-ttft-ms")),
            Some(ValueRef::Str("200"))
        );
        assert!(matches!(
            held.attribute(keys.id("empty")),
            Some(ValueRef::Other(_))
        ));
        assert_eq!(
            held.attribute(ids[1]),
            Some(ValueRef::Other(&header("429")))
        );
    }
}
