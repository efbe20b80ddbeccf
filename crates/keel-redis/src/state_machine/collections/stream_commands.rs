//! The stream writes (XADD, XTRIM, XDEL, XSETID, XGROUP, XREADGROUP, XACK, XCLAIM, XAUTOCLAIM)
//! with Redis 7.0's replies and errors. The stream's operations are keel-redis-types'; here are
//! the key lookups, the errors that name keys and groups, and the replies.
//!
//! Every time these commands record (IDs of `XADD *`, delivery times, consumers' seen times) is
//! the state machine's log time, the same on every replica. Each answers a value
//! ([`WriteAnswer::Value`]): deduplication remembers only that it applied.

use bytes::Bytes;

use super::stream_reads::{delivered_reply, id_reply, STREAM_REPLY_BYTES_MAX};
use super::{Collection, Stream};
use crate::command::{GroupStart, ReadFrom, StreamWrite, XRead};
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::{KvStateMachine, WriteError};
use keel_redis_types::stream::{
    AddError, AutoClaim, ClaimOptions, NewId, ReadGroupOutcome, SetIdError, StreamId, Trim,
};
use keel_resp::Reply;

/// Claimed entries: with their fields, or their IDs alone (JUSTID).
fn claimed_reply(claimed: Vec<(StreamId, Option<Vec<Bytes>>)>) -> Reply {
    Reply::Array(
        claimed
            .into_iter()
            .map(|(id, fields)| match fields {
                Some(_) => delivered_reply((id, fields)),
                None => id_reply(id),
            })
            .collect(),
    )
}

fn error(error: WriteError) -> Reply {
    Reply::error(error.to_string())
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// NOGROUP as XCLAIM, XAUTOCLAIM and XPENDING word it.
pub(super) fn no_key_or_group(key: &[u8], group: &[u8]) -> Reply {
    Reply::error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        lossy(key),
        lossy(group)
    ))
}

/// NOGROUP as XGROUP and XINFO CONSUMERS word it.
pub(super) fn no_group_for_key(key: &[u8], group: &[u8]) -> Reply {
    Reply::error(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        lossy(group),
        lossy(key)
    ))
}

const KEY_REQUIRED: &str = "ERR The XGROUP subcommand requires the key to exist. Note that for \
                            CREATE you may want to use the MKSTREAM option to create an empty \
                            stream automatically.";

impl KvStateMachine {
    /// Runs `f` on the stream under `key`. With no such key: if `create`, on a new stream that
    /// is stored only if `f` succeeds (a failed XADD leaves no key, as in Redis); else not at
    /// all (Ok(None)).
    fn stream_write<R>(
        &mut self,
        key: &[u8],
        create: bool,
        f: impl FnOnce(&mut Stream) -> Result<R, Reply>,
    ) -> Result<Option<R>, Reply> {
        self.expire_if_due(key);
        if self.collection::<Stream>(key).map_err(error)?.is_none() {
            if !create {
                return Ok(None);
            }
            let mut fresh = Stream::default();
            let result = f(&mut fresh)?;
            self.put_value(key, fresh.into_value(), 0);
            return Ok(Some(result));
        }
        match self.change(key, false, f) {
            Ok(Some(result)) => result.map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(error(e)),
        }
    }

    /// The stream under `key` with the group `group` checked, or the reply to give instead.
    fn stream_with_group(
        &self,
        key: &[u8],
        group: &[u8],
        nogroup: fn(&[u8], &[u8]) -> Reply,
    ) -> Result<&Stream, Reply> {
        match self.collection::<Stream>(key).map_err(error)? {
            Some(stream) if stream.group(group).is_some() => Ok(stream),
            _ => Err(nogroup(key, group)),
        }
    }

    pub(in crate::state_machine) fn execute_stream(
        &mut self,
        command: &StreamWrite,
    ) -> WriteAnswer {
        let reply = match command {
            StreamWrite::Add {
                key,
                no_mkstream,
                trim,
                id,
                fields,
            } => self.xadd(key, *no_mkstream, *trim, *id, fields),
            StreamWrite::Trim { key, trim } => self.counting(key, |s| Ok(s.trim(*trim) as i64)),
            StreamWrite::Del { key, ids } => self.counting(key, |s| Ok(s.delete(ids) as i64)),
            StreamWrite::SetId {
                key,
                id,
                entries_added,
                max_deleted,
            } => self.xsetid(key, *id, *entries_added, *max_deleted),
            StreamWrite::GroupCreate {
                key,
                group,
                start,
                mkstream,
                entries_read,
            } => self.xgroup_create(key, group, *start, *mkstream, *entries_read),
            StreamWrite::GroupSetId {
                key,
                group,
                start,
                entries_read,
            } => self.group_write(key, group, |s| {
                let id = match start {
                    GroupStart::Last => s.last_id(),
                    GroupStart::Id(id) => *id,
                };
                s.set_group_id(group, id, *entries_read);
                Reply::OK
            }),
            StreamWrite::GroupDestroy { key, group } => self.xgroup_destroy(key, group),
            StreamWrite::Consumer {
                key,
                group,
                consumer,
                create,
            } => self.xgroup_consumer(key, group, consumer, *create),
            StreamWrite::ReadGroup(read) => self.xreadgroup(read),
            StreamWrite::Ack { key, group, ids } => {
                self.counting(key, |s| Ok(s.ack(group, ids) as i64))
            }
            StreamWrite::Claim {
                key,
                group,
                consumer,
                ids,
                options,
            } => self.xclaim(key, group, consumer, ids, *options),
            StreamWrite::AutoClaim {
                key,
                group,
                consumer,
                args,
            } => self.xautoclaim(key, group, consumer, *args),
        };
        WriteAnswer::Value(reply)
    }

    fn xadd(
        &mut self,
        key: &[u8],
        no_mkstream: bool,
        trim: Option<Trim>,
        id: NewId,
        fields: &[Bytes],
    ) -> Reply {
        let now = self.log_time_ms;
        let added = self.stream_write(key, !no_mkstream, |s| {
            let id = s.add(id, fields.to_vec(), now).map_err(|e| {
                Reply::error(match e {
                    AddError::NotAboveTop => {
                        "ERR The ID specified in XADD is equal or smaller than the target stream \
                         top item"
                    }
                    AddError::Exhausted => {
                        "ERR The stream has exhausted the last possible ID, unable to add more \
                         items"
                    }
                })
            })?;
            if let Some(trim) = trim {
                s.trim(trim);
            }
            Ok(id)
        });
        match added {
            Ok(Some(id)) => {
                self.note_filled(key);
                id_reply(id)
            }
            Ok(None) => Reply::Null,
            Err(reply) => reply,
        }
    }

    fn xgroup_destroy(&mut self, key: &[u8], group: &[u8]) -> Reply {
        match self.stream_write(key, false, |s| Ok(s.destroy_group(group))) {
            Ok(Some(destroyed)) => {
                // A client blocked in XREADGROUP on it answers NOGROUP, as in Redis.
                self.note_filled(key);
                Reply::Integer(i64::from(destroyed))
            }
            Ok(None) => Reply::error(KEY_REQUIRED),
            Err(reply) => reply,
        }
    }

    fn xgroup_consumer(
        &mut self,
        key: &[u8],
        group: &[u8],
        consumer: &[u8],
        create: bool,
    ) -> Reply {
        let now = self.log_time_ms;
        self.group_write(key, group, |s| {
            Reply::Integer(if create {
                i64::from(s.create_consumer(group, consumer, now) == Some(true))
            } else {
                s.delete_consumer(group, consumer).unwrap_or(0) as i64
            })
        })
    }

    fn xautoclaim(&mut self, key: &[u8], group: &[u8], consumer: &[u8], args: AutoClaim) -> Reply {
        if let Err(reply) = self.stream_with_group(key, group, no_key_or_group) {
            return reply;
        }
        let now = self.log_time_ms;
        let done = self.stream_write(key, false, |s| Ok(s.auto_claim(group, consumer, args, now)));
        match done {
            Ok(Some(done)) => Reply::Array(vec![
                id_reply(done.next),
                claimed_reply(done.claimed),
                Reply::Array(done.deleted.into_iter().map(id_reply).collect()),
            ]),
            Ok(None) => no_key_or_group(key, group),
            Err(reply) => reply,
        }
    }

    /// A write answering an integer, 0 with no such key.
    fn counting(&mut self, key: &[u8], f: impl FnOnce(&mut Stream) -> Result<i64, Reply>) -> Reply {
        match self.stream_write(key, false, f) {
            Ok(n) => Reply::Integer(n.unwrap_or(0)),
            Err(reply) => reply,
        }
    }

    /// An XGROUP subcommand that needs the key and the group.
    fn group_write(
        &mut self,
        key: &[u8],
        group: &[u8],
        f: impl FnOnce(&mut Stream) -> Reply,
    ) -> Reply {
        match self.collection::<Stream>(key) {
            Err(e) => return error(e),
            Ok(None) => return Reply::error(KEY_REQUIRED),
            Ok(Some(stream)) if stream.group(group).is_none() => {
                return no_group_for_key(key, group)
            }
            Ok(Some(_)) => {}
        }
        match self.stream_write(key, false, |s| Ok(f(s))) {
            Ok(Some(reply)) => reply,
            Ok(None) => Reply::error(KEY_REQUIRED),
            Err(reply) => reply,
        }
    }

    fn xsetid(
        &mut self,
        key: &[u8],
        id: StreamId,
        added: Option<u64>,
        max_deleted: StreamId,
    ) -> Reply {
        let set = self.stream_write(key, false, |s| {
            s.set_id(id, added, max_deleted).map_err(|e| {
                Reply::error(match e {
                    SetIdError::BelowTop => "ERR The ID specified in XSETID is smaller than the target stream top item",
                    SetIdError::AddedBelowLength => "ERR The entries_added specified in XSETID is smaller than the target stream length",
                })
            })
        });
        match set {
            Ok(Some(())) => Reply::OK,
            Ok(None) => error(WriteError::NoSuchKey),
            Err(reply) => reply,
        }
    }

    fn xgroup_create(
        &mut self,
        key: &[u8],
        group: &Bytes,
        start: GroupStart,
        mkstream: bool,
        entries_read: Option<u64>,
    ) -> Reply {
        let created = self.stream_write(key, mkstream, |s| {
            let id = match start {
                GroupStart::Last => s.last_id(),
                GroupStart::Id(id) => id,
            };
            if s.create_group(group.clone(), id, entries_read) {
                Ok(())
            } else {
                Err(Reply::error("BUSYGROUP Consumer Group name already exists"))
            }
        });
        match created {
            Ok(Some(())) => Reply::OK,
            Ok(None) => Reply::error(KEY_REQUIRED),
            Err(reply) => reply,
        }
    }

    /// XREADGROUP: every stream and group checked first (an error answers alone, nothing
    /// changed), then each served in turn.
    pub(super) fn xreadgroup(&mut self, read: &XRead) -> Reply {
        let (group, consumer) = read.group.as_ref().expect("XREADGROUP has GROUP");
        for (key, _) in &read.streams {
            self.expire_if_due(key);
            if let Err(reply) = self.stream_with_group(key, group, |key, group| {
                Reply::error(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    lossy(key),
                    lossy(group)
                ))
            }) {
                return reply;
            }
        }
        let now = self.log_time_ms;
        let mut served = Vec::new();
        for (key, from) in &read.streams {
            let after = match from {
                ReadFrom::After(id) => Some(*id),
                ReadFrom::New | ReadFrom::Last => None,
            };
            let count = self.new_entries_that_fit(key, group, after, read.count);
            let outcome = self.stream_write(key, false, |s| {
                Ok(s.read_group(group, consumer, after, count, read.no_ack, now))
            });
            if let Ok(Some(ReadGroupOutcome::Served(entries))) = outcome {
                let entries = entries.into_iter().map(delivered_reply).collect();
                served.push((Reply::Bulk(key.clone()), Reply::Array(entries)));
            }
        }
        if served.is_empty() {
            // A client that may block waits (`blocking_reads.rs`); others get an expired
            // block's answer, as Redis answers inside MULTI and scripts.
            return Reply::NullArray;
        }
        Reply::Keyed(served)
    }

    /// XREADGROUP's COUNT for `>`: at most as many new entries as fit in
    /// [`STREAM_REPLY_BYTES_MAX`] (at least one), so that a read without COUNT of a large
    /// stream delivers a bounded prefix, as if COUNT said so, rather than a reply too large.
    fn new_entries_that_fit(
        &self,
        key: &[u8],
        group: &[u8],
        after: Option<StreamId>,
        count: usize,
    ) -> usize {
        let Some((stream, last)) = self
            .collection::<Stream>(key)
            .ok()
            .flatten()
            .and_then(|s| s.group(group).map(|g| (s, g.last_id())))
        else {
            return count;
        };
        let Some(start) = last.next().filter(|_| after.is_none()) else {
            return count;
        };
        let mut bytes = 0usize;
        let fitting = stream
            .range(start, StreamId::MAX, count, false)
            .into_iter()
            .take_while(|(_, entry)| {
                bytes += entry.fields.iter().map(|f| f.len() + 16).sum::<usize>() + 64;
                bytes <= STREAM_REPLY_BYTES_MAX
            })
            .count();
        fitting.max(1)
    }

    fn xclaim(
        &mut self,
        key: &[u8],
        group: &[u8],
        consumer: &[u8],
        ids: &[StreamId],
        options: ClaimOptions,
    ) -> Reply {
        if let Err(reply) = self.stream_with_group(key, group, no_key_or_group) {
            return reply;
        }
        let now = self.log_time_ms;
        match self.stream_write(key, false, |s| {
            Ok(s.claim(group, consumer, ids, options, now))
        }) {
            Ok(claimed) => claimed_reply(claimed.unwrap_or_default()),
            Err(reply) => reply,
        }
    }
}
