//! A set of byte strings, with its content hash: the XOR of its members' hashes
//! (`element_hash(3, member, "")`), so membership alone counts, not the order members came in.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;

use crate::state_machine::digest::element_hash;
use crate::state_machine::value::{CollectionValue, Value};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Set {
    members: HashSet<Bytes>,
    hash: u64,
    member_bytes: u64,
}

impl Set {
    pub(crate) fn contains(&self, member: &[u8]) -> bool {
        self.members.contains(member)
    }

    pub(crate) fn len_u64(&self) -> u64 {
        self.members.len() as u64
    }

    /// Every member in ascending byte order: replies and snapshots, so that every replica
    /// answers and writes the same.
    pub(crate) fn sorted(&self) -> Vec<&Bytes> {
        let mut members: Vec<&Bytes> = self.members.iter().collect();
        members.sort_unstable();
        members
    }

    /// True if `member` was not there.
    pub(crate) fn insert(&mut self, member: Bytes) -> bool {
        if self.members.contains(&member) {
            return false;
        }
        self.hash ^= element_hash(3, &member, b"");
        self.member_bytes += member.len() as u64;
        self.members.insert(member);
        true
    }

    /// True if `member` was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        if !self.members.remove(member) {
            return false;
        }
        self.hash ^= element_hash(3, member, b"");
        self.member_bytes -= member.len() as u64;
        true
    }
}

collection_impl!(Set, Set, members, member_bytes);
