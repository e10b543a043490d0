//! The multiply-rotate hash of rustc's FxHasher: maps keyed by thread ids, metadata ids and
//! stacks are hit once per event, where SipHash's DoS resistance costs more than it buys (the
//! input is a trace file, and a colliding one only slows its own decoding).

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
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
