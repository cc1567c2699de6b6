//! Insertion-ordered containers with the operations the assembler's Python dicts are used for:
//! removal of any entry, move to the end, and the oldest first.

use std::collections::VecDeque;
use std::hash::Hash;

use crate::join::hash::HashMap;

/// A map that remembers insertion order (Python's `OrderedDict`). The order is a queue of
/// (sequence number, key): a removed or moved key leaves a stale entry behind (its number is no
/// longer the key's), dropped when it reaches the front or when stale entries outnumber live ones,
/// so every operation is O(1) amortized, without the B-tree's node allocations.
pub struct OrderedMap<K, V> {
    entries: HashMap<K, (u64, V)>,
    order: VecDeque<(u64, K)>,
    next: u64,
}

impl<K: Hash + Eq + Copy, V> Default for OrderedMap<K, V> {
    fn default() -> Self {
        OrderedMap {
            entries: HashMap::default(),
            order: VecDeque::new(),
            next: 0,
        }
    }
}

impl<K: Hash + Eq + Copy, V> OrderedMap<K, V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.entries.get_mut(key).map(|(_, v)| v)
    }

    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    fn live(&self, (seq, key): &(u64, K)) -> bool {
        self.entries.get(key).is_some_and(|e| e.0 == *seq)
    }

    /// Drops stale entries at the front (so the front is always live) and, when stale entries
    /// outnumber live ones, everywhere.
    fn tidy(&mut self) {
        while self.order.front().is_some_and(|e| !self.live(e)) {
            self.order.pop_front();
        }
        if self.order.len() > 2 * self.entries.len() + 16 {
            let entries = &self.entries;
            self.order
                .retain(|(seq, key)| entries.get(key).is_some_and(|e| e.0 == *seq));
        }
    }

    /// Inserts a new key at the end (an existing key keeps its place, as a dict assignment does).
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.1 = value;
            return;
        }
        let seq = self.next;
        self.next += 1;
        self.order.push_back((seq, key));
        self.entries.insert(key, (seq, value));
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let (_, value) = self.entries.remove(key)?;
        self.tidy();
        Some(value)
    }

    pub fn move_to_end(&mut self, key: &K) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.0 = self.next;
            self.order.push_back((self.next, *key));
            self.next += 1;
            self.tidy();
        }
    }

    /// Keys, oldest first.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.order
            .iter()
            .filter(|e| self.live(e))
            .map(|(_, key)| key)
    }

    pub fn first(&self) -> Option<K> {
        self.order.front().map(|(_, key)| *key) // the front is live (`tidy`)
    }

    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let key = self.first()?;
        self.remove(&key).map(|v| (key, v))
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values().map(|(_, v)| v)
    }
}

/// A vector that holds exactly its elements (no spare capacity) in 16 bytes: what a pending trace
/// keeps its few spans and ids in, so that an idle trace costs no slack.
pub struct Few<T>(Box<[T]>);

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few(Box::default())
    }
}

impl<T> std::ops::Deref for Few<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<'a, T> IntoIterator for &'a Few<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> Few<T> {
    fn edit(&mut self, change: impl FnOnce(&mut Vec<T>)) {
        let mut items = std::mem::take(&mut self.0).into_vec();
        change(&mut items);
        items.shrink_to_fit();
        self.0 = items.into_boxed_slice();
    }

    pub fn push(&mut self, item: T) {
        self.edit(|v| {
            v.reserve_exact(1);
            v.push(item)
        });
    }

    pub fn remove(&mut self, index: usize) -> T {
        let mut out = None;
        self.edit(|v| out = Some(v.remove(index)));
        out.expect("removed")
    }

    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        if !self.0.is_empty() {
            self.edit(|v| v.retain(keep));
        }
    }

    pub fn clear(&mut self) {
        self.0 = Box::default();
    }
}

/// A list that nearly always holds one item (a pending trace's anchors, its gateway spans): that one
/// item in place, more than one boxed as a `Few`. A trace pays 8 bytes more for it than for a `Few`
/// and saves the smallest heap block the allocator hands out (32 bytes with glibc) for each list
/// that holds one item.
#[derive(Default)]
pub enum Lone<T> {
    #[default]
    Empty,
    One(T),
    Many(Few<T>),
}

impl<T> std::ops::Deref for Lone<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Lone::Empty => &[],
            Lone::One(item) => std::slice::from_ref(item),
            Lone::Many(items) => items,
        }
    }
}

impl<'a, T> IntoIterator for &'a Lone<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T> Lone<T> {
    fn edit(&mut self, change: impl FnOnce(&mut Vec<T>)) {
        let mut items = match std::mem::take(self) {
            Lone::Empty => Vec::new(),
            Lone::One(item) => vec![item],
            Lone::Many(items) => items.0.into_vec(),
        };
        change(&mut items);
        *self = match items.len() {
            0 => Lone::Empty,
            1 => Lone::One(items.pop().expect("one item")),
            _ => Lone::Many(Few(items.into_boxed_slice())),
        };
    }

    pub fn push(&mut self, item: T) {
        match self {
            Lone::Empty => *self = Lone::One(item),
            _ => self.edit(|v| {
                v.reserve_exact(1);
                v.push(item)
            }),
        }
    }

    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        if !self.is_empty() {
            self.edit(|v| v.retain(keep));
        }
    }

    pub fn clear(&mut self) {
        *self = Lone::Empty;
    }
}

/// A short list of copyable items kept in place up to `N` of them (on the heap beyond): the
/// spans, ids and request ids the join collects while it works on one request are almost always a
/// handful, and an allocation each was a third of its time. No uninitialised memory: the array is
/// filled with copies of the first item pushed.
#[derive(Clone, Default)]
pub enum Small<T: Copy, const N: usize> {
    #[default]
    Empty,
    Inline([T; N], usize),
    Heap(Vec<T>),
}

impl<T: Copy, const N: usize> std::ops::Deref for Small<T, N> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Small::Empty => &[],
            Small::Inline(items, len) => &items[..*len],
            Small::Heap(items) => items,
        }
    }
}

impl<T: Copy, const N: usize> Small<T, N> {
    pub fn new() -> Self {
        Small::Empty
    }

    pub fn push(&mut self, item: T) {
        match self {
            Small::Empty => *self = Small::Inline([item; N], 1),
            Small::Inline(items, len) if *len < N => {
                items[*len] = item;
                *len += 1;
            }
            Small::Inline(items, _) => {
                let mut heap = Vec::with_capacity(2 * N);
                heap.extend_from_slice(items);
                heap.push(item);
                *self = Small::Heap(heap);
            }
            Small::Heap(items) => items.push(item),
        }
    }

    pub fn pop(&mut self) -> Option<T> {
        match self {
            Small::Empty => None,
            Small::Inline(items, len) => {
                let item = (*len > 0).then(|| items[*len - 1]);
                *len = len.saturating_sub(1);
                item
            }
            Small::Heap(items) => items.pop(),
        }
    }

    /// Puts `item` at `index`, the items from there on one place later.
    pub fn insert(&mut self, index: usize, item: T) {
        self.push(item);
        let items: &mut [T] = match self {
            Small::Empty => &mut [],
            Small::Inline(items, len) => &mut items[..*len],
            Small::Heap(items) => items,
        };
        items[index..].rotate_right(1);
    }

    /// Removes the `count` items from `start` on.
    pub fn remove_range(&mut self, start: usize, count: usize) {
        match self {
            Small::Empty => assert_eq!(count, 0, "nothing to remove"),
            Small::Inline(items, len) => {
                items[start..*len].rotate_left(count);
                *len -= count;
            }
            Small::Heap(items) => {
                items.drain(start..start + count);
            }
        }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut kept = Small::new();
        for item in self.iter().filter(|i| keep(i)) {
            kept.push(*item);
        }
        *self = kept;
    }
}

impl<T: Copy, const N: usize> Extend<T> for Small<T, N> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        for item in items {
            self.push(item);
        }
    }
}

impl<T: Copy, const N: usize> FromIterator<T> for Small<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut out = Small::new();
        out.extend(items);
        out
    }
}

impl<'a, T: Copy, const N: usize> IntoIterator for &'a Small<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// `Small` by value: its items, copied out in order.
pub struct SmallIter<T: Copy, const N: usize> {
    items: Small<T, N>,
    at: usize,
}

impl<T: Copy, const N: usize> Iterator for SmallIter<T, N> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let item = self.items.get(self.at).copied();
        self.at += 1;
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.items.len().saturating_sub(self.at);
        (left, Some(left))
    }
}

impl<T: Copy, const N: usize> ExactSizeIterator for SmallIter<T, N> {}

impl<T: Copy, const N: usize> IntoIterator for Small<T, N> {
    type Item = T;
    type IntoIter = SmallIter<T, N>;

    fn into_iter(self) -> Self::IntoIter {
        SmallIter { items: self, at: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_survives_removal_and_moves() {
        let mut m: OrderedMap<u8, &str> = OrderedMap::default();
        m.insert(1, "a");
        m.insert(2, "b");
        m.insert(3, "c");
        m.insert(1, "z"); // keeps its place
        m.remove(&2);
        m.move_to_end(&1);
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), vec![3, 1]);
        assert_eq!(m.pop_first(), Some((3, "c")));
        assert_eq!(m.get(&1), Some(&"z"));
    }

    #[test]
    fn a_lone_list_keeps_one_item_in_place_and_more_boxed() {
        let mut list: Lone<u8> = Lone::default();
        list.push(1);
        assert!(matches!(list, Lone::One(1)));
        list.push(2);
        list.push(3);
        assert_eq!(&*list, [1, 2, 3]);
        list.retain(|&i| i != 2);
        assert!(matches!(&list, Lone::Many(items) if **items == [1, 3]));
        list.retain(|&i| i == 3);
        assert!(matches!(list, Lone::One(3)));
        assert_eq!((&list).into_iter().copied().collect::<Vec<_>>(), [3]);
        list.retain(|_| false);
        assert!(matches!(list, Lone::Empty));
        list.push(4);
        list.clear();
        assert!(list.is_empty());
    }

    #[test]
    fn stale_entries_do_not_pile_up() {
        let mut m: OrderedMap<u32, ()> = OrderedMap::default();
        m.insert(0, ()); // stays at the front while thousands come and go behind it
        for i in 1..10_000 {
            m.insert(i, ());
            m.remove(&i);
            m.move_to_end(&0);
            m.insert(i + 100_000, ());
            m.move_to_end(&0);
        }
        assert!(m.order.len() <= 2 * m.len() + 17, "{}", m.order.len());
        assert_eq!(m.first(), Some(100_001));
        assert_eq!(m.keys().count(), m.len());
    }

    #[test]
    fn small_lists_spill_to_the_heap_in_order() {
        let mut s: Small<u8, 2> = Small::new();
        assert!(s.is_empty());
        s.extend([1, 2, 3, 4]);
        assert!(matches!(s, Small::Heap(_)));
        s.retain(|i| i % 2 == 0);
        assert!(matches!(s, Small::Inline(_, 2)));
        assert_eq!(&*s, &[2, 4]);
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![2, 4]);
    }

    #[test]
    fn small_lists_insert_and_remove_a_range_in_place_or_on_the_heap() {
        let mut s: Small<u8, 4> = Small::new();
        s.insert(0, 3);
        s.insert(0, 1);
        s.insert(1, 2);
        s.insert(3, 4);
        assert!(matches!(s, Small::Inline(_, 4)));
        assert_eq!(&*s, &[1, 2, 3, 4]);
        s.remove_range(1, 2);
        assert_eq!(&*s, &[1, 4]);
        s.extend([5, 6, 7]);
        s.insert(2, 9);
        assert!(matches!(s, Small::Heap(_)));
        assert_eq!(&*s, &[1, 4, 9, 5, 6, 7]);
        s.remove_range(0, 3);
        assert_eq!(&*s, &[5, 6, 7]);
    }
}
