//! sloscope's native core, imported as `sloscope._native`.
//!
//! The per-span work of the pipeline (decoding OTLP, keeping the mapped attributes, assembling
//! traces into joined requests) in compiled code that releases the GIL, so that Python handles one
//! joined request per LLM call rather than one object per span. The Python implementations stay
//! as the reference: differential tests hold the two to the same output.

use pyo3::prelude::*;

pub mod decode; // OTLP protobuf and JSON into SpanBatch
pub mod front; // the OTLP/gRPC listener: HTTP/2 in a thread of its own, decoding off the GIL
pub mod join; // the trace join: SpanBatch into joined requests
pub mod packed; // a span's strings and attributes in two allocations
pub mod span; // the span type both share

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<span::SpanBatch>()?;
    decode::register(m)?;
    m.add_class::<join::py::NativeAssembler>()?;
    m.add_class::<join::py::GatewayMemory>()?;
    m.add_class::<join::py::JoinStep>()?;
    m.add_class::<front::py::GrpcFront>()?;
    m.add_class::<front::py::HttpFront>()?;
    m.add_class::<front::budget::ByteBudget>()?;
    Ok(())
}
