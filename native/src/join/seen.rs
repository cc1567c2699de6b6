//! What is remembered of a trace's spans once they left the pending trace (the twin of
//! `processors/trace_state.py` `SeenSpans`): the ids seen, those claimed by an emitted request and
//! the parents of claimed spans, so that a duplicate or late span is recognised.
//!
//! One entry a span id, marked with the lists it is in, rather than a list each: a gateway span
//! and the anchor under it are two entries (the gateway claimed and a parent, the anchor claimed),
//! where three lists held five ids. The join remembers `join.max_done_traces` traces, and their
//! table was most of the memory it grows under load: an entry of the table is the trace id and
//! this, 48 bytes (96 with three lists, docs/performance.md).

use crate::join::hash::HashMap;
use crate::join::trace::SpanId;

/// A list an id is in, as its bit in an entry's marks.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum List {
    Seen = 1,
    Claimed = 2,
    Parents = 4,
}

const LISTS: [List; 3] = [List::Seen, List::Claimed, List::Parents];

/// Why a span is not new to its trace (`Seen::verdict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// A span of this id was seen.
    Duplicate,
    /// It came after its trace was emitted: a parent of a claimed span, or under one.
    Late,
}

/// Ids held in place; most traces name no more (a gateway span, the anchor, the client's span).
const IN_PLACE: usize = 3;

/// A trace with more ids than this also indexes them, so checking a span costs the same whatever
/// the trace's length: scanning took the join from 0.60 to 0.96 µs a span at 128 calls a trace.
const INDEXED: usize = 48;

/// Entries in order of first mention, each a span id and its marks; each list is bounded (the
/// oldest entries of a list over its cap lose its mark, and an entry with no mark left is gone).
pub enum Seen {
    /// In place: an allocation per remembered trace, and its free when its generation was
    /// forgotten (memory long gone cold), cost more than the join of a two-span trace.
    Few {
        ids: [SpanId; IN_PLACE],
        marks: [u8; IN_PLACE],
        len: u8,
    },
    Many(Box<Many>),
}

#[derive(Default)]
pub struct Many {
    /// In order of first mention. Their marks are the index's once there is one (these go stale).
    entries: Vec<(SpanId, u8)>,
    counts: [usize; 3],
    /// Marks by id, once there are more than `INDEXED` entries.
    index: Option<HashMap<SpanId, u8>>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen::Few {
            ids: [[0; 8]; IN_PLACE],
            marks: [0; IN_PLACE],
            len: 0,
        }
    }
}

fn slot(list: List) -> usize {
    (list as u8).trailing_zeros() as usize
}

impl Seen {
    /// The lists the id is in (0: none).
    fn marks(&self, id: &SpanId) -> u8 {
        match self {
            Seen::Few { ids, marks, len } => (0..*len as usize)
                .find(|&i| ids[i] == *id)
                .map_or(0, |i| marks[i]),
            Seen::Many(many) => match &many.index {
                Some(index) => index.get(id).copied().unwrap_or(0),
                None => many
                    .entries
                    .iter()
                    .find(|(entry, _)| entry == id)
                    .map_or(0, |(_, marks)| *marks),
            },
        }
    }

    fn has(&self, list: List, id: &SpanId) -> bool {
        self.marks(id) & list as u8 != 0
    }

    fn add(&mut self, list: List, id: SpanId) {
        if let Seen::Few { ids, marks, len } = self {
            let n = *len as usize;
            if let Some(i) = (0..n).find(|&i| ids[i] == id) {
                marks[i] |= list as u8;
                return;
            }
            if n < IN_PLACE {
                ids[n] = id;
                marks[n] = list as u8;
                *len += 1;
                return;
            }
            let entries = (0..n).map(|i| (ids[i], marks[i])).collect();
            let mut many = Many {
                entries,
                ..Many::default()
            };
            many.count_all();
            *self = Seen::Many(Box::new(many));
        }
        if let Seen::Many(many) = self {
            many.add(list, id);
        }
    }

    /// Each list's entries, oldest first (for tests).
    #[cfg(test)]
    fn list(&self, list: List) -> Vec<SpanId> {
        let bit = list as u8;
        match self {
            Seen::Few { ids, marks, len } => (0..*len as usize)
                .filter(|&i| marks[i] & bit != 0)
                .map(|i| ids[i])
                .collect(),
            Seen::Many(many) => many
                .entries
                .iter()
                .filter(|entry| many.marks_of(entry) & bit != 0)
                .map(|(id, _)| *id)
                .collect(),
        }
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
        // In place there are at most IN_PLACE ids, never over a cap of 4 * join.max_spans_per_trace.
        if let Seen::Many(many) = self {
            many.trim(cap);
        }
    }

    /// Why a span with these ids is not new: a duplicate of a span seen, or late (a parent of a
    /// claimed span, or under one).
    pub fn verdict(&self, span: SpanId, parent: Option<SpanId>) -> Option<Repeat> {
        let marks = self.marks(&span);
        if marks & List::Seen as u8 != 0 {
            return Some(Repeat::Duplicate);
        }
        let under_claimed = parent.is_some_and(|p| self.has(List::Claimed, &p));
        if marks & List::Parents as u8 != 0 || under_claimed {
            return Some(Repeat::Late);
        }
        None
    }
}

impl Many {
    fn count_all(&mut self) {
        self.counts = [0; 3];
        for (_, marks) in &self.entries {
            for list in LISTS {
                self.counts[slot(list)] += usize::from(marks & list as u8 != 0);
            }
        }
    }

    fn add(&mut self, list: List, id: SpanId) {
        let bit = list as u8;
        let found = match &mut self.index {
            Some(index) => index.get_mut(&id),
            None => self
                .entries
                .iter_mut()
                .find(|(entry, _)| *entry == id)
                .map(|(_, marks)| marks),
        };
        match found {
            Some(marks) if *marks & bit != 0 => {}
            Some(marks) => {
                *marks |= bit;
                self.counts[slot(list)] += 1;
            }
            None => {
                if let Some(index) = &mut self.index {
                    index.insert(id, bit);
                }
                self.entries.push((id, bit));
                self.counts[slot(list)] += 1;
                self.index_if_long();
            }
        }
    }

    /// Takes each list's mark from its oldest entries until at most `cap` are left in it, and
    /// forgets the entries left with no mark.
    fn trim(&mut self, cap: usize) {
        let mut forgot = false;
        for list in LISTS {
            let bit = list as u8;
            let mut over = self.counts[slot(list)].saturating_sub(cap);
            self.counts[slot(list)] -= over;
            for (id, entry_marks) in &mut self.entries {
                if over == 0 {
                    break;
                }
                let marks = match &mut self.index {
                    Some(index) => index.get_mut(id).expect("every entry is indexed"),
                    None => entry_marks,
                };
                if *marks & bit != 0 {
                    *marks &= !bit;
                    over -= 1;
                    forgot |= *marks == 0;
                }
            }
        }
        if !forgot {
            return;
        }
        match &mut self.index {
            Some(index) => {
                index.retain(|_, marks| *marks != 0);
                self.entries.retain(|(id, _)| index.contains_key(id));
            }
            None => self.entries.retain(|(_, marks)| *marks != 0),
        }
    }

    fn index_if_long(&mut self) {
        if self.index.is_none() && self.entries.len() > INDEXED {
            self.index = Some(self.entries.iter().copied().collect());
        }
    }

    /// Each entry's marks, wherever they are kept (for `Seen::list`).
    #[cfg(test)]
    fn marks_of(&self, entry: &(SpanId, u8)) -> u8 {
        self.index.as_ref().map_or(entry.1, |index| index[&entry.0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u16) -> SpanId {
        let mut id = [0u8; 8];
        id[..2].copy_from_slice(&i.to_be_bytes());
        id
    }

    #[test]
    fn a_two_span_trace_is_remembered_in_place() {
        let mut seen = Seen::default();
        seen.remember([(id(1), None), (id(2), Some(id(1)))].into_iter(), true, 256);
        assert!(
            matches!(seen, Seen::Few { len: 2, .. }),
            "two ids, however many lists"
        );
        assert_eq!(seen.list(List::Parents), [id(1)]);
        // Its entry in a generation's table: the trace id and this (docs/configuration.md, join.max_done_traces).
        assert_eq!(std::mem::size_of::<([u8; 16], Seen)>(), 48);
    }

    #[test]
    fn each_list_keeps_its_newest_cap() {
        let mut seen = Seen::default();
        seen.remember([(id(1), Some(id(9))), (id(2), None)].into_iter(), true, 3);
        seen.remember([(id(3), Some(id(8))), (id(1), None)].into_iter(), false, 3);
        seen.remember([(id(4), Some(id(7)))].into_iter(), true, 2);
        assert_eq!(seen.list(List::Seen), [id(3), id(4)]);
        assert_eq!(seen.list(List::Claimed), [id(2), id(4)]);
        assert_eq!(seen.list(List::Parents), [id(9), id(7)]);
        // Id 1 lost every mark and is gone; the rest keep their order of first mention (a parent
        // is mentioned after its span).
        let Seen::Many(many) = &seen else {
            panic!("six ids are not held in place")
        };
        let order: Vec<SpanId> = many.entries.iter().map(|(id, _)| *id).collect();
        assert_eq!(order, [id(9), id(2), id(3), id(4), id(7)]);
        assert_eq!(many.counts, [2, 2, 2]);
        assert!(many.index.is_none());
    }

    #[test]
    fn an_id_in_a_list_later_than_its_first_mention_is_as_old_as_that() {
        let mut seen = Seen::default();
        seen.remember([(id(1), None), (id(2), None)].into_iter(), false, 8);
        seen.remember([(id(3), None), (id(4), None)].into_iter(), false, 8);
        seen.remember([(id(2), None), (id(1), None)].into_iter(), true, 1);
        assert_eq!(seen.list(List::Claimed), [id(2)]);
        assert_eq!(seen.list(List::Seen), [id(4)]);
    }

    #[test]
    fn a_long_trace_is_indexed_and_forgets_from_its_index_too() {
        let mut seen = Seen::default();
        // 100 calls of a session: span 2k under parent 2k + 1, each call claimed; at most 64 of each kept.
        for k in 0..100 {
            seen.remember([(id(2 * k), Some(id(2 * k + 1)))].into_iter(), true, 64);
        }
        let verdict = |span: u16, parent: Option<u16>| seen.verdict(id(span), parent.map(id));
        assert_eq!(verdict(198, None), Some(Repeat::Duplicate));
        assert_eq!(verdict(72, None), Some(Repeat::Duplicate)); // call 36, the oldest kept
        assert_eq!(verdict(70, None), None); // call 35: forgotten, from the index too
        assert_eq!(verdict(199, None), Some(Repeat::Late)); // a parent of a claimed span
        assert_eq!(verdict(5000, Some(150)), Some(Repeat::Late)); // under a claimed span
        assert_eq!(verdict(5000, Some(60)), None);
        let Seen::Many(many) = &seen else {
            panic!("a long trace is not held in place")
        };
        let index = many.index.as_ref().expect("indexed");
        assert_eq!(index.len(), many.entries.len());
        assert!(many.entries.iter().all(|(id, _)| index.contains_key(id)));
        assert_eq!(many.counts, [64, 64, 64]);
    }
}
