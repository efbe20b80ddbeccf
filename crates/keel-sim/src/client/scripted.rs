//! A simulated client's operation done by a script (see the parent module): one `EVAL` whose
//! script reads and writes the operation's key, which its node runs as the server does
//! (`crate::scripts`): the script's atomicity is what the linearizability checker then judges.

use std::collections::VecDeque;

use bytes::Bytes;

use super::{Awaited, ClientOp, Watch};
use crate::connection::Frame;
use crate::history::{OpKind, OpResult};
use crate::kv_user::KvState;
use crate::world::World;

/// A read: `GET` in a read-only script (`EVAL_RO`).
const READ: &str = "return redis.call('GET', KEYS[1])";
/// A write: answers `SET`'s `+OK`.
const WRITE: &str = "return redis.call('SET', KEYS[1], ARGV[1])";
/// A swap: the old value, or nil.
const SWAP: &str = "local old = redis.call('GET', KEYS[1])\n\
                    redis.call('SET', KEYS[1], ARGV[1])\n\
                    return old";
/// A compare-and-set expecting ARGV[1]: 1 if it set ARGV[2], else 0.
const CAS: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n\
                   redis.call('SET', KEYS[1], ARGV[2]) return 1 end\n\
                   return 0";
/// A compare-and-set expecting no value: 1 if it set ARGV[1], else 0.
const CAS_ABSENT: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then\n\
                          redis.call('SET', KEYS[1], ARGV[1]) return 1 end\n\
                          return 0";

/// A scripted operation's request.
pub(super) fn script_requests(
    op: &ClientOp,
    frames: &mut VecDeque<Frame>,
    awaited: &mut VecDeque<Awaited>,
    at: usize,
) {
    let value = || op.value_arg.clone().expect("a write has a value");
    let (eval, body, args): (&'static str, &'static str, Vec<Bytes>) = match op.kind {
        OpKind::Read => ("EVAL_RO", READ, Vec::new()),
        OpKind::Write(_) => ("EVAL", WRITE, vec![value()]),
        OpKind::Swap(_) => ("EVAL", SWAP, vec![value()]),
        OpKind::Cas { expected: None, .. } => ("EVAL", CAS_ABSENT, vec![value()]),
        OpKind::Cas { .. } => {
            let expected = op.expected_arg.clone().expect("a CAS expects a value");
            ("EVAL", CAS, vec![expected, value()])
        }
    };
    let mut request = vec![
        Bytes::from_static(eval.as_bytes()),
        Bytes::from_static(body.as_bytes()),
        Bytes::from_static(b"1"),
        op.key_arg.clone(),
    ];
    request.extend(args);
    frames.push_back(Frame::new(request));
    awaited.push_back(Awaited::Answer(at));
}

impl World<KvState> {
    /// A script answered an error: refused before anything of it was proposed (its node does
    /// not lead, or knows no leader), it goes again; a transaction of its writes that may have
    /// applied ("outcome unknown", or aborted by changes too many times: not applied, but
    /// unknown is as true) ends it with an unknown outcome; any other error is a violation,
    /// since the workload's scripts cannot fail.
    pub(super) fn script_refused(&mut self, c: usize, at: usize, error: String) {
        let not_proposed = ["TRYAGAIN leader is node", "TRYAGAIN no leader"];
        if not_proposed.iter().any(|n| error.starts_with(n)) {
            if let Some(p) = self.user.clients.clients[c].pipeline.as_mut() {
                p.ops[at].watch = Watch::Idle;
            }
            return self.refused(c, &error);
        }
        if !error.starts_with("TRYAGAIN") {
            let detail = format!("client {c}: a script answered -{error}");
            return self.violate("client reply", detail);
        }
        self.trace_line(|| format!("client {c} script: {error}"));
        self.user
            .clients
            .finish(c, at, OpResult::Unknown, self.now, &mut self.user.history);
    }
}
