//! The data structures under the search: the time-ordered entry list, bit sets, and the memo.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::history::Operation;
use super::model::Model;

/// The "no entry" link.
pub(super) const NIL: usize = usize::MAX;

/// The call and return entries of one key's returned operations in time order, as a doubly
/// linked list over indices: `i < n` is the call of operation `i`, `n + i` its return, and
/// `2n` the list head. Operations that never returned have no entries (see the `blocks`
/// module).
pub(super) struct Entries {
    pub(super) next: Vec<usize>,
    prev: Vec<usize>,
    pub(super) n: usize,
}

impl Entries {
    pub(super) fn new<M: Model>(ops: &[&Operation<M>]) -> Self {
        let n = ops.len();
        // (time, returns-sort-after-calls, entry): at equal times calls come first, so equal
        // timestamps count as concurrent.
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
        for (i, op) in ops.iter().enumerate() {
            if let Some(t) = op.return_time() {
                events.push((op.invoke_time, false, i));
                events.push((t.max(op.invoke_time), true, n + i));
            }
        }
        events.sort_unstable();
        let head = 2 * n;
        let mut next = vec![NIL; 2 * n + 1];
        let mut prev = vec![NIL; 2 * n + 1];
        let mut last = head;
        for &(_, _, e) in &events {
            next[last] = e;
            prev[e] = last;
            last = e;
        }
        Entries { next, prev, n }
    }

    pub(super) fn first(&self) -> usize {
        self.next[2 * self.n]
    }

    /// The first return entry, i.e. the end of the window of operations that may go next.
    pub(super) fn first_return(&self) -> usize {
        let mut e = self.first();
        while e < self.n {
            e = self.next[e];
        }
        e
    }

    pub(super) fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    /// Undoes `unlink(e)`; valid only in reverse order of the unlinks.
    pub(super) fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        if n != NIL {
            self.prev[n] = e;
        }
    }
}

/// The set of linearized operations, one bit per operation.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Bits(Box<[u64]>);

impl Bits {
    pub(super) fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)].into_boxed_slice())
    }
    pub(super) fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    pub(super) fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    pub(super) fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

impl Bits {
    /// The bits set in both `self` and `mask` (`keep`) or in `self` but not `mask` (`!keep`).
    fn masked(&self, mask: &Bits, keep: bool) -> Bits {
        let words = self.0.iter().zip(mask.0.iter());
        Bits(
            words
                .map(|(w, m)| if keep { w & m } else { w & !m })
                .collect(),
        )
    }

    fn is_subset_of(&self, other: &Bits) -> bool {
        self.0.iter().zip(other.0.iter()).all(|(a, b)| a & !b == 0)
    }
}

/// Lowe's memo of explored configurations, extended with dominance over timed-out operations.
///
/// A configuration is (returned operations linearized, timed-out operations used, state).
/// Using fewer timed-out operations never hurts (the unused ones may take effect later or
/// never), so a configuration is not worth exploring if one with the same returned operations
/// and state, but a subset of its timed-out operations, was explored already. It was then
/// explored to exhaustion: returned operations only accumulate along a search path, so it
/// cannot be an ancestor. Without timed-out operations this is exactly Lowe's memo.
pub(super) struct Memo<S> {
    explored: HashMap<(Bits, S), Vec<Bits>, MixBuild>,
    returned_mask: Bits,
}

impl<S: Clone + Eq + Hash> Memo<S> {
    /// An empty memo; `returned_mask` has the bits of the operations that returned.
    pub(super) fn new(returned_mask: Bits) -> Self {
        Memo {
            explored: HashMap::default(),
            returned_mask,
        }
    }

    /// Records the configuration; `false` if it (or one dominating it) was explored already.
    pub(super) fn insert(&mut self, linearized: &Bits, state: &S) -> bool {
        let returned = linearized.masked(&self.returned_mask, true);
        let used = linearized.masked(&self.returned_mask, false);
        let sets = self.explored.entry((returned, state.clone())).or_default();
        if sets.iter().any(|explored| explored.is_subset_of(&used)) {
            return false;
        }
        sets.retain(|explored| !used.is_subset_of(explored));
        sets.push(used);
        true
    }
}

impl Hash for Bits {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for &w in self.0.iter() {
            state.write_u64(w);
        }
    }
}

/// A fast non-cryptographic hasher for the memo table (the keys are not attacker-controlled).
#[derive(Default)]
pub(super) struct MixHasher(u64);

impl MixHasher {
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for MixHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    fn write_u8(&mut self, x: u8) {
        self.add(u64::from(x));
    }
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
    fn finish(&self) -> u64 {
        // Spread the entropy into the low bits as well, which pick the bucket.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
}

pub(super) type MixBuild = BuildHasherDefault<MixHasher>;
