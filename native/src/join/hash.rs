//! The hasher of the join's maps: keyed by trace ids, request ids and attribute keys, looked up
//! several times per span, where std's SipHash cost more than the rest of a lookup.
//!
//! A folded multiply (the 128-bit product's halves xor-ed, as foldhash and ahash's fallback do) of
//! each 8-byte word with keys drawn at random once per map: fast on short keys, and, because the
//! keys are secret, trace ids and request ids chosen by a client cannot be chosen to collide.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

const MULTIPLE: u64 = 0x9e37_79b9_7f4a_7c15;

fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// Hashers for one map: two random keys.
#[derive(Clone, Copy, Debug)]
pub struct Seeded {
    k0: u64,
    k1: u64,
}

impl Default for Seeded {
    fn default() -> Self {
        let random = RandomState::new();
        let k0 = random.hash_one(0x5105_c09e_u64) | 1;
        let k1 = random.hash_one(k0);
        Seeded { k0, k1 }
    }
}

impl BuildHasher for Seeded {
    type Hasher = Folded;

    fn build_hasher(&self) -> Folded {
        Folded {
            acc: self.k1,
            key: self.k0,
        }
    }
}

pub struct Folded {
    acc: u64,
    key: u64,
}

impl Folded {
    fn mix(&mut self, word: u64) {
        self.acc = folded_multiply(self.acc ^ word, self.key ^ MULTIPLE);
    }
}

impl Hasher for Folded {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.mix(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            last[7] = rest.len() as u8; // a tail is at most 7 bytes: "ab" and "ab\0" differ
            self.mix(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64); // str's Hash ends with 0xff, slices start with their length
    }

    fn finish(&self) -> u64 {
        folded_multiply(self.acc, self.key.rotate_left(23))
    }
}

/// Strings reduced to 128 bits by two hashes of independent random keys: a set of them answers as
/// a set of the strings would, but for a pair of strings whose both hashes meet (about 2^-128 a
/// pair, and not to be chosen by a client who does not know the keys), with no string to allocate,
/// compare or free.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fingerprints {
    high: Seeded,
    low: Seeded,
}

impl Fingerprints {
    pub fn of(&self, text: &str) -> u128 {
        u128::from(self.high.hash_one(text)) << 64 | u128::from(self.low.hash_one(text))
    }
}

pub type HashMap<K, V> = std::collections::HashMap<K, V, Seeded>;
pub type HashSet<K> = std::collections::HashSet<K, Seeded>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_equal_and_near_keys_spread() {
        let s = Seeded::default();
        assert_eq!(s.hash_one("abc"), s.hash_one(String::from("abc")));
        let mut buckets = [0usize; 16];
        for i in 0u64..16_000 {
            let mut id = [0u8; 16];
            id[8..].copy_from_slice(&i.to_be_bytes());
            buckets[(s.hash_one(id) & 15) as usize] += 1; // hashbrown reads the low bits
        }
        assert!(
            buckets.iter().all(|&n| (800..1200).contains(&n)),
            "{buckets:?}"
        );
        assert_ne!(s.hash_one("ab"), s.hash_one("ab\0"));
    }

    #[test]
    fn a_fingerprint_is_two_independent_hashes() {
        let f = Fingerprints::default();
        assert_eq!(f.of("req-1"), f.of(&String::from("req-1")));
        assert_ne!(f.of("req-1"), f.of("req-2"));
        let (high, low) = ((f.of("req-1") >> 64) as u64, f.of("req-1") as u64);
        assert_ne!(high, low, "the two halves are keyed apart");
        assert_ne!(Fingerprints::default().of("req-1"), f.of("req-1"));
    }
}
