//! A blocked XREAD's or XREADGROUP's attempt (`RAFT.BLOCKED deadline-ms woken XREAD ...`,
//! `command/blocking.rs`), with Redis 7.0's answers.
//!
//! The first attempt (`woken` 0) runs as the command would without BLOCK: entries, an error
//! (WRONGTYPE, NOGROUP), or nothing. Nothing answers null (the client waits), except for an XREAD
//! naming `$`: its first attempt answers the ID each stream's `$` stands for now (its last ID, 0-0
//! for no stream), which the client names in its later attempts, so that `$` means the same
//! place on every replica and for every attempt.
//!
//! A woken attempt serves the first stream, in the command's order, with entries after the
//! client's ID (XREAD) or new to the group (XREADGROUP `>`), and that stream alone, as Redis
//! serves a blocked client from the key that woke it. An XREAD passes over a stream that is gone
//! or holds another kind (it waits for one to appear, as in Redis). An XREADGROUP answers Redis's
//! errors instead: a key that no longer holds a stream, `-UNBLOCKED the stream key no longer
//! exists`; a group destroyed, `-NOGROUP the consumer group this client was blocked on no longer
//! exists`. Serving XREADGROUP delivers the entries to the consumer (the pending entries, unless
//! NOACK) in this entry: once, on every replica alike.

use super::{Family, Stream};
use crate::command::blocking::BlockingPop;
use crate::command::{ReadFrom, XRead};
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::{KvStateMachine, WriteReply};
use keel_resp::Reply;

/// What a blocked XREADGROUP answers when its key stopped holding a stream (Redis 7.0).
pub const STREAM_GONE: &str = "UNBLOCKED the stream key no longer exists";

/// What a blocked XREADGROUP answers when its group was destroyed (Redis 7.0).
pub const GROUP_GONE: &str =
    "NOGROUP the consumer group this client was blocked on no longer exists";

impl KvStateMachine {
    pub(super) fn blocking_read(&mut self, pop: &BlockingPop, read: &XRead) -> WriteAnswer {
        let reply = match (&read.group, pop.woken) {
            (None, false) => match self.xread(read) {
                Ok(reply) => reply,
                Err(error) => return error.into(),
            },
            (Some(_), false) => self.xreadgroup(read),
            (None, true) => self.woken_xread(read),
            (Some((group, _)), true) => match self.blocked_group_gone(read, group) {
                Some(error) => Reply::error(error),
                None => self.woken_xreadgroup(read),
            },
        };
        match reply {
            Reply::NullArray if pop.reads_after_last().is_some() && !pop.woken => {
                let mut resolved = read.clone();
                self.xread_resolve_last(&mut resolved);
                let ids = resolved.streams.iter().map(|(_, from)| match from {
                    ReadFrom::After(id) => Reply::Bulk(id.to_string().into()),
                    ReadFrom::Last | ReadFrom::New => Reply::Null,
                });
                WriteAnswer::Value(Reply::Array(ids.collect()))
            }
            // "Not yet" is remembered as it is (a retry of it answers null again).
            Reply::NullArray => WriteReply::Nil.into(),
            reply => WriteAnswer::Value(reply),
        }
    }

    /// The first stream with entries after the client's ID, alone; a key that is gone or holds
    /// another kind is passed over.
    fn woken_xread(&self, read: &XRead) -> Reply {
        for (key, from) in &read.streams {
            let Ok(Some(stream)) = self.collection::<Stream>(key) else {
                continue;
            };
            let after = match from {
                ReadFrom::After(id) => *id,
                ReadFrom::Last | ReadFrom::New => stream.last_id(),
            };
            if stream.len() > 0 && stream.top_id() > after {
                let alone = XRead {
                    streams: vec![(key.clone(), *from)],
                    ..read.clone()
                };
                return self
                    .xread(&alone)
                    .unwrap_or_else(|error| Reply::error(error.to_string()));
            }
        }
        Reply::NullArray
    }

    /// Redis's error for a blocked XREADGROUP whose key no longer holds a stream or whose group
    /// is gone, if one of its keys is such.
    fn blocked_group_gone(&mut self, read: &XRead, group: &[u8]) -> Option<&'static str> {
        for (key, _) in &read.streams {
            self.expire_if_due(key);
            match self.collection::<Stream>(key) {
                Ok(Some(stream)) if stream.group(group).is_some() => {}
                Ok(Some(_)) => return Some(GROUP_GONE),
                Ok(None) | Err(_) => return Some(STREAM_GONE),
            }
        }
        None
    }

    /// The first stream with entries new to the group, delivered alone.
    fn woken_xreadgroup(&mut self, read: &XRead) -> Reply {
        let (group, _) = read.group.as_ref().expect("XREADGROUP has GROUP");
        let first = read.streams.iter().find(|(key, _)| {
            let Ok(Some(stream)) = self.collection::<Stream>(key) else {
                return false;
            };
            let last = stream.group(group).map_or(stream.top_id(), |g| g.last_id());
            stream.len() > 0 && stream.top_id() > last
        });
        match first {
            Some(stream) => self.xreadgroup(&XRead {
                streams: vec![stream.clone()],
                ..read.clone()
            }),
            None => Reply::NullArray,
        }
    }
}
