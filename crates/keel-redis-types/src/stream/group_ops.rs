//! The operations of the consumer group commands on one stream (XREADGROUP, XACK, XPENDING,
//! XCLAIM, XAUTOCLAIM, XGROUP's SETID, CREATECONSUMER and DELCONSUMER), with Redis 7.0's rules.
//! `now_ms` is always the log's time of the entry being applied.
//!
//! What they hand back is owned (the IDs and fields, which share their bytes with the stream):
//! the caller builds the reply after the stream has changed.

use bytes::Bytes;

use super::{Group, Pending, Stream, StreamId};

/// An entry as a reply carries it: None for one deleted since it was delivered.
pub type Delivered = (StreamId, Option<Vec<Bytes>>);

/// What XREADGROUP on one stream did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadGroupOutcome {
    /// No such group.
    NoGroup,
    /// `>` with nothing new: the stream is left out of the reply.
    Nothing,
    /// The entries delivered (new ones, or the consumer's history).
    Served(Vec<Delivered>),
}

/// XPENDING's summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingSummary {
    pub count: usize,
    /// The least and greatest pending IDs (None when nothing is pending).
    pub bounds: Option<(StreamId, StreamId)>,
    /// Each consumer with pending entries, and how many.
    pub consumers: Vec<(Bytes, usize)>,
}

/// XCLAIM's IDLE (the delivery time that many ms before now) or TIME (that time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    IdleMs(i64),
    AtMs(i64),
}

/// XCLAIM's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClaimOptions {
    pub min_idle_ms: u64,
    /// IDLE or TIME; None: now. A time before 0 or after now is now, as in Redis.
    pub delivery: Option<Delivery>,
    pub retry_count: Option<u64>,
    pub force: bool,
    pub just_id: bool,
    /// LASTID: the group's last ID is raised to it.
    pub last_id: Option<StreamId>,
}

/// XAUTOCLAIM's arguments after the consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoClaim {
    /// Where to start in the PEL (inclusive).
    pub start: StreamId,
    /// COUNT: at most this many claimed or found deleted.
    pub count: usize,
    pub min_idle_ms: u64,
    pub just_id: bool,
}

/// What XAUTOCLAIM did: the cursor to go on from, the entries claimed, the IDs found deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoClaimed {
    pub next: StreamId,
    pub claimed: Vec<Delivered>,
    pub deleted: Vec<StreamId>,
}

impl Stream {
    fn fields_of(&self, id: StreamId) -> Option<Vec<Bytes>> {
        self.get(id).map(|e| e.fields.clone())
    }

    /// XREADGROUP on this stream: `after` None is `>` (entries never delivered to the group),
    /// Some(id) the consumer's own pending entries after `id`. `count` 0: no limit.
    pub fn read_group(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        after: Option<StreamId>,
        count: usize,
        no_ack: bool,
        now_ms: u64,
    ) -> ReadGroupOutcome {
        let Some(last) = self.group(group).map(Group::last_id) else {
            return ReadGroupOutcome::NoGroup;
        };
        let limit = if count == 0 { usize::MAX } else { count };
        let Some(after) = after else {
            if self.top_id() <= last {
                return ReadGroupOutcome::Nothing;
            }
            let Some(start) = last.next() else {
                return ReadGroupOutcome::Nothing;
            };
            let served: Vec<Delivered> = self
                .range(start, StreamId::MAX, limit, false)
                .into_iter()
                .map(|(id, e)| (id, Some(e.fields.clone())))
                .collect();
            let counts: Vec<(StreamId, Option<u64>, bool)> = served
                .iter()
                .map(|(id, _)| {
                    (
                        *id,
                        self.entries_read_at(*id),
                        self.has_tombstones_from(*id),
                    )
                })
                .collect();
            self.group_mut(group, |g| {
                g.touch_consumer(consumer, now_ms, true);
                for (id, estimate, tombstones) in counts {
                    g.entries_read = match g.entries_read {
                        Some(read) if !tombstones => Some(read + 1),
                        _ => estimate,
                    };
                    g.last_id = id;
                    if !no_ack {
                        let pending = Pending {
                            consumer: Bytes::copy_from_slice(consumer),
                            delivery_ms: now_ms,
                            delivery_count: 1,
                        };
                        g.set_pending(id, pending);
                    }
                }
            });
            return ReadGroupOutcome::Served(served);
        };
        let Some(start) = after.next() else {
            self.group_mut(group, |g| g.touch_consumer(consumer, now_ms, false));
            return ReadGroupOutcome::Served(Vec::new());
        };
        let ids: Vec<StreamId> = self
            .group(group)
            .and_then(|g| g.consumer(consumer))
            .map(|c| c.pending.range(start..).take(limit).copied().collect())
            .unwrap_or_default();
        let served: Vec<Delivered> = ids.iter().map(|&id| (id, self.fields_of(id))).collect();
        self.group_mut(group, |g| {
            g.touch_consumer(consumer, now_ms, true);
            for (id, fields) in &served {
                if fields.is_some() {
                    let mut pending = g.pel()[id].clone();
                    pending.delivery_ms = now_ms;
                    pending.delivery_count = pending.delivery_count.saturating_add(1);
                    g.set_pending(*id, pending);
                }
            }
        });
        ReadGroupOutcome::Served(served)
    }

    /// XACK: how many of `ids` were pending in `group` (then acknowledged).
    pub fn ack(&mut self, group: &[u8], ids: &[StreamId]) -> usize {
        self.group_mut(group, |g| {
            ids.iter()
                .filter(|id| g.remove_pending(**id).is_some())
                .count()
        })
        .unwrap_or(0)
    }

    /// XPENDING's summary of `group`.
    pub fn pending_summary(group: &Group) -> PendingSummary {
        let pel = group.pel();
        PendingSummary {
            count: pel.len(),
            bounds: pel
                .keys()
                .next()
                .map(|first| (*first, *pel.keys().next_back().expect("not empty"))),
            consumers: group
                .consumers()
                .iter()
                .filter(|(_, c)| !c.pending.is_empty())
                .map(|(name, c)| (name.clone(), c.pending.len()))
                .collect(),
        }
    }

    /// XCLAIM of `ids` for `consumer`: the entries claimed. A pending entry whose stream
    /// entry was deleted is dropped from the PEL.
    pub fn claim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        ids: &[StreamId],
        options: ClaimOptions,
        now_ms: u64,
    ) -> Vec<Delivered> {
        let at = options.delivery.map(|d| match d {
            Delivery::IdleMs(idle) => (now_ms as i64).saturating_sub(idle),
            Delivery::AtMs(at) => at,
        });
        let delivery_ms = match at {
            Some(at) if at >= 0 && (at as u64) <= now_ms => at as u64,
            _ => now_ms,
        };
        let exists: Vec<Option<Vec<Bytes>>> = ids.iter().map(|&id| self.fields_of(id)).collect();
        self.group_mut(group, |g| {
            if let Some(last) = options.last_id.filter(|last| *last > g.last_id) {
                g.last_id = last;
            }
            let mut claimed = Vec::new();
            for (&id, fields) in ids.iter().zip(exists) {
                let Some(fields) = fields else {
                    g.remove_pending(id);
                    continue;
                };
                let current = g.pel().get(&id).cloned();
                if current.is_none() && !options.force {
                    continue;
                }
                let fresh = current.is_none();
                // A forced new pending entry starts at one delivery, as Redis's does.
                let count = current.as_ref().map_or(1, |p| p.delivery_count);
                if !fresh
                    && options.min_idle_ms > 0
                    && now_ms.saturating_sub(current.as_ref().map_or(0, |p| p.delivery_ms))
                        < options.min_idle_ms
                {
                    continue;
                }
                g.touch_consumer(consumer, now_ms, true);
                let delivery_count = match options.retry_count {
                    Some(retry) => retry,
                    None if !options.just_id => count.saturating_add(1),
                    None => count,
                };
                let pending = Pending {
                    consumer: Bytes::copy_from_slice(consumer),
                    delivery_ms,
                    delivery_count,
                };
                g.set_pending(id, pending);
                claimed.push((id, (!options.just_id).then_some(fields)));
            }
            claimed
        })
        .unwrap_or_default()
    }

    /// XAUTOCLAIM from `start`: up to `count` entries idle at least `min_idle_ms`, examining at
    /// most ten times `count` pending entries (as Redis does).
    pub fn auto_claim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        args: AutoClaim,
        now_ms: u64,
    ) -> AutoClaimed {
        let AutoClaim {
            start,
            count,
            min_idle_ms,
            just_id,
        } = args;
        let ids: Vec<StreamId> = self
            .group(group)
            .map(|g| g.pel().range(start..).map(|(id, _)| *id).collect())
            .unwrap_or_default();
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let mut at = 0;
        let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
        while attempts > 0 && left > 0 && at < ids.len() {
            attempts -= 1;
            let id = ids[at];
            at += 1;
            let Some(fields) = self.fields_of(id) else {
                self.group_mut(group, |g| g.remove_pending(id));
                deleted.push(id);
                left -= 1;
                continue;
            };
            let claimed_now = self.group_mut(group, |g| {
                let mut pending = g.pel()[&id].clone();
                if min_idle_ms > 0 && now_ms.saturating_sub(pending.delivery_ms) < min_idle_ms {
                    return false;
                }
                g.touch_consumer(consumer, now_ms, true);
                pending.consumer = Bytes::copy_from_slice(consumer);
                pending.delivery_ms = now_ms;
                if !just_id {
                    pending.delivery_count = pending.delivery_count.saturating_add(1);
                }
                g.set_pending(id, pending);
                true
            });
            if claimed_now == Some(true) {
                claimed.push((id, (!just_id).then_some(fields)));
                left -= 1;
            }
        }
        AutoClaimed {
            next: ids.get(at).copied().unwrap_or_default(),
            claimed,
            deleted,
        }
    }

    /// XGROUP SETID.
    pub fn set_group_id(&mut self, group: &[u8], id: StreamId, entries_read: Option<u64>) -> bool {
        self.group_mut(group, |g| {
            g.last_id = id;
            g.entries_read = entries_read;
        })
        .is_some()
    }

    /// XGROUP CREATECONSUMER: whether it was created (None: no such group).
    pub fn create_consumer(&mut self, group: &[u8], consumer: &[u8], now_ms: u64) -> Option<bool> {
        self.group_mut(group, |g| g.create_consumer(consumer, now_ms))
    }

    /// XGROUP DELCONSUMER: the consumer's pending entries, removed with it (None: no such
    /// group; Some(0) also when there was no such consumer).
    pub fn delete_consumer(&mut self, group: &[u8], consumer: &[u8]) -> Option<usize> {
        self.group_mut(group, |g| g.delete_consumer(consumer).unwrap_or(0))
    }
}
