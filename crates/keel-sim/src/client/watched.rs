//! The watched transaction of a simulated client (see the parent module): `WATCH k`, `GET k`,
//! then, once both are answered on the same connection, `MULTI`, `SET k v`, `EXEC`.

use std::collections::VecDeque;

use bytes::Bytes;
use keel_resp::Reply;

use super::{register_value, Awaited, ClientOp};
use crate::connection::Frame;
use crate::history::{OpResult, Value};
use crate::kv_user::KvState;
use crate::world::World;

/// Where a watched transaction is in its current attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Watch {
    /// Nothing watched yet in this attempt.
    Idle,
    /// `WATCH` answered `+OK`; its read not yet.
    Watching,
    /// The value read under the watch: the transaction goes next.
    Read(Option<Value>),
    /// Its `EXEC` left.
    Sent,
}

/// A watched transaction's requests: the watch and its read, or (once the value is read) the
/// transaction, its `EXEC` under the operation's id.
pub(super) fn watched_requests(
    op: &ClientOp,
    frames: &mut VecDeque<Frame>,
    awaited: &mut VecDeque<Awaited>,
    at: usize,
) {
    let key = op.key_arg.clone();
    match op.watch {
        Watch::Read(_) => {
            let value = op.value_arg.clone().expect("a watched transaction writes");
            frames.push_back(Frame::new(vec![Bytes::from_static(b"MULTI")]));
            frames.push_back(Frame::new(vec![Bytes::from_static(b"SET"), key, value]));
            frames.push_back(Frame {
                args: vec![Bytes::from_static(b"EXEC")],
                given_id: op.id,
            });
            awaited.extend([Awaited::Multi, Awaited::Queued, Awaited::Answer(at)]);
        }
        _ => {
            frames.push_back(Frame::new(vec![Bytes::from_static(b"WATCH"), key.clone()]));
            frames.push_back(Frame::new(vec![Bytes::from_static(b"GET"), key]));
            awaited.extend([Awaited::Watch(at), Awaited::WatchedRead(at)]);
        }
    }
}

impl World<KvState> {
    /// The answer to a watched transaction's `WATCH` or to its read; false if no node could
    /// give it.
    pub(super) fn watch_answered(
        &mut self,
        c: usize,
        at: usize,
        awaited: Awaited,
        reply: Reply,
    ) -> bool {
        let Some(p) = self.user.clients.clients[c].pipeline.as_mut() else {
            return true;
        };
        let op = &mut p.ops[at];
        if let Reply::Error(error) = &reply {
            // Refused (no leader to read from, ...): the attempt starts over.
            op.watch = Watch::Idle;
            p.close_after = true;
            self.refused(c, error);
            return true;
        }
        match (awaited, op.watch) {
            (Awaited::Watch(_), Watch::Idle) if reply == Reply::OK => op.watch = Watch::Watching,
            (Awaited::WatchedRead(_), Watch::Watching) => match register_value(op.key, &reply) {
                Ok(value) => op.watch = Watch::Read(value),
                Err(detail) => {
                    self.violate("client reply", format!("client {c}: {detail}"));
                }
            },
            // The read of a refused watch tells nothing here.
            (Awaited::WatchedRead(_), Watch::Idle) => {}
            _ => return false,
        }
        true
    }

    /// A watched transaction's `EXEC` answered an error: refused before it was proposed, it
    /// starts over (a new watch, a new read); otherwise it may have applied, under the value it
    /// expected, and ends with an unknown outcome.
    pub(super) fn watched_exec_refused(&mut self, c: usize, at: usize, error: String) {
        let not_proposed = ["TRYAGAIN leader is node", "TRYAGAIN no leader", "EXECABORT"];
        if let Some(p) = self.user.clients.clients[c].pipeline.as_mut() {
            p.close_after = true;
            if not_proposed.iter().any(|n| error.starts_with(n)) {
                p.ops[at].watch = Watch::Idle;
                return self.refused(c, &error);
            }
        }
        self.trace_line(|| format!("client {c} watched EXEC: {error}"));
        self.user
            .clients
            .finish(c, at, OpResult::Unknown, self.now, &mut self.user.history);
    }
}
