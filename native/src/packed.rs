//! A span's name, status message and attributes packed into one allocation: 12-byte attribute
//! records, then one text for every string.
//!
//! The decoder writes spans in this form and the trace join holds them in it (it only rewrites each
//! record's key in place), so a span costs one allocation made on a receiver's thread and freed
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

/// One attribute, in 12 bytes of four-byte words (so a span's records and text share one
/// allocation without padding): its key id in the low 24 bits of `tag`, its kind and the join's
/// `gen_ai.` mark in the high 8, its value's 64 bits in two words. The key is an id: the batch's
/// key table's for a decoded span, the join's interned id for a held one. A string's (or header's)
/// start in the text is the low 32 bits of the value and its length the high 32.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Attr {
    tag: u32,
    bits: [u32; 2],
}

const KEY_BITS: u32 = 24;
/// The largest key id a record holds: a payload naming more distinct keys is refused
/// (`decode::values::Keys`), which `limits.max_request_bytes` already prevents.
pub const MAX_KEY: u32 = (1 << KEY_BITS) - 1;
const GEN_AI: u32 = 1 << 31;
const KIND_MASK: u32 = 0x7f;

impl Attr {
    fn new(key: u32, kind: u8, bits: u64) -> Attr {
        let mut attr = Attr {
            tag: 0,
            bits: [0; 2],
        };
        attr.set_key(key);
        attr.set_value(kind, bits);
        attr
    }

    pub fn key(&self) -> u32 {
        self.tag & MAX_KEY
    }

    pub fn set_key(&mut self, key: u32) {
        debug_assert!(key <= MAX_KEY);
        self.tag = self.tag & !MAX_KEY | key & MAX_KEY;
    }

    pub fn kind(&self) -> u8 {
        (self.tag >> KEY_BITS & KIND_MASK) as u8
    }

    /// Set by the join: a `gen_ai.` key beyond the request id.
    pub fn gen_ai(&self) -> bool {
        self.tag & GEN_AI != 0
    }

    pub fn set_gen_ai(&mut self, gen_ai: bool) {
        self.tag = if gen_ai {
            self.tag | GEN_AI
        } else {
            self.tag & !GEN_AI
        };
    }

    pub fn bits(&self) -> u64 {
        u64::from(self.bits[0]) | u64::from(self.bits[1]) << 32
    }

    fn set_value(&mut self, kind: u8, bits: u64) {
        let kind = (u32::from(kind) & KIND_MASK) << KEY_BITS;
        self.tag = self.tag & (MAX_KEY | GEN_AI) | kind;
        self.bits = [bits as u32, (bits >> 32) as u32];
    }
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

/// Room for `attrs` records followed by `text_len` bytes of text, in one allocation of its exact
/// size, zeroed.
fn blank(attrs: usize, text_len: usize) -> Box<[Attr]> {
    let zero = Attr {
        tag: 0,
        bits: [0; 2],
    };
    vec![zero; attrs + records_for(text_len)].into_boxed_slice()
}

/// The text being written into the records after the attributes.
struct Text<'a> {
    bytes: &'a mut [u8],
    len: usize,
}

impl<'a> Text<'a> {
    fn new(records: &'a mut [Attr]) -> Text<'a> {
        let len = size_of_val(records);
        // SAFETY: `Attr` is plain 4-byte words (`repr(C)`, no padding), so its memory is bytes and any
        // bytes written there are a valid `Attr`.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(records.as_mut_ptr().cast::<u8>(), len) };
        Text { bytes, len: 0 }
    }

    /// Writes `s` after what is written; returns its start in the low 32 bits, its length in the high.
    fn push(&mut self, s: &str) -> u64 {
        let start = self.len;
        self.bytes[start..start + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        start as u64 | (s.len() as u64) << 32
    }
}

/// The kind and bits of a value that is not kept whole, its text written to `text`.
fn record(text: &mut Text<'_>, value: In<'_>) -> (u8, u64) {
    match value {
        In::Str(s) => (STR, text.push(s)),
        In::Header(s) => (HEADER, text.push(s)),
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

/// Where a string lies in a packed span's text: its start and length, in 8 bytes with a niche (so an
/// `Option` of it is 8 bytes too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextAt(std::num::NonZeroU64);

impl TextAt {
    fn new(start: usize, len: usize) -> TextAt {
        let bits = (len as u64) << 32 | start as u64;
        TextAt(std::num::NonZeroU64::new(bits + 1).expect("a text is shorter than 4 GiB"))
    }
}

fn text_range(bits: u64) -> (usize, usize) {
    let start = (bits & 0xffff_ffff) as usize;
    (start, start + (bits >> 32) as usize)
}

/// A span's name, status message and attributes in one allocation: the attribute records, then the
/// text (the name, the status message, then each string value) in the records after them.
pub struct Packed {
    buf: Box<[Attr]>,
    /// How many of `buf`'s records are attributes.
    attrs: u32,
    text_len: u32,
    name_end: u32,
    message_end: u32,
    /// The values kept whole, boxed apart (a pointer, not a slice's two words: most spans have none).
    #[allow(clippy::box_collection)]
    others: Option<Box<Vec<Value>>>,
}

/// Records that hold `bytes` of text.
fn records_for(bytes: usize) -> usize {
    bytes.div_ceil(size_of::<Attr>())
}

impl Packed {
    /// Packs a span's strings and attributes (`(key id, value)` in order, drained) into one
    /// allocation of its exact size.
    pub fn new(name: &str, message: &str, attrs: &mut Vec<(u32, In<'_>)>) -> Packed {
        let strings: usize = attrs.iter().map(|(_, v)| v.text_len()).sum();
        let text_len = name.len() + message.len() + strings;
        let count = attrs.len();
        let mut buf = blank(count, text_len);
        let (records, tail) = buf.split_at_mut(count);
        let mut text = Text::new(tail);
        text.push(name);
        text.push(message);
        let name_end = name.len() as u32;
        let message_end = name_end + message.len() as u32;
        let mut others = Vec::new();
        for (slot, (key, value)) in records.iter_mut().zip(attrs.drain(..)) {
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
            *slot = Attr::new(key, kind, bits);
        }
        debug_assert_eq!(text.len, text_len);
        Packed {
            buf,
            attrs: count as u32,
            text_len: text_len as u32,
            name_end,
            message_end,
            others: (!others.is_empty()).then(|| Box::new(others)),
        }
    }

    fn text(&self) -> &str {
        let records = &self.buf[self.attrs as usize..];
        // SAFETY: the records after the attributes hold `text_len` bytes that `Text::push` copied
        // there from `str`s (valid UTF-8), and nothing writes them after.
        unsafe {
            let bytes =
                std::slice::from_raw_parts(records.as_ptr().cast::<u8>(), self.text_len as usize);
            std::str::from_utf8_unchecked(bytes)
        }
    }

    pub fn name(&self) -> &str {
        &self.text()[..self.name_end as usize]
    }

    pub fn status_message(&self) -> &str {
        &self.text()[self.name_end as usize..self.message_end as usize]
    }

    pub fn attrs(&self) -> &[Attr] {
        &self.buf[..self.attrs as usize]
    }

    pub fn attrs_mut(&mut self) -> &mut [Attr] {
        &mut self.buf[..self.attrs as usize]
    }

    fn string(&self, attr: &Attr) -> &str {
        let (start, end) = text_range(attr.bits());
        &self.text()[start..end]
    }

    /// The string at `at` in the text.
    pub fn text_at(&self, at: TextAt) -> &str {
        let (start, end) = text_range(at.0.get() - 1);
        &self.text()[start..end]
    }

    /// Where `part` lies in the text, when it is a slice of it (a value read from it).
    pub fn find(&self, part: &str) -> Option<TextAt> {
        let text = self.text();
        let offset = (part.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
        let inside = offset <= text.len() && part.len() <= text.len() - offset;
        inside.then(|| TextAt::new(offset, part.len()))
    }

    /// Appends `part` to the text (one reallocation): for a string the span did not carry, such as
    /// a request id made from a number or by a pattern in Python.
    pub fn append(&mut self, part: &str) -> TextAt {
        let (count, start) = (self.attrs as usize, self.text_len as usize);
        let mut buf = blank(count, start + part.len());
        let (records, tail) = buf.split_at_mut(count);
        records.copy_from_slice(self.attrs());
        let mut text = Text::new(tail);
        text.push(self.text());
        text.push(part);
        self.buf = buf;
        self.text_len = (start + part.len()) as u32;
        TextAt::new(start, part.len())
    }

    /// An attribute's value as the join reads it.
    pub fn get(&self, attr: &Attr) -> ValueRef<'_> {
        match attr.kind() {
            STR | HEADER => ValueRef::Str(self.string(attr)),
            BOOL => ValueRef::Bool(attr.bits() != 0),
            INT => ValueRef::Int(attr.bits() as i64),
            DOUBLE => ValueRef::Double(f64::from_bits(attr.bits())),
            EMPTY => ValueRef::Empty,
            _ => match &self.others {
                Some(others) => ValueRef::Other(&others[attr.bits() as usize]),
                None => ValueRef::Empty, // never: an OTHER attribute's value is in `others`
            },
        }
    }

    /// An attribute's value in its input form (a header as a header).
    pub fn input(&self, attr: &Attr) -> In<'_> {
        match (attr.kind(), self.get(attr)) {
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
        let attr = self.buf[index];
        if attr.kind() != HEADER {
            return;
        }
        let array = In::Header(self.string(&attr)).to_value();
        let others = self.others.get_or_insert_with(Default::default);
        others.push(array);
        self.buf[index].set_value(OTHER, (others.len() - 1) as u64);
    }

    /// Its heap parts: the records, the text, the values kept whole.
    pub fn heap_bytes(&self, value_heap: impl Fn(&Value) -> usize) -> usize {
        self.buf.len() * size_of::<Attr>()
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
        assert_eq!(size_of::<Attr>(), 12);
        assert_eq!((packed.name(), packed.status_message()), ("span", "boom"));
        let got: Vec<In> = packed.attrs().iter().map(|a| packed.input(a)).collect();
        assert_eq!(got, expected);
        let keys: Vec<u32> = packed.attrs().iter().map(|a| a.key()).collect();
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
    fn a_record_keeps_its_key_kind_mark_and_value_apart() {
        let mut attr = Attr::new(MAX_KEY, DOUBLE, (-2.5f64).to_bits());
        attr.set_gen_ai(true);
        assert_eq!(
            (attr.key(), attr.kind(), attr.gen_ai()),
            (MAX_KEY, DOUBLE, true)
        );
        attr.set_key(7);
        attr.set_value(INT, u64::MAX);
        assert_eq!(
            (attr.key(), attr.kind(), attr.gen_ai(), attr.bits()),
            (7, INT, true, u64::MAX)
        );
        attr.set_gen_ai(false);
        assert_eq!((attr.key(), attr.kind(), attr.gen_ai()), (7, INT, false));
    }

    #[test]
    fn a_string_of_the_text_is_found_in_place_and_another_is_appended() {
        // 13 bytes of text after the records: the last record holds one byte of it.
        let mut packed = Packed::new(
            "span",
            "",
            &mut vec![(1, In::Str("chatcmpl-")), (2, In::Int(7))],
        );
        let value = match packed.get(&packed.attrs()[0]) {
            ValueRef::Str(s) => s,
            other => panic!("{other:?}"),
        };
        let at = packed.find(&value[4..]).expect("a slice of the text");
        assert_eq!(packed.text_at(at), "cmpl-");
        assert_eq!(packed.find("cmpl-"), None); // equal, but not of the text
        let made = packed.append("12345");
        assert_eq!(
            (packed.text_at(made), packed.text_at(at)),
            ("12345", "cmpl-")
        );
        assert_eq!(
            (packed.name(), packed.get(&packed.attrs()[1])),
            ("span", ValueRef::Int(7))
        );
        assert_eq!(packed.heap_bytes(|_| 0), 2 * 12 + 24); // 18 bytes of text in two records
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
