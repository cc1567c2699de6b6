//! A span's name, status message and attributes packed into two allocations: one text buffer for
//! every string and one slice of 16-byte attribute records.
//!
//! The decoder writes spans in this form and the trace join holds them in it (it only rewrites each
//! record's key in place), so a span costs two allocations made on a receiver's thread and freed
//! once on the join's, instead of one per string, header and attribute list made on one thread and
//! freed on the other as the join repacked them.
//!
//! Numbers and booleans sit in the record; a string sits in the text (the record holds where); a
//! captured header (an array of one non-empty string, which is how the gateway records request
//! headers) is kept as its string with its own kind, so it costs no allocation either; only the
//! rare value that is none of these (another array, a map, bytes) is kept whole as a `Value`.

use std::mem::size_of;

use crate::span::Value;

pub const STR: u8 = 0;
pub const BOOL: u8 = 1;
pub const INT: u8 = 2;
pub const DOUBLE: u8 = 3;
pub const EMPTY: u8 = 4;
/// A value kept whole: `bits` is its index in `others`.
pub const OTHER: u8 = 5;
/// An array of one non-empty string, held as the string.
pub const HEADER: u8 = 6;

/// One attribute. `key` is an id: the batch's key table's for a decoded span, the join's interned
/// id for a held one. A string's (or header's) start in the text is the low 32 bits of `bits` and
/// its length the high 32.
#[derive(Clone, Copy, Debug)]
pub struct Attr {
    pub key: u32,
    pub kind: u8,
    /// Set by the join: a `gen_ai.` key beyond the request id.
    pub gen_ai: bool,
    pub bits: u64,
}

/// A value on its way into a packed span: text borrowed from the payload (or from an owned value),
/// or a value kept whole.
#[derive(Clone, Debug, PartialEq)]
pub enum In<'a> {
    Str(&'a str),
    /// An array of one non-empty string.
    Header(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Empty,
    Whole(Value),
}

impl<'a> In<'a> {
    /// The form of an owned value (a header is recognised; other arrays, maps and bytes are cloned).
    pub fn of(value: &'a Value) -> In<'a> {
        In::plain(value).unwrap_or_else(|| In::Whole(value.clone()))
    }

    /// The form of a value that need not be kept whole, else None.
    fn plain(value: &'a Value) -> Option<In<'a>> {
        Some(match value {
            Value::Str(s) => In::Str(s),
            Value::Array(items) => match &**items {
                [Value::Str(s)] if !s.is_empty() => In::Header(s),
                _ => return None,
            },
            Value::Bool(b) => In::Bool(*b),
            Value::Int(i) => In::Int(*i),
            Value::Double(d) => In::Double(*d),
            Value::Empty => In::Empty,
            Value::Bytes(_) | Value::KvList(_) => return None,
        })
    }

    /// The value as the Python decoder makes it.
    pub fn to_value(&self) -> Value {
        match self {
            In::Str(s) => Value::Str((*s).into()),
            In::Header(s) => Value::Array(Box::new([Value::Str((*s).into())])),
            In::Bool(b) => Value::Bool(*b),
            In::Int(i) => Value::Int(*i),
            In::Double(d) => Value::Double(*d),
            In::Empty => Value::Empty,
            In::Whole(v) => v.clone(),
        }
    }

    fn text_len(&self) -> usize {
        match self {
            In::Str(s) | In::Header(s) => s.len(),
            In::Whole(v) => In::plain(v).map_or(0, |plain| plain.text_len()),
            _ => 0,
        }
    }
}

impl From<Value> for In<'_> {
    fn from(value: Value) -> Self {
        In::Whole(value)
    }
}

/// A value read from a packed span: the forms the join tells apart, borrowed. A header reads as its
/// string (every reader of the join treats the two alike; `HeldSpan` keeps the arrays of the keys
/// that do not).
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

/// The kind and bits of a value that is not kept whole, its text written to `text`.
fn record(text: &mut String, value: In<'_>) -> (u8, u64) {
    let mut string = |kind: u8, s: &str| {
        let start = text.len() as u64;
        text.push_str(s);
        (kind, start | (s.len() as u64) << 32)
    };
    match value {
        In::Str(s) => string(STR, s),
        In::Header(s) => string(HEADER, s),
        In::Bool(b) => (BOOL, u64::from(b)),
        In::Int(i) => (INT, i as u64),
        In::Double(d) => (DOUBLE, d.to_bits()),
        In::Empty | In::Whole(_) => (EMPTY, 0), // never Whole: the caller files it
    }
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

fn text_range(bits: u64) -> (usize, usize) {
    let start = (bits & 0xffff_ffff) as usize;
    (start, start + (bits >> 32) as usize)
}

pub struct Packed {
    /// The name, the status message, then each string value.
    text: Box<str>,
    name_end: u32,
    message_end: u32,
    attrs: Box<[Attr]>,
    /// The values kept whole, boxed apart (a pointer, not a slice's two words: most spans have none).
    #[allow(clippy::box_collection)]
    others: Option<Box<Vec<Value>>>,
}

impl Packed {
    /// Packs a span's strings and attributes (`(key id, value)` in order, drained), each part
    /// allocated at its exact size.
    pub fn new(name: &str, message: &str, attrs: &mut Vec<(u32, In<'_>)>) -> Packed {
        let strings: usize = attrs.iter().map(|(_, v)| v.text_len()).sum();
        let mut text = String::with_capacity(name.len() + message.len() + strings);
        text.push_str(name);
        let name_end = text.len() as u32;
        text.push_str(message);
        let message_end = text.len() as u32;
        let mut records = Vec::with_capacity(attrs.len());
        let mut others = Vec::new();
        for (key, value) in attrs.drain(..) {
            let (kind, bits) = match value {
                // A value made whole (merged from several encodings, or owned) is filed by its form.
                In::Whole(whole) => match In::plain(&whole) {
                    Some(plain) => record(&mut text, plain),
                    None => {
                        others.push(whole);
                        (OTHER, (others.len() - 1) as u64)
                    }
                },
                plain => record(&mut text, plain),
            };
            records.push(Attr {
                key,
                kind,
                gen_ai: false,
                bits,
            });
        }
        Packed {
            text: text.into_boxed_str(),
            name_end,
            message_end,
            attrs: records.into_boxed_slice(),
            others: (!others.is_empty()).then(|| Box::new(others)),
        }
    }

    pub fn name(&self) -> &str {
        &self.text[..self.name_end as usize]
    }

    pub fn status_message(&self) -> &str {
        &self.text[self.name_end as usize..self.message_end as usize]
    }

    pub fn attrs(&self) -> &[Attr] {
        &self.attrs
    }

    pub fn attrs_mut(&mut self) -> &mut [Attr] {
        &mut self.attrs
    }

    fn string(&self, attr: &Attr) -> &str {
        let (start, end) = text_range(attr.bits);
        &self.text[start..end]
    }

    /// An attribute's value as the join reads it.
    pub fn get(&self, attr: &Attr) -> ValueRef<'_> {
        match attr.kind {
            STR | HEADER => ValueRef::Str(self.string(attr)),
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

    /// An attribute's value in its input form (a header as a header).
    pub fn input(&self, attr: &Attr) -> In<'_> {
        match (attr.kind, self.get(attr)) {
            (HEADER, ValueRef::Str(s)) => In::Header(s),
            (_, ValueRef::Str(s)) => In::Str(s),
            (_, ValueRef::Bool(b)) => In::Bool(b),
            (_, ValueRef::Int(i)) => In::Int(i),
            (_, ValueRef::Double(d)) => In::Double(d),
            (_, ValueRef::Empty) => In::Empty,
            (_, ValueRef::Other(v)) => In::Whole(v.clone()),
        }
    }

    /// An attribute's value as the Python decoder makes it.
    pub fn value(&self, attr: &Attr) -> Value {
        self.input(attr).to_value()
    }

    /// Turns a header attribute into the array it came as (kept whole), for a reader that tells the
    /// two apart.
    pub fn unfold_header(&mut self, index: usize) {
        let attr = self.attrs[index];
        if attr.kind != HEADER {
            return;
        }
        let array = In::Header(self.string(&attr)).to_value();
        let others = self.others.get_or_insert_with(Default::default);
        others.push(array);
        self.attrs[index].kind = OTHER;
        self.attrs[index].bits = (others.len() - 1) as u64;
    }

    /// Its heap parts: the records, the text, the values kept whole.
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

    #[test]
    fn values_read_back_in_both_forms() {
        let bytes = Value::Bytes(Box::new([1, 2]));
        let mut attrs = vec![
            (7, In::Str("x")),
            (8, In::Header("200")),
            (9, In::Int(-3)),
            (10, In::Double(1.5)),
            (11, In::Bool(true)),
            (12, In::Empty),
            (13, In::Whole(bytes.clone())),
        ];
        let expected: Vec<In> = attrs.iter().map(|(_, v)| v.clone()).collect();
        let packed = Packed::new("span", "boom", &mut attrs);
        assert!(attrs.is_empty());
        assert_eq!(size_of::<Attr>(), 16);
        assert_eq!((packed.name(), packed.status_message()), ("span", "boom"));
        let got: Vec<In> = packed.attrs().iter().map(|a| packed.input(a)).collect();
        assert_eq!(got, expected);
        let keys: Vec<u32> = packed.attrs().iter().map(|a| a.key).collect();
        assert_eq!(keys, [7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(packed.get(&packed.attrs()[1]), ValueRef::Str("200"));
        assert_eq!(
            packed.value(&packed.attrs()[1]),
            Value::Array(Box::new([Value::Str("200".into())]))
        );
        assert_eq!(packed.get(&packed.attrs()[6]), ValueRef::Other(&bytes));
    }

    #[test]
    fn a_header_is_an_array_of_one_non_empty_string() {
        let header = Value::Array(Box::new([Value::Str("a".into())]));
        let empty = Value::Array(Box::new([Value::Str("".into())]));
        let two = Value::Array(Box::new([Value::Str("a".into()), Value::Str("b".into())]));
        assert_eq!(In::of(&header), In::Header("a"));
        assert_eq!(In::of(&empty), In::Whole(empty.clone()));
        assert_eq!(In::of(&two), In::Whole(two.clone()));
        assert_eq!(In::of(&header).to_value(), header);
    }

    #[test]
    fn an_unfolded_header_reads_as_its_array() {
        let mut packed = Packed::new("s", "", &mut vec![(1, In::Header("429")), (2, In::Int(1))]);
        packed.unfold_header(0);
        packed.unfold_header(1); // not a header: unchanged
        let array = Value::Array(Box::new([Value::Str("429".into())]));
        assert_eq!(packed.get(&packed.attrs()[0]), ValueRef::Other(&array));
        assert_eq!(packed.get(&packed.attrs()[1]), ValueRef::Int(1));
    }
}
