//! sloscope's native core, imported as `sloscope._native`.
//!
//! The per-span work of the pipeline (decoding OTLP, keeping the mapped attributes, assembling
//! traces into joined requests) in compiled code that releases the GIL, so that Python handles one
//! joined request per LLM call rather than one object per span. The Python implementations stay
//! as the reference: differential tests hold the two to the same output.

use pyo3::prelude::*;

// Spans are allocated on the decoding threads and freed on the join's, hundreds of thousands a second,
// where glibc's malloc took a fifth of the core's time (docs/native-core.md, Building).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod decode; // OTLP protobuf and JSON into SpanBatch
pub mod join; // the trace join: SpanBatch into joined requests
pub mod packed; // a span's strings and attributes in two allocations
pub mod span; // the span type both share

/// Transparent huge pages off for the process, as mimalloc's `MIMALLOC_ALLOW_THP=0` would set them
/// at start (it is loaded too late to read it from code): on a kernel whose THP is `always`, or when
/// mimalloc asks for them, each thread's segments were faulted in 2 MiB at a time, and a flood of
/// 380,000 spans left the server 68-97 MiB larger, against under 64 with glibc
/// (tests/integration/test_overload.py). An operator who sets `MIMALLOC_ALLOW_THP` decides.
#[cfg(target_os = "linux")]
fn without_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    extern "C" {
        fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
    }
    const PR_SET_THP_DISABLE: std::ffi::c_int = 41;
    // SAFETY: prctl with PR_SET_THP_DISABLE takes one integer flag and touches no memory of ours;
    // a kernel without it answers EINVAL, which changes nothing.
    unsafe {
        prctl(
            PR_SET_THP_DISABLE,
            1 as std::ffi::c_ulong,
            0 as std::ffi::c_ulong,
            0 as std::ffi::c_ulong,
            0 as std::ffi::c_ulong,
        );
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(target_os = "linux")]
    without_huge_pages();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<span::SpanBatch>()?;
    decode::register(m)?;
    m.add_class::<join::py::NativeAssembler>()?;
    Ok(())
}
