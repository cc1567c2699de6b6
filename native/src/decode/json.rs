//! OTLP/JSON to spans, natively, for the bodies whose meaning is beyond doubt; every other body is
//! left to the Python reference (`parse_json`, exporter/sloscope/receivers/otlp_decode.py), so the
//! two never disagree: a body is either decoded here exactly as the reference decodes it, or
//! [`Unsure`] and decoded there.
//!
//! Decoded here: the OTLP/JSON encoding (opentelemetry-proto docs/specification.md, "JSON Protobuf
//! Encoding"): lowerCamelCase or snake_case field names, hex trace and span ids, 64-bit integers
//! as JSON numbers or decimal strings, enums as numbers or names, bytes as base64, doubles as
//! numbers or "NaN"/"Infinity"/"-Infinity". Left to the reference: anything `ParseDict` or
//! `_hex_ids_to_base64` might refuse or read in a Python-specific way (a `null`, a value of the
//! wrong JSON type, a field given under both of its names, two members of the `AnyValue` oneof,
//! an integer as a float or as a string with spaces, underscores or a sign, an unknown enum name,
//! base64 with stray characters, ids with spaces, messages nested more than 100 deep, which is
//! `ParseDict`'s `max_recursion_depth`), and whatever [`json_dom::parse`] is unsure of.
//!
//! The reference counts message depth from the request (1); a message at depth 101 is refused
//! (google/protobuf/json_format.py `ConvertMessage`, protobuf 7.36.2).

use std::sync::Arc;

use super::json_dom::{parse, Sure, Unsure, J};
use super::rules::Rules;
use super::values::{dedupe, KeyInfo, Keys};
use super::{Decoded, Read};
use crate::span::{Key, Resource, Value};

const MAX_MESSAGE_DEPTH: usize = 100;

/// One message's known fields, looked up by JSON name or proto name.
struct Fields<'j, 'a, const N: usize> {
    values: [Option<&'j J<'a>>; N],
}

/// The values of `names` (each `(lowerCamelCase, snake_case)`) in `obj`; unknown keys are ignored
/// as `ignore_unknown_fields=True` ignores them. Unsure of a duplicate key, a field under both
/// names, a `null`, or a non-object.
fn fields<'j, 'a, const N: usize>(
    obj: &'j J<'a>,
    names: &[(&str, &str); N],
) -> Sure<Fields<'j, 'a, N>> {
    let J::Obj(pairs) = obj else {
        return Err(Unsure);
    };
    let mut values = [None; N];
    for (i, (key, value)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(k, _)| k == key) {
            return Err(Unsure);
        }
        let Some(at) = names
            .iter()
            .position(|(camel, snake)| key == camel || key == snake)
        else {
            continue;
        };
        if values[at].is_some() || matches!(value, J::Null) {
            return Err(Unsure);
        }
        values[at] = Some(value);
    }
    Ok(Fields { values })
}

fn array<'j, 'a>(value: Option<&'j J<'a>>) -> Sure<&'j [J<'a>]> {
    match value {
        None => Ok(&[]),
        Some(J::Arr(items)) => Ok(items),
        Some(_) => Err(Unsure),
    }
}

fn string<'j>(value: Option<&'j J<'_>>) -> Sure<&'j str> {
    match value {
        None => Ok(""),
        Some(J::Str(s)) => Ok(s),
        Some(_) => Err(Unsure),
    }
}

/// An integer as a JSON integer token or a plain decimal string (`-?[0-9]+`), in range for `T`.
fn integer<T: std::str::FromStr + Default>(value: Option<&J<'_>>) -> Sure<T> {
    let text: &str = match value {
        None => return Ok(T::default()),
        Some(J::Num(n)) => n,
        Some(J::Str(s)) => s,
        Some(_) => return Err(Unsure),
    };
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Unsure);
    }
    text.parse().map_err(|_| Unsure)
}

/// An open enum (int32): a known name, or an integer in range.
fn enumeration(value: Option<&J<'_>>, names: &[&str]) -> Sure<i32> {
    if let Some(J::Str(s)) = value {
        if let Some(number) = names.iter().position(|n| n == s) {
            return Ok(number as i32);
        }
        return Err(Unsure);
    }
    integer(value)
}

/// A trace or span id: hex (OTLP/JSON), "" for none.
fn hex_id(value: Option<&J<'_>>) -> Sure<Vec<u8>> {
    let text = string(value)?;
    if text.len() % 2 != 0 {
        return Err(Unsure);
    }
    let nibble = |c: u8| (c as char).to_digit(16).ok_or(Unsure);
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| Ok((nibble(pair[0])? << 4 | nibble(pair[1])?) as u8))
        .collect()
}

/// Base64 as `urlsafe_b64decode(value + padding)` reads it, for plain inputs: characters of either
/// alphabet, then no more `=` than the last group lacks.
fn base64(text: &str) -> Sure<Vec<u8>> {
    let data = text.trim_end_matches('=');
    let pads = text.len() - data.len();
    let rest = data.len() % 4;
    if rest == 1 || pads > (4 - rest) % 4 {
        return Err(Unsure);
    }
    let sextet = |c: u8| match c {
        b'A'..=b'Z' => Ok(u32::from(c - b'A')),
        b'a'..=b'z' => Ok(u32::from(c - b'a') + 26),
        b'0'..=b'9' => Ok(u32::from(c - b'0') + 52),
        b'+' | b'-' => Ok(62),
        b'/' | b'_' => Ok(63),
        _ => Err(Unsure),
    };
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    for group in data.as_bytes().chunks(4) {
        let mut bits = 0u32;
        for &c in group {
            bits = bits << 6 | sextet(c)?;
        }
        let bytes = (group.len() * 6) / 8;
        bits <<= 6 * (4 - group.len());
        out.extend_from_slice(&bits.to_be_bytes()[1..1 + bytes]);
    }
    Ok(out)
}

/// A double as `_ConvertFloat` reads a JSON number (an integer token through Python's `int`, so
/// `-0` is `0.0`) or one of its three spelled-out strings.
fn double(value: &J<'_>) -> Sure<f64> {
    let number = match value {
        J::Num(text) => {
            let parsed: f64 = text.parse().map_err(|_| Unsure)?;
            let integral = !text.contains(['.', 'e', 'E']);
            if integral && parsed == 0.0 {
                0.0
            } else {
                parsed
            }
        }
        J::Str(s) if s == "NaN" => return Ok(f64::NAN),
        J::Str(s) if s == "Infinity" => return Ok(f64::INFINITY),
        J::Str(s) if s == "-Infinity" => return Ok(f64::NEG_INFINITY),
        _ => return Err(Unsure),
    };
    if number.is_finite() {
        Ok(number)
    } else {
        Err(Unsure) // the reference refuses a number too large for a double, with its own words
    }
}

struct Walk<'d, 'r> {
    keys: Keys<'d>,
    rules: &'r Rules,
}

/// Message depths as `ParseDict` counts them (the request is 1).
const REQUEST: usize = 1;

impl<'d> Walk<'d, '_> {
    /// An AnyValue at message depth `depth`.
    fn any_value(&mut self, obj: &'d J<'d>, depth: usize) -> Sure<Value> {
        if depth > MAX_MESSAGE_DEPTH {
            return Err(Unsure);
        }
        const NAMES: [(&str, &str); 8] = [
            ("stringValue", "string_value"),
            ("boolValue", "bool_value"),
            ("intValue", "int_value"),
            ("doubleValue", "double_value"),
            ("arrayValue", "array_value"),
            ("kvlistValue", "kvlist_value"),
            ("bytesValue", "bytes_value"),
            ("stringValueStrindex", "string_value_strindex"),
        ];
        let f = fields(obj, &NAMES)?;
        let mut set = f.values.iter().enumerate().filter(|(_, v)| v.is_some());
        let Some((member, Some(value))) = set.next() else {
            return Ok(Value::Empty);
        };
        if set.next().is_some() {
            return Err(Unsure); // two oneof members: the reference refuses
        }
        Ok(match (member, value) {
            (0, J::Str(s)) => Value::Str(s.as_ref().into()),
            (1, J::Bool(b)) => Value::Bool(*b),
            (2, _) => Value::Int(integer(Some(value))?),
            (3, _) => Value::Double(double(value)?),
            (4 | 5, _) if depth + 1 > MAX_MESSAGE_DEPTH => return Err(Unsure),
            (4, _) => {
                let inner = fields(value, &[("values", "values")])?;
                let items = array(inner.values[0])?
                    .iter()
                    .map(|item| self.any_value(item, depth + 2))
                    .collect::<Sure<Vec<Value>>>()?;
                Value::Array(items.into_boxed_slice())
            }
            (5, _) => {
                let inner = fields(value, &[("values", "values")])?;
                let pairs = self
                    .key_values(inner.values[0], depth + 2, true)?
                    .into_iter()
                    .map(|(info, value)| (info.key, value))
                    .collect();
                Value::KvList(dedupe(pairs).into_boxed_slice())
            }
            (6, J::Str(s)) => Value::Bytes(base64(s)?.into_boxed_slice()),
            _ => return Err(Unsure), // string_value_strindex, or a value of the wrong JSON type
        })
    }

    /// A list of KeyValue messages at message depth `depth`: the pairs whose key is kept
    /// (every pair with `all`), the others read and dropped.
    fn key_values(
        &mut self,
        list: Option<&'d J<'d>>,
        depth: usize,
        all: bool,
    ) -> Sure<Vec<(KeyInfo, Value)>> {
        let items = array(list)?;
        if !items.is_empty() && depth > MAX_MESSAGE_DEPTH {
            return Err(Unsure);
        }
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            const NAMES: [(&str, &str); 3] = [
                ("key", "key"),
                ("value", "value"),
                ("keyStrindex", "key_strindex"),
            ];
            let f = fields(item, &NAMES)?;
            if f.values[2].is_some() {
                return Err(Unsure);
            }
            let key = string(f.values[0])?;
            let info = self
                .keys
                .get(key.as_bytes(), self.rules)
                .map_err(|_| Unsure)?;
            let value = match f.values[1] {
                None => Value::Empty,
                Some(v) => self.any_value(v, depth + 1)?,
            };
            if all || info.kept {
                out.push((info, value));
            }
        }
        Ok(out)
    }

    /// Attributes of a message nobody reads (a scope, an event, a link): checked, then dropped.
    fn unread(&mut self, list: Option<&'d J<'d>>, depth: usize) -> Sure<()> {
        self.key_values(list, depth, true).map(drop)
    }

    fn request(&mut self, doc: &'d J<'d>, out: &mut Decoded) -> Sure<()> {
        let f = fields(doc, &[("resourceSpans", "resource_spans")])?;
        for resource_spans in array(f.values[0])? {
            self.resource_spans(resource_spans, REQUEST + 1, out)?;
        }
        Ok(())
    }

    fn resource_spans(&mut self, obj: &'d J<'d>, depth: usize, out: &mut Decoded) -> Sure<()> {
        const NAMES: [(&str, &str); 3] = [
            ("resource", "resource"),
            ("scopeSpans", "scope_spans"),
            ("schemaUrl", "schema_url"),
        ];
        let f = fields(obj, &NAMES)?;
        string(f.values[2])?;
        let mut attributes = Vec::new();
        if let Some(resource) = f.values[0] {
            const RESOURCE: [(&str, &str); 3] = [
                ("attributes", "attributes"),
                ("droppedAttributesCount", "dropped_attributes_count"),
                ("entityRefs", "entity_refs"),
            ];
            let r = fields(resource, &RESOURCE)?;
            if r.values[2].is_some() {
                return Err(Unsure);
            }
            integer::<u32>(r.values[1])?;
            attributes = self.key_values(r.values[0], depth + 2, true)?;
        }
        let resource = Arc::new(Resource {
            attributes: dedupe(attributes.into_iter().map(|(i, v)| (i.key, v)).collect()),
        });
        for scope_spans in array(f.values[1])? {
            const SCOPE_SPANS: [(&str, &str); 3] = [
                ("scope", "scope"),
                ("spans", "spans"),
                ("schemaUrl", "schema_url"),
            ];
            let s = fields(scope_spans, &SCOPE_SPANS)?;
            string(s.values[2])?;
            if let Some(scope) = s.values[0] {
                const SCOPE: [(&str, &str); 4] = [
                    ("name", "name"),
                    ("version", "version"),
                    ("attributes", "attributes"),
                    ("droppedAttributesCount", "dropped_attributes_count"),
                ];
                let sc = fields(scope, &SCOPE)?;
                string(sc.values[0])?;
                string(sc.values[1])?;
                integer::<u32>(sc.values[3])?;
                self.unread(sc.values[2], depth + 3)?;
            }
            for span in array(s.values[1])? {
                self.span(span, depth + 2, &resource, out)?;
            }
        }
        Ok(())
    }

    fn span(
        &mut self,
        obj: &'d J<'d>,
        depth: usize,
        resource: &Arc<Resource>,
        out: &mut Decoded,
    ) -> Sure<()> {
        const NAMES: [(&str, &str); 16] = [
            ("traceId", "trace_id"),
            ("spanId", "span_id"),
            ("traceState", "trace_state"),
            ("parentSpanId", "parent_span_id"),
            ("flags", "flags"),
            ("name", "name"),
            ("kind", "kind"),
            ("startTimeUnixNano", "start_time_unix_nano"),
            ("endTimeUnixNano", "end_time_unix_nano"),
            ("attributes", "attributes"),
            ("droppedAttributesCount", "dropped_attributes_count"),
            ("events", "events"),
            ("droppedEventsCount", "dropped_events_count"),
            ("links", "links"),
            ("droppedLinksCount", "dropped_links_count"),
            ("status", "status"),
        ];
        const KINDS: [&str; 6] = [
            "SPAN_KIND_UNSPECIFIED",
            "SPAN_KIND_INTERNAL",
            "SPAN_KIND_SERVER",
            "SPAN_KIND_CLIENT",
            "SPAN_KIND_PRODUCER",
            "SPAN_KIND_CONSUMER",
        ];
        const CODES: [&str; 3] = ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];
        let f = fields(obj, &NAMES)?;
        let trace_id = hex_id(f.values[0])?;
        let span_id = hex_id(f.values[1])?;
        let trace_state = string(f.values[2])?;
        let parent_id = hex_id(f.values[3])?;
        integer::<u32>(f.values[4])?;
        let name = string(f.values[5])?;
        enumeration(f.values[6], &KINDS)?;
        let start_ns: u64 = integer(f.values[7])?;
        let end_ns: u64 = integer(f.values[8])?;
        let kept = self.key_values(f.values[9], depth + 1, false)?;
        integer::<u32>(f.values[10])?;
        integer::<u32>(f.values[12])?;
        integer::<u32>(f.values[14])?;
        for event in array(f.values[11])? {
            const EVENT: [(&str, &str); 4] = [
                ("timeUnixNano", "time_unix_nano"),
                ("name", "name"),
                ("attributes", "attributes"),
                ("droppedAttributesCount", "dropped_attributes_count"),
            ];
            let e = fields(event, &EVENT)?;
            integer::<u64>(e.values[0])?;
            string(e.values[1])?;
            integer::<u32>(e.values[3])?;
            self.unread(e.values[2], depth + 2)?;
        }
        for link in array(f.values[13])? {
            const LINK: [(&str, &str); 6] = [
                ("traceId", "trace_id"),
                ("spanId", "span_id"),
                ("traceState", "trace_state"),
                ("attributes", "attributes"),
                ("droppedAttributesCount", "dropped_attributes_count"),
                ("flags", "flags"),
            ];
            let l = fields(link, &LINK)?;
            hex_id(l.values[0])?;
            hex_id(l.values[1])?;
            string(l.values[2])?;
            integer::<u32>(l.values[4])?;
            integer::<u32>(l.values[5])?;
            self.unread(l.values[3], depth + 2)?;
        }
        let (mut status_message, mut status_code) = ("", 0);
        if let Some(status) = f.values[15] {
            let st = fields(status, &[("message", "message"), ("code", "code")])?;
            status_message = string(st.values[0])?;
            status_code = enumeration(st.values[1], &CODES)?;
        }
        let typed: Vec<(Key, u32)> = kept
            .iter()
            .filter_map(|(info, _)| Some((info.key.clone(), info.rule?)))
            .collect();
        let attributes = kept.into_iter().map(|(i, v)| (i.key, v)).collect();
        let read = Read {
            trace_id: &trace_id,
            span_id: &span_id,
            parent_id: &parent_id,
            name,
            trace_state,
            start_ns,
            end_ns,
            status_code,
            status_message,
        };
        out.add(self.rules, read, attributes, true, resource, &typed);
        Ok(())
    }
}

/// The body decoded, or `Unsure`: the reference decodes it then.
pub fn decode(payload: &[u8], rules: &Rules) -> Sure<Decoded> {
    let doc = parse(payload)?;
    let mut walk = Walk {
        keys: Keys::default(),
        rules,
    };
    let mut out = Decoded::default();
    walk.request(&doc, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_python_reads_plain_inputs() {
        assert_eq!(base64("AQ").unwrap(), b"\x01");
        assert_eq!(base64("AQ==").unwrap(), b"\x01");
        assert_eq!(base64("AQ=").unwrap(), b"\x01");
        assert_eq!(base64("AQID").unwrap(), b"\x01\x02\x03");
        assert_eq!(base64("-_8").unwrap(), b"\xfb\xff");
        assert_eq!(base64("+/8=").unwrap(), b"\xfb\xff");
        assert_eq!(base64("").unwrap(), b"");
        assert_eq!(base64("A"), Err(Unsure));
        assert_eq!(base64("AQ==="), Err(Unsure));
        assert_eq!(base64("A Q"), Err(Unsure));
    }

    #[test]
    fn integers_and_doubles() {
        assert_eq!(
            integer::<u64>(Some(&J::Str("18446744073709551615".into()))),
            Ok(u64::MAX)
        );
        assert_eq!(integer::<u64>(Some(&J::Num("-1"))), Err(Unsure));
        assert_eq!(integer::<i64>(Some(&J::Num("1.0"))), Err(Unsure));
        assert_eq!(integer::<i64>(Some(&J::Str(" 1".into()))), Err(Unsure));
        assert_eq!(double(&J::Num("-0")).unwrap().to_bits(), 0.0f64.to_bits());
        assert_eq!(
            double(&J::Num("-0.0")).unwrap().to_bits(),
            (-0.0f64).to_bits()
        );
        assert_eq!(double(&J::Num("1e999")), Err(Unsure));
        assert!(double(&J::Str("NaN".into())).unwrap().is_nan());
    }
}
