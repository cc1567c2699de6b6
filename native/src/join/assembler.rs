//! The trace assembler: held spans in, one joined request per LLM call out. A line-for-line port
//! of `sloscope.processors.assembler.TraceAssembler` (whose module docstring states the rules);
//! the differential tests (tests/unit/processors/test_native_join.py) hold the two to the same requests, in
//! the same order, and the same counters.
//!
//! Python objects are identified here by ids: a span by its span id within its trace, a trace by
//! its trace id. Where the reference works on a trace it has already taken out of its map (an
//! eviction), the trace stays in the map marked `evicting`, invisible to lookups of other traces.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::join::build::{Builder, Joined};
use crate::join::columns;
use crate::join::deadlines::Deadlines;
use crate::join::hash::{Fingerprints, HashMap, HashSet};
use crate::join::held::ValueRef;
use crate::join::ordered::{OrderedMap, Small};
use crate::join::recent::Recent;
use crate::join::rules::{Field, Rules};
use crate::join::seen::{Repeat, Seen};
use crate::join::shapes::Leg;
use crate::join::trace::{Held, SpanId, Spans, Trace, TraceId};
use crate::join::vocabulary::{Vocabulary, Word};

/// The `Join` settings the assembler reads.
#[derive(Clone, Debug)]
pub struct Settings {
    pub window_seconds: f64,
    pub trace_ttl_seconds: f64,
    pub failure_window_seconds: f64,
    /// How recently a gateway span must have arrived for an anchor no gateway claims to wait for one
    /// (`Join.gateway_memory_seconds`: infinite always, negative never).
    pub gateway_memory_seconds: f64,
    pub max_request_seconds: f64,
    pub by_request_id: bool,
    pub max_pending_traces: usize,
    pub max_spans_per_trace: usize,
    pub max_pending_bytes: usize,
    pub max_done_traces: usize,
    pub unanswered_are_aborted: bool,
    pub latency_scorer_types: Vec<String>,
    /// Bytes counted per pending trace beyond its spans (0 when measuring as the reference does).
    pub trace_overhead: usize,
    /// Count the request-id index too (not when measuring as the reference does).
    pub count_index: bool,
}

/// The request an anchor belongs to: its gateway's, else its parent's and request id's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Gateway(SpanId),
    Parent(Option<SpanId>, Box<str>),
}

/// What `count_dropped` / `count_outcome` receive, summed per reason in first-seen order.
#[derive(Default)]
pub struct Counts {
    pub items: Vec<(bool, &'static str, u64)>, // (is a drop, reason, n)
}

impl Counts {
    fn add(&mut self, dropped: bool, reason: &'static str, n: u64) {
        match self
            .items
            .iter_mut()
            .find(|(d, r, _)| *d == dropped && *r == reason)
        {
            Some(item) => item.2 += n,
            None => self.items.push((dropped, reason, n)),
        }
    }
}

pub struct Assembler {
    cfg: Settings,
    rules: Arc<Rules>,
    builder: Builder,
    /// The strings of the requests in `out` (`build::Text` ranges), one buffer for them all. In a
    /// mutex only because the assembler is shared with Python, which wants it `Sync`: it is locked
    /// once a request, by the one thread that holds the assembler mutably or not at all.
    text: Mutex<String>,
    done_cap: usize,
    /// Boxed: the map's table, never full, then holds a pointer per slot, not a whole trace.
    traces: OrderedMap<TraceId, Box<Trace>>,
    evicting: Option<TraceId>,
    span_bytes: usize,
    /// Bytes of the request-id index's entries (`companions_by_rid`).
    index_bytes: usize,
    anchor_deadlines: Deadlines,
    gateway_deadlines: Deadlines,
    done: Recent<TraceId, Seen>,
    companions_by_rid: HashMap<Box<str>, TraceId>,
    anchors_by_rid: HashMap<Box<str>, (TraceId, SpanId)>,
    /// The request ids of emitted anchors, by fingerprint: a string and its hash table entry each, and
    /// the allocation and free of each, were a tenth of the join (docs/performance.md).
    answered: Recent<u128, ()>,
    fingerprints: Fingerprints,
    /// The last `groups` list, kept for the next trace's (an allocation per trace otherwise).
    groups: Vec<(Key, Ids)>,
    /// When the last gateway span arrived (late ones included), shared by the join's shards, and the clock
    /// of this batch.
    gateway_seen: GatewaySeen,
    now: f64,
    pub out: Vec<Joined>,
    pub counts: Counts,
}

type Ids = Small<SpanId, 8>;

/// The most requests (and bytes of their text) whose buffers are kept from one batch to the next:
/// above the default `join.batch_requests` (4,096) and its text.
const KEPT_REQUESTS: usize = 8192;
const KEPT_TEXT: usize = 4 << 20;

fn held<'a>(trace: &'a Trace, ids: &[SpanId]) -> Spans<'a> {
    ids.iter().filter_map(|id| trace.get(id)).collect()
}

fn ids(spans: &[&Held]) -> Ids {
    spans.iter().map(|h| h.id()).collect()
}

/// Every anchor hangs from its gateway span, or its chain to the trace root is whole. An anchor
/// whose parent has not arrived was matched to its gateway by request id alone: the spans between
/// them (a routing sidecar's, exported by another process) may still come, and they decide its P/D
/// stages and TTFT, so the request waits for them, at most its window.
fn placed(trace: &Trace, gid: &SpanId, anchors: &[&Held]) -> bool {
    anchors
        .iter()
        .all(|a| trace.above(a).any(|h| h.id() == *gid) || trace.chain_complete(a))
}

/// Whether a sibling gateway span of the anchor's request id can be the one that sent it there
/// (`TraceAssembler._may_answer`): not the coordinator's refused conditional-decode probe, and an encode or
/// prefill leg's only when it encloses the anchor's start in time.
fn may_answer(words: &Vocabulary, trace: &Trace, gid: &SpanId, anchor: &Held) -> bool {
    let Some(gateway) = trace.get(gid) else {
        return false;
    };
    if words.is_conditional_probe(std::iter::once(&gateway.span)) {
        return false;
    }
    match words.phase(trace.descendants(gid).iter().map(|h| &h.span)) {
        Some(phase) if words.early_phases.contains(&phase) => {
            gateway.span.start_ns <= anchor.span.start_ns
                && anchor.span.start_ns <= gateway.span.end_ns
        }
        _ => true,
    }
}

/// When a gateway span last arrived, on the join's clock: one for every shard of a pipeline. Held as
/// the bits of `now + 1` (0: never), which order as the times do for a clock that does not go below 0.
#[derive(Clone, Default)]
pub struct GatewaySeen(Arc<AtomicU64>);

impl GatewaySeen {
    pub fn note(&self, now: f64) {
        self.0
            .fetch_max((now.max(0.0) + 1.0).to_bits(), Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<f64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            bits => Some(f64::from_bits(bits) - 1.0),
        }
    }
}

/// A sibling of the gateway span that started before it and ended after it: the same call's.
fn encloses(span: &Held, gateway: &Held) -> bool {
    span.parent() == gateway.parent()
        && span.span.start_ns <= gateway.span.start_ns
        && span.span.end_ns >= gateway.span.end_ns
}

impl Assembler {
    pub fn new(cfg: Settings, rules: Arc<Rules>, words: Arc<Vocabulary>) -> Assembler {
        let builder = Builder {
            rules: rules.clone(),
            words,
            latency_scorers: cfg.latency_scorer_types.clone(),
            unanswered_are_aborted: cfg.unanswered_are_aborted,
        };
        Assembler {
            done_cap: 4 * cfg.max_spans_per_trace,
            done: Recent::new(cfg.max_done_traces),
            answered: Recent::new(cfg.max_done_traces),
            fingerprints: Fingerprints::default(),
            groups: Vec::new(),
            gateway_seen: GatewaySeen::default(),
            now: 0.0,
            cfg,
            rules,
            builder,
            traces: OrderedMap::default(),
            evicting: None,
            span_bytes: 0,
            index_bytes: 0,
            anchor_deadlines: Deadlines::default(),
            gateway_deadlines: Deadlines::default(),
            companions_by_rid: HashMap::default(),
            anchors_by_rid: HashMap::default(),
            out: Vec::new(),
            text: Mutex::default(),
            counts: Counts::default(),
        }
    }

    /// The span words it reads and writes.
    pub fn words(&self) -> &Vocabulary {
        &self.builder.words
    }

    fn text(&self) -> MutexGuard<'_, String> {
        self.text
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The requests emitted since the last call, as the buffers of their columns (`columns`). The
    /// requests and their text are cleared, not given away: a fresh vector for every batch grew by
    /// doubling into memory the system could have to fault in and zero each time. What is kept is
    /// bounded by `KEPT_REQUESTS` requests and `KEPT_TEXT` bytes, so a flush of every pending trace
    /// does not stay allocated.
    pub fn export_out(&mut self) -> Vec<(&'static str, columns::Column)> {
        let text = self.text.get_mut().unwrap_or_else(|p| p.into_inner());
        let array = columns::columns(&self.out, text);
        self.out.clear();
        self.out.shrink_to(KEPT_REQUESTS);
        text.clear();
        text.shrink_to(KEPT_TEXT);
        array
    }

    pub fn pending(&self) -> usize {
        self.traces.len()
    }

    /// The bytes held for pending traces: their spans, plus a fixed part per trace.
    pub fn pending_bytes(&self) -> usize {
        self.span_bytes + self.index_bytes + self.cfg.trace_overhead * self.traces.len()
    }

    /// What an entry of the request-id index holds: its slot in the hash table and its text.
    fn index_entry_bytes(&self, rid: &str) -> usize {
        if !self.cfg.count_index {
            return 0;
        }
        (std::mem::size_of::<(Box<str>, TraceId)>() + 1) * 8 / 7 + rid.len()
    }

    fn dropped(&mut self, reason: Word, n: u64) {
        self.counts.add(true, reason.0, n);
    }

    fn outcome(&mut self, outcome: Word, n: u64) {
        self.counts.add(false, outcome.0, n);
    }

    /// A trace as the reference's `self._traces.get` sees it (not one being evicted).
    fn live(&self, tid: &TraceId) -> Option<&Trace> {
        if self.evicting == Some(*tid) {
            return None;
        }
        self.traces.get(tid).map(|t| &**t)
    }

    fn t(&self, tid: &TraceId) -> &Trace {
        self.traces
            .get(tid)
            .expect("the trace being worked on is held")
    }

    fn t_mut(&mut self, tid: &TraceId) -> &mut Trace {
        self.traces
            .get_mut(tid)
            .expect("the trace being worked on is held")
    }

    // ---- input --------------------------------------------------------------------------

    /// Spans with their trace ids (a held span does not carry its own).
    pub fn consume(&mut self, spans: Vec<(TraceId, Held)>, now: f64) {
        self.now = now;
        let mut touched: Vec<TraceId> = Vec::new();
        let mut seen: HashSet<TraceId> = HashSet::default();
        for (tid, span) in spans {
            if self.add(tid, span, now) && seen.insert(tid) {
                touched.push(tid);
            }
        }
        for tid in &touched {
            if self.live(tid).is_some() {
                self.try_complete(*tid);
            }
        }
        for tid in &touched {
            if let Some(trace) = self.traces.get_mut(tid) {
                trace.compact();
            }
        }
        self.expire(now);
    }

    fn add(&mut self, tid: TraceId, span: Held, now: f64) -> bool {
        if span.gateway {
            self.gateway_seen.note(now);
        }
        if let Some(verdict) = self
            .done
            .get(&tid)
            .and_then(|d| d.verdict(span.span.span_id, span.span.parent_span_id))
        {
            let drops = self.words().drops;
            self.dropped(
                match verdict {
                    Repeat::Duplicate => drops.duplicate,
                    Repeat::Late => drops.late,
                },
                1,
            );
            return false;
        }
        match self.traces.get(&tid) {
            None => self.open(tid, now),
            Some(trace) if trace.holds(&span.id()) => {
                self.dropped(self.words().drops.duplicate, 1);
                return false;
            }
            Some(_) => {}
        }
        // Room too for what indexing its request id may add (native bytes only: the reference's
        // estimate counts no index), so the cap holds after the span is indexed.
        let index = match span.rid().filter(|_| !span.anchor) {
            Some(rid) if self.cfg.count_index => {
                self.index_entry_bytes(rid) + std::mem::size_of::<Box<str>>() + rid.len()
            }
            _ => 0,
        };
        if !self.make_room(&tid, &span) || !self.fit_bytes(&tid, span.size as usize + index) {
            self.dropped(self.words().drops.trace_too_large, 1);
            self.close_if_finished(&tid);
            return false;
        }
        let (sid, anchor, gateway, bare) = (span.id(), span.anchor, span.gateway, span.bare);
        self.span_bytes += span.size as usize;
        let trace = self.t_mut(&tid);
        trace.add(span);
        if anchor {
            trace.anchors.push((sid, now));
            let traces = &self.traces;
            self.anchor_deadlines
                .push(now + self.cfg.window_seconds, tid, sid, |t, a| {
                    traces.get(t).is_some_and(|t| t.is_anchor(a))
                });
            return true;
        }
        if gateway {
            trace.gateways.push(sid);
            let traces = &self.traces;
            self.gateway_deadlines
                .push(now + self.cfg.failure_window_seconds, tid, sid, |t, g| {
                    traces.get(t).is_some_and(|t| t.gateways.contains(g))
                });
        } else if bare {
            trace.bare.push(sid);
        }
        let trace = self.t(&tid);
        if self.cfg.by_request_id && trace.anchors.is_empty() && !trace.emitted {
            self.index_companion(tid, sid);
        }
        true
    }

    fn make_room(&mut self, tid: &TraceId, span: &Held) -> bool {
        let trace = self.t(tid);
        if trace.spans.len() < self.cfg.max_spans_per_trace {
            return true;
        }
        if span.bare || trace.bare.is_empty() {
            return false;
        }
        let trace = self.t_mut(tid);
        let evicted = trace.bare.remove(0); // a span that carries nothing makes way for one that does
        let size = trace.remove(&evicted);
        self.span_bytes -= size;
        self.dropped(self.words().drops.trace_too_large, 1);
        true
    }

    /// Evicts the oldest other traces until `size` more bytes fit under `join.max_pending_bytes`.
    fn fit_bytes(&mut self, tid: &TraceId, size: usize) -> bool {
        while self.pending_bytes() + size > self.cfg.max_pending_bytes {
            let victim = self.traces.keys().find(|t| *t != tid).copied();
            let Some(victim) = victim else { return false };
            self.evict(victim);
        }
        true
    }

    fn open(&mut self, tid: TraceId, now: f64) {
        while self.traces.len() >= self.cfg.max_pending_traces {
            let Some(oldest) = self.traces.first() else {
                break;
            };
            self.evict(oldest);
        }
        self.traces.insert(tid, Box::new(Trace::new(now)));
    }

    /// A pending-trace cap is reached: the trace leaves early, its requests emitted with what they have.
    fn evict(&mut self, tid: TraceId) {
        self.evicting = Some(tid);
        self.forget_request_ids(&tid);
        if self.t(&tid).anchors.is_empty() {
            let n = self.t(&tid).spans.len() as u64;
            self.dropped(self.words().drops.pending_cap, n);
        } else {
            loop {
                let trace = self.t(&tid);
                let Some(&(first, _)) = trace.anchors.first() else {
                    break;
                };
                let before = trace.anchors.len();
                self.finish_with_what_it_has(tid, first, self.words().outcomes.evicted);
                if self.t(&tid).anchors.len() == before {
                    break; // never: an emitted group takes its anchors with it
                }
            }
        }
        self.evicting = None;
        let trace = self.traces.remove(&tid).expect("held");
        self.span_bytes -= trace.size;
        self.remember(tid, trace.spans.iter().map(|h| (h.id(), h.parent())), false);
    }

    fn index_companion(&mut self, tid: TraceId, sid: SpanId) {
        let trace = self.t(&tid);
        let Some(rid) = trace.get(&sid).and_then(|h| h.rid()).map(Box::<str>::from) else {
            return;
        };
        let has_gateways = !trace.gateways.is_empty();
        let indexed = self.companions_by_rid.get(&rid).copied();
        let keep = match indexed.and_then(|i| self.live(&i).map(|t| (i, t))) {
            None => true,
            Some((i, t)) => i == tid || t.gateways.is_empty() || has_gateways,
        };
        if keep {
            // A trace with the gateway span keeps the id.
            if self.companions_by_rid.insert(rid.clone(), tid).is_none() {
                self.index_bytes += self.index_entry_bytes(&rid);
            }
            // The trace's own list of the ids it indexed.
            let listed = if self.cfg.count_index {
                std::mem::size_of::<Box<str>>() + rid.len()
            } else {
                0
            };
            self.span_bytes += listed;
            let trace = self.t_mut(&tid);
            trace.size += listed;
            trace.request_ids.push(rid.clone());
        }
        if let Some((wt, ws)) = self.anchors_by_rid.remove(&rid) {
            if wt != tid && self.live(&wt).is_some_and(|o| o.is_anchor(&ws)) {
                self.lend(&tid);
                let other = self.t(&wt);
                let key = self.key(other, other.get(&ws).expect("anchors are held"));
                self.emit_group(
                    wt,
                    key,
                    self.words().outcomes.joined_by_request_id,
                    Some(tid),
                    None,
                    None,
                );
            }
        }
    }

    /// A trace whose companions answered another trace's anchor: its gateway spans are accounted for.
    fn lend(&mut self, tid: &TraceId) {
        let trace = self.t_mut(tid);
        trace.lent = true;
        trace.gateways.clear();
    }

    // ---- grouping -----------------------------------------------------------------------

    fn key(&self, trace: &Trace, anchor: &Held) -> Key {
        if let Some(above) = trace.above(anchor).find(|h| h.gateway) {
            return Key::Gateway(above.id());
        }
        let rid: Box<str> = anchor.rid().map(Box::from).unwrap_or_default();
        if !rid.is_empty() {
            // The caller's traceparent won at the gateway: a sibling.
            for gid in &trace.gateways {
                if self.request_ids_under(trace, gid).contains(&&*rid)
                    && may_answer(&self.builder.words, trace, gid, anchor)
                {
                    return Key::Gateway(*gid);
                }
            }
        }
        Key::Parent(anchor.parent(), rid)
    }

    fn request_ids_under<'a>(&self, trace: &'a Trace, gid: &SpanId) -> Small<&'a str, 8> {
        let Some(gateway) = trace.get(gid) else {
            return Small::new();
        };
        let mut out: Small<&str, 8> = Small::new();
        for span in std::iter::once(gateway).chain(trace.descendants(gid)) {
            if !span.anchor {
                if let Some(rid) = span.rid().filter(|r| !r.is_empty()) {
                    if !out.contains(&rid) {
                        out.push(rid);
                    }
                }
            }
        }
        out
    }

    /// The trace's anchors by request, in `groups` (emptied first).
    fn group_anchors(&self, trace: &Trace, groups: &mut Vec<(Key, Ids)>) {
        groups.clear();
        for (aid, _) in &trace.anchors {
            let Some(anchor) = trace.get(aid) else {
                continue;
            };
            let key = self.key(trace, anchor);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(*aid),
                None => groups.push((key, std::iter::once(*aid).collect())),
            }
        }
    }

    fn group(&self, trace: &Trace, key: &Key) -> Ids {
        trace
            .anchors
            .iter()
            .filter(|(a, _)| trace.get(a).is_some_and(|h| self.key(trace, h) == *key))
            .map(|(a, _)| *a)
            .collect()
    }

    fn in_a_gateway(trace: &Trace, span: &Held) -> bool {
        span.gateway || trace.above(span).any(|h| h.gateway)
    }

    /// The request's companions, nearest first: what its fields are read from, and what it claims.
    fn scope<'a>(&self, trace: &'a Trace, key: &Key, anchors: &[&'a Held]) -> Spans<'a> {
        let primary = self.builder.words.primary_anchor(trace, anchors);
        let mut ordered: Spans<'_> = trace
            .ancestors(primary)
            .into_iter()
            .filter(|s| !trace.is_anchor(&s.id()))
            .collect();
        let mut listed: Vec<SpanId> = ordered
            .iter()
            .map(|s| s.id())
            .chain(anchors.iter().map(|a| a.id()))
            .collect();
        let extra: Spans<'_> = match key {
            Key::Gateway(gid) => {
                let Some(gateway) = trace.get(gid) else {
                    return ordered;
                };
                let mut extra: Spans<'_> = Small::new();
                if !listed.contains(gid) {
                    extra.push(gateway);
                    extra.extend(trace.ancestors(gateway));
                }
                extra.extend(trace.descendants(gid));
                extra.extend(self.beside(trace, gateway, anchors, &listed));
                extra
            }
            Key::Parent(..) => trace
                .spans
                .iter()
                .filter(|s| !Self::in_a_gateway(trace, s))
                .collect(),
        };
        for span in extra {
            let id = span.id();
            if !listed.contains(&id) && !trace.is_anchor(&id) {
                ordered.push(span);
                listed.push(id);
            }
        }
        ordered
    }

    /// Spans outside every gateway that belong to this one's request: an Envoy span with its headers.
    fn beside<'a>(
        &self,
        trace: &'a Trace,
        gateway: &Held,
        anchors: &[&Held],
        listed: &[SpanId],
    ) -> Spans<'a> {
        let candidates: Spans<'_> = trace
            .spans
            .iter()
            .filter(|s| {
                !listed.contains(&s.id())
                    && !trace.is_anchor(&s.id())
                    && !Self::in_a_gateway(trace, s)
            })
            .collect();
        if candidates.is_empty() {
            return candidates;
        }
        let mut request_ids: Small<&str, 8> = self.request_ids_under(trace, &gateway.id());
        for anchor in anchors {
            if let Some(rid) = anchor.rid().filter(|r| !r.is_empty()) {
                request_ids.push(rid);
            }
        }
        let mut others: Small<&str, 8> = Small::new();
        if request_ids.is_empty() {
            for other in &trace.gateways {
                if *other != gateway.id() {
                    others.extend(self.request_ids_under(trace, other));
                }
            }
        }
        candidates
            .into_iter()
            .filter(|s| {
                let rid = s.rid();
                let same_id = rid.is_some_and(|r| request_ids.contains(&r));
                let unclaimed = rid.is_none_or(|r| !others.contains(&r));
                same_id || (request_ids.is_empty() && unclaimed && encloses(s, gateway))
            })
            .collect()
    }

    // ---- completion ---------------------------------------------------------------------

    fn try_complete(&mut self, tid: TraceId) {
        self.settle_probes(tid);
        let mut groups = std::mem::take(&mut self.groups);
        self.group_anchors(self.t(&tid), &mut groups);
        for (key, anchor_ids) in groups.drain(..) {
            let trace = self.t(&tid);
            let anchors = held(trace, &anchor_ids);
            if anchors.is_empty() {
                continue;
            }
            if let Key::Gateway(gid) = key {
                let scope = self.scope(trace, &key, &anchors);
                if placed(trace, &gid, &anchors)
                    && self.stages(trace, &anchors, &scope).1
                    && self.headers_settled(trace, &key, &scope)
                {
                    let scope = ids(&scope);
                    self.emit_group(
                        tid,
                        key,
                        self.words().outcomes.joined,
                        None,
                        Some(anchor_ids),
                        Some(scope),
                    );
                }
                continue;
            }
            if !trace.chain_complete(anchors[0]) {
                continue;
            }
            let first = anchors[0];
            if let Some(gateway_trace) = self.gateway_trace(&tid, first) {
                // The EPP's spans in a trace of their own (a gateway forwarded another).
                self.lend(&gateway_trace);
                self.emit_group(
                    tid,
                    key,
                    self.words().outcomes.joined_by_request_id,
                    Some(gateway_trace),
                    Some(anchor_ids),
                    None,
                );
                continue;
            }
            let waits = self.awaits_gateway();
            let scope = if waits {
                Spans::default()
            } else {
                self.scope(trace, &key, &anchors)
            };
            if !scope.is_empty() {
                let scope = ids(&scope);
                self.emit_group(
                    tid,
                    key,
                    self.words().outcomes.joined,
                    None,
                    Some(anchor_ids),
                    Some(scope),
                );
            } else if !self.cfg.by_request_id {
                if !waits {
                    self.emit_group(
                        tid,
                        key,
                        self.words().outcomes.anchor_only,
                        None,
                        None,
                        None,
                    );
                }
            } else if let Some(other) = self.companion_trace(first).filter(|other| *other != tid) {
                self.lend(&other);
                self.emit_group(
                    tid,
                    key,
                    self.words().outcomes.joined_by_request_id,
                    Some(other),
                    None,
                    None,
                );
            } else if let Key::Parent(_, rid) = &key {
                let first_id = first.id();
                if !rid.is_empty() && !trace.anchor_request_ids.contains(rid) {
                    self.anchors_by_rid.insert(rid.clone(), (tid, first_id));
                    self.t_mut(&tid).anchor_request_ids.push(rid.clone());
                }
            }
        }
        self.groups = groups;
        self.close_if_finished(&tid);
    }

    /// A request no gateway span claims waits for one, up to its window, while the gateway traces
    /// (`join.wait_for_gateway`): the caller's traceparent made the EPP's span a sibling of the model
    /// server's, and the EPP's exporter sends it later. `always` waits from the start, before any
    /// gateway span came.
    fn awaits_gateway(&self) -> bool {
        let memory = self.cfg.gateway_memory_seconds;
        memory == f64::INFINITY
            || self
                .gateway_seen
                .get()
                .is_some_and(|seen| self.now - seen <= memory)
    }

    /// Shares `seen` with other shards of the join: whether the gateway traces is the traffic's, not one
    /// shard's (`TraceAssembler.share_gateway_memory`).
    pub fn share_gateway_memory(&mut self, seen: GatewaySeen) {
        self.gateway_seen = seen;
    }

    /// A request is complete once the span with its SLO headers is here, or its gateway's chain to
    /// the trace root is, or its window passed.
    fn headers_settled(&self, trace: &Trace, key: &Key, scope: &[&Held]) -> bool {
        let Key::Gateway(gid) = key else { return false };
        trace.get(gid).is_some_and(|g| trace.chain_complete(g)) || self.has_slo(scope)
    }

    /// (Its decode stage is here, both its stages are): a P/D request waits for its decode stage,
    /// which may stream for minutes, and then for its prefill stage, no longer than the decode
    /// stage's window (each pod exports its own spans, so the prefill pod's may come after the
    /// decode pod's). Any other request has both once an anchor is here.
    fn stages(&self, trace: &Trace, anchors: &[&Held], scope: &[&Held]) -> (bool, bool) {
        let words = &self.builder.words;
        if !words.disaggregated_in(trace, anchors, scope) {
            return (true, true);
        }
        let decode = anchors
            .iter()
            .any(|a| words.leg_of(trace, a) == Some(Leg::Decode))
            || (anchors.len() >= 2 && !scope.iter().any(|s| words.leg(&s.span).is_some()));
        (decode, decode && anchors.len() >= 2)
    }

    /// The window is over (or the trace expires, or sloscope stops): the anchor's companions if
    /// any, else a companion found by request id, else the anchor alone.
    fn finish_with_what_it_has(&mut self, tid: TraceId, aid: SpanId, outcome: Word) {
        let trace = self.t(&tid);
        let Some(anchor) = trace.get(&aid) else {
            return;
        };
        let mut key = self.key(trace, anchor);
        if matches!(key, Key::Parent(..))
            && trace.gateways.len() == 1
            && !trace.chain_complete(anchor)
        {
            key = Key::Gateway(trace.gateways[0]); // a span between it and the trace's one gateway is missing
        }
        let mut anchor_ids = self.group(trace, &key);
        if !anchor_ids.contains(&aid) {
            anchor_ids.push(aid); // adopted by the gateway
        }
        let anchors = held(trace, &anchor_ids);
        if matches!(key, Key::Gateway(_)) || !self.scope(trace, &key, &anchors).is_empty() {
            self.emit_group(tid, key, outcome, None, Some(anchor_ids), None);
            return;
        }
        let other = if self.cfg.by_request_id {
            self.companion_trace(anchor)
        } else {
            None
        };
        match other {
            Some(other) => {
                self.lend(&other);
                self.emit_group(
                    tid,
                    key,
                    self.words().outcomes.joined_by_request_id,
                    Some(other),
                    Some(anchor_ids),
                    None,
                );
            }
            None => {
                let fallback = if outcome == self.words().outcomes.joined {
                    self.words().outcomes.anchor_only
                } else {
                    outcome
                };
                self.emit_group(tid, key, fallback, None, Some(anchor_ids), None);
            }
        }
    }

    /// Another pending trace holding the gateway span of the anchor's request id.
    fn gateway_trace(&self, tid: &TraceId, anchor: &Held) -> Option<TraceId> {
        if !self.cfg.by_request_id {
            return None;
        }
        let other = self.companion_trace(anchor)?;
        (other != *tid && !self.t(&other).gateways.is_empty()).then_some(other)
    }

    fn companion_trace(&self, anchor: &Held) -> Option<TraceId> {
        let rid = anchor.rid().filter(|r| !r.is_empty())?;
        let other = self.companions_by_rid.get(rid)?;
        self.live(other).map(|_| *other)
    }

    /// A trace with nothing left is closed; later spans of it are duplicates, late, or a new call.
    fn close_if_finished(&mut self, tid: &TraceId) {
        let Some(trace) = self.traces.get(tid) else {
            return;
        };
        if !trace.spans.is_empty() || trace.lent {
            return;
        }
        self.forget_request_ids(tid);
        let trace = self.traces.remove(tid).expect("held");
        self.span_bytes -= trace.size;
    }

    fn forget_request_ids(&mut self, tid: &TraceId) {
        let trace = self.traces.get(tid).expect("held");
        for rid in &trace.request_ids {
            if self.companions_by_rid.get(rid) == Some(tid) {
                self.companions_by_rid.remove(rid);
                self.index_bytes -= self.index_entry_bytes(rid);
            }
        }
        for rid in &trace.anchor_request_ids {
            if self.anchors_by_rid.get(rid).is_some_and(|w| w.0 == *tid) {
                self.anchors_by_rid.remove(rid);
            }
        }
    }

    fn answered_id(&mut self, rid: u128) {
        if !self.answered.contains(&rid) {
            self.answered.put(rid, ());
        }
    }

    fn remember(
        &mut self,
        tid: TraceId,
        spans: impl Iterator<Item = (SpanId, Option<SpanId>)>,
        claimed: bool,
    ) {
        // Put again: the most recent trace is forgotten last.
        let mut done = self.done.take(&tid).unwrap_or_default();
        done.remember(spans, claimed, self.done_cap);
        self.done.put(tid, done);
    }

    // ---- time ---------------------------------------------------------------------------

    /// Emits anchors whose join window has passed, resolves gateways whose failure window has,
    /// and expires traces past their time to live.
    pub fn expire(&mut self, now: f64) {
        while let Some((tid, aid)) = self.anchor_deadlines.pop_due(now) {
            let Some(trace) = self.live(&tid) else {
                continue;
            };
            if !trace.is_anchor(&aid) || self.awaits_decode(trace, &aid) {
                continue; // a prefill stage waits for its decode stage: the gateway's failure window decides
            }
            self.finish_with_what_it_has(tid, aid, self.words().outcomes.joined);
            self.close_if_finished(&tid);
        }
        while let Some((tid, gid)) = self.gateway_deadlines.pop_due(now) {
            if self.live(&tid).is_some_and(|t| t.gateways.contains(&gid)) {
                self.resolve_unanswered(tid, gid);
                self.close_if_finished(&tid);
            }
        }
        self.expire_traces(now);
    }

    fn expire_traces(&mut self, now: f64) {
        let ttl = self.cfg.trace_ttl_seconds;
        while let Some(tid) = self.traces.first() {
            let trace = self.t(&tid);
            if trace.first_seen + ttl > now {
                break;
            }
            // An anchor that arrived late in its trace's life can still be waiting when the trace expires.
            let longest = self.cfg.max_request_seconds;
            let decoding: Ids = trace
                .anchors
                .iter()
                .filter(|(a, at)| now - at < longest && self.awaits_decode(trace, a))
                .map(|(a, _)| *a)
                .collect();
            let rest: Ids = trace
                .anchors
                .iter()
                .map(|(a, _)| *a)
                .filter(|a| !decoding.contains(a))
                .collect();
            for aid in rest {
                if self.t(&tid).is_anchor(&aid) {
                    self.finish_with_what_it_has(tid, aid, self.words().outcomes.joined);
                }
            }
            let trace = self.t_mut(&tid);
            if !trace.gateways.is_empty() || !decoding.is_empty() {
                // A gateway in its failure window, or a long decode, keeps the trace.
                trace.first_seen = now;
                self.traces.move_to_end(&tid);
                continue;
            }
            self.forget_request_ids(&tid);
            let (_, trace) = self.traces.pop_first().expect("held");
            self.span_bytes -= trace.size;
            if !trace.lent && !trace.emitted {
                self.outcome(self.words().outcomes.no_anchor, 1);
            }
            self.remember(tid, trace.spans.iter().map(|h| (h.id(), h.parent())), false);
        }
    }

    /// A P/D prefill stage whose decode stage has not come: the decode may stream for minutes.
    fn awaits_decode(&self, trace: &Trace, aid: &SpanId) -> bool {
        let Some(anchor) = trace.get(aid) else {
            return false;
        };
        let key = self.key(trace, anchor);
        let anchors = held(trace, &self.group(trace, &key));
        let scope = self.scope(trace, &key, &anchors);
        !self.stages(trace, &anchors, &scope).0
    }

    /// A conditional-decode probe the EPP refused says so on its own gateway span: emitted once its request
    /// id has come (`TraceAssembler._settle_probes`).
    fn settle_probes(&mut self, tid: TraceId) {
        let probes: Ids = {
            let trace = self.t(&tid);
            trace
                .gateways
                .iter()
                .copied()
                .filter(|gid| {
                    let Some(gateway) = trace.get(gid) else {
                        return false;
                    };
                    if !self
                        .builder
                        .words
                        .is_conditional_probe(std::iter::once(&gateway.span))
                    {
                        return false;
                    }
                    let key = Key::Gateway(*gid);
                    let named = std::iter::once(gateway)
                        .chain(self.scope(trace, &key, &[gateway]))
                        .any(|h| h.rid().is_some_and(|r| !r.is_empty()));
                    named && self.group(trace, &key).is_empty()
                })
                .collect()
        };
        for gid in probes {
            self.emit_probe(tid, gid);
        }
    }

    /// The probe, a step of a call that goes on: a leg of its call (`TraceAssembler._emit_probe`).
    fn emit_probe(&mut self, tid: TraceId, gid: SpanId) {
        let key = Key::Gateway(gid);
        let trace = self.t(&tid);
        let Some(gateway) = trace.get(&gid) else {
            return;
        };
        let mut scope: Spans<'_> = std::iter::once(gateway).collect();
        scope.extend(self.scope(trace, &key, &[gateway]));
        let mut request = self.builder.probe(&mut self.text(), gateway, &scope);
        request.trace_id = tid;
        let scope = ids(&scope);
        self.claim(tid, &key, &[], &scope);
        self.outcome(self.words().outcomes.probe, 1);
        self.out.push(request);
    }

    /// The failure window of a gateway span passed: its anchors with what they have, else a failed request.
    fn resolve_unanswered(&mut self, tid: TraceId, gid: SpanId) {
        let key = Key::Gateway(gid);
        if !self.group(self.t(&tid), &key).is_empty() {
            self.emit_group(tid, key, self.words().outcomes.joined, None, None, None);
            return;
        }
        self.t_mut(&tid).gateways.retain(|g| *g != gid);
        let trace = self.t(&tid);
        let Some(gateway) = trace.get(&gid) else {
            return;
        };
        let mut scope: Spans<'_> = std::iter::once(gateway).collect();
        scope.extend(self.scope(trace, &key, &[gateway]));
        if !self.is_llm_call(&scope) {
            return; // not an LLM call: it stays a companion until the trace expires, as any span
        }
        if self
            .builder
            .words
            .is_conditional_probe(scope.iter().map(|h| &h.span))
        {
            // a step of a call that goes on, not a call (whose later legs, of its request id, were answered)
            self.emit_probe(tid, gid);
            return;
        }
        if self
            .request_ids_under(trace, &gid)
            .iter()
            .any(|r| self.answered.contains(&self.fingerprints.of(r)))
        {
            return; // a model server answered it in another trace
        }
        let answered = !self.cfg.unanswered_are_aborted;
        let Some(reason) = self
            .builder
            .words
            .failure_reason(scope.iter().map(|h| &h.span), answered)
        else {
            return;
        };
        let mut request = self
            .builder
            .failed(&mut self.text(), gateway, &scope, reason);
        request.trace_id = tid;
        let scope = ids(&scope);
        self.claim(tid, &key, &[], &scope);
        self.outcome(self.words().outcomes.failed, 1);
        self.out.push(request);
    }

    /// A model, an SLO header or a gen_ai attribute beyond the request id: a /tokenize or a GET that
    /// the EPP passes through is scheduled with a request id and no model, and is no LLM call.
    fn is_llm_call(&self, scope: &[&Held]) -> bool {
        let rules = &self.rules;
        let names_a_model = rules
            .string(Field::RequestedModel, scope)
            .is_some_and(|s| !s.is_empty())
            || rules
                .string(Field::TargetModel, scope)
                .is_some_and(|s| !s.is_empty());
        if names_a_model || self.has_slo(scope) {
            return true;
        }
        scope.iter().any(|held| {
            held.span.gen_ai_keys().any(|key| {
                // The merged view's value: the nearest span's (within it, the last duplicate).
                let value = scope.iter().find_map(|h| h.span.attribute(key));
                match value {
                    Some(ValueRef::Empty) | None => false,
                    Some(ValueRef::Str(s)) => !s.is_empty(),
                    Some(_) => true,
                }
            })
        })
    }

    fn has_slo(&self, view: &[&Held]) -> bool {
        self.rules.present(Field::SloTtftMs, view) || self.rules.present(Field::SloTpotMs, view)
    }

    /// Emits every waiting anchor with what it has (shutdown). Returns how many.
    pub fn flush(&mut self) -> usize {
        let mut flushed = 0;
        let order: Vec<TraceId> = self.traces.keys().copied().collect();
        for tid in order {
            while let Some(&(first, _)) = self.traces.get(&tid).and_then(|t| t.anchors.first()) {
                let before = self.t(&tid).anchors.len();
                self.finish_with_what_it_has(tid, first, self.words().outcomes.joined);
                let after = self.t(&tid).anchors.len();
                if after >= before {
                    break;
                }
                flushed += before - after;
            }
        }
        self.traces.clear();
        self.span_bytes = 0;
        self.anchor_deadlines.clear();
        self.gateway_deadlines.clear();
        self.companions_by_rid.clear();
        self.index_bytes = 0;
        self.anchors_by_rid.clear();
        flushed
    }

    // ---- building the record ------------------------------------------------------------

    fn emit_group(
        &mut self,
        tid: TraceId,
        key: Key,
        outcome: Word,
        lender: Option<TraceId>,
        anchors: Option<Ids>,
        scope: Option<Ids>,
    ) {
        let trace = self.t(&tid);
        let anchor_ids = anchors.unwrap_or_else(|| self.group(trace, &key));
        let anchors = held(trace, &anchor_ids);
        if anchors.is_empty() {
            return;
        }
        let scope = match scope {
            Some(ids) => held(trace, &ids),
            None => self.scope(trace, &key, &anchors),
        };
        let mut companions = scope.clone();
        if let Some(lender) = lender.and_then(|l| self.traces.get(&l)) {
            companions.extend(lender.spans.iter().filter(|s| !lender.is_anchor(&s.id())));
        }
        let gateway = match key {
            Key::Gateway(gid) => trace.get(&gid),
            Key::Parent(..) => None,
        };
        let mut request = self.builder.request(
            &mut self.text(),
            trace,
            &anchors,
            &companions,
            outcome,
            gateway,
        );
        request.trace_id = tid;
        let rids: Small<u128, 4> = anchors
            .iter()
            .filter_map(|a| a.rid().map(|r| self.fingerprints.of(r)))
            .collect();
        let scope_ids = ids(&scope);
        self.claim(tid, &key, &anchor_ids, &scope_ids);
        for rid in rids {
            self.answered_id(rid);
        }
        self.outcome(request.outcome, 1);
        self.out.push(request);
    }

    /// The spans of an emitted request leave the pending trace; shared ancestors of a gateway stay.
    fn claim(&mut self, tid: TraceId, key: &Key, anchors: &[SpanId], scope: &[SpanId]) {
        let trace = self.t(&tid);
        let shared: Ids = match key {
            Key::Gateway(gid) => match trace.get(gid) {
                Some(gateway) => ids(&trace.ancestors(gateway)),
                None => Small::new(),
            },
            Key::Parent(..) => Small::new(),
        };
        let claimed: Ids = anchors
            .iter()
            .chain(scope.iter().filter(|s| !shared.contains(s)))
            .copied()
            .collect();
        let remembered: Small<(SpanId, Option<SpanId>), 8> = claimed
            .iter()
            .filter_map(|id| trace.get(id).map(|h| (h.id(), h.parent())))
            .collect();
        let everything = claimed.len() == trace.spans.len();
        let trace = self.t_mut(&tid);
        if let Key::Gateway(gid) = key {
            trace.gateways.retain(|g| g != gid);
        }
        let freed = if everything {
            trace.clear() // the usual case: the request was the whole trace
        } else {
            let mut freed = 0;
            for id in &claimed {
                trace.anchors.retain(|(a, _)| a != id);
                freed += trace.remove(id);
            }
            if !trace.bare.is_empty() {
                let spans = &trace.spans;
                trace.bare.retain(|b| spans.iter().any(|h| h.id() == *b));
            }
            freed
        };
        trace.emitted = true;
        self.span_bytes -= freed;
        self.remember(tid, remembered.into_iter(), true);
    }
}

#[cfg(test)]
mod tests {
    use super::GatewaySeen;

    #[test]
    fn the_gateway_memory_keeps_the_latest_time_for_every_holder() {
        let seen = GatewaySeen::default();
        let other = seen.clone();
        assert_eq!(seen.get(), None);
        other.note(0.0);
        assert_eq!(seen.get(), Some(0.0));
        other.note(12.5);
        seen.note(3.0);
        assert_eq!((seen.get(), other.get()), (Some(12.5), Some(12.5)));
    }
}
