//! sloscope's native core, imported as `sloscope._native`.
//!
//! The per-span work of the pipeline (decoding OTLP, keeping the mapped attributes, assembling
//! traces into joined requests) in compiled code that releases the GIL, so that Python handles one
//! joined request per LLM call rather than one object per span. The Python implementations stay
//! as the reference: differential tests hold the two to the same output.

use pyo3::prelude::*;

pub mod decode;
pub mod span;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<span::SpanBatch>()?;
    // OTLP decoding (decode/)
    decode::register(m)?;
    Ok(())
}
