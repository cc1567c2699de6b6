//! What both fronts share between their listener and Python: the threads that hand requests over,
//! the bytes in flight, credentials, TLS and the memory trim.

use std::sync::Arc;

use crate::front::budget::Budget;
use crate::front::tls;

#[derive(Debug)]
pub struct Handoff {
    /// Blocking threads decoding and handing over requests at once (`limits.decode_threads`).
    pub handler_threads: usize,
    /// The bytes in flight, shared with the Python receivers.
    pub budget: Arc<Budget>,
    /// Whether requests need credentials (the handler's `authorize`).
    pub authorize: bool,
    /// Bodies of at least this many bytes are told to the handler's `freed` once let go.
    pub trim_from: usize,
    /// The TLS of new connections, when the listener serves TLS (reloaded when the handler's
    /// `tls_changed` says the files changed).
    pub tls: Option<tls::Acceptor>,
}
