//! Insertion-ordered containers with the operations the assembler's Python dicts are used for:
//! removal of any entry in O(log n), move to the end, and the oldest first.

use std::collections::BTreeMap;
use std::hash::Hash;

use crate::join::hash::HashMap;

/// A map that remembers insertion order (Python's `OrderedDict`), removal in O(log n).
pub struct OrderedMap<K, V> {
    entries: HashMap<K, (u64, V)>,
    order: BTreeMap<u64, K>,
    next: u64,
}

impl<K: Hash + Eq + Copy, V> Default for OrderedMap<K, V> {
    fn default() -> Self {
        OrderedMap {
            entries: HashMap::default(),
            order: BTreeMap::new(),
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

    /// Inserts a new key at the end (an existing key keeps its place, as a dict assignment does).
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.1 = value;
            return;
        }
        let seq = self.next;
        self.next += 1;
        self.order.insert(seq, key);
        self.entries.insert(key, (seq, value));
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let (seq, value) = self.entries.remove(key)?;
        self.order.remove(&seq);
        Some(value)
    }

    pub fn move_to_end(&mut self, key: &K) {
        if let Some(entry) = self.entries.get_mut(key) {
            self.order.remove(&entry.0);
            entry.0 = self.next;
            self.order.insert(self.next, *key);
            self.next += 1;
        }
    }

    /// Keys, oldest first.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.order.values()
    }

    pub fn first(&self) -> Option<K> {
        self.order.values().next().copied()
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

/// A bounded set of ids, oldest first; re-adding keeps the old place (a dict's `d[k] = None`).
/// Small (a few hundred ids), so a scan beats hashing and costs no table.
#[derive(Default)]
pub struct SmallSet<T> {
    items: Vec<T>,
}

impl<T: PartialEq + Copy> SmallSet<T> {
    pub fn contains(&self, item: &T) -> bool {
        self.items.contains(item)
    }

    pub fn add(&mut self, item: T) {
        if !self.items.contains(&item) {
            self.items.push(item);
        }
    }

    /// Forgets the oldest until at most `cap` are left.
    pub fn trim(&mut self, cap: usize) {
        if self.items.len() > cap {
            let excess = self.items.len() - cap;
            self.items.drain(..excess);
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
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
    fn small_set_forgets_the_oldest() {
        let mut s = SmallSet::default();
        for i in [1, 2, 3, 1, 4] {
            s.add(i);
        }
        s.trim(2);
        assert!(!s.contains(&1) && !s.contains(&2) && s.contains(&3) && s.contains(&4));
    }
}
