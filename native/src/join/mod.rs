//! The trace join: spans in, one joined request per LLM call out, by the rules of the Python
//! reference (`sloscope.processors.assembler.TraceAssembler`), which differential tests hold it to.
//!
//! The pieces: what the configured attribute mapping reads (`rules`), the joinable request id
//! (`request_id`), what upstream span shapes mean (`shapes`), how a waiting span is held (`held`), what is held per trace (`trace`),
//! how a request is read from its spans (`build`), requests as Arrow buffers (`columns`), the assembler itself (`assembler`), the
//! windows it waits out (`deadlines`), its memory of finished traces (`recent`) and its Python face (`py`), and the hasher of their maps (`hash`).

pub mod assembler;
pub mod build;
pub mod columns;
pub mod deadlines;
pub mod hash;
pub mod held;
pub mod ordered;
pub mod py;
pub mod recent;
pub mod request_id;
pub mod rules;
pub mod shapes;
pub mod trace;
