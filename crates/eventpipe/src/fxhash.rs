//! The multiply-rotate hash of rustc's FxHasher: maps keyed by thread ids, metadata ids and
//! stacks are hit once per event, where SipHash's DoS resistance costs more than it buys (the
//! input is a trace file, and a colliding one only slows its own decoding).

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
/// A second odd constant (wyhash's), for the other word of a pair.
const FOLD_SEED: u64 = 0xe7_03_7e_d1_a0_b4_28_db;

/// The high and low halves of the 128-bit product, xored.
#[inline(always)]
fn fold_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    /// Long inputs (stacks, exception texts) 16 bytes at a time, each pair of words folded by a
    /// multiply of its own: the multiplies do not wait for each other, where one chain of
    /// multiply-rotates, a word at a time, made hashing an exception's text 6 % of a full
    /// decode. Inputs of up to 16 bytes are hashed as before.
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap());
        let rest = if bytes.len() > 16 {
            let pairs = bytes.chunks_exact(16);
            let rest = pairs.remainder();
            let mut folded = 0u64;
            for c in pairs {
                folded = folded.rotate_left(23) ^ fold_multiply(word(&c[..8]) ^ SEED, word(&c[8..]) ^ FOLD_SEED);
            }
            self.add(folded);
            rest
        } else {
            bytes
        };
        let mut chunks = rest.chunks_exact(8);
        for c in &mut chunks {
            self.add(word(c));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i.into());
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i.into());
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;
pub(crate) type FxHashMap<K, V> = std::collections::HashMap<K, V, FxBuild>;

/// Values by metadata id. The runtime numbers its metadata 1, 2, 3 …, and both the reader (the
/// definition of each id) and the decoder (what it does with each id) look an id up at most
/// events: a small id indexes a list (a hash probe showed as ~40 % of header parsing in a
/// profile); an id past [`IdMap::DENSE`] (possible in any stream, seen in none) goes to a map.
pub(crate) struct IdMap<T> {
    dense: Vec<Option<T>>,
    sparse: FxHashMap<u32, T>,
}

impl<T> Default for IdMap<T> {
    fn default() -> Self {
        IdMap { dense: Vec::new(), sparse: FxHashMap::default() }
    }
}

impl<T> IdMap<T> {
    const DENSE: u32 = 1 << 16;

    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        if id >= Self::DENSE { self.sparse.get(&id) } else { self.dense.get(id as usize)?.as_ref() }
    }

    #[inline]
    pub(crate) fn get_or_insert_with(&mut self, id: u32, new: impl FnOnce() -> T) -> &mut T {
        if id >= Self::DENSE {
            return self.sparse.entry(id).or_insert_with(new);
        }
        let i = id as usize;
        if i >= self.dense.len() {
            self.dense.resize_with(i + 1, || None);
        }
        self.dense[i].get_or_insert_with(new)
    }

    pub(crate) fn insert(&mut self, id: u32, value: T) {
        if id >= Self::DENSE {
            self.sparse.insert(id, value);
            return;
        }
        let i = id as usize;
        if i >= self.dense.len() {
            self.dense.resize_with(i + 1, || None);
        }
        self.dense[i] = Some(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash_of(bytes: &[u8]) -> u64 {
        let mut h = FxHasher::default();
        bytes.hash(&mut h);
        h.finish()
    }

    proptest::proptest! {
        /// Inputs of any length (long ones hashed a pair of words at a time, 16 bytes and less as
        /// before) tell apart inputs that differ in one byte, or only in the order of their
        /// 16-byte pieces.
        #[test]
        fn inputs_that_differ_hash_apart(bytes in proptest::collection::vec(proptest::num::u8::ANY, 1..200), at in 0usize..200, bit in 0u8..8) {
            let mut flipped = bytes.clone();
            let at = at % bytes.len();
            flipped[at] ^= 1 << bit;
            proptest::prop_assert_ne!(hash_of(&bytes), hash_of(&flipped));
            let mut swapped = bytes.clone();
            if bytes.len() >= 32 {
                swapped[..32].rotate_left(16);
            }
            if swapped != bytes {
                proptest::prop_assert_ne!(hash_of(&bytes), hash_of(&swapped));
            }
        }
    }
}
