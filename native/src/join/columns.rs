//! Joined requests as Arrow columns: the buffers of `sloscope.processors.joined_batch.SCHEMA`
//! (one column per `JoinedRequest` field, in field order), written here so that Python wraps them
//! with `pyarrow.Array.from_buffers` and builds no object per request.
//!
//! The layouts are Arrow's: a validity bitmap (bit i set when row i has a value, least significant
//! bit first; left out when every row has one), then for `string` 32-bit offsets and the UTF-8
//! bytes, for `float64` and `int64` the values (a null's slot holds 0).

use std::ffi::c_void;
use std::ptr;

use crate::join::build::{Joined, Text};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The Arrow type of a column (named as `str(pyarrow type)` names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    String,
    Float64,
    Int64,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Float64 => "double", // pyarrow's name of float64
            Kind::Int64 => "int64",
        }
    }
}

/// One column's buffers.
#[derive(Debug, Default)]
pub struct Column {
    pub validity: Option<Vec<u8>>,
    pub offsets: Vec<u8>,
    pub values: Vec<u8>,
    /// Rows without a value (those cleared in `validity`).
    pub nulls: usize,
}

/// A validity bitmap being written, made only once a null is seen.
struct Validity {
    bits: Option<Vec<u8>>,
    rows: usize,
    nulls: usize,
}

impl Validity {
    fn new(rows: usize) -> Validity {
        Validity {
            bits: None,
            rows,
            nulls: 0,
        }
    }

    fn null(&mut self, row: usize) {
        self.nulls += 1;
        let rows = self.rows;
        let bits = self
            .bits
            .get_or_insert_with(|| vec![0xff; rows.div_ceil(8)]);
        bits[row / 8] &= !(1 << (row % 8));
    }

    fn finish(self) -> (Option<Vec<u8>>, usize) {
        (self.bits, self.nulls)
    }
}

fn strings<'a>(rows: usize, values: impl Iterator<Item = Option<&'a str>>) -> Column {
    let mut validity = Validity::new(rows);
    let mut offsets = Vec::with_capacity(4 * (rows + 1));
    let mut data = Vec::new();
    offsets.extend_from_slice(&0i32.to_le_bytes());
    for (row, value) in values.enumerate() {
        match value {
            Some(text) => data.extend_from_slice(text.as_bytes()),
            None => validity.null(row),
        }
        // Arrow `string` offsets are i32; a batch is far below 2 GiB of text (the assembler emits
        // one call's requests), and a larger one would be refused by pyarrow's validation.
        let end = i32::try_from(data.len()).unwrap_or(i32::MAX);
        offsets.extend_from_slice(&end.to_le_bytes());
    }
    let (validity, nulls) = validity.finish();
    Column {
        validity,
        offsets,
        values: data,
        nulls,
    }
}

/// Ids as lowercase hex strings, written straight into the column (no string per id).
fn hex_strings<'a>(ids: impl ExactSizeIterator<Item = &'a [u8]>) -> Column {
    let rows = ids.len();
    let mut offsets = Vec::with_capacity(4 * (rows + 1));
    let mut data = Vec::new();
    offsets.extend_from_slice(&0i32.to_le_bytes());
    for id in ids {
        data.reserve(2 * id.len());
        for b in id {
            data.push(HEX[(b >> 4) as usize]);
            data.push(HEX[(b & 15) as usize]);
        }
        let end = i32::try_from(data.len()).unwrap_or(i32::MAX);
        offsets.extend_from_slice(&end.to_le_bytes());
    }
    Column {
        offsets,
        values: data,
        ..Column::default()
    }
}

fn floats(rows: usize, values: impl Iterator<Item = Option<f64>>) -> Column {
    let mut validity = Validity::new(rows);
    let mut data = Vec::with_capacity(8 * rows);
    for (row, value) in values.enumerate() {
        if value.is_none() {
            validity.null(row);
        }
        data.extend_from_slice(&value.unwrap_or(0.0).to_le_bytes());
    }
    let (validity, nulls) = validity.finish();
    Column {
        validity,
        offsets: Vec::new(),
        values: data,
        nulls,
    }
}

fn ints(rows: usize, values: impl Iterator<Item = i64>) -> Column {
    let mut data = Vec::with_capacity(8 * rows);
    for value in values {
        data.extend_from_slice(&value.to_le_bytes());
    }
    Column {
        values: data,
        ..Column::default()
    }
}

/// Nanoseconds as Arrow's int64 (OTLP's u64 times are far below 2^63 until the year 2262).
fn ns(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The columns of `requests`, named and typed as `SCHEMA` names and types them, in its order.
pub fn columns(requests: &[Joined], text: &str) -> Vec<(&'static str, Kind, Column)> {
    let n = requests.len();
    let r = requests;
    let shared =
        |f: fn(&Joined) -> Option<Text>| strings(n, r.iter().map(|j| f(j).map(|t| t.read(text))));
    let text = |f: fn(&Joined) -> Option<&str>| strings(n, r.iter().map(f));
    let float = |f: fn(&Joined) -> Option<f64>| floats(n, r.iter().map(f));
    let int = |f: fn(&Joined) -> i64| ints(n, r.iter().map(f));
    let hex = |f: fn(&Joined) -> &[u8]| hex_strings(r.iter().map(f));
    use Kind::{Float64 as F, Int64 as I, String as S};
    vec![
        ("trace_id", S, hex(|j| &j.trace_id)),
        ("span_id", S, hex(|j| &j.span_id)),
        ("outcome", S, text(|j| Some(j.outcome.0))),
        ("request_id", S, shared(|j| j.request_id)),
        ("requested_model", S, shared(|j| j.requested_model)),
        ("target_model", S, shared(|j| j.target_model)),
        ("pool", S, shared(|j| j.pool)),
        ("pod", S, shared(|j| j.pod)),
        ("endpoint", S, shared(|j| j.endpoint)),
        ("slo_ttft_ms", F, float(|j| j.slo_ttft_ms)),
        ("slo_tpot_ms", F, float(|j| j.slo_tpot_ms)),
        ("routing", S, text(|j| Some(j.routing.0))),
        ("predicted_ttft_ms", F, float(|j| j.predicted_ttft_ms)),
        ("predicted_tpot_ms", F, float(|j| j.predicted_tpot_ms)),
        ("ttft_seconds", F, float(|j| j.ttft_seconds)),
        ("ttft_source", S, text(|j| j.ttft_source.map(|w| w.0))),
        ("server_ttft_seconds", F, float(|j| j.server_ttft_seconds)),
        ("e2e_seconds", F, float(|j| j.e2e_seconds)),
        ("queue_seconds", F, float(|j| j.queue_seconds)),
        ("prefill_seconds", F, float(|j| j.prefill_seconds)),
        ("decode_seconds", F, float(|j| j.decode_seconds)),
        ("prompt_tokens", F, float(|j| j.prompt_tokens)),
        ("completion_tokens", F, float(|j| j.completion_tokens)),
        ("prefix_cache_score", F, float(|j| j.prefix_cache_score)),
        ("start_ns", I, int(|j| ns(j.start_ns))),
        ("end_ns", I, int(|j| ns(j.end_ns))),
        ("arrival_ns", I, int(|j| ns(j.arrival_ns))),
        ("failure_reason", S, text(|j| j.failure_reason.map(|w| w.0))),
        ("tpot_seconds", F, float(|j| j.tpot_seconds)),
        ("choices", I, int(|j| i64::from(j.choices))),
        ("prefill_pod", S, shared(|j| j.prefill_pod)),
        (
            "prefill_queue_seconds",
            F,
            float(|j| j.prefill_queue_seconds),
        ),
        (
            "prefill_seconds_on_prefill_pod",
            F,
            float(|j| j.prefill_seconds_on_prefill_pod),
        ),
        ("phase", S, text(|j| j.phase.map(|w| w.0))),
        ("call_arrival_ns", I, int(|j| ns(j.call_arrival_ns))),
        ("gateway", S, shared(|j| j.gateway)),
    ]
}

// ---- the Arrow C data interface ------------------------------------------------------------

/// `struct ArrowArray` of the Arrow C data interface (arrow.apache.org/docs/format/CDataInterface.html):
/// how the columns reach pyarrow in one call (`RecordBatch._import_from_c`), its buffers moved, not
/// copied. Handing pyarrow each column's buffers (33 columns when measured) as bytes objects to wrap one by one
/// (`Array.from_buffers`) cost 245 us a batch of 256 requests, about 0.5 us a span: as much as the
/// rest of the join. The interface is raw pointers and a release callback, hence the `unsafe` below,
/// each block with what makes it sound.
#[repr(C)]
pub struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

/// What an exported batch owns: every buffer and the arrays and pointer lists that point at them.
/// Their heap addresses do not move while it lives (nothing is pushed after the pointers are taken).
struct Exported {
    _columns: Vec<Column>,
    _buffers: Vec<[*const c_void; 3]>,
    _children: Vec<ArrowArray>,
    _child_pointers: Vec<*mut ArrowArray>,
    _top_buffers: [*const c_void; 1],
}

/// A byte every empty buffer points at: the interface wants a real address, not Rust's dangling one.
static EMPTY: u64 = 0;

fn address(buffer: &[u8]) -> *const c_void {
    if buffer.is_empty() {
        ptr::addr_of!(EMPTY).cast()
    } else {
        buffer.as_ptr().cast()
    }
}

/// The release callback of a child: its buffers belong to the batch, released with it.
unsafe extern "C" fn release_child(array: *mut ArrowArray) {
    // SAFETY: the consumer calls this with the child it was given, which lives in `Exported`.
    unsafe { (*array).release = None };
}

/// The release callback of the batch: frees everything `export` allocated.
unsafe extern "C" fn release_batch(array: *mut ArrowArray) {
    // SAFETY: `private_data` is the `Box<Exported>` that `export` leaked, and the interface calls
    // release once (it is set to None here, and a released array is never released again).
    unsafe {
        let private = (*array).private_data.cast::<Exported>();
        if !private.is_null() {
            drop(Box::from_raw(private));
        }
        (*array).private_data = ptr::null_mut();
        (*array).release = None;
    }
}

fn empty_array() -> ArrowArray {
    ArrowArray {
        length: 0,
        null_count: 0,
        offset: 0,
        n_buffers: 0,
        n_children: 0,
        buffers: ptr::null_mut(),
        children: ptr::null_mut(),
        dictionary: ptr::null_mut(),
        release: None,
        private_data: ptr::null_mut(),
    }
}

/// The requests as a struct array of the C data interface, the columns its children in `SCHEMA`'s order.
pub fn export(requests: &[Joined], text: &str) -> Box<ArrowArray> {
    let rows = requests.len() as i64;
    let built = columns(requests, text);
    let mut buffers: Vec<[*const c_void; 3]> = Vec::with_capacity(built.len());
    let mut children: Vec<ArrowArray> = Vec::with_capacity(built.len());
    let mut cols: Vec<Column> = Vec::with_capacity(built.len());
    for (_, kind, column) in built {
        let validity = column
            .validity
            .as_deref()
            .map_or(ptr::null(), |v| v.as_ptr().cast());
        let (n, list) = match kind {
            Kind::String => (
                3,
                [validity, address(&column.offsets), address(&column.values)],
            ),
            _ => (2, [validity, address(&column.values), ptr::null()]),
        };
        buffers.push(list);
        children.push(ArrowArray {
            length: rows,
            null_count: column.nulls as i64,
            n_buffers: n,
            release: Some(release_child),
            ..empty_array()
        });
        cols.push(column); // moving a Column moves its Vecs' handles, not their heap buffers
    }
    let mut exported = Box::new(Exported {
        _columns: cols,
        _buffers: buffers,
        _children: children,
        _child_pointers: Vec::new(),
        _top_buffers: [ptr::null()],
    });
    let e = &mut *exported;
    for (child, list) in e._children.iter_mut().zip(e._buffers.iter_mut()) {
        child.buffers = list.as_mut_ptr();
    }
    e._child_pointers = e
        ._children
        .iter_mut()
        .map(|c| c as *mut ArrowArray)
        .collect();
    let n_children = e._child_pointers.len() as i64;
    let children = e._child_pointers.as_mut_ptr();
    let top_buffers = e._top_buffers.as_mut_ptr();
    Box::new(ArrowArray {
        length: rows,
        n_buffers: 1,
        n_children,
        buffers: top_buffers,
        children,
        release: Some(release_batch),
        private_data: Box::into_raw(exported).cast(),
        ..empty_array()
    })
}

/// An exported batch not yet imported is released when its holder goes.
impl Drop for ArrowArray {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: a live (unreleased) array is released once, through its own callback.
            unsafe { release(self) };
        }
    }
}

// SAFETY: the pointers point into the heap parts `Exported` owns, reached only through the array:
// it moves between threads with its owner, and nothing mutates it through a shared reference (only
// pyarrow's import, which moves it out once, through the address Python hands it, and `Drop`).
unsafe impl Send for ArrowArray {}
unsafe impl Sync for ArrowArray {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_have_offsets_and_a_bitmap_only_with_nulls() {
        let c = strings(3, [Some("ab"), None, Some("")].into_iter());
        assert_eq!(c.validity, Some(vec![0b1111_1101]));
        let offsets: Vec<i32> = c
            .offsets
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(offsets, vec![0, 2, 2, 2]);
        assert_eq!(c.values, b"ab");
        assert_eq!(strings(1, [Some("x")].into_iter()).validity, None);
    }

    #[test]
    fn ids_are_lowercase_hex() {
        let c = hex_strings([&[0xde_u8, 0x0a][..], &[][..]].into_iter());
        assert_eq!((c.values.as_slice(), c.validity), (&b"de0a"[..], None));
        assert_eq!(c.offsets.len(), 12);
    }

    #[test]
    fn floats_keep_nan_as_a_value_and_none_as_null() {
        let c = floats(9, (0..9).map(|i| (i != 8).then_some(f64::NAN)));
        assert_eq!(c.validity, Some(vec![0xff, 0b1111_1110]));
        assert!(f64::from_le_bytes(c.values[..8].try_into().unwrap()).is_nan());
    }

    #[test]
    fn every_field_has_a_column() {
        let cols = columns(&[Joined::default()], "");
        assert_eq!(cols.len(), 36);
        assert!(cols.iter().all(|(_, kind, c)| c.values.len()
            == if *kind == Kind::String { 0 } else { 8 }
            || *kind == Kind::String));
    }
}
