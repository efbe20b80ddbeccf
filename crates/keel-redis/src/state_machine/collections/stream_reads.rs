//! The stream reads (XLEN, XRANGE, XREVRANGE, XREAD, XPENDING, XINFO) with Redis 7.0's reply
//! shapes: XREAD's streams and XINFO's records are maps in RESP3 (`Reply::Keyed`,
//! `Reply::Map`), arrays in RESP2; "nothing to read" is a null array.
//!
//! Idle times are measured against the state's log time, not a clock of the node's: every
//! replica answers the same for the same state.
//!
//! A reply is bounded by [`STREAM_REPLY_BYTES_MAX`] (counted as an `EXEC` reply is): a range
//! beyond it answers an error (COUNT makes it fit), as SORT's result does.

use bytes::Bytes;

use super::stream_commands::{no_group_for_key, no_key_or_group};
use super::{Family, Stream};
use crate::command::{PendingRange, ReadFrom, StreamRead, XInfo, XRead};
use crate::state_machine::apply_reply::reply_bytes;
use crate::state_machine::{KvStateMachine, WriteError};
use keel_redis_types::stream::{Entry, Group, StreamId, NODE_ENTRIES};
use keel_resp::Reply;

/// The most bytes of entries one stream read answers: 128 MiB, as `SORT_RESULT_BYTES_MAX`.
pub const STREAM_REPLY_BYTES_MAX: usize = 128 << 20;

pub(super) fn id_reply(id: StreamId) -> Reply {
    Reply::text(id.to_string())
}

fn entry_reply(id: StreamId, entry: &Entry) -> Reply {
    let fields = entry.fields.iter().cloned().map(Reply::Bulk).collect();
    Reply::Array(vec![id_reply(id), Reply::Array(fields)])
}

/// An entry as XREADGROUP and XCLAIM give it: a deleted one has a null in place of its fields.
pub(super) fn delivered_reply((id, fields): (StreamId, Option<Vec<Bytes>>)) -> Reply {
    let fields = fields.map_or(Reply::NullArray, |f| {
        Reply::Array(f.into_iter().map(Reply::Bulk).collect())
    });
    Reply::Array(vec![id_reply(id), fields])
}

/// Entries as a reply, or the error for a reply past [`STREAM_REPLY_BYTES_MAX`].
fn entries_reply<'a>(
    entries: impl IntoIterator<Item = (StreamId, &'a Entry)>,
) -> Result<Reply, Reply> {
    let mut bytes = 0usize;
    let mut replies = Vec::new();
    for (id, entry) in entries {
        let reply = entry_reply(id, entry);
        bytes += reply_bytes(&reply);
        if bytes > STREAM_REPLY_BYTES_MAX {
            return Err(Reply::error(format!(
                "ERR stream reply exceeds {STREAM_REPLY_BYTES_MAX} bytes: use COUNT"
            )));
        }
        replies.push(reply);
    }
    Ok(Reply::Array(replies))
}

fn map(fields: Vec<(&'static str, Reply)>) -> Reply {
    Reply::Map(
        fields
            .into_iter()
            .map(|(k, v)| (Reply::bulk(k), v))
            .collect(),
    )
}

fn optional_count(n: Option<u64>) -> Reply {
    n.map_or(Reply::Null, |n| Reply::Integer(n as i64))
}

impl KvStateMachine {
    pub(super) fn read_stream(&self, command: &StreamRead) -> Result<Reply, WriteError> {
        Ok(match command {
            StreamRead::Len { key } => {
                Reply::Integer(self.collection::<Stream>(key)?.map_or(0, |s| s.len()) as i64)
            }
            StreamRead::Range {
                key,
                start,
                end,
                count,
                rev,
            } => {
                let Some(stream) = self.collection::<Stream>(key)? else {
                    return Ok(Reply::Array(Vec::new()));
                };
                match count {
                    Some(0) => Reply::NullArray,
                    _ => {
                        let entries = stream.range(*start, *end, count.unwrap_or(0), *rev);
                        entries_reply(entries).unwrap_or_else(|e| e)
                    }
                }
            }
            StreamRead::Read(read) => self.xread(read)?,
            StreamRead::Pending { key, group, range } => {
                let Some(group_of) = self.collection::<Stream>(key)?.and_then(|s| s.group(group))
                else {
                    return Ok(no_key_or_group(key, group));
                };
                match range {
                    None => pending_summary(group_of),
                    Some(range) => self.pending_range(group_of, range),
                }
            }
            StreamRead::Info(info) => self.xinfo(info)?,
            StreamRead::Help(lines) => {
                Reply::Array(lines.iter().map(|line| Reply::simple(*line)).collect())
            }
        })
    }

    /// Where each stream of `read` is read from, `$` resolved against the state: the IDs a
    /// blocked XREAD keeps waiting from (a `$` means "after what was last when it blocked").
    pub fn xread_resolve_last(&self, read: &mut XRead) {
        for (key, from) in &mut read.streams {
            if *from == ReadFrom::Last {
                let last = self
                    .collection::<Stream>(key)
                    .ok()
                    .flatten()
                    .map_or(StreamId::ZERO, Stream::last_id);
                *from = ReadFrom::After(last);
            }
        }
    }

    pub(super) fn xread(&self, read: &XRead) -> Result<Reply, WriteError> {
        let mut served = Vec::new();
        for (key, from) in &read.streams {
            let Some(stream) = self.collection::<Stream>(key)? else {
                continue;
            };
            let after = match from {
                ReadFrom::After(id) => *id,
                ReadFrom::Last | ReadFrom::New => stream.last_id(),
            };
            if stream.len() == 0 || stream.top_id() <= after {
                continue;
            }
            let Some(start) = after.next() else { continue };
            let entries = stream.range(start, StreamId::MAX, read.count, false);
            match entries_reply(entries) {
                Ok(entries) => served.push((Reply::Bulk(key.clone()), entries)),
                Err(reply) => return Ok(reply),
            }
        }
        // Nothing to read answers as an expired BLOCK would: a client that may block waits
        // (`blocking_reads.rs`), the others (in MULTI, in scripts) do not, as in Redis.
        Ok(if served.is_empty() {
            Reply::NullArray
        } else {
            Reply::Keyed(served)
        })
    }

    fn pending_range(&self, group: &Group, range: &PendingRange) -> Reply {
        let now = self.log_time_ms;
        let ids: Vec<StreamId> = match &range.consumer {
            Some(name) => match group.consumer(name) {
                None => return Reply::Array(Vec::new()),
                Some(c) => c
                    .pending
                    .range(range.start..=range.end.max(range.start))
                    .copied()
                    .collect(),
            },
            None => group
                .pel()
                .range(range.start..=range.end.max(range.start))
                .map(|(id, _)| *id)
                .collect(),
        };
        if range.start > range.end {
            return Reply::Array(Vec::new());
        }
        Reply::Array(
            ids.into_iter()
                .filter_map(|id| {
                    let p = &group.pel()[&id];
                    let idle = now.saturating_sub(p.delivery_ms);
                    (idle >= range.min_idle_ms).then(|| {
                        Reply::Array(vec![
                            id_reply(id),
                            Reply::Bulk(p.consumer.clone()),
                            Reply::Integer(idle as i64),
                            Reply::Integer(p.delivery_count as i64),
                        ])
                    })
                })
                .take(range.count)
                .collect(),
        )
    }

    fn xinfo(&self, info: &XInfo) -> Result<Reply, WriteError> {
        let key = match info {
            XInfo::Stream { key, .. } | XInfo::Groups { key } | XInfo::Consumers { key, .. } => key,
        };
        let Some(stream) = self.collection::<Stream>(key)? else {
            return Err(WriteError::NoSuchKey);
        };
        let now = self.log_time_ms;
        Ok(match info {
            XInfo::Stream { full: None, .. } => stream_info(stream),
            XInfo::Stream {
                full: Some(count), ..
            } => stream_info_full(stream, *count).unwrap_or_else(|e| e),
            XInfo::Groups { .. } => Reply::Array(
                stream
                    .groups()
                    .map(|(name, g)| {
                        map(vec![
                            ("name", Reply::Bulk(name.clone())),
                            ("consumers", Reply::Integer(g.consumers().len() as i64)),
                            ("pending", Reply::Integer(g.pel().len() as i64)),
                            ("last-delivered-id", id_reply(g.last_id())),
                            ("entries-read", optional_count(g.entries_read())),
                            ("lag", optional_count(stream.lag(g))),
                        ])
                    })
                    .collect(),
            ),
            XInfo::Consumers { key, group } => {
                let Some(g) = stream.group(group) else {
                    return Ok(no_group_for_key(key, group));
                };
                Reply::Array(
                    g.consumers()
                        .iter()
                        .map(|(name, c)| {
                            map(vec![
                                ("name", Reply::Bulk(name.clone())),
                                ("pending", Reply::Integer(c.pending.len() as i64)),
                                ("idle", Reply::Integer(now.saturating_sub(c.seen_ms) as i64)),
                            ])
                        })
                        .collect(),
                )
            }
        })
    }
}

fn pending_summary(group: &Group) -> Reply {
    let summary = Stream::pending_summary(group);
    let Some((first, last)) = summary.bounds else {
        return Reply::Array(vec![
            Reply::Integer(0),
            Reply::Null,
            Reply::Null,
            Reply::NullArray,
        ]);
    };
    let consumers = summary
        .consumers
        .into_iter()
        .map(|(name, n)| Reply::Array(vec![Reply::Bulk(name), Reply::text(n.to_string())]))
        .collect();
    Reply::Array(vec![
        Reply::Integer(summary.count as i64),
        id_reply(first),
        id_reply(last),
        Reply::Array(consumers),
    ])
}

/// Redis's radix tree keys and nodes for this stream, as keel's emulated layout has them (one
/// key per node of [`NODE_ENTRIES`]; nodes: keys and the root): informational only.
fn radix_counts(stream: &Stream) -> (i64, i64) {
    let mut keys = 0i64;
    let mut last_node = None;
    for (_, entry) in stream.range(StreamId::ZERO, StreamId::MAX, 0, false) {
        let node = entry.ordinal / NODE_ENTRIES;
        if last_node != Some(node) {
            keys += 1;
            last_node = Some(node);
        }
    }
    (keys, keys + 1)
}

fn stream_header(stream: &Stream) -> Vec<(&'static str, Reply)> {
    let (keys, nodes) = radix_counts(stream);
    vec![
        ("length", Reply::Integer(stream.len() as i64)),
        ("radix-tree-keys", Reply::Integer(keys)),
        ("radix-tree-nodes", Reply::Integer(nodes)),
        ("last-generated-id", id_reply(stream.last_id())),
        ("max-deleted-entry-id", id_reply(stream.max_deleted_id())),
        (
            "entries-added",
            Reply::Integer(stream.entries_added() as i64),
        ),
        ("recorded-first-entry-id", id_reply(stream.first_id())),
    ]
}

fn stream_info(stream: &Stream) -> Reply {
    let mut fields = stream_header(stream);
    let edge = |rev: bool| {
        stream
            .range(StreamId::ZERO, StreamId::MAX, 1, rev)
            .first()
            .map_or(Reply::Null, |(id, e)| entry_reply(*id, e))
    };
    fields.push(("groups", Reply::Integer(stream.groups().count() as i64)));
    fields.push(("first-entry", edge(false)));
    fields.push(("last-entry", edge(true)));
    map(fields)
}

/// XINFO STREAM FULL: `count` entries, and as many pending entries per group and consumer
/// (0: all).
fn stream_info_full(stream: &Stream, count: usize) -> Result<Reply, Reply> {
    let limit = if count == 0 { usize::MAX } else { count };
    let mut fields = stream_header(stream);
    fields.push((
        "entries",
        entries_reply(stream.range(StreamId::ZERO, StreamId::MAX, count, false))?,
    ));
    let groups = stream
        .groups()
        .map(|(name, g)| {
            let pending = g.pel().iter().take(limit).map(|(id, p)| {
                Reply::Array(vec![
                    id_reply(*id),
                    Reply::Bulk(p.consumer.clone()),
                    Reply::Integer(p.delivery_ms as i64),
                    Reply::Integer(p.delivery_count as i64),
                ])
            });
            let consumers = g.consumers().iter().map(|(name, c)| {
                let pending = c.pending.iter().take(limit).map(|id| {
                    let p = &g.pel()[id];
                    Reply::Array(vec![
                        id_reply(*id),
                        Reply::Integer(p.delivery_ms as i64),
                        Reply::Integer(p.delivery_count as i64),
                    ])
                });
                map(vec![
                    ("name", Reply::Bulk(name.clone())),
                    ("seen-time", Reply::Integer(c.seen_ms as i64)),
                    ("pel-count", Reply::Integer(c.pending.len() as i64)),
                    ("pending", Reply::Array(pending.collect())),
                ])
            });
            map(vec![
                ("name", Reply::Bulk(name.clone())),
                ("last-delivered-id", id_reply(g.last_id())),
                ("entries-read", optional_count(g.entries_read())),
                ("lag", optional_count(stream.lag(g))),
                ("pel-count", Reply::Integer(g.pel().len() as i64)),
                ("pending", Reply::Array(pending.collect())),
                ("consumers", Reply::Array(consumers.collect())),
            ])
        })
        .collect();
    fields.push(("groups", Reply::Array(groups)));
    Ok(map(fields))
}
