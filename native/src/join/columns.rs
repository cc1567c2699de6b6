//! Joined requests as the columns of `sloscope.columnar.batch.Batch` (one per `JoinedRequest`
//! field, in field order; `sloscope.processors.joined_batch` names each one's kind), written here so
//! that Python wraps each with `numpy.frombuffer` and builds no object per request.
//!
//! Four kinds, each in the layout its Python reader reads:
//! - `float`: little-endian f64 values, NaN in a row with none, and a byte per row (1: the row
//!   holds a value) left out when every row holds one: NaN itself stays a value in a held row;
//! - `int`: little-endian i64 values;
//! - `label`: an i64 code per row (-1: none) into its distinct values, in order of first
//!   appearance (the few pods, models, pools and outcomes of many rows);
//! - `text`: i64 offsets and the UTF-8 bytes (row `i` at `data[offsets[i]..offsets[i + 1]]`), and
//!   the held bytes as for floats: the ids, which differ in every row, decoded only where read.

use crate::join::build::{Joined, Text};
use crate::join::hash::HashMap;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A column's kind (as `sloscope.processors.joined_batch` names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Float,
    Int,
    Label,
    Text,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Float => "float",
            Kind::Int => "int",
            Kind::Label => "label",
            Kind::Text => "text",
        }
    }
}

/// One column's buffers.
#[derive(Debug, PartialEq)]
pub enum Column {
    Floats {
        values: Vec<u8>,
        held: Option<Vec<u8>>,
    },
    Ints {
        values: Vec<u8>,
    },
    Labels {
        codes: Vec<u8>,
        values: Vec<String>,
    },
    Texts {
        offsets: Vec<u8>,
        data: Vec<u8>,
        held: Option<Vec<u8>>,
    },
}

impl Column {
    pub fn kind(&self) -> Kind {
        match self {
            Column::Floats { .. } => Kind::Float,
            Column::Ints { .. } => Kind::Int,
            Column::Labels { .. } => Kind::Label,
            Column::Texts { .. } => Kind::Text,
        }
    }
}

/// Which rows hold a value, as a byte per row, made only once a row without one is seen.
struct Held {
    bytes: Option<Vec<u8>>,
    rows: usize,
}

impl Held {
    fn new(rows: usize) -> Held {
        Held { bytes: None, rows }
    }

    fn none(&mut self, row: usize) {
        let rows = self.rows;
        self.bytes.get_or_insert_with(|| vec![1; rows])[row] = 0;
    }
}

/// Label codes: a row like the one before it (the usual case: a batch's rows share a few pods,
/// models and pools) takes its code without a lookup.
fn labels<'a>(rows: usize, values: impl Iterator<Item = Option<&'a str>>) -> Column {
    let mut index: HashMap<&str, i64> = HashMap::default();
    let mut distinct: Vec<String> = Vec::new();
    let mut codes = Vec::with_capacity(8 * rows);
    let mut last: Option<(&str, i64)> = None;
    for value in values {
        let code = match (value, last) {
            (None, _) => -1,
            (Some(text), Some((previous, code))) if text == previous => code,
            (Some(text), _) => {
                let code = *index.entry(text).or_insert_with(|| {
                    distinct.push(text.to_owned());
                    distinct.len() as i64 - 1
                });
                last = Some((text, code));
                code
            }
        };
        codes.extend_from_slice(&code.to_le_bytes());
    }
    Column::Labels {
        codes,
        values: distinct,
    }
}

fn texts<'a>(rows: usize, values: impl Iterator<Item = Option<&'a str>>) -> Column {
    let mut held = Held::new(rows);
    let mut offsets = Vec::with_capacity(8 * (rows + 1));
    let mut data = Vec::new();
    offsets.extend_from_slice(&0i64.to_le_bytes());
    for (row, value) in values.enumerate() {
        match value {
            Some(text) => data.extend_from_slice(text.as_bytes()),
            None => held.none(row),
        }
        offsets.extend_from_slice(&(data.len() as i64).to_le_bytes());
    }
    Column::Texts {
        offsets,
        data,
        held: held.bytes,
    }
}

/// Ids as lowercase hex text, written straight into the column (no string per id).
fn hex_texts<'a>(ids: impl ExactSizeIterator<Item = &'a [u8]>) -> Column {
    let rows = ids.len();
    let mut offsets = Vec::with_capacity(8 * (rows + 1));
    let mut data = Vec::new();
    offsets.extend_from_slice(&0i64.to_le_bytes());
    for id in ids {
        data.reserve(2 * id.len());
        for b in id {
            data.push(HEX[(b >> 4) as usize]);
            data.push(HEX[(b & 15) as usize]);
        }
        offsets.extend_from_slice(&(data.len() as i64).to_le_bytes());
    }
    Column::Texts {
        offsets,
        data,
        held: None,
    }
}

fn floats(rows: usize, values: impl Iterator<Item = Option<f64>>) -> Column {
    let mut held = Held::new(rows);
    let mut data = Vec::with_capacity(8 * rows);
    for (row, value) in values.enumerate() {
        if value.is_none() {
            held.none(row);
        }
        data.extend_from_slice(&value.unwrap_or(f64::NAN).to_le_bytes());
    }
    Column::Floats {
        values: data,
        held: held.bytes,
    }
}

fn ints(rows: usize, values: impl Iterator<Item = i64>) -> Column {
    let mut data = Vec::with_capacity(8 * rows);
    for value in values {
        data.extend_from_slice(&value.to_le_bytes());
    }
    Column::Ints { values: data }
}

/// Nanoseconds as i64 (OTLP's u64 times are far below 2^63 until the year 2262).
fn ns(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The columns of `requests`, named as `JoinedRequest`'s fields, in their order.
pub fn columns(requests: &[Joined], text: &str) -> Vec<(&'static str, Column)> {
    let n = requests.len();
    let r = requests;
    let shared =
        |f: fn(&Joined) -> Option<Text>| labels(n, r.iter().map(|j| f(j).map(|t| t.read(text))));
    let word = |f: fn(&Joined) -> Option<&str>| labels(n, r.iter().map(f));
    let float = |f: fn(&Joined) -> Option<f64>| floats(n, r.iter().map(f));
    let int = |f: fn(&Joined) -> i64| ints(n, r.iter().map(f));
    let hex = |f: fn(&Joined) -> &[u8]| hex_texts(r.iter().map(f));
    vec![
        ("trace_id", hex(|j| &j.trace_id)),
        ("span_id", hex(|j| &j.span_id)),
        ("outcome", word(|j| Some(j.outcome.0))),
        (
            "request_id",
            texts(n, r.iter().map(|j| j.request_id.map(|t| t.read(text)))),
        ),
        ("requested_model", shared(|j| j.requested_model)),
        ("target_model", shared(|j| j.target_model)),
        ("pool", shared(|j| j.pool)),
        ("pod", shared(|j| j.pod)),
        ("endpoint", shared(|j| j.endpoint)),
        ("slo_ttft_ms", float(|j| j.slo_ttft_ms)),
        ("slo_tpot_ms", float(|j| j.slo_tpot_ms)),
        ("routing", word(|j| Some(j.routing.0))),
        ("predicted_ttft_ms", float(|j| j.predicted_ttft_ms)),
        ("predicted_tpot_ms", float(|j| j.predicted_tpot_ms)),
        ("ttft_seconds", float(|j| j.ttft_seconds)),
        ("ttft_source", word(|j| j.ttft_source.map(|w| w.0))),
        ("server_ttft_seconds", float(|j| j.server_ttft_seconds)),
        ("e2e_seconds", float(|j| j.e2e_seconds)),
        ("queue_seconds", float(|j| j.queue_seconds)),
        ("prefill_seconds", float(|j| j.prefill_seconds)),
        ("decode_seconds", float(|j| j.decode_seconds)),
        ("prompt_tokens", float(|j| j.prompt_tokens)),
        ("completion_tokens", float(|j| j.completion_tokens)),
        ("prefix_cache_score", float(|j| j.prefix_cache_score)),
        ("start_ns", int(|j| ns(j.start_ns))),
        ("end_ns", int(|j| ns(j.end_ns))),
        ("arrival_ns", int(|j| ns(j.arrival_ns))),
        ("failure_reason", word(|j| j.failure_reason.map(|w| w.0))),
        ("tpot_seconds", float(|j| j.tpot_seconds)),
        ("choices", int(|j| i64::from(j.choices))),
        ("prefill_pod", shared(|j| j.prefill_pod)),
        ("prefill_queue_seconds", float(|j| j.prefill_queue_seconds)),
        (
            "prefill_seconds_on_prefill_pod",
            float(|j| j.prefill_seconds_on_prefill_pod),
        ),
        ("phase", word(|j| j.phase.map(|w| w.0))),
        ("call_arrival_ns", int(|j| ns(j.call_arrival_ns))),
        ("gateway", shared(|j| j.gateway)),
        ("sampling_probability", float(|j| j.sampling_probability)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i64s(bytes: &[u8]) -> Vec<i64> {
        bytes
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn labels_are_codes_into_their_values_in_order_of_first_appearance() {
        let Column::Labels { codes, values } = labels(
            8,
            [
                Some("b"),
                None,
                Some("b"),
                Some("a"),
                Some("a"),
                Some("b"),
                Some(""),
                None,
            ]
            .into_iter(),
        ) else {
            panic!("not labels")
        };
        assert_eq!(i64s(&codes), vec![0, -1, 0, 1, 1, 0, 2, -1]);
        assert_eq!(values, vec!["b", "a", ""]);
    }

    #[test]
    fn texts_have_offsets_and_held_bytes_only_with_a_row_without_one() {
        let c = texts(3, [Some("ab"), None, Some("é")].into_iter());
        let Column::Texts {
            offsets,
            data,
            held,
        } = c
        else {
            panic!("not texts")
        };
        assert_eq!(i64s(&offsets), vec![0, 2, 2, 4]);
        assert_eq!(data, "abé".as_bytes());
        assert_eq!(held, Some(vec![1, 0, 1]));
        let all = texts(1, [Some("x")].into_iter());
        assert!(matches!(all, Column::Texts { held: None, .. }));
    }

    #[test]
    fn ids_are_lowercase_hex() {
        let Column::Texts { offsets, data, .. } =
            hex_texts([&[0xde_u8, 0x0a][..], &[][..]].into_iter())
        else {
            panic!("not texts")
        };
        assert_eq!(
            (i64s(&offsets), data.as_slice()),
            (vec![0, 4, 4], &b"de0a"[..])
        );
    }

    #[test]
    fn floats_keep_nan_as_a_value_apart_from_a_row_without_one() {
        let Column::Floats { values, held } =
            floats(3, [Some(f64::NAN), None, Some(1.5)].into_iter())
        else {
            panic!("not floats")
        };
        let read: Vec<f64> = values
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!(read[0].is_nan() && read[1].is_nan() && read[2] == 1.5);
        assert_eq!(held, Some(vec![1, 0, 1]));
    }

    #[test]
    fn every_field_has_a_column_of_one_row() {
        let cols = columns(&[Joined::default()], "");
        assert_eq!(cols.len(), 37);
        for (name, column) in &cols {
            let rows = match column {
                Column::Floats { values, .. } | Column::Ints { values } => values.len() / 8,
                Column::Labels { codes, .. } => codes.len() / 8,
                Column::Texts { offsets, .. } => offsets.len() / 8 - 1,
            };
            assert_eq!(rows, 1, "{name}");
        }
    }
}
