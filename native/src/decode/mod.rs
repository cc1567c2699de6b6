//! OTLP trace exports decoded natively into a `SpanBatch`, with the GIL released.
//!
//! The Python reference is `sloscope.receivers.otlp_decode.decode_protobuf` followed by the
//! per-span `Mapping.check` of `Intake.submit`; this decoder does both in one pass and returns
//! what they return together: the spans that passed, how many were rejected, and the first five
//! rejection messages (id faults first, then wrong types, as the two Python passes order them).
//! Messages are worded under the GIL at the end, from Python's own `repr`, so that they are
//! exactly the reference's.

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use std::sync::Arc;

use crate::packed::{In, Packed};
use crate::span::{to_hex, value_to_py, Key, KeyTable, Resource, Span, SpanBatch, Value};

pub mod json;
pub mod json_dom;
pub mod protobuf;
pub mod rules;
pub mod schema;
pub mod values;
pub mod wire;

use rules::{Expected, Rule, Rules};

create_exception!(
    _native,
    DecodeError,
    PyValueError,
    "The payload is not a valid OTLP export (raised by Python as MalformedPayloadError)."
);

/// How many rejection messages a result quotes (`Decoded.reject` keeps five).
const QUOTED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdFault {
    TraceId,
    SpanId,
    Parent,
}

/// A span's ids, or which is invalid: `decode_request`'s checks in its order (a 16-byte trace id
/// and an 8-byte span id, neither all zero; a parent id empty or 8 bytes).
pub type Ids = ([u8; 16], [u8; 8], Option<[u8; 8]>);

pub fn check_ids(trace_id: &[u8], span_id: &[u8], parent: &[u8]) -> Result<Ids, IdFault> {
    let trace: [u8; 16] = trace_id.try_into().map_err(|_| IdFault::TraceId)?;
    if trace == [0; 16] {
        return Err(IdFault::TraceId);
    }
    let span: [u8; 8] = span_id.try_into().map_err(|_| IdFault::SpanId)?;
    if span == [0; 8] {
        return Err(IdFault::SpanId);
    }
    let parent = match parent {
        [] => None,
        bytes => Some(bytes.try_into().map_err(|_| IdFault::Parent)?),
    };
    Ok((trace, span, parent))
}

/// Why a span was rejected, kept until the message can be worded under the GIL.
#[derive(Debug, Clone)]
pub enum Rejection {
    Id {
        name: Box<str>,
        fault: IdFault,
    },
    Type {
        span_id: [u8; 8],
        name: Box<str>,
        key: Key,
        field: Box<str>,
        expected: Expected,
        value: Value,
    },
}

/// One span's fields as a decoder read them, before its ids are checked.
pub struct Read<'a> {
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub parent_id: &'a [u8],
    pub name: &'a str,
    pub trace_state: &'a str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub status_code: i32,
    pub status_message: &'a str,
}

/// One payload's outcome.
#[derive(Default)]
pub struct Decoded {
    pub spans: Vec<Span>,
    /// The keys of the spans' attributes, by id.
    pub keys: KeyTable,
    pub rejected: usize,
    ids: Vec<Rejection>,
    types: Vec<Rejection>,
}

impl Decoded {
    fn reject_id(&mut self, rejection: Rejection) {
        self.rejected += 1;
        if self.ids.len() < QUOTED {
            self.ids.push(rejection);
        }
    }

    fn reject_type(&mut self, rejection: Rejection) {
        self.rejected += 1;
        if self.types.len() < QUOTED {
            self.types.push(rejection);
        }
    }

    /// The span's ids, or None after rejecting it for them.
    fn ids(&mut self, read: &Read<'_>) -> Option<Ids> {
        match check_ids(read.trace_id, read.span_id, read.parent_id) {
            Ok(ids) => Some(ids),
            Err(fault) => {
                self.reject_id(Rejection::Id {
                    name: read.name.into(),
                    fault,
                });
                None
            }
        }
    }

    /// Keeps a span whose attributes are owned (OTLP/JSON): deduplicated as a Python dict keeps
    /// them, unless the decoder knows its keys are distinct (`maybe_repeated` false), then checked;
    /// `typed` holds the span's typed keys (interned, so compared by address) with their rules.
    fn add(
        &mut self,
        rules: &Rules,
        read: Read<'_>,
        attributes: Vec<(Key, Value)>,
        maybe_repeated: bool,
        resource: &Arc<Resource>,
        typed: &[(Key, u32)],
    ) {
        let Some(ids) = self.ids(&read) else { return };
        let attributes = if maybe_repeated {
            values::dedupe(attributes)
        } else {
            attributes
        };
        let wrong = rules::first_wrong(rules, &attributes, typed, Expected::accepts);
        if let Some((key, rule, value)) = wrong {
            return self.reject_wrong_type(ids.1, &read, key.clone(), rule, value.clone());
        }
        let mut input = self.keys.input(&attributes);
        self.push(ids, &read, resource, &mut input);
    }

    /// Keeps a span whose attributes are packed input by key id (the protobuf decoder's; `key_of`
    /// names an id), as `add` does.
    #[allow(clippy::too_many_arguments)]
    fn add_input(
        &mut self,
        rules: &Rules,
        read: Read<'_>,
        attributes: &mut Vec<(u32, In<'_>)>,
        maybe_repeated: bool,
        resource: &Arc<Resource>,
        typed: &[(u32, u32)],
        key_of: impl Fn(u32) -> Key,
    ) {
        let Some(ids) = self.ids(&read) else { return };
        if maybe_repeated {
            values::dedupe_in_place(attributes);
        }
        let wrong = rules::first_wrong(rules, attributes, typed, Expected::accepts_in);
        if let Some((&id, rule, value)) = wrong {
            return self.reject_wrong_type(ids.1, &read, key_of(id), rule, value.to_value());
        }
        self.push(ids, &read, resource, attributes);
    }

    fn reject_wrong_type(
        &mut self,
        span_id: [u8; 8],
        read: &Read<'_>,
        key: Key,
        rule: &Rule,
        value: Value,
    ) {
        self.reject_type(Rejection::Type {
            span_id,
            name: read.name.into(),
            key,
            field: rule.field.clone(),
            expected: rule.expected,
            value,
        });
    }

    /// Writes a kept span into the batch.
    fn push(
        &mut self,
        ids: Ids,
        read: &Read<'_>,
        resource: &Arc<Resource>,
        attributes: &mut Vec<(u32, In<'_>)>,
    ) {
        let (trace_id, span_id, parent_span_id) = ids;
        self.spans.push(Span {
            trace_id,
            span_id,
            parent_span_id,
            start_ns: read.start_ns,
            end_ns: read.end_ns,
            resource: resource.clone(),
            tracestate: read.trace_state.into(),
            status_code: read.status_code,
            fields: Packed::new(read.name, read.status_message, attributes),
        });
    }

    /// The quoted rejections in the reference's order.
    pub fn rejections(&self) -> impl Iterator<Item = &Rejection> {
        self.ids.iter().chain(&self.types).take(QUOTED)
    }
}

fn word(py: Python<'_>, rejection: &Rejection) -> PyResult<String> {
    Ok(match rejection {
        Rejection::Id { name, fault } => {
            let name = PyString::new(py, name).repr()?;
            let what = match fault {
                IdFault::TraceId => "trace_id must be 16 bytes, not all zero",
                IdFault::SpanId => "span_id must be 8 bytes, not all zero",
                IdFault::Parent => "parent_span_id must be empty or 8 bytes",
            };
            format!("span {name}: {what}")
        }
        Rejection::Type {
            span_id,
            name,
            key,
            field,
            expected,
            value,
        } => {
            // attributes.py `_wrong_type`: the repr cut to 37 characters and "..." past 40.
            let value = value_to_py(py, value)?;
            let shown: String = value.repr()?.extract()?;
            let shown = if shown.chars().count() > 40 {
                shown.chars().take(37).chain("...".chars()).collect()
            } else {
                shown
            };
            format!(
                "span {} ({name}): attribute {key} ({field}) must be {}, got {} {shown}",
                to_hex(span_id),
                expected.text(),
                value.get_type().name()?,
            )
        }
    })
}

/// What decoding one export gave: the spans kept, how many were rejected, and the first five
/// reasons (in the reference's words).
#[pyclass(module = "sloscope._native", frozen, get_all)]
pub struct Outcome {
    pub spans: Py<SpanBatch>,
    pub rejected: usize,
    pub reasons: Vec<String>,
}

pub fn outcome(py: Python<'_>, decoded: Decoded) -> PyResult<Outcome> {
    let reasons = decoded
        .rejections()
        .map(|r| word(py, r))
        .collect::<PyResult<Vec<_>>>()?;
    let batch = SpanBatch {
        spans: decoded.spans,
        keys: decoded.keys.into_keys(),
    };
    Ok(Outcome {
        spans: Py::new(py, batch)?,
        rejected: decoded.rejected,
        reasons,
    })
}

/// Decodes OTLP trace exports for one attribute mapping.
#[pyclass(module = "sloscope._native", frozen)]
pub struct Decoder {
    rules: Rules,
}

#[pymethods]
impl Decoder {
    /// `keep`: the span attributes to keep (None: all); `typed`: `Mapping.rules()["typed"]`, span
    /// key → (field, expected kind).
    #[new]
    #[pyo3(signature = (keep, typed))]
    fn new(keep: Option<&Bound<'_, PyAny>>, typed: &Bound<'_, PyDict>) -> PyResult<Self> {
        let keep = match keep {
            None => None,
            Some(keys) => {
                let mut set = std::collections::HashSet::new();
                for key in keys.try_iter()? {
                    set.insert(key?.extract::<String>()?.into_boxed_str());
                }
                Some(set)
            }
        };
        let mut rules = Rules {
            keep,
            ..Rules::default()
        };
        for (key, rule) in typed.iter() {
            let (field, kind): (String, String) = rule.extract()?;
            let expected = Expected::parse(&kind)
                .ok_or_else(|| PyTypeError::new_err(format!("unknown attribute kind {kind:?}")))?;
            let rule = Rule {
                field: field.into(),
                expected,
            };
            rules.add(key.extract::<String>()?.into(), rule);
        }
        Ok(Decoder { rules })
    }

    /// An `ExportTraceServiceRequest` in protobuf: (the spans, how many were rejected, the first
    /// five reasons). Raises `DecodeError` for a payload that is not one.
    fn protobuf(&self, py: Python<'_>, payload: &[u8]) -> PyResult<Outcome> {
        let decoded = py
            .detach(|| self.export_request(payload))
            .map_err(DecodeError::new_err)?;
        outcome(py, decoded)
    }

    /// An OTLP/JSON body, as `protobuf` returns it; None when the body is not plainly valid
    /// OTLP/JSON (malformed, or written in a way only the reference reads exactly: see
    /// decode/json.rs), for the Python reference to decode, or refuse.
    fn json(&self, py: Python<'_>, payload: &[u8]) -> PyResult<Option<Outcome>> {
        match py.detach(|| json::decode(payload, &self.rules)) {
            Ok(decoded) => outcome(py, decoded).map(Some),
            Err(json_dom::Unsure) => Ok(None),
        }
    }
}

impl Decoder {
    /// `protobuf` without the GIL (the gRPC front decodes on its own threads); the error is the
    /// reason a client is told.
    pub fn export_request(&self, payload: &[u8]) -> Result<Decoded, String> {
        protobuf::decode(payload, &self.rules).map_err(|e| {
            format!(
                "not a valid OTLP ExportTraceServiceRequest protobuf: {}",
                e.0
            )
        })
    }
}

impl Decoder {
    /// `json` without the GIL (the HTTP front decodes on its own threads): None for a body left to
    /// the Python reference.
    pub fn json_request(&self, payload: &[u8]) -> Option<Decoded> {
        json::decode(payload, &self.rules).ok()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Decoder>()?;
    m.add_class::<Outcome>()?;
    m.add("DecodeError", m.py().get_type::<DecodeError>())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_in_the_references_order() {
        let (t, s, p) = ([1u8; 16], [2u8; 8], [3u8; 8]);
        assert_eq!(check_ids(&t, &s, &[]), Ok((t, s, None)));
        assert_eq!(check_ids(&t, &s, &p), Ok((t, s, Some(p))));
        assert_eq!(check_ids(&t, &s, &[0; 8]), Ok((t, s, Some([0; 8]))));
        assert_eq!(check_ids(&[0; 16], &[], &[1]), Err(IdFault::TraceId));
        assert_eq!(check_ids(&t[..15], &s, &[]), Err(IdFault::TraceId));
        assert_eq!(check_ids(&t, &[0; 8], &[]), Err(IdFault::SpanId));
        assert_eq!(check_ids(&t, &s[..7], &[1]), Err(IdFault::SpanId));
        assert_eq!(check_ids(&t, &s, &[1; 9]), Err(IdFault::Parent));
    }
}
