//! A set of byte strings, with its content hash: the XOR of its members' hashes
//! (`element_hash(3, member, "")`), so membership alone counts, not the order members came in;
//! its body in a snapshot (`count n >= 1 (u32), n x bytes member, strictly ascending`); and the
//! set commands' operations. Members leave in ascending byte order (Redis's order is its hash
//! table's, which no client may rely on), so every replica answers the same.

use std::collections::HashSet;

use bytes::Bytes;

use crate::wire::{put_bytes, Reader};
use crate::BYTES_FIELD_MIN;
use crate::{ascending, element_hash, read_element, BodyError, Family};

/// SINTER, SUNION, SDIFF (and their STORE forms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetAlgebra {
    Inter,
    Union,
    Diff,
}

/// A set value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    members: HashSet<Bytes>,
    hash: u64,
    member_bytes: u64,
}

impl Set {
    pub fn contains(&self, member: &[u8]) -> bool {
        self.members.contains(member)
    }

    pub fn len_u64(&self) -> u64 {
        self.members.len() as u64
    }

    /// Every member in ascending byte order: replies and snapshots, so that every replica
    /// answers and writes the same.
    pub fn sorted(&self) -> Vec<&Bytes> {
        let mut members: Vec<&Bytes> = self.members.iter().collect();
        members.sort_unstable();
        members
    }

    /// True if `member` was not there.
    pub fn insert(&mut self, member: Bytes) -> bool {
        if self.members.contains(&member) {
            return false;
        }
        self.hash ^= element_hash(3, &member, b"");
        self.member_bytes += member.len() as u64;
        self.members.insert(member);
        true
    }

    /// True if `member` was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        if !self.members.remove(member) {
            return false;
        }
        self.hash ^= element_hash(3, member, b"");
        self.member_bytes -= member.len() as u64;
        true
    }

    /// SPOP: removes and returns the `count` members of least hash under `salt` (the entry's
    /// index): arbitrary, but the same on every replica.
    pub fn pop_least_hashed(&mut self, count: u64, salt: &[u8]) -> Vec<Bytes> {
        let n = count.min(self.len_u64()) as usize;
        let mut ranked: Vec<(u64, Bytes)> = self
            .sorted()
            .into_iter()
            .map(|m| (element_hash(4, salt, m), m.clone()))
            .collect();
        ranked.sort_unstable();
        let chosen: Vec<Bytes> = ranked.into_iter().take(n).map(|(_, m)| m).collect();
        chosen.iter().for_each(|m| {
            self.remove(m);
        });
        chosen
    }

    /// SINTER, SUNION or SDIFF of `sets` (at least one; a missing key is the empty set).
    pub fn algebra(algebra: SetAlgebra, sets: &[&Set]) -> Set {
        let mut result = Set::default();
        match algebra {
            SetAlgebra::Union => sets.iter().flat_map(|s| s.sorted()).for_each(|m| {
                result.insert(m.clone());
            }),
            SetAlgebra::Inter => {
                let smallest = sets
                    .iter()
                    .min_by_key(|s| s.len_u64())
                    .expect("at least one set");
                for m in smallest.sorted() {
                    if sets.iter().all(|s| s.contains(m)) {
                        result.insert(m.clone());
                    }
                }
            }
            SetAlgebra::Diff => {
                for m in sets[0].sorted() {
                    if !sets[1..].iter().any(|s| s.contains(m)) {
                        result.insert(m.clone());
                    }
                }
            }
        }
        result
    }
}

impl Family for Set {
    const ELEMENT_BYTES_MIN: usize = BYTES_FIELD_MIN;

    family_counts!(members, member_bytes);

    fn encode_body(&self, out: &mut Vec<u8>) {
        self.sorted().into_iter().for_each(|m| put_bytes(out, m));
    }

    fn decode_body(r: &mut Reader, count: usize) -> Result<Set, BodyError> {
        let (mut set, mut previous) = (Set::default(), None);
        for _ in 0..count {
            let member = read_element(r)?;
            ascending(&mut previous, &member)?;
            set.insert(member);
        }
        Ok(set)
    }
}
