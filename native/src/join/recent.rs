//! A bounded memory of what was finished most recently: the emitted traces whose late and
//! duplicate spans the join recognises, and the request ids model servers answered.

use std::borrow::Borrow;
use std::hash::Hash;

use crate::join::hash::{HashMap, Seeded};

/// The most keys a generation's table is made for up front; a table for a larger limit grows past it
/// as it fills, so that a limit set far above the default does not reserve its memory at start.
pub const PRESIZED: usize = 1 << 20;

/// The keys put most recently, at most `limit` of them, kept as two generations: a key goes into
/// the young one; when that holds half the limit it becomes the old one and the old one is
/// forgotten whole. Forgetting the single oldest key on every insert, as an insertion-ordered map
/// does, touched an entry long gone cold each time (and a queue of the order besides); a generation
/// is cleared in one sequential pass and its table reused, so once both have filled nothing is
/// allocated. The price: between half the limit and the limit are remembered, never more.
/// The Python reference (`sloscope.processors.recent.Recent`) forgets the same keys at the same time.
///
/// Both tables are made at their full size at once (up to [`PRESIZED`] keys each): grown as they
/// fill, they were rehashed into fresh memory at every doubling, and the page faults and copies of
/// that made the join of a server's first few hundred thousand traces a third dearer than later
/// (docs/performance.md). Untouched pages cost no resident memory until keys land in them.
pub struct Recent<K, V> {
    young: HashMap<K, V>,
    old: HashMap<K, V>,
    half: usize,
}

impl<K: Hash + Eq, V> Recent<K, V> {
    pub fn new(limit: usize) -> Self {
        let half = limit.div_ceil(2).max(1);
        let table = || HashMap::with_capacity_and_hasher(half.min(PRESIZED), Seeded::default());
        Recent {
            young: table(),
            old: table(),
            half,
        }
    }

    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.young.get(key).or_else(|| self.old.get(key))
    }

    pub fn contains<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.young.contains_key(key) || self.old.contains_key(key)
    }

    /// Removes a key, to be put again (its value updated, and remembered as recent).
    pub fn take<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.young.remove(key).or_else(|| self.old.remove(key))
    }

    /// Remembers a key that is not remembered now (`take` it first).
    pub fn put(&mut self, key: K, value: V) {
        debug_assert!(
            !self.old.contains_key(&key),
            "put a remembered key: take it first"
        );
        self.young.insert(key, value);
        if self.young.len() >= self.half {
            std::mem::swap(&mut self.young, &mut self.old);
            self.young.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_the_older_half_whole_when_the_newer_fills() {
        let mut recent = Recent::new(6);
        for k in 0..5 {
            recent.put(k, k * 10);
        }
        // 0, 1, 2 filled the young generation and became the old one; 3 and 4 are young.
        assert_eq!(recent.len(), 5);
        assert_eq!(recent.get(&0), Some(&0));
        recent.put(5, 50); // the young fill: 0, 1, 2 are forgotten
        assert_eq!(recent.len(), 3);
        assert!(!recent.contains(&2));
        assert_eq!(recent.get(&3), Some(&30));
        // Taken and put again, an old key is young: it outlives its generation.
        let three = recent.take(&3).expect("remembered");
        recent.put(3, three + 1);
        recent.put(6, 60);
        recent.put(7, 70); // young 3, 6, 7 fill: 4 and 5 are forgotten
        assert_eq!((recent.get(&3), recent.contains(&4)), (Some(&31), false));
    }

    #[test]
    fn both_tables_are_made_whole_at_start_and_never_grow() {
        let mut recent: Recent<u64, ()> = Recent::new(1000);
        let made = (recent.young.capacity(), recent.old.capacity());
        assert!(made.0 >= 500 && made.1 >= 500, "{made:?}");
        for key in 0..10_000 {
            recent.put(key, ());
        }
        assert_eq!((recent.young.capacity(), recent.old.capacity()), made);
        let large: Recent<u64, ()> = Recent::new(4 * PRESIZED);
        assert!((PRESIZED..2 * PRESIZED).contains(&large.young.capacity()));
    }

    #[test]
    fn never_holds_more_than_the_limit() {
        for limit in 1..9 {
            let mut recent = Recent::new(limit);
            for k in 0..50 {
                recent.put(k, ());
                assert!(recent.len() <= limit, "limit {limit}: {}", recent.len());
                assert!(recent.contains(&k), "the newest is always remembered");
            }
        }
    }
}
