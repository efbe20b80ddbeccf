//! A stream: entries (field-value pairs) by ID, ascending, with the bookkeeping Redis 7.0 keeps
//! beside them (the last ID given, the greatest ID deleted, how many entries were ever added),
//! and its consumer groups (`group.rs`). Its content hash, its body in a snapshot (`body.rs`) and
//! the operations of the stream commands (`ops.rs`, `group_ops.rs`).
//!
//! IDs come from the caller: XADD's `*` is resolved against the time the caller passes, the
//! log's time of the entry being applied (never a clock of the node's), so every replica assigns
//! the same IDs.
//!
//! A stream is a key even with no entries (as in Redis: XADD with `MAXLEN 0`, XGROUP CREATE
//! MKSTREAM, XDEL of every entry), so [`crate::Family::is_empty`] is always false for it.
//!
//! The content hash is the XOR of: each entry's hash (`element_hash(6, id, ordinal || fields)`),
//! the stream's metadata hash (role 7: last ID, greatest deleted ID, entries added), and each
//! group's (`group.rs`: its metadata, pending entries and consumers). Each part is kept up to
//! date as it changes, so a change costs hash work for what it changed, not for the stream.
//!
//! Redis stores entries in nodes of up to 100 (`stream-node-max-entries`), and `~` trimming
//! removes whole nodes only. keel emulates that layout: an entry's node is its ordinal (the
//! count of entries added before it) divided by [`NODE_ENTRIES`], so `~` trims where Redis
//! would at its default settings (entries larger than Redis's node byte limit aside).

mod body;
mod group;
mod group_ops;
mod id;
mod ops;
#[cfg(test)]
mod tests;

pub use group::{Consumer, Group, Pending};
pub use group_ops::{
    AutoClaim, AutoClaimed, ClaimOptions, Delivery, PendingSummary, ReadGroupOutcome,
};
pub use id::{NewId, RangeBound, StreamId};
pub use ops::{AddError, SetIdError, Trim, TrimStrategy};

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::{element_hash, ELEMENT_OVERHEAD_BYTES};

/// Entries per node of Redis's layout at its default `stream-node-max-entries` (see above).
pub const NODE_ENTRIES: u64 = 100;

/// The `LIMIT` of `~` trimming when none is given: Redis's `100 * stream-node-max-entries`.
pub const APPROX_TRIM_LIMIT_DEFAULT: u64 = 100 * NODE_ENTRIES;

/// What each entry is counted as taking beyond its fields (its ID and ordinal).
const ENTRY_FIXED_BYTES: u64 = 24;

/// One entry: its fields and values, alternating, and its ordinal (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub fields: Vec<Bytes>,
    pub ordinal: u64,
}

impl Entry {
    fn bytes(&self) -> u64 {
        self.fields.iter().map(|f| f.len() as u64).sum::<u64>()
            + ENTRY_FIXED_BYTES
            + ELEMENT_OVERHEAD_BYTES
    }

    fn hash(&self, id: StreamId) -> u64 {
        let mut encoded =
            Vec::with_capacity(8 + self.fields.iter().map(|f| f.len() + 4).sum::<usize>());
        encoded.extend_from_slice(&self.ordinal.to_le_bytes());
        for field in &self.fields {
            crate::wire::put_bytes(&mut encoded, field);
        }
        element_hash(6, &id.to_bytes(), &encoded)
    }
}

/// A stream value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stream {
    entries: BTreeMap<StreamId, Entry>,
    last_id: StreamId,
    max_deleted_id: StreamId,
    entries_added: u64,
    groups: BTreeMap<Bytes, Group>,
    /// The XOR of the entries' hashes.
    entries_hash: u64,
    /// The XOR of the groups' hashes ([`Group::total_hash`]).
    groups_hash: u64,
    entry_bytes: u64,
    group_bytes: u64,
}

impl Stream {
    pub fn last_id(&self) -> StreamId {
        self.last_id
    }

    pub fn max_deleted_id(&self) -> StreamId {
        self.max_deleted_id
    }

    pub fn entries_added(&self) -> u64 {
        self.entries_added
    }

    /// The first entry's ID, `0-0` with none (Redis's "recorded-first-entry-id").
    pub fn first_id(&self) -> StreamId {
        self.entries.keys().next().copied().unwrap_or_default()
    }

    /// The greatest ID an entry holds, `0-0` with none.
    pub fn top_id(&self) -> StreamId {
        self.entries.keys().next_back().copied().unwrap_or_default()
    }

    pub fn get(&self, id: StreamId) -> Option<&Entry> {
        self.entries.get(&id)
    }

    pub fn contains(&self, id: StreamId) -> bool {
        self.entries.contains_key(&id)
    }

    /// Up to `count` entries (0: all) from `start` to `end` inclusive, ascending or (`rev`)
    /// descending.
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
        count: usize,
        rev: bool,
    ) -> Vec<(StreamId, &Entry)> {
        if start > end {
            return Vec::new();
        }
        let limit = if count == 0 { usize::MAX } else { count };
        let range = self.entries.range(start..=end).map(|(id, e)| (*id, e));
        if rev {
            range.rev().take(limit).collect()
        } else {
            range.take(limit).collect()
        }
    }

    pub fn groups(&self) -> impl Iterator<Item = (&Bytes, &Group)> {
        self.groups.iter()
    }

    pub fn group(&self, name: &[u8]) -> Option<&Group> {
        self.groups.get(name)
    }

    /// The stream's metadata's share of the content hash.
    fn meta_hash(&self) -> u64 {
        let mut meta = [0u8; 40];
        meta[..16].copy_from_slice(&self.last_id.to_bytes());
        meta[16..32].copy_from_slice(&self.max_deleted_id.to_bytes());
        meta[32..].copy_from_slice(&self.entries_added.to_le_bytes());
        element_hash(7, &meta, b"")
    }

    fn insert_entry(&mut self, id: StreamId, entry: Entry) {
        self.entries_hash ^= entry.hash(id);
        self.entry_bytes += entry.bytes();
        self.entries.insert(id, entry);
    }

    fn remove_entry(&mut self, id: StreamId) -> bool {
        let Some(entry) = self.entries.remove(&id) else {
            return false;
        };
        self.entries_hash ^= entry.hash(id);
        self.entry_bytes -= entry.bytes();
        true
    }

    /// Runs `f` on the group `name` (None if there is none), keeping the content hash and the
    /// counted bytes up to date.
    pub fn group_mut<R>(&mut self, name: &[u8], f: impl FnOnce(&mut Group) -> R) -> Option<R> {
        let group = self.groups.get_mut(name)?;
        self.groups_hash ^= group.total_hash(name);
        self.group_bytes -= group.counted_bytes(name);
        let result = f(group);
        self.groups_hash ^= group.total_hash(name);
        self.group_bytes += group.counted_bytes(name);
        Some(result)
    }

    /// Adds a group; false (and nothing changed) if one of that name exists.
    pub fn create_group(
        &mut self,
        name: Bytes,
        last_id: StreamId,
        entries_read: Option<u64>,
    ) -> bool {
        if self.groups.contains_key(&name) {
            return false;
        }
        let group = Group::new(last_id, entries_read);
        self.groups_hash ^= group.total_hash(&name);
        self.group_bytes += group.counted_bytes(&name);
        self.groups.insert(name, group);
        true
    }

    /// Removes a group; whether there was one.
    pub fn destroy_group(&mut self, name: &[u8]) -> bool {
        let Some((name, group)) = self.groups.remove_entry(name) else {
            return false;
        };
        self.groups_hash ^= group.total_hash(&name);
        self.group_bytes -= group.counted_bytes(&name);
        true
    }
}

impl crate::Family for Stream {
    /// An entry's smallest encoding: its ID, ordinal and field count.
    const ELEMENT_BYTES_MIN: usize = 28;

    /// XLEN: the entries it holds.
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// Never: a stream is a key whatever it holds.
    fn is_empty(&self) -> bool {
        false
    }

    fn content_hash(&self) -> u64 {
        self.entries_hash ^ self.groups_hash ^ self.meta_hash()
    }

    fn counted_bytes(&self) -> u64 {
        self.entry_bytes + self.group_bytes + ELEMENT_OVERHEAD_BYTES
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        body::encode(self, out);
    }

    fn decode_body(r: &mut crate::wire::Reader, count: usize) -> Result<Self, crate::BodyError> {
        body::decode(r, count)
    }
}
