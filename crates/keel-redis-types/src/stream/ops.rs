//! The operations of XADD, XTRIM, XDEL and XSETID on one stream, with Redis 7.0's rules.

use bytes::Bytes;

use super::{Entry, NewId, Stream, StreamId, NODE_ENTRIES};

/// Why XADD added nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddError {
    /// The ID is not above the last ID (or `ms-*` with the last ID's ms and sequence at its
    /// greatest).
    NotAboveTop,
    /// The last ID is the greatest there is.
    Exhausted,
}

/// XTRIM's and XADD's trimming: MAXLEN or MINID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimStrategy {
    MaxLen(u64),
    MinId(StreamId),
}

/// A trimming, as XADD and XTRIM parse it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trim {
    pub strategy: TrimStrategy,
    /// `~`: whole nodes only (see the module docs).
    pub approx: bool,
    /// At most this many entries removed (0: no limit). Only with `~`.
    pub limit: u64,
}

/// Why XSETID changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetIdError {
    /// The ID is below the greatest entry's.
    BelowTop,
    /// ENTRIESADDED is below the number of entries.
    AddedBelowLength,
}

impl Stream {
    /// XADD: the entry with `fields` under the ID `id` names, `*` taking `now_ms` (the log's
    /// time) unless the last ID's ms is later; the ID given.
    pub fn add(
        &mut self,
        id: NewId,
        fields: Vec<Bytes>,
        now_ms: u64,
    ) -> Result<StreamId, AddError> {
        if self.last_id == StreamId::MAX {
            return Err(AddError::Exhausted);
        }
        let last = self.last_id;
        let id = match id {
            NewId::Auto if now_ms > last.ms => StreamId::new(now_ms, 0),
            NewId::Auto => last.next().ok_or(AddError::Exhausted)?,
            NewId::Ms(ms) if ms == last.ms => {
                StreamId::new(ms, last.seq.checked_add(1).ok_or(AddError::NotAboveTop)?)
            }
            NewId::Ms(ms) => StreamId::new(ms, 0),
            NewId::Exact(id) => id,
        };
        if id <= last {
            return Err(AddError::NotAboveTop);
        }
        let ordinal = self.entries_added;
        self.last_id = id;
        self.entries_added = self.entries_added.saturating_add(1);
        self.insert_entry(id, Entry { fields, ordinal });
        Ok(id)
    }

    /// XTRIM, and XADD's trimming: how many entries were removed.
    pub fn trim(&mut self, trim: Trim) -> u64 {
        let mut deleted = 0u64;
        while let Some(first) = self.entries.keys().next().copied() {
            let node = self.node_of(first);
            let node_ids: Vec<StreamId> = if trim.approx {
                self.entries
                    .range(first..)
                    .take_while(|(_, e)| e.ordinal / NODE_ENTRIES == node)
                    .map(|(id, _)| *id)
                    .collect()
            } else {
                vec![first]
            };
            let remove = match trim.strategy {
                TrimStrategy::MaxLen(max) => {
                    (self.entries.len() as u64).saturating_sub(node_ids.len() as u64) >= max
                        && self.entries.len() as u64 > max
                }
                TrimStrategy::MinId(min) => node_ids.last().is_some_and(|last| *last < min),
            };
            if !remove || (trim.limit != 0 && deleted + node_ids.len() as u64 > trim.limit) {
                break;
            }
            for id in node_ids {
                self.remove_entry(id);
                deleted += 1;
            }
        }
        deleted
    }

    fn node_of(&self, id: StreamId) -> u64 {
        self.entries
            .get(&id)
            .map_or(0, |e| e.ordinal / NODE_ENTRIES)
    }

    /// XDEL: removes the entries named; how many were there. The greatest ID removed is
    /// remembered (a group's lag after it is then unknown, as in Redis).
    pub fn delete(&mut self, ids: &[StreamId]) -> usize {
        let mut deleted = 0;
        for &id in ids {
            if self.remove_entry(id) {
                self.max_deleted_id = self.max_deleted_id.max(id);
                deleted += 1;
            }
        }
        deleted
    }

    /// XSETID: the last ID, and optionally the entries added and the greatest deleted ID
    /// (`0-0`: unchanged).
    pub fn set_id(
        &mut self,
        id: StreamId,
        entries_added: Option<u64>,
        max_deleted: StreamId,
    ) -> Result<(), SetIdError> {
        if !self.entries.is_empty() {
            if id < self.top_id() {
                return Err(SetIdError::BelowTop);
            }
            if entries_added.is_some_and(|added| added < self.entries.len() as u64) {
                return Err(SetIdError::AddedBelowLength);
            }
        }
        self.last_id = id;
        if let Some(added) = entries_added {
            self.entries_added = added;
        }
        if !max_deleted.is_zero() {
            self.max_deleted_id = max_deleted;
        }
        Ok(())
    }

    /// Whether an entry deleted so far may lie within `start..` (Redis's
    /// `streamRangeHasTombstones` with an open end).
    pub(super) fn has_tombstones_from(&self, start: StreamId) -> bool {
        !self.entries.is_empty()
            && !self.max_deleted_id.is_zero()
            && self.first_id() <= self.max_deleted_id
            && start <= self.max_deleted_id
    }

    /// How many entries were added up to and including `id`, when that can be known (Redis's
    /// `streamEstimateDistanceFromFirstEverEntry`).
    pub fn entries_read_at(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.entries.is_empty() && id <= self.last_id {
            return Some(self.entries_added);
        }
        match id.cmp(&self.last_id) {
            std::cmp::Ordering::Equal => return Some(self.entries_added),
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {}
        }
        let first = self.first_id();
        if self.max_deleted_id.is_zero() || self.max_deleted_id < first {
            let before_first = self.entries_added - self.entries.len() as u64;
            match id.cmp(&first) {
                std::cmp::Ordering::Less => return Some(before_first),
                std::cmp::Ordering::Equal => return Some(before_first + 1),
                std::cmp::Ordering::Greater => {}
            }
        }
        None
    }

    /// A group's lag: the entries not yet delivered to it, None when unknown.
    pub fn lag(&self, group: &super::Group) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if let Some(read) = group.entries_read {
            if !self.has_tombstones_from(group.last_id) {
                return Some(self.entries_added.saturating_sub(read));
            }
        }
        self.entries_read_at(group.last_id)
            .map(|read| self.entries_added.saturating_sub(read))
    }
}
