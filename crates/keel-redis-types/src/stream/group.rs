//! A consumer group: the last ID delivered, how many entries it has read (`entries_read`, None
//! when unknown: Redis's -1), its pending entries list (PEL: each entry delivered and not yet
//! acknowledged, with its consumer, last delivery time and delivery count) and its consumers
//! (each with the time it was last seen, the time it last read or claimed, and its own PEL).
//! Every time is the log's time of the entry that set it.
//!
//! Its share of the stream's content hash ([`Group::total_hash`]) is the XOR of its metadata's
//! hash (role 8: name, last ID, entries read), its pending entries' (role 9: ID, consumer,
//! delivery time, count) and its consumers' (role 10: name, seen and active times); the
//! pending entries' and consumers' XOR is kept as they change (`hash`).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::StreamId;
use crate::{element_hash, ELEMENT_OVERHEAD_BYTES};

/// What each pending entry is counted as taking: its ID, time and count, and its slots in the
/// group's and the consumer's lists.
const PENDING_BYTES: u64 = 32 + 2 * ELEMENT_OVERHEAD_BYTES;

/// A pending entry: delivered to `consumer`, not acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub consumer: Bytes,
    /// When it was last delivered (log time, ms).
    pub delivery_ms: u64,
    pub delivery_count: u64,
}

impl Pending {
    fn hash(&self, id: StreamId) -> u64 {
        let mut second = Vec::with_capacity(16 + self.consumer.len());
        second.extend_from_slice(&self.delivery_ms.to_le_bytes());
        second.extend_from_slice(&self.delivery_count.to_le_bytes());
        second.extend_from_slice(&self.consumer);
        element_hash(9, &id.to_bytes(), &second)
    }
}

/// A consumer of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    /// When it last took part in a command (log time, ms): XINFO CONSUMERS' idle time.
    pub seen_ms: u64,
    /// When it last read or claimed an entry (log time, ms); 0: never.
    pub active_ms: u64,
    /// The IDs of its pending entries.
    pub pending: BTreeSet<StreamId>,
}

impl Consumer {
    fn hash(&self, name: &[u8]) -> u64 {
        let mut times = [0u8; 16];
        times[..8].copy_from_slice(&self.seen_ms.to_le_bytes());
        times[8..].copy_from_slice(&self.active_ms.to_le_bytes());
        element_hash(10, name, &times)
    }
}

/// A consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub(super) last_id: StreamId,
    pub(super) entries_read: Option<u64>,
    pel: BTreeMap<StreamId, Pending>,
    consumers: BTreeMap<Bytes, Consumer>,
    /// The XOR of the pending entries' and the consumers' hashes.
    hash: u64,
    /// The bytes of the consumers' names and of the pending entries' consumer names.
    name_bytes: u64,
}

impl Group {
    pub(super) fn new(last_id: StreamId, entries_read: Option<u64>) -> Group {
        Group {
            last_id,
            entries_read,
            ..Group::default()
        }
    }

    pub fn last_id(&self) -> StreamId {
        self.last_id
    }

    pub fn entries_read(&self) -> Option<u64> {
        self.entries_read
    }

    pub fn pel(&self) -> &BTreeMap<StreamId, Pending> {
        &self.pel
    }

    pub fn consumers(&self) -> &BTreeMap<Bytes, Consumer> {
        &self.consumers
    }

    pub fn consumer(&self, name: &[u8]) -> Option<&Consumer> {
        self.consumers.get(name)
    }

    /// This group's share of the stream's content hash.
    pub(super) fn total_hash(&self, name: &[u8]) -> u64 {
        let mut meta = [0u8; 24];
        meta[..16].copy_from_slice(&self.last_id.to_bytes());
        meta[16..].copy_from_slice(&self.entries_read.map_or(u64::MAX, |n| n).to_le_bytes());
        self.hash ^ element_hash(8, name, &meta)
    }

    pub(super) fn counted_bytes(&self, name: &[u8]) -> u64 {
        name.len() as u64
            + ELEMENT_OVERHEAD_BYTES * (1 + self.consumers.len() as u64)
            + PENDING_BYTES * self.pel.len() as u64
            + self.name_bytes
    }

    /// Adds the consumer `name` seen at `now_ms`; false if it exists (then nothing changes).
    pub(super) fn create_consumer(&mut self, name: &[u8], now_ms: u64) -> bool {
        if self.consumers.contains_key(name) {
            return false;
        }
        let consumer = Consumer {
            seen_ms: now_ms,
            ..Consumer::default()
        };
        self.hash ^= consumer.hash(name);
        self.name_bytes += name.len() as u64;
        self.consumers
            .insert(Bytes::copy_from_slice(name), consumer);
        true
    }

    /// The consumer `name`, created if missing, seen at `now_ms` (and active, if `active`).
    pub(super) fn touch_consumer(&mut self, name: &[u8], now_ms: u64, active: bool) {
        if self.create_consumer(name, now_ms) && !active {
            return;
        }
        let consumer = self.consumers.get_mut(name).expect("created above");
        self.hash ^= consumer.hash(name);
        consumer.seen_ms = now_ms;
        if active {
            consumer.active_ms = now_ms;
        }
        self.hash ^= consumer.hash(name);
    }

    /// Removes the consumer `name` and its pending entries; how many it had, None if there was
    /// no such consumer.
    pub(super) fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let consumer = self.consumers.get(name)?;
        let ids: Vec<StreamId> = consumer.pending.iter().copied().collect();
        for id in &ids {
            self.remove_pending(*id);
        }
        let (name, consumer) = self.consumers.remove_entry(name).expect("looked up above");
        self.hash ^= consumer.hash(&name);
        self.name_bytes -= name.len() as u64;
        Some(ids.len())
    }

    /// Sets the pending entry `id` (the consumer must exist), replacing any it was.
    pub(super) fn set_pending(&mut self, id: StreamId, pending: Pending) {
        self.remove_pending(id);
        self.hash ^= pending.hash(id);
        self.name_bytes += pending.consumer.len() as u64;
        self.consumers
            .get_mut(&pending.consumer)
            .expect("a pending entry's consumer exists")
            .pending
            .insert(id);
        self.pel.insert(id, pending);
    }

    /// Removes the pending entry `id` from the group and its consumer; it, if it was there.
    pub(super) fn remove_pending(&mut self, id: StreamId) -> Option<Pending> {
        let pending = self.pel.remove(&id)?;
        self.hash ^= pending.hash(id);
        self.name_bytes -= pending.consumer.len() as u64;
        if let Some(consumer) = self.consumers.get_mut(&pending.consumer) {
            consumer.pending.remove(&id);
        }
        Some(pending)
    }

    /// A consumer as a snapshot holds it (no pending IDs yet: [`Group::set_pending`] adds them).
    pub(super) fn restore_consumer(&mut self, name: Bytes, seen_ms: u64, active_ms: u64) {
        let consumer = Consumer {
            seen_ms,
            active_ms,
            pending: BTreeSet::new(),
        };
        self.hash ^= consumer.hash(&name);
        self.name_bytes += name.len() as u64;
        self.consumers.insert(name, consumer);
    }
}
