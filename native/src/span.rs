//! One OTLP span reduced to what sloscope reads: the native twin of `sloscope.records.Span`.
//!
//! The decoder writes this type and the trace join takes it; Python sees it only when it asks
//! (`SpanBatch.to_spans`, for tests and for the Python reference assembler). Ids stay bytes here
//! (hex only at the boundary); the name, the status message and the attributes are packed
//! (`packed::Packed`), each attribute's key an id in its batch's key table (so a thousand spans
//! carrying `gen_ai.latency.e2e` hold one copy of the name, and the join maps a batch's keys to its
//! own once); a span's resource is shared by every span of its `ResourceSpans`.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyType};

use crate::packed::{In, Packed, MAX_KEY};

/// An attribute key, shared between spans.
pub type Key = Arc<str>;

/// An OTLP `AnyValue`, as the Python decoder turns it into Python objects.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Box<str>),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(Box<[u8]>),
    Array(Box<[Value]>),
    KvList(Box<[(Key, Value)]>),
    /// An `AnyValue` with no value set (Python: `None`).
    Empty,
}

/// Attributes in the order the span carried them (the order decides which of two duplicates wins,
/// and which wrong-typed attribute a rejection message names).
pub type Attrs = Vec<(Key, Value)>;

/// Looks a key up; spans carry few kept attributes, so a scan beats hashing.
pub fn get<'a>(attrs: &'a [(Key, Value)], key: &str) -> Option<&'a Value> {
    // The last of duplicate keys wins, as a Python dict built from the list keeps the last one.
    attrs
        .iter()
        .rev()
        .find(|(k, _)| &**k == key)
        .map(|(_, v)| v)
}

/// The attributes of one `Resource`, shared by every span of its `ResourceSpans`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resource {
    pub attributes: Attrs,
}

/// A decoded span. Its name, status message and attributes are packed (`Packed`); the attributes'
/// keys are ids in the key table of the batch that carries it (`SpanBatch::keys`).
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// None for a root span (OTLP: an empty `parent_span_id`).
    pub parent_span_id: Option<[u8; 8]>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub resource: Arc<Resource>,
    /// Apart from the packed text: the join never reads it, and it is nearly always empty (no
    /// allocation).
    pub tracestate: Box<str>,
    /// OTLP StatusCode: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub fields: Packed,
}

pub const STATUS_ERROR: i32 = 2;

/// Attribute keys by id, for the spans of one batch: the decoder of protobuf interns a payload's
/// keys itself; this table interns them for the other ways a span is made (OTLP/JSON, Python
/// spans, tests).
#[derive(Default)]
pub struct KeyTable {
    ids: HashMap<Key, u32>,
    keys: Vec<Key>,
}

impl KeyTable {
    pub fn id(&mut self, key: &Key) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.keys.len() as u32;
        // Spans made here carry only the keys a mapping keeps: a few dozen.
        assert!(
            id <= MAX_KEY,
            "more than {MAX_KEY} distinct attribute keys in one batch"
        );
        self.ids.insert(key.clone(), id);
        self.keys.push(key.clone());
        id
    }

    /// The owned attributes as packed input, their keys interned.
    pub fn input<'a>(&mut self, attrs: &'a [(Key, Value)]) -> Vec<(u32, In<'a>)> {
        attrs.iter().map(|(k, v)| (self.id(k), In::of(v))).collect()
    }

    pub fn into_keys(self) -> Vec<Key> {
        self.keys
    }
}

impl From<Vec<Key>> for KeyTable {
    /// A table of distinct keys, each with its index as id.
    fn from(keys: Vec<Key>) -> KeyTable {
        let ids = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i as u32))
            .collect();
        KeyTable { ids, keys }
    }
}

// ---- hex ids --------------------------------------------------------------------------------

const HEX: &[u8; 16] = b"0123456789abcdef";

pub fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Parses exactly `N` bytes of hex.
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let raw = text.as_bytes();
    if raw.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in raw.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

// ---- to and from Python ---------------------------------------------------------------------

static SPAN_CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();

pub fn value_to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Double(d) => PyFloat::new(py, *d).into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items.iter() {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::KvList(pairs) => attrs_to_py(py, pairs)?.into_any(),
        Value::Empty => py.None().into_bound(py),
    })
}

pub fn attrs_to_py<'py>(py: Python<'py>, attrs: &[(Key, Value)]) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in attrs {
        dict.set_item(&**key, value_to_py(py, value)?)?;
    }
    Ok(dict)
}

/// A `sloscope.records.Span` with the same fields (ids as lowercase hex, "" for no parent); `keys`
/// is its batch's key table.
pub fn span_to_py<'py>(py: Python<'py>, span: &Span, keys: &[Key]) -> PyResult<Bound<'py, PyAny>> {
    let class = SPAN_CLASS.import(py, "sloscope.records", "Span")?;
    let parent = span.parent_span_id.map(|p| to_hex(&p)).unwrap_or_default();
    let fields = &span.fields;
    let attributes = PyDict::new(py);
    for attr in fields.attrs() {
        attributes.set_item(
            &*keys[attr.key() as usize],
            value_to_py(py, &fields.value(attr))?,
        )?;
    }
    class.call1((
        to_hex(&span.trace_id),
        to_hex(&span.span_id),
        parent,
        fields.name(),
        span.start_ns,
        span.end_ns,
        attributes,
        attrs_to_py(py, &span.resource.attributes)?,
        &*span.tracestate,
        span.status_code,
        fields.status_message(),
    ))
}

pub fn value_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Empty);
    }
    // bool before int: a Python bool is an int.
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(Value::Int(obj.extract::<i64>()?));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Double(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::Str(s.to_str()?.into()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Value::Bytes(b.as_bytes().into()));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        let items: PyResult<Vec<Value>> = list.iter().map(|item| value_from_py(&item)).collect();
        return Ok(Value::Array(items?.into_boxed_slice()));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        return Ok(Value::KvList(attrs_from_py(dict)?.into_boxed_slice()));
    }
    Err(PyTypeError::new_err(format!(
        "attribute value of type {} is not an OTLP value",
        obj.get_type().name()?
    )))
}

pub fn attrs_from_py(dict: &Bound<'_, PyDict>) -> PyResult<Attrs> {
    let mut out = Vec::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        let key: String = key.extract()?;
        out.push((Key::from(key), value_from_py(&value)?));
    }
    Ok(out)
}

fn id_from_py<const N: usize>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<[u8; N]> {
    let text: String = obj.getattr(what)?.extract()?;
    from_hex::<N>(&text)
        .ok_or_else(|| PyValueError::new_err(format!("{what} {text:?} is not {N} bytes of hex")))
}

/// The native span of a `sloscope.records.Span`, its keys interned in `keys`. `resources` shares
/// one `Resource` between spans whose resource dict is the same Python object (as the Python decoder
/// makes them).
pub fn span_from_py(
    obj: &Bound<'_, PyAny>,
    resources: &mut Vec<(usize, Arc<Resource>)>,
    keys: &mut KeyTable,
) -> PyResult<Span> {
    let parent: String = obj.getattr("parent_span_id")?.extract()?;
    let parent_span_id = if parent.is_empty() {
        None
    } else {
        Some(from_hex::<8>(&parent).ok_or_else(|| {
            PyValueError::new_err(format!("parent_span_id {parent:?} is not 8 bytes of hex"))
        })?)
    };
    let resource_obj = obj.getattr("resource")?;
    let address = resource_obj.as_ptr() as usize;
    let resource = match resources.iter().find(|(a, _)| *a == address) {
        Some((_, r)) => r.clone(),
        None => {
            let r = Arc::new(Resource {
                attributes: attrs_from_py(resource_obj.cast::<PyDict>()?)?,
            });
            resources.push((address, r.clone()));
            r
        }
    };
    let name: String = obj.getattr("name")?.extract()?;
    let message: String = obj.getattr("status_message")?.extract()?;
    let attributes = attrs_from_py(obj.getattr("attributes")?.cast::<PyDict>()?)?;
    Ok(Span {
        trace_id: id_from_py::<16>(obj, "trace_id")?,
        span_id: id_from_py::<8>(obj, "span_id")?,
        parent_span_id,
        start_ns: obj.getattr("start_ns")?.extract()?,
        end_ns: obj.getattr("end_ns")?.extract()?,
        resource,
        tracestate: obj.getattr("tracestate")?.extract::<String>()?.into(),
        status_code: obj.getattr("status_code")?.extract()?,
        fields: Packed::new(&name, &message, &mut keys.input(&attributes)),
    })
}

// ---- the batch Python holds -----------------------------------------------------------------

/// Spans decoded natively, held in native memory until the trace join takes them. Python sees a
/// length (the queue counts spans) and, when it asks, the spans as `sloscope.records.Span`.
#[pyclass(module = "sloscope._native")]
#[derive(Default)]
pub struct SpanBatch {
    pub spans: Vec<Span>,
    /// The attribute keys of its spans, by id.
    pub keys: Vec<Key>,
}

impl SpanBatch {
    /// The spans and their key table, leaving the batch empty (the join owns them from then on).
    pub fn take(&mut self) -> (Vec<Span>, Vec<Key>) {
        (
            std::mem::take(&mut self.spans),
            std::mem::take(&mut self.keys),
        )
    }
}

/// The shard (of `n`) a trace belongs to: a stable mix of its 128 bits, so every span of a trace
/// reaches the same join worker whatever batch carries it. `sloscope.processors.shards.shard_of`
/// computes the same for the reference decoder's spans (a trace's spans can come from both).
pub fn shard_of(trace_id: &[u8; 16], n: usize) -> usize {
    let hi = u64::from_be_bytes(trace_id[..8].try_into().expect("8 of 16 bytes"));
    let lo = u64::from_be_bytes(trace_id[8..].try_into().expect("8 of 16 bytes"));
    (mix(hi ^ mix(lo)) % n as u64) as usize
}

/// splitmix64's finalizer: every input bit moves every output bit (trace ids need not be random).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[pymethods]
impl SpanBatch {
    /// A batch of the given `sloscope.records.Span` objects (the Python decoder's output, tests).
    #[staticmethod]
    fn from_spans(spans: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut resources = Vec::new();
        let mut keys = KeyTable::default();
        let mut out = Vec::new();
        for span in spans.try_iter()? {
            out.push(span_from_py(&span?, &mut resources, &mut keys)?);
        }
        Ok(SpanBatch {
            spans: out,
            keys: keys.into_keys(),
        })
    }

    /// The spans as `sloscope.records.Span` objects, in order.
    fn to_spans<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for span in &self.spans {
            list.append(span_to_py(py, span, &self.keys)?)?;
        }
        Ok(list)
    }

    /// The spans split into `n` batches by trace id (`shard_of`), in their order within each; the
    /// spans move, leaving this batch empty (as the join's `take` does).
    fn split(&mut self, n: usize) -> PyResult<Vec<SpanBatch>> {
        if n == 0 {
            return Err(PyValueError::new_err("n must be at least 1"));
        }
        let (spans, keys) = self.take();
        let mut out: Vec<SpanBatch> = (0..n)
            .map(|_| SpanBatch {
                spans: Vec::new(),
                keys: keys.clone(),
            })
            .collect();
        for span in spans {
            out[shard_of(&span.trace_id, n)].spans.push(span);
        }
        Ok(out)
    }

    fn __len__(&self) -> usize {
        self.spans.len()
    }

    fn __repr__(&self) -> String {
        format!("SpanBatch({} spans)", self.spans.len())
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A span with these attributes, and the key table of its batch (for the join's tests).
    pub fn span_with(
        name: &str,
        status_code: i32,
        message: &str,
        attributes: Vec<(&str, Value)>,
    ) -> (Span, Vec<Key>) {
        let attributes: Attrs = attributes
            .into_iter()
            .map(|(k, v)| (Key::from(k), v))
            .collect();
        let mut keys = KeyTable::default();
        let span = Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: None,
            start_ns: 0,
            end_ns: 0,
            resource: Arc::new(Resource::default()),
            tracestate: "".into(),
            status_code,
            fields: Packed::new(name, message, &mut keys.input(&attributes)),
        };
        (span, keys.into_keys())
    }

    #[test]
    fn hex_round_trip() {
        let id = [0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 0xff];
        assert_eq!(to_hex(&id), "deadbeef000102ff");
        assert_eq!(from_hex::<8>("deadbeef000102ff"), Some(id));
        assert_eq!(from_hex::<8>("DEADBEEF000102FF"), Some(id));
        assert_eq!(from_hex::<8>("deadbeef000102f"), None);
        assert_eq!(from_hex::<8>("deadbeef000102fg"), None);
    }

    #[test]
    fn a_trace_has_one_shard_and_traces_spread() {
        let id = |i: u64| {
            let mut bytes = [0u8; 16];
            bytes[8..].copy_from_slice(&i.to_be_bytes());
            bytes
        };
        assert_eq!(shard_of(&id(7), 1), 0);
        assert_eq!(shard_of(&id(7), 4), shard_of(&id(7), 4));
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[shard_of(&id(i), 4)] += 1; // sequential ids, not random ones, still spread
        }
        assert!(
            counts.iter().all(|&n| (900..1100).contains(&n)),
            "{counts:?}"
        );
    }

    #[test]
    fn last_duplicate_key_wins() {
        let attrs: Attrs = vec![
            (Key::from("a"), Value::Int(1)),
            (Key::from("a"), Value::Int(2)),
        ];
        assert_eq!(get(&attrs, "a"), Some(&Value::Int(2)));
        assert_eq!(get(&attrs, "b"), None);
    }
}
