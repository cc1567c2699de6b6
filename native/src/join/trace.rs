//! What the assembler holds per trace (the twin of `processors/trace_state.py`): the pending spans
//! with what the join asks of each one computed once, and what is remembered of spans that left.
//!
//! Spans are few per trace (`join.max_spans_per_trace`, 64 by default), so they are kept in a
//! vector in arrival order and children are found by a scan: no per-trace index to pay for.

use crate::join::held::HeldSpan;
use crate::join::ordered::{Few, Lone, Small};
use crate::packed::TextAt;

pub type SpanId = [u8; 8];
pub type TraceId = [u8; 16];

/// Spans the join collects while it works on one request (a handful: kept in place).
pub type Spans<'a> = Small<&'a Held, 8>;

/// A held span and what the join reads of it more than once.
pub struct Held {
    pub span: HeldSpan,
    /// Where its joinable request id (`join.request_id_pattern`'s group `id`) lies in its text,
    /// None without one: most ids are a slice of an attribute's value, so they cost nothing more.
    pub rid_at: Option<TextAt>,
    pub anchor: bool,
    pub gateway: bool,
    pub bare: bool,
    /// Its bytes as the configured measure counts them (fixed at intake, so removal gives back
    /// exactly what adding took).
    pub size: u32,
}

impl Held {
    pub fn id(&self) -> SpanId {
        self.span.span_id
    }

    pub fn parent(&self) -> Option<SpanId> {
        self.span.parent_span_id
    }

    /// Its joinable request id, None without one.
    pub fn rid(&self) -> Option<&str> {
        self.rid_at.map(|at| self.span.text_at(at))
    }
}

#[derive(Default)]
pub struct Trace {
    pub first_seen: f64,
    pub size: usize,
    /// A vector that grows while a batch adds to it (one allocation for a batch's spans, not one per
    /// span) and is cut to its length when the batch is done (`compact`) or a span leaves.
    pub spans: Vec<Held>,
    /// Anchors not yet emitted, with their arrival time, in arrival order.
    pub anchors: Lone<(SpanId, f64)>,
    /// Gateway spans not yet resolved.
    pub gateways: Lone<SpanId>,
    /// Spans that carry nothing: the first to go when the trace is full.
    pub bare: Few<SpanId>,
    pub request_ids: Few<Box<str>>,
    pub anchor_request_ids: Few<Box<str>>,
    pub lent: bool,
    pub emitted: bool,
}

impl Trace {
    pub fn new(first_seen: f64) -> Trace {
        Trace {
            first_seen,
            ..Trace::default()
        }
    }

    pub fn get(&self, id: &SpanId) -> Option<&Held> {
        self.spans.iter().find(|h| h.span.span_id == *id)
    }

    pub fn holds(&self, id: &SpanId) -> bool {
        self.get(id).is_some()
    }

    pub fn is_anchor(&self, id: &SpanId) -> bool {
        self.anchors.iter().any(|(a, _)| a == id)
    }

    /// Gives back the spare room the spans' vector grew while a batch added to it.
    pub fn compact(&mut self) {
        self.spans.shrink_to_fit();
    }

    pub fn add(&mut self, held: Held) {
        self.size += held.size as usize;
        self.spans.push(held);
    }

    /// Removes a held span; returns its size (0 when it was not held).
    pub fn remove(&mut self, id: &SpanId) -> usize {
        match self.spans.iter().position(|h| h.span.span_id == *id) {
            Some(i) => {
                let size = self.spans.remove(i).size as usize;
                self.spans.shrink_to_fit();
                self.size -= size;
                size
            }
            None => 0,
        }
    }

    /// Every span left (their request was emitted); returns the bytes given back.
    pub fn clear(&mut self) -> usize {
        let size = std::mem::take(&mut self.size);
        self.spans = Vec::new();
        self.anchors.clear();
        self.gateways.clear();
        self.bare.clear();
        size
    }

    /// The held ancestors of `span`, nearest first, up to the first one missing.
    pub fn ancestors<'a>(&'a self, span: &Held) -> Spans<'a> {
        let mut chain = Spans::new();
        let mut parent = span.parent();
        while let Some(id) = parent {
            if id == span.id() || chain.iter().any(|h| h.id() == id) {
                break; // a parent cycle
            }
            let Some(above) = self.get(&id) else { break };
            chain.push(above);
            parent = above.parent();
        }
        chain
    }

    /// The held ancestors of `span`, nearest first, without collecting them: for finding one. In a
    /// parent cycle it goes round again (at most as many steps as the trace holds spans), which no
    /// search can tell from `ancestors`: what it meets again it met before.
    pub fn above<'a>(&'a self, span: &Held) -> impl Iterator<Item = &'a Held> + 'a {
        let start = span.id();
        let mut parent = span.parent();
        let mut left = self.spans.len();
        std::iter::from_fn(move || {
            let id = parent?;
            if id == start || left == 0 {
                return None;
            }
            left -= 1;
            let above = self.get(&id)?;
            parent = above.parent();
            Some(above)
        })
    }

    /// Every ancestor up to a root span is held (a cycle never is complete).
    pub fn chain_complete(&self, span: &Held) -> bool {
        let chain = self.ancestors(span);
        chain.last().copied().unwrap_or(span).parent().is_none()
    }

    /// The held descendants of `id`, in the order of a depth-first walk taking the last child
    /// first (the order the Python reference's stack gives).
    pub fn descendants(&self, id: &SpanId) -> Spans<'_> {
        let mut out = Spans::new();
        let mut stack: Spans<'_> = self.children(id).collect();
        while let Some(child) = stack.pop() {
            let child_id = child.id();
            if child_id == *id || out.iter().any(|h| h.id() == child_id) {
                continue; // seen: the walk's start and what it took (a parent cycle)
            }
            out.push(child);
            stack.extend(self.children(&child_id));
        }
        out
    }

    fn children(&self, id: &SpanId) -> impl Iterator<Item = &Held> + '_ {
        let id = *id;
        self.spans.iter().filter(move |h| h.parent() == Some(id))
    }
}
