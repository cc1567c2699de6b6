//! Attribute keys and OTLP `AnyValue`s, built as the Python decoder builds them.
//!
//! The Python reference reads a fully parsed message, so every protobuf merge rule applies: a
//! `KeyValue.value` given twice is one `AnyValue` merged from both (the last member of the `value`
//! oneof set wins; two `kvlist_value`s in a row concatenate their pairs), and a list of pairs
//! becomes a dict (each key at its first position, with its last value). An `AnyValue` with no
//! member set, or with `string_value_strindex` (which `_value` does not convert), is `Empty`.

use std::collections::HashMap;
use std::hash::Hash;

use super::rules::Rules;
use super::schema::{validate, ANY_VALUE};
use super::wire::{utf8, Reader, Result, Value as Wire, WireError};
use crate::packed::{In, MAX_KEY};
use crate::span::{Key, Value};

/// What a key is to this decode: its shared name, and whether span attributes keep it.
#[derive(Clone)]
pub struct KeyInfo {
    pub key: Key,
    pub kept: bool,
    /// Its type rule (an index into `Rules::list`), if a mapped field reads it.
    pub rule: Option<u32>,
}

/// Interns attribute keys for one payload: a key's bytes are checked and converted once, and
/// every span carrying it shares one `Arc<str>`. Each distinct key has a small id (its index in
/// `infos`, in order of first sight), which lets a span tell cheaply that its keys are distinct.
///
/// A small direct-mapped cache sits in front of the map: a payload repeats the same dozen keys
/// span after span, and comparing a few bytes is cheaper than hashing them. The map keeps the
/// standard library's keyed hash, since the keys come from the client.
#[derive(Default)]
pub struct Keys<'p> {
    recent: Vec<Option<(&'p [u8], u32)>>,
    known: HashMap<&'p [u8], u32>,
    infos: Vec<KeyInfo>,
}

const RECENT: usize = 128;

/// The cache slot of a key: its length mixed with its first and last eight bytes (mapped keys
/// often differ only near their end: `x-slo-ttft-ms`, `x-slo-tpot-ms`).
#[inline(always)]
fn slot(raw: &[u8]) -> usize {
    let word = |bytes: Option<&[u8]>| {
        bytes
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let (head, tail) = if raw.len() >= 8 {
        (word(raw.get(..8)), word(raw.get(raw.len() - 8..)))
    } else {
        (raw.iter().fold(0u64, |h, &b| h << 8 | u64::from(b)), 0)
    };
    let mixed =
        (head ^ tail.rotate_left(29) ^ raw.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 57) as usize % RECENT
}

impl<'p> Keys<'p> {
    /// The key's id (see `info`).
    #[inline(always)]
    pub fn id(&mut self, raw: &'p [u8], rules: &Rules) -> Result<u32> {
        let at = slot(raw);
        if let Some(Some((bytes, id))) = self.recent.get(at) {
            if *bytes == raw {
                return Ok(*id);
            }
        }
        self.miss(at, raw, rules)
    }

    #[inline(never)]
    fn miss(&mut self, at: usize, raw: &'p [u8], rules: &Rules) -> Result<u32> {
        if self.recent.is_empty() {
            self.recent.resize(RECENT, None);
        }
        let id = match self.known.get(raw) {
            Some(&id) => id,
            None => {
                let text = utf8(raw)?;
                let id = self.infos.len() as u32;
                if id > MAX_KEY {
                    return Err(WireError(format!(
                        "more than {MAX_KEY} distinct attribute keys in one request"
                    )));
                }
                self.infos.push(KeyInfo {
                    key: Key::from(text),
                    kept: rules.kept(text),
                    rule: rules.rule_of(text),
                });
                self.known.insert(raw, id);
                id
            }
        };
        self.recent[at] = Some((raw, id));
        Ok(id)
    }

    /// What the key of id `id` is.
    #[inline(always)]
    pub fn info(&self, id: u32) -> &KeyInfo {
        &self.infos[id as usize]
    }

    /// The keys by id.
    pub fn into_keys(self) -> Vec<Key> {
        self.infos.into_iter().map(|info| info.key).collect()
    }

    pub fn get(&mut self, raw: &'p [u8], rules: &Rules) -> Result<KeyInfo> {
        let id = self.id(raw, rules)?;
        Ok(self.info(id).clone())
    }
}

/// Which keys a span has seen, by id, to tell whether its attributes need `dedupe` at all.
#[derive(Default)]
pub struct Seen {
    ids: u64,
    /// A key seen twice, or one whose id is past the mask: `dedupe` decides.
    pub maybe_repeated: bool,
}

impl Seen {
    #[inline(always)]
    pub fn add(&mut self, id: u32) {
        let bit = 1u64.checked_shl(id).unwrap_or(0);
        self.maybe_repeated |= bit == 0 || self.ids & bit != 0;
        self.ids |= bit;
    }
}

/// An `AnyValue` being merged from one or more encodings of it.
enum Building<'p> {
    Empty,
    Str(&'p str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(&'p [u8]),
    Array(Vec<Value>),
    KvList(Vec<(Key, Value)>),
}

impl Building<'_> {
    #[inline(always)]
    fn finish(self) -> Value {
        match self {
            Building::Empty => Value::Empty,
            Building::Str(s) => Value::Str(s.into()),
            Building::Bool(b) => Value::Bool(b),
            Building::Int(i) => Value::Int(i),
            Building::Double(d) => Value::Double(d),
            Building::Bytes(b) => Value::Bytes(b.into()),
            Building::Array(items) => Value::Array(items.into_boxed_slice()),
            Building::KvList(pairs) => Value::KvList(dedupe(pairs).into_boxed_slice()),
        }
    }
}

/// The decoding state shared by every value of one payload.
pub struct Ctx<'p, 'r> {
    pub keys: Keys<'p>,
    pub rules: &'r Rules,
    /// A span's attributes while it is read, by key id (reused: the span packs them).
    pub scratch: Vec<(u32, In<'p>)>,
    /// The span's typed keys (by id) with their rules.
    pub typed: Vec<(u32, u32)>,
}

impl<'p> Ctx<'p, '_> {
    /// Merges the `AnyValue` encoded in `body` (a field of `parent`) into `state`.
    #[inline]
    fn merge_any(
        &mut self,
        parent: &Reader<'p>,
        body: &'p [u8],
        state: &mut Building<'p>,
    ) -> Result<()> {
        // AnyValue (common.proto): string_value = 1, bool_value = 2, int_value = 3,
        // double_value = 4, array_value = 5, kvlist_value = 6, bytes_value = 7,
        // string_value_strindex = 8.
        let mut reader = parent.sub(body)?;
        while let Some((number, value)) = reader.next()? {
            match (number, value) {
                (1, Wire::Len(b)) => *state = Building::Str(utf8(b)?),
                (2, Wire::Varint(v)) => *state = Building::Bool(v != 0),
                (3, Wire::Varint(v)) => *state = Building::Int(v as i64),
                (4, Wire::Fixed64(v)) => *state = Building::Double(f64::from_bits(v)),
                (5, Wire::Len(b)) => {
                    if !matches!(state, Building::Array(_)) {
                        // Most arrays are captured headers of one value: sized for that, the
                        // boxed slice needs no second allocation.
                        *state = Building::Array(Vec::with_capacity(1));
                    }
                    if let Building::Array(items) = state {
                        self.merge_array(&reader, b, items)?;
                    }
                }
                (6, Wire::Len(b)) => {
                    if !matches!(state, Building::KvList(_)) {
                        *state = Building::KvList(Vec::new());
                    }
                    if let Building::KvList(pairs) = state {
                        self.merge_kvlist(&reader, b, pairs)?;
                    }
                }
                (7, Wire::Len(b)) => *state = Building::Bytes(b),
                (8, Wire::Varint(_)) => *state = Building::Empty,
                _ => {}
            }
        }
        Ok(())
    }

    /// The `AnyValue` encoded in `body` (a field of `parent`): what `merge_any` builds from an
    /// empty state, read directly in the usual case of one member written once.
    #[inline]
    fn any_value(&mut self, parent: &Reader<'p>, body: &'p [u8]) -> Result<Value> {
        let mut reader = parent.sub(body)?;
        if let Some((number, value)) = reader.next()? {
            if reader.at_end() {
                match (number, value) {
                    (1, Wire::Len(b)) => return Ok(Value::Str(utf8(b)?.into())),
                    (2, Wire::Varint(v)) => return Ok(Value::Bool(v != 0)),
                    (3, Wire::Varint(v)) => return Ok(Value::Int(v as i64)),
                    (4, Wire::Fixed64(v)) => return Ok(Value::Double(f64::from_bits(v))),
                    (5, Wire::Len(b)) => {
                        let mut items = Vec::with_capacity(1);
                        self.merge_array(&reader, b, &mut items)?;
                        return Ok(Value::Array(items.into_boxed_slice()));
                    }
                    (7, Wire::Len(b)) => return Ok(Value::Bytes(b.into())),
                    (8, Wire::Varint(_)) => return Ok(Value::Empty),
                    _ => {}
                }
            }
        }
        let mut state = Building::Empty;
        self.merge_any(parent, body, &mut state)?;
        Ok(state.finish())
    }

    /// `any_value` in packed form: a string or a captured header borrowed from the payload.
    #[inline]
    fn any_in(&mut self, parent: &Reader<'p>, body: &'p [u8]) -> Result<In<'p>> {
        let mut reader = parent.sub(body)?;
        if let Some((number, value)) = reader.next()? {
            if reader.at_end() {
                match (number, value) {
                    (1, Wire::Len(b)) => return Ok(In::Str(utf8(b)?)),
                    (2, Wire::Varint(v)) => return Ok(In::Bool(v != 0)),
                    (3, Wire::Varint(v)) => return Ok(In::Int(v as i64)),
                    (4, Wire::Fixed64(v)) => return Ok(In::Double(f64::from_bits(v))),
                    (5, Wire::Len(b)) => {
                        if let Some(text) = header(&reader, b)? {
                            return Ok(In::Header(text));
                        }
                    }
                    _ => {}
                }
            }
        }
        // `Packed::new` files a whole value that is a plain string or a header as such.
        self.any_value(parent, body).map(In::Whole)
    }

    /// ArrayValue: values = 1.
    fn merge_array(
        &mut self,
        parent: &Reader<'p>,
        body: &'p [u8],
        items: &mut Vec<Value>,
    ) -> Result<()> {
        let mut reader = parent.sub(body)?;
        while let Some((number, value)) = reader.next()? {
            if let (1, Wire::Len(b)) = (number, value) {
                items.push(self.any_value(&reader, b)?);
            }
        }
        Ok(())
    }

    /// KeyValueList: values = 1.
    fn merge_kvlist(
        &mut self,
        parent: &Reader<'p>,
        body: &'p [u8],
        pairs: &mut Vec<(Key, Value)>,
    ) -> Result<()> {
        let mut reader = parent.sub(body)?;
        while let Some((number, value)) = reader.next()? {
            if let (1, Wire::Len(b)) = (number, value) {
                self.key_value(&reader, b, true, pairs)?;
            }
        }
        Ok(())
    }

    /// One `KeyValue` (key = 1, value = 2): the pair pushed onto `out` if the key is kept (always,
    /// with `all`), and its key's id returned; else None after checking the value as the runtime
    /// would.
    pub fn key_value(
        &mut self,
        parent: &Reader<'p>,
        body: &'p [u8],
        all: bool,
        out: &mut Vec<(Key, Value)>,
    ) -> Result<Option<u32>> {
        let Some((id, value)) = self.kept(parent, body, all, Self::any_value)? else {
            return Ok(None);
        };
        out.push((self.keys.info(id).key.clone(), value));
        Ok(Some(id))
    }

    /// `key_value` for a span's attribute: the pair pushed in packed form, by key id.
    #[inline]
    pub fn span_attribute(
        &mut self,
        parent: &Reader<'p>,
        body: &'p [u8],
        out: &mut Vec<(u32, In<'p>)>,
    ) -> Result<Option<u32>> {
        let Some((id, value)) = self.kept(parent, body, false, Self::any_in)? else {
            return Ok(None);
        };
        out.push((id, value));
        Ok(Some(id))
    }

    /// A `KeyValue`'s key id and value (read by `one`, or merged), if the key is kept.
    #[inline(always)]
    fn kept<V: From<Value>>(
        &mut self,
        parent: &Reader<'p>,
        body: &'p [u8],
        all: bool,
        one: impl FnOnce(&mut Self, &Reader<'p>, &'p [u8]) -> Result<V>,
    ) -> Result<Option<(u32, V)>> {
        let mut reader = parent.sub(body)?;
        let (key, first, more) = match canonical_key_value(body) {
            Some((key, value)) => (Some(key), Some(value), Vec::new()),
            None => key_value_fields(&mut reader)?,
        };
        let id = self.keys.id(key.unwrap_or(b""), self.rules)?;
        let single = more.is_empty();
        let bodies = first.into_iter().chain(more);
        if !(all || self.keys.info(id).kept) {
            for b in bodies {
                if one_scalar(b) {
                    reader.sub(b)?; // nothing in it to check but its depth
                } else {
                    validate(&reader, b, &ANY_VALUE)?;
                }
            }
            return Ok(None);
        }
        let value = match (first, single) {
            (None, _) => V::from(Value::Empty),
            (Some(b), true) => one(self, &reader, b)?,
            (Some(_), false) => {
                let mut state = Building::Empty;
                for b in bodies {
                    self.merge_any(&reader, b, &mut state)?;
                }
                V::from(state.finish())
            }
        };
        Ok(Some((id, value)))
    }
}

/// The string of an `ArrayValue` body holding exactly one `AnyValue` that is exactly one non-empty
/// string, as SDKs write a captured header; None for any other body (`any_value` reads it then, and
/// checks it).
#[inline(always)]
fn header<'p>(parent: &Reader<'p>, body: &'p [u8]) -> Result<Option<&'p str>> {
    let mut array = parent.sub(body)?;
    let Some((1, Wire::Len(item))) = array.next()? else {
        return Ok(None);
    };
    if !array.at_end() {
        return Ok(None);
    }
    let mut any = array.sub(item)?;
    match any.next()? {
        Some((1, Wire::Len(text))) if any.at_end() && !text.is_empty() => Ok(Some(utf8(text)?)),
        _ => Ok(None),
    }
}

/// A `KeyValue` as SDKs write it: the key (field 1) then one value (field 2), each with a
/// one-byte length, and nothing else; None for any other form (`key_value_fields` reads it). Both
/// read the same key and value from such a body.
#[inline(always)]
fn canonical_key_value(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&[0x0a, key_len], rest) = body.split_first_chunk::<2>()? else {
        return None;
    };
    if key_len >= 0x80 {
        return None;
    }
    let (key, rest) = rest.split_at_checked(usize::from(key_len))?;
    let (&[0x12, value_len], value) = rest.split_first_chunk::<2>()? else {
        return None;
    };
    (value_len < 0x80 && value.len() == usize::from(value_len)).then_some((key, value))
}

/// Whether an `AnyValue` body is one bool, int or double (one-byte tag) and nothing else: the
/// runtime accepts any such bytes, so `validate` would find nothing in it.
#[inline(always)]
fn one_scalar(body: &[u8]) -> bool {
    match body.split_first() {
        Some((0x21, rest)) => rest.len() == 8,
        // a varint of at most 10 bytes, each but the last with its continuation bit set
        Some((0x10 | 0x18, [more @ .., last])) => {
            more.len() < 10 && *last < 0x80 && more.iter().all(|&b| b >= 0x80)
        }
        _ => false,
    }
}

/// The key and the value bodies of a `KeyValue` (key = 1, value = 2) in any form the runtime
/// reads: the last key wins (an earlier one is still checked), every value is kept in order.
#[allow(clippy::type_complexity)]
fn key_value_fields<'p>(
    reader: &mut Reader<'p>,
) -> Result<(Option<&'p [u8]>, Option<&'p [u8]>, Vec<&'p [u8]>)> {
    let mut key: Option<&'p [u8]> = None;
    let mut first: Option<&'p [u8]> = None;
    let mut more: Vec<&'p [u8]> = Vec::new();
    while let Some((number, value)) = reader.next()? {
        match (number, value) {
            (1, Wire::Len(b)) => {
                if let Some(previous) = key.replace(b) {
                    utf8(previous)?; // overwritten, but the runtime still checked it
                }
            }
            (2, Wire::Len(b)) => match first {
                None => first = Some(b),
                Some(_) => more.push(b),
            },
            _ => {}
        }
    }
    Ok((key, first, more))
}

/// Pairs as a Python dict holds them: each key at its first position, with its last value. The
/// keys must come from one `Keys` (interned: equal keys are the same `Arc`, or the same id).
pub fn dedupe<K: Eq + Hash + Clone, V>(mut pairs: Vec<(K, V)>) -> Vec<(K, V)> {
    dedupe_in_place(&mut pairs);
    pairs
}

/// `dedupe`, in the vector given.
pub fn dedupe_in_place<K: Eq + Hash + Clone, V>(pairs: &mut Vec<(K, V)>) {
    const SCAN: usize = 16; // up to this many pairs a scan beats hashing
    if pairs.len() <= SCAN {
        let unique = pairs
            .iter()
            .enumerate()
            .all(|(i, (key, _))| !pairs[..i].iter().any(|(k, _)| k == key));
        if unique {
            return; // the usual case: nothing to move
        }
    }
    let mut at: HashMap<K, usize> = HashMap::with_capacity(pairs.len());
    let mut out: Vec<(K, V)> = Vec::with_capacity(pairs.len());
    for (key, value) in pairs.drain(..) {
        match at.get(&key) {
            Some(&i) => out[i].1 = value,
            None => {
                at.insert(key.clone(), out.len());
                out.push((key, value));
            }
        }
    }
    *pairs = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs with interned keys, as a decoder makes them.
    fn pairs(items: &[(&str, i64)]) -> Vec<(Key, Value)> {
        let mut interned: HashMap<String, Key> = HashMap::new();
        items
            .iter()
            .map(|(k, v)| {
                let key = interned
                    .entry(k.to_string())
                    .or_insert_with(|| Key::from(*k));
                (key.clone(), Value::Int(*v))
            })
            .collect()
    }

    #[test]
    fn a_canonical_key_value_reads_as_the_general_loop_reads_it() {
        let forms: [&[u8]; 8] = [
            b"\x0a\x01k\x12\x02\x08\x01",         // key, then one value
            b"\x0a\x00\x12\x00",                  // empty key, empty value
            b"\x12\x02\x08\x01\x0a\x01k",         // value first
            b"\x0a\x01k",                         // no value
            b"\x0a\x01k\x12\x02\x08\x01\x12\x00", // two values
            b"\x0a\x01k\x12\x03\x08\x01",         // truncated value
            b"\x0a\x01k\x12\x01\x08\x01",         // a byte past the value
            b"\x0a\x05k\x12\x00",                 // key longer than the body
        ];
        for (i, body) in forms.iter().enumerate() {
            let general = key_value_fields(&mut Reader::new(body));
            match canonical_key_value(body) {
                Some((key, value)) => {
                    assert!(i < 2, "form {i}");
                    assert_eq!(general, Ok((Some(key), Some(value), Vec::new())));
                }
                None => assert!(i >= 2, "form {i}"),
            }
        }
    }

    #[test]
    fn one_scalar_is_what_validate_has_nothing_to_check_in() {
        let ten = [[0x18].as_slice(), &[0xff; 9], &[0x01]].concat();
        let eleven = [[0x18].as_slice(), &[0xff; 10], &[0x01]].concat();
        let yes: [&[u8]; 5] = [
            b"\x18\x01",
            b"\x10\x00",
            b"\x18\x96\x01",
            &ten,
            b"\x21\0\0\0\0\0\0\xf0\x3f",
        ];
        let no: [&[u8]; 7] = [
            b"",
            b"\x18",
            b"\x18\x80",
            b"\x18\x01\x01",
            &eleven,
            b"\x21\0",
            b"\x0a\x00",
        ];
        let parent = Reader::new(b"");
        for body in yes {
            assert!(one_scalar(body), "{body:?}");
            assert!(validate(&parent, body, &ANY_VALUE).is_ok());
        }
        for body in no {
            assert!(!one_scalar(body), "{body:?}");
        }
    }

    #[test]
    fn dedupe_keeps_first_position_and_last_value() {
        let out = dedupe(pairs(&[("a", 1), ("b", 2), ("a", 3)]));
        assert_eq!(out, pairs(&[("a", 3), ("b", 2)]));
        let many: Vec<(String, i64)> = (0..40).map(|i| (format!("k{}", i % 20), i)).collect();
        let many: Vec<(&str, i64)> = many.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let out = dedupe(pairs(&many));
        let expected: Vec<(String, i64)> = (0..20).map(|i| (format!("k{i}"), i + 20)).collect();
        let expected: Vec<(&str, i64)> = expected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(out, pairs(&expected));
    }
}
