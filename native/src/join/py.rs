//! The assembler's Python face: `sloscope._native.NativeAssembler`, fed `SpanBatch`es and handing
//! back the joined requests as column buffers (no object per request) and the counts of what was dropped and how requests
//! were joined. The join itself runs with the GIL released.
//!
//! Memory is counted as what Rust holds: each span's struct and heap parts (attribute keys are
//! interned, so a key shared by every span costs one copy; a resource is shared by the spans of
//! its `ResourceSpans` and each is counted its share), plus a fixed part per pending trace. For
//! the differential tests the reference's estimate (`trace_state.span_bytes`) can be chosen
//! instead, so that `join.max_pending_bytes` evicts the same traces in both.

use std::borrow::Cow;
use std::mem::size_of;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::join::assembler::{Assembler, GatewaySeen, Settings};
use crate::join::columns;
use crate::join::held::{HeldSpan, KeyId, Keys};
use crate::join::request_id::{self, DEFAULT_PATTERN};
use crate::join::rules::{Field, Rules, Source, FIELD_NAMES};
use crate::join::trace::{Held, SpanId, Trace, TraceId};
use crate::join::vocabulary::{self, Vocabulary};
use crate::span::{Key, Resource, Span, SpanBatch, Value};

#[pyclass(module = "sloscope._native")]
pub struct NativeAssembler {
    core: Assembler,
    rules: Arc<Rules>,
    /// The compiled `join.request_id_pattern`, used when it is not the default or an id is not ASCII.
    pattern: Py<PyAny>,
    default_pattern: bool,
    anchor_names: Vec<String>,
    /// The interned key of `join.anchor_attribute`.
    anchor_key: KeyId,
    gateway_names: Vec<String>,
    python_bytes: bool,
    keys: Keys,
}

/// What the native join reads of the settings' `sloscope.config.Join`, declared once: each field is read from the
/// attribute of its name when the assembler is built, and a missing or mistyped one fails then, by name.
#[derive(FromPyObject)]
struct JoinSettings {
    window_seconds: f64,
    trace_ttl_seconds: f64,
    failure_window_seconds: f64,
    gateway_memory_seconds: f64,
    max_request_seconds: f64,
    by_request_id: bool,
    max_pending_traces: usize,
    max_spans_per_trace: usize,
    max_pending_bytes: usize,
    max_done_traces: usize,
    unanswered_are_aborted: bool,
    latency_scorer_types: Vec<String>,
    request_id_pattern: String,
    anchor_attribute: String,
    anchor_span_names: Vec<String>,
    gateway_span_names: Vec<String>,
}

fn rules_from_py(rules: &Bound<'_, PyDict>, keys: &mut Keys) -> PyResult<Rules> {
    let order = rules
        .get_item("order")?
        .ok_or_else(|| PyValueError::new_err("mapping rules have no 'order'"))?;
    let order = order.cast::<PyDict>()?;
    let mut out = Vec::with_capacity(FIELD_NAMES.len());
    for name in FIELD_NAMES {
        let sources = order.get_item(name)?.ok_or_else(|| {
            PyValueError::new_err(format!("mapping rules have no field {name:?}"))
        })?;
        let mut list = Vec::new();
        for item in sources.try_iter()? {
            let (resource, key): (bool, String) = item?.extract()?;
            list.push(Source {
                resource,
                id: keys.id(&key),
                key: key.into(),
            });
        }
        out.push(list);
    }
    Ok(Rules::new(out))
}

// ---- what a span costs ----------------------------------------------------------------------

/// `trace_state.span_bytes`: the reference's estimate (characters, not bytes, of its strings);
/// `keys` names the span's attribute keys.
fn python_span_bytes(span: &Span, keys: &[Key]) -> usize {
    fn chars(s: &str) -> usize {
        s.chars().count()
    }
    fn value(v: &Value) -> usize {
        match v {
            Value::Str(s) => chars(s),
            Value::Bytes(b) => b.len(),
            Value::Array(items) => items.iter().map(|i| 100 + value(i)).sum(),
            Value::KvList(pairs) => pairs.iter().map(|(k, v)| 100 + chars(k) + value(v)).sum(),
            _ => 0,
        }
    }
    let fields = &span.fields;
    let mut size = 700 + chars(fields.name()) + chars(fields.status_message());
    size += chars(&span.tracestate);
    for attr in fields.attrs() {
        size += 100 + chars(&keys[attr.key() as usize]) + value(&fields.value(attr));
    }
    size
}

fn value_heap(v: &Value) -> usize {
    match v {
        Value::Str(s) => s.len(),
        Value::Bytes(b) => b.len(),
        Value::Array(items) => items
            .iter()
            .map(|i| size_of::<Value>() + value_heap(i))
            .sum(),
        Value::KvList(pairs) => pairs
            .iter()
            .map(|(k, v)| size_of::<(Key, Value)>() + 16 + k.len() + value_heap(v))
            .sum(),
        _ => 0,
    }
}

/// An `Arc<str>`'s allocation: two counts and the text.
fn key_heap(key: &Key) -> usize {
    16 + key.len()
}

/// What Rust holds for a span: its slot, its packed attributes and strings (keys are interned: the
/// table is shared by every span), its share of its resource.
fn native_span_bytes(held: &Held) -> usize {
    let span = &held.span;
    let mut size = size_of::<Held>() + span.heap_bytes(value_heap);
    // Its entries in the trace's lists and the assembler's deadline queues.
    let deadline = size_of::<(f64, TraceId, SpanId)>();
    if held.anchor {
        size += size_of::<(SpanId, f64)>() + deadline;
    } else if held.gateway {
        size += size_of::<SpanId>() + deadline;
    } else if held.bare {
        size += size_of::<SpanId>();
    }
    let resource = &span.resource;
    let resource_bytes = 16
        + size_of::<Resource>()
        + resource.attributes.capacity() * size_of::<(Key, Value)>()
        + resource
            .attributes
            .iter()
            .map(|(k, v)| key_heap(k) + value_heap(v))
            .sum::<usize>();
    size + resource_bytes / Arc::strong_count(resource).max(1)
}

/// Bytes a pending trace holds beyond its spans: its `Trace` (boxed, with the allocator's 8-byte
/// header), its entry in the trace map's hash table (a control byte, at most 7/8 full) and in its
/// order (a queue with at most about as many stale entries as live ones).
fn trace_overhead() -> usize {
    let entry = size_of::<(TraceId, (u64, Box<Trace>))>() + 1;
    let order = size_of::<(u64, TraceId)>();
    size_of::<Trace>() + 8 + entry * 8 / 7 + order * 2
}

// ---- results to Python ----------------------------------------------------------------------

impl NativeAssembler {
    /// A span as the join holds it: its request id normalised, its kind decided, its size counted.
    /// `names` are its batch's keys, `ids` their ids here.
    fn hold(&mut self, py: Python<'_>, span: Span, names: &[Key], ids: &[KeyId]) -> PyResult<Held> {
        // The reference's estimate, of the span as it came (before headers are unfolded).
        let reference_size = self.python_bytes.then(|| python_span_bytes(&span, names));
        let name = span.fields.name();
        let named_anchor = self.anchor_names.iter().any(|n| n == name);
        let gateway = self.gateway_names.iter().any(|n| n == name);
        let mut span = HeldSpan::pack(span, ids, &self.keys);
        span.shape = self.core.words().classify(span.name());
        let anchor = named_anchor || span.attribute(self.anchor_key).is_some();
        let words = self.core.words();
        let bare = !span.has_attributes()
            && !gateway
            && words.leg(&span).is_none()
            && !words.is_sidecar_routing(&span)
            && !words.is_scheduling(&span);
        let mut held = Held {
            span,
            rid_at: None,
            anchor,
            gateway,
            bare,
            size: 0,
        };
        held.rid_at = match self.joinable_id(py, &held)? {
            None => None,
            // Nearly always a slice of one of its values: kept as where it lies.
            Some(id) => match held.span.find(&id) {
                found @ Some(_) => found,
                None => {
                    let made = id.into_owned(); // made elsewhere: appended to its text
                    Some(held.span.append(&made))
                }
            },
        };
        let size = reference_size.unwrap_or_else(|| native_span_bytes(&held));
        held.size = u32::try_from(size).unwrap_or(u32::MAX);
        Ok(held)
    }

    fn joinable_id<'a>(&self, py: Python<'_>, held: &'a Held) -> PyResult<Option<Cow<'a, str>>> {
        let Some(raw) = self.rules.identifier(Field::RequestId, &[held]) else {
            return Ok(None);
        };
        if raw.is_empty() {
            return Ok(None);
        }
        if self.default_pattern && raw.is_ascii() {
            return Ok(Some(match raw {
                Cow::Borrowed(raw) => Cow::Borrowed(request_id::normalise(raw).unwrap_or(raw)),
                Cow::Owned(raw) => Cow::Owned(request_id::normalise(&raw).unwrap_or(&raw).into()),
            }));
        }
        let found = self.pattern.bind(py).call_method1("match", (&*raw,))?;
        if found.is_none() {
            return Ok(Some(raw));
        }
        let id: Option<String> = found.call_method1("group", ("id",))?.extract()?;
        Ok(id.map(Cow::Owned))
    }

    /// The counts since the last call, in order. The requests emitted stay gathered in the core until
    /// `take` (the pipeline takes them once a batch is due, so a batch of thousands is exported once
    /// rather than concatenated from one small batch per call).
    fn counts<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let counts = PyList::empty(py);
        for (dropped, reason, n) in std::mem::take(&mut self.core.counts.items) {
            let kind = if dropped { "dropped" } else { "outcome" };
            counts.append((kind, reason, n))?;
        }
        Ok(counts)
    }

    /// What a call did: the requests emitted since `before` rows were gathered, and the counts.
    fn step(&mut self, py: Python<'_>, before: usize, flushed: usize) -> PyResult<JoinStep> {
        Ok(JoinStep {
            emitted: self.core.out.len() - before,
            flushed,
            counts: self.counts(py)?.unbind(),
        })
    }
}

/// What one call of the join did: how many requests it emitted (gathered until `take`), how many
/// waiting anchors a flush let go with what they had (0 for the other calls), and the counts, in
/// order: (kind "dropped" or "outcome", reason, how many).
#[pyclass(module = "sloscope._native", frozen, get_all)]
pub struct JoinStep {
    pub emitted: usize,
    pub flushed: usize,
    pub counts: Py<PyList>,
}

/// The columns of the requests taken, as `JoinedColumns` of `_native.pyi` says: a tuple per
/// column, its buffers as bytes (copied once; numpy reads them where they are).
fn column_parts<'py>(py: Python<'py>, column: columns::Column) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = |b: &[u8]| PyBytes::new(py, b).into_any();
    let held = |h: Option<Vec<u8>>| h.map(|h| PyBytes::new(py, &h));
    match column {
        columns::Column::Floats { values, held: h } => {
            PyTuple::new(py, [bytes(&values), held(h).into_pyobject(py)?.into_any()])
        }
        columns::Column::Ints { values } => PyTuple::new(py, [bytes(&values)]),
        columns::Column::Labels { codes, values } => {
            PyTuple::new(py, [bytes(&codes), PyList::new(py, values)?.into_any()])
        }
        columns::Column::Texts {
            offsets,
            data,
            held: h,
        } => PyTuple::new(
            py,
            [
                bytes(&offsets),
                bytes(&data),
                held(h).into_pyobject(py)?.into_any(),
            ],
        ),
    }
}

/// When a gateway span last arrived, shared by the native join's shards (`Pipeline`).
#[pyclass(module = "sloscope._native", frozen)]
#[derive(Default)]
pub struct GatewayMemory {
    seen: GatewaySeen,
}

#[pymethods]
impl GatewayMemory {
    #[new]
    fn new() -> Self {
        GatewayMemory::default()
    }

    /// When a gateway span last arrived, on the join's clock; None before the first.
    #[getter]
    fn seen(&self) -> Option<f64> {
        self.seen.get()
    }
}

#[pymethods]
impl NativeAssembler {
    /// The exported batches' columns, `(name, Arrow type name)` in order, for checking them against
    /// `joined_batch.SCHEMA` once.
    #[staticmethod]
    fn columns() -> Vec<(&'static str, &'static str)> {
        columns::columns(&[], "")
            .into_iter()
            .map(|(name, column)| (name, column.kind().name()))
            .collect()
    }

    /// `spec` is a `sloscope.processors.join_spec.JoinSpec`; `python_bytes` counts memory as the reference
    /// estimates it; `gateway_memory` is shared with the pipeline's other shards.
    #[new]
    #[pyo3(signature = (spec, python_bytes = false, gateway_memory = None))]
    fn new(
        spec: &Bound<'_, PyAny>,
        python_bytes: bool,
        gateway_memory: Option<&Bound<'_, GatewayMemory>>,
    ) -> PyResult<Self> {
        // Its parts, each read by its name: `join` (the settings read, `JoinSettings`), `rules` (`Mapping.rules()`:
        // per field, the (resource?, key) pairs tried in order), `vocabulary` (`SpanVocabulary`) and `pattern` (the
        // compiled `join.request_id_pattern`). Read one by one so that a part's missing field is named as it is.
        let join: JoinSettings = spec.getattr("join")?.extract()?;
        let rules = spec.getattr("rules")?;
        let rules = rules.cast::<PyDict>()?;
        let vocabulary: vocabulary::Spec = spec.getattr("vocabulary")?.extract()?;
        let pattern = spec.getattr("pattern")?;
        let settings = Settings {
            window_seconds: join.window_seconds,
            trace_ttl_seconds: join.trace_ttl_seconds,
            failure_window_seconds: join.failure_window_seconds,
            gateway_memory_seconds: join.gateway_memory_seconds,
            max_request_seconds: join.max_request_seconds,
            by_request_id: join.by_request_id,
            max_pending_traces: join.max_pending_traces,
            max_spans_per_trace: join.max_spans_per_trace,
            max_pending_bytes: join.max_pending_bytes,
            max_done_traces: join.max_done_traces,
            unanswered_are_aborted: join.unanswered_are_aborted,
            latency_scorer_types: join.latency_scorer_types,
            trace_overhead: if python_bytes { 0 } else { trace_overhead() },
            count_index: !python_bytes,
        };
        let mut keys = Keys::default();
        let words = Arc::new(Vocabulary::new(vocabulary, &mut keys));
        let rules = Arc::new(rules_from_py(rules, &mut keys)?);
        let anchor_key = keys.id(&join.anchor_attribute);
        let mut core = Assembler::new(settings, rules.clone(), words);
        if let Some(memory) = gateway_memory {
            core.share_gateway_memory(memory.get().seen.clone());
        }
        Ok(NativeAssembler {
            core,
            rules,
            pattern: pattern.unbind(),
            default_pattern: join.request_id_pattern == DEFAULT_PATTERN,
            anchor_names: join.anchor_span_names,
            anchor_key,
            gateway_names: join.gateway_span_names,
            python_bytes,
            keys,
        })
    }

    /// Takes the batch's spans (it is left empty) and joins them at time `now` (seconds, the
    /// pipeline's monotonic clock). Returns how many requests it emitted (gathered until `take`) and
    /// the counts, in order.
    fn consume<'py>(
        &mut self,
        py: Python<'py>,
        batch: &Bound<'py, SpanBatch>,
        now: f64,
    ) -> PyResult<JoinStep> {
        let (spans, names) = batch.borrow_mut().take();
        let ids = self.keys.ids_of(&names);
        let mut held = Vec::with_capacity(spans.len());
        for span in spans {
            let tid = span.trace_id;
            held.push((tid, self.hold(py, span, &names, &ids)?));
        }
        let before = self.core.out.len();
        let core = &mut self.core;
        py.detach(move || core.consume(held, now));
        self.step(py, before, 0)
    }

    /// Lets go of the traces whose window closed at time `now`.
    fn expire(&mut self, py: Python<'_>, now: f64) -> PyResult<JoinStep> {
        let before = self.core.out.len();
        let core = &mut self.core;
        py.detach(move || core.expire(now));
        self.step(py, before, 0)
    }

    /// Emits every waiting anchor with what it has (shutdown).
    fn flush(&mut self, py: Python<'_>) -> PyResult<JoinStep> {
        let before = self.core.out.len();
        let flushed = self.core.flush();
        self.step(py, before, flushed)
    }

    /// The requests gathered since the last take, in order, as one Arrow record batch exported
    /// through the C data interface (None for none; `NativeTraceAssembler` imports it with `SCHEMA`).
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let rows = self.core.out.len();
        if rows == 0 {
            return Ok(py.None().into_bound(py));
        }
        let core = &mut self.core;
        let built = py.detach(move || core.export_out());
        let parts = built
            .into_iter()
            .map(|(_, column)| column_parts(py, column))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((rows, PyList::new(py, parts)?)
            .into_pyobject(py)?
            .into_any())
    }

    /// Requests emitted and not yet taken.
    #[getter]
    fn gathered(&self) -> usize {
        self.core.out.len()
    }

    #[getter]
    fn pending(&self) -> usize {
        self.core.pending()
    }

    #[getter]
    fn pending_bytes(&self) -> usize {
        self.core.pending_bytes()
    }
}
