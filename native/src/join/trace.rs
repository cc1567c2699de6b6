//! What the assembler holds per trace (the twin of `processors/trace_state.py`): the pending spans
//! with what the join asks of each one computed once, and what is remembered of spans that left.
//!
//! Spans are few per trace (`join.max_spans_per_trace`, 64 by default), so they are kept in a
//! vector in arrival order and children are found by a scan: no per-trace index to pay for.

use crate::join::hash::HashSet;
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

/// What is remembered of a trace's spans once they left the pending trace: the ids seen, those
/// claimed by an emitted request, and the parents of claimed spans, each a bounded list oldest first.
/// The three lists are segments of one list, held in place up to `IN_PLACE` ids: a trace of a
/// gateway span and an anchor remembers five (two seen, two claimed, a parent), and a list of its
/// own for each of the hundred thousand traces a generation of `Recent` holds was an allocation,
/// and, when the generation was forgotten, a free of memory long gone cold.
/// A long-lived trace (an agent session of many calls) also indexes them once they hold more than
/// `INDEXED` ids, so checking a span costs the same whatever the trace's length: scanning the lists
/// took the join from 0.60 to 0.96 µs a span at 128 calls a trace.
#[derive(Default)]
pub struct Seen {
    ids: Small<SpanId, IN_PLACE>,
    claimed_at: usize,
    parents_at: usize,
    index: Option<Box<[HashSet<SpanId>; 3]>>,
}

const INDEXED: usize = 48;
const IN_PLACE: usize = 5;

#[derive(Clone, Copy, PartialEq)]
enum List {
    Seen = 0,
    Claimed = 1,
    Parents = 2,
}

/// Why a span is not new to its trace (`Seen::verdict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// A span of this id was seen.
    Duplicate,
    /// It came after its trace was emitted: a parent of a claimed span, or under one.
    Late,
}

impl Seen {
    fn bounds(&self, list: List) -> (usize, usize) {
        match list {
            List::Seen => (0, self.claimed_at),
            List::Claimed => (self.claimed_at, self.parents_at),
            List::Parents => (self.parents_at, self.ids.len()),
        }
    }

    fn list(&self, list: List) -> &[SpanId] {
        let (start, end) = self.bounds(list);
        &self.ids[start..end]
    }

    fn has(&self, list: List, id: &SpanId) -> bool {
        match &self.index {
            Some(index) => index[list as usize].contains(id),
            None => self.list(list).contains(id),
        }
    }

    fn add(&mut self, list: List, id: SpanId) {
        if self.has(list, &id) {
            return;
        }
        let (_, end) = self.bounds(list);
        self.ids.insert(end, id);
        if list == List::Seen {
            self.claimed_at += 1;
        }
        if list != List::Parents {
            self.parents_at += 1;
        }
        if let Some(index) = &mut self.index {
            index[list as usize].insert(id);
        }
    }

    /// Forgets the oldest `count` of a list.
    fn forget(&mut self, list: List, count: usize) {
        let (start, _) = self.bounds(list);
        if let Some(index) = &mut self.index {
            for id in &self.ids[start..start + count] {
                index[list as usize].remove(id);
            }
        }
        self.ids.remove_range(start, count);
        if list == List::Seen {
            self.claimed_at -= count;
        }
        if list != List::Parents {
            self.parents_at -= count;
        }
    }

    /// Forgets the oldest of each list until at most `cap` are left in it.
    fn trim(&mut self, cap: usize) {
        for list in [List::Parents, List::Claimed, List::Seen] {
            let over = self.list(list).len().saturating_sub(cap);
            if over > 0 {
                self.forget(list, over);
            }
        }
    }

    fn index_if_long(&mut self) {
        if self.index.is_some() || self.ids.len() <= INDEXED {
            return;
        }
        let set = |list| self.list(list).iter().copied().collect::<HashSet<SpanId>>();
        self.index = Some(Box::new([
            set(List::Seen),
            set(List::Claimed),
            set(List::Parents),
        ]));
    }

    pub fn remember(
        &mut self,
        spans: impl Iterator<Item = (SpanId, Option<SpanId>)>,
        claimed: bool,
        cap: usize,
    ) {
        for (id, parent) in spans {
            self.add(List::Seen, id);
            if claimed {
                self.add(List::Claimed, id);
                if let Some(parent) = parent {
                    self.add(List::Parents, parent);
                }
            }
        }
        self.trim(cap);
        self.index_if_long();
    }

    /// Why a span with these ids is not new: a duplicate of a span seen, or late (a parent of a
    /// claimed span, or under one).
    pub fn verdict(&self, span: SpanId, parent: Option<SpanId>) -> Option<Repeat> {
        if self.has(List::Seen, &span) {
            return Some(Repeat::Duplicate);
        }
        let under_claimed = parent.is_some_and(|p| self.has(List::Claimed, &p));
        if self.has(List::Parents, &span) || under_claimed {
            return Some(Repeat::Late);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_two_span_trace_is_remembered_in_place() {
        let mut seen = Seen::default();
        let id = |i: u8| [i; 8];
        seen.remember([(id(1), None), (id(2), Some(id(1)))].into_iter(), true, 256);
        assert!(
            matches!(seen.ids, Small::Inline(_, 5)),
            "seen 2, claimed 2, a parent"
        );
        // Its entry in a generation's table: the trace id and this (docs/configuration.md, join.max_done_traces).
        assert_eq!(std::mem::size_of::<([u8; 16], Seen)>(), 96);
    }

    #[test]
    fn each_list_keeps_its_newest_cap() {
        let mut seen = Seen::default();
        let id = |i: u8| [i; 8];
        seen.remember([(id(1), Some(id(9))), (id(2), None)].into_iter(), true, 3);
        seen.remember([(id(3), Some(id(8))), (id(1), None)].into_iter(), false, 3);
        seen.remember([(id(4), Some(id(7)))].into_iter(), true, 2);
        assert_eq!(seen.list(List::Seen), &[id(3), id(4)]);
        assert_eq!(seen.list(List::Claimed), &[id(2), id(4)]);
        assert_eq!(seen.list(List::Parents), &[id(9), id(7)]);
        assert!(seen.index.is_none());
    }

    #[test]
    fn a_long_trace_is_indexed_and_forgets_from_its_index_too() {
        let mut seen = Seen::default();
        let id = |i: u16| {
            let mut id = [0u8; 8];
            id[..2].copy_from_slice(&i.to_be_bytes());
            id
        };
        // 100 calls of a session: span 2k under parent 2k + 1, each call claimed; at most 64 of each kept.
        for k in 0..100 {
            seen.remember([(id(2 * k), Some(id(2 * k + 1)))].into_iter(), true, 64);
        }
        assert!(seen.index.is_some());
        let verdict = |span: u16, parent: Option<u16>| seen.verdict(id(span), parent.map(id));
        assert_eq!(verdict(198, None), Some(Repeat::Duplicate));
        assert_eq!(verdict(72, None), Some(Repeat::Duplicate)); // call 36, the oldest kept
        assert_eq!(verdict(70, None), None); // call 35: forgotten, from the index too
        assert_eq!(verdict(199, None), Some(Repeat::Late)); // a parent of a claimed span
        assert_eq!(verdict(5000, Some(150)), Some(Repeat::Late)); // under a claimed span
        assert_eq!(verdict(5000, Some(60)), None);
        let index = seen.index.as_ref().expect("indexed");
        for list in [List::Seen, List::Claimed, List::Parents] {
            assert_eq!(index[list as usize].len(), seen.list(list).len());
        }
    }
}
