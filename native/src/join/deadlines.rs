//! The windows the join waits out: each anchor's join window and each gateway span's failure
//! window, soonest first. A port of `sloscope.processors.deadlines.Deadlines`, which tidies at the
//! same lengths, so the two assemblers drop the same entries.

use std::collections::VecDeque;

use crate::join::trace::{SpanId, TraceId};

/// The shortest queue that is tidied.
pub const TIDY_FROM: usize = 4096;

/// (deadline, trace, span), in the order they were pushed, which is the order of their deadlines
/// (one window length a queue, the clock never goes back).
///
/// Most entries go stale long before their deadline: a request is emitted as soon as it is whole,
/// and the failure window (15 s by default) outlives it by far. Left in the queue until their
/// deadline, stale entries held rate × window of them, tens of megabytes at a fleet's rate and
/// beyond the pending caps, and growing the queue faulted in fresh pages all through a server's
/// first window. So once the queue is longer than twice what it held after the last tidying (and
/// `TIDY_FROM`), the entries whose span is no longer waiting are dropped: a scan of the queue per
/// as many pushes, O(1) amortized.
pub struct Deadlines {
    queue: VecDeque<(f64, TraceId, SpanId)>,
    tidy_at: usize,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            queue: VecDeque::new(),
            tidy_at: TIDY_FROM,
        }
    }
}

impl Deadlines {
    /// Adds a window; `waiting` tells whether an older entry's span still waits, should the queue
    /// be tidied now.
    pub fn push(
        &mut self,
        deadline: f64,
        tid: TraceId,
        sid: SpanId,
        mut waiting: impl FnMut(&TraceId, &SpanId) -> bool,
    ) {
        self.queue.push_back((deadline, tid, sid));
        if self.queue.len() > self.tidy_at {
            self.queue.retain(|(_, t, s)| waiting(t, s));
            self.tidy_at = TIDY_FROM.max(2 * self.queue.len());
        }
    }

    /// The next entry whose deadline is `now` or past, taken out.
    pub fn pop_due(&mut self, now: f64) -> Option<(TraceId, SpanId)> {
        if self.queue.front()?.0 > now {
            return None;
        }
        self.queue.pop_front().map(|(_, tid, sid)| (tid, sid))
    }

    pub fn clear(&mut self) {
        self.queue.clear();
        self.tidy_at = TIDY_FROM;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(k: usize) -> (TraceId, SpanId) {
        let mut tid = [0u8; 16];
        tid[..8].copy_from_slice(&(k as u64).to_be_bytes());
        (tid, [k as u8; 8])
    }

    #[test]
    fn stale_entries_are_dropped_once_the_queue_doubles_and_due_ones_come_in_order() {
        let mut deadlines = Deadlines::default();
        // Every tenth span still waits.
        let waiting =
            |t: &TraceId, _: &SpanId| u64::from_be_bytes(t[..8].try_into().unwrap()) % 10 == 0;
        for k in 0..TIDY_FROM {
            let (tid, sid) = ids(k);
            deadlines.push(k as f64, tid, sid, waiting);
        }
        assert_eq!(deadlines.queue.len(), TIDY_FROM); // not longer than TIDY_FROM: untouched
        let (tid, sid) = ids(TIDY_FROM);
        deadlines.push(TIDY_FROM as f64, tid, sid, waiting);
        // The 410 multiples of ten below 4,096; the one just pushed (4,096) does not wait either.
        assert_eq!(deadlines.queue.len(), 410);
        assert_eq!(deadlines.tidy_at, TIDY_FROM);
        assert_eq!(deadlines.pop_due(-1.0), None);
        assert_eq!(deadlines.pop_due(25.0), Some(ids(0)));
        assert_eq!(deadlines.pop_due(25.0), Some(ids(10)));
        assert_eq!(deadlines.pop_due(25.0), Some(ids(20)));
        assert_eq!(deadlines.pop_due(25.0), None);
        deadlines.clear();
        assert!(deadlines.queue.is_empty());
    }

    #[test]
    fn a_queue_of_waiting_spans_is_tidied_at_twice_its_length() {
        let mut deadlines = Deadlines::default();
        for k in 0..3 * TIDY_FROM {
            let (tid, sid) = ids(k);
            deadlines.push(k as f64, tid, sid, |_, _| true);
        }
        assert_eq!(deadlines.queue.len(), 3 * TIDY_FROM);
        // Tidied at 4,097 entries (keeping all: the next at over 8,194), then at 8,195.
        assert_eq!(deadlines.tidy_at, 2 * 8_195);
    }
}
