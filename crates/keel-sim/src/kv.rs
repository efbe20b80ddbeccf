//! The simulator's key-value state machine: registers of `u64` keyed by `u64`, with read, write
//! and compare-and-set, request-id deduplication, and an incrementally maintained digest so
//! replicas can be compared cheaply.

use std::collections::{BTreeMap, HashMap};

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub type Key = u64;
pub type Value = u64;

/// A client command as it travels through the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub client: u64,
    pub seq: u64,
    pub key: Key,
    pub op: CommandOp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandOp {
    Write(Value),
    Cas { expected: Option<Value>, new: Value },
}

/// What applying a command produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandResult {
    Written,
    CasSwapped,
    CasFailed,
}

const ENCODING_VERSION: u8 = 1;
const ENCODED_LEN_BYTES: usize = 1 + 1 + 8 * 5 + 1;

impl Command {
    /// Fixed little-endian layout: version, op tag, client, seq, key, a, b, has-expected.
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(ENCODED_LEN_BYTES);
        buf.put_u8(ENCODING_VERSION);
        let (tag, a, b, has_expected) = match self.op {
            CommandOp::Write(v) => (0u8, v, 0, 0u8),
            CommandOp::Cas { expected, new } => {
                (1, expected.unwrap_or(0), new, expected.is_some() as u8)
            }
        };
        buf.put_u8(tag);
        buf.put_u64_le(self.client);
        buf.put_u64_le(self.seq);
        buf.put_u64_le(self.key);
        buf.put_u64_le(a);
        buf.put_u64_le(b);
        buf.put_u8(has_expected);
        buf.freeze()
    }

    pub fn decode(mut data: &[u8]) -> Option<Command> {
        if data.len() != ENCODED_LEN_BYTES || data.get_u8() != ENCODING_VERSION {
            return None;
        }
        let tag = data.get_u8();
        let client = data.get_u64_le();
        let seq = data.get_u64_le();
        let key = data.get_u64_le();
        let a = data.get_u64_le();
        let b = data.get_u64_le();
        let has_expected = data.get_u8() == 1;
        let op = match tag {
            0 => CommandOp::Write(a),
            1 => CommandOp::Cas {
                expected: has_expected.then_some(a),
                new: b,
            },
            _ => return None,
        };
        Some(Command {
            client,
            seq,
            key,
            op,
        })
    }
}

/// Bound on remembered client sessions; the oldest is forgotten beyond it.
const MAX_SESSIONS: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct KvStateMachine {
    data: BTreeMap<Key, Value>,
    /// Per client: the last sequence number applied and its result.
    sessions: HashMap<u64, (u64, CommandResult)>,
    digest: u64,
}

fn pair_hash(key: Key, value: Value) -> u64 {
    let mut z = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ value.rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl KvStateMachine {
    pub fn get(&self, key: Key) -> Option<Value> {
        self.data.get(&key).copied()
    }

    /// XOR of a hash of every (key, value) pair: order-free, so it can be updated per write.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Applies one command. A command whose sequence number was already applied for its client
    /// returns the remembered result and changes nothing (a retried proposal can never apply twice).
    pub fn apply(&mut self, cmd: &Command) -> CommandResult {
        if let Some(&(seq, result)) = self.sessions.get(&cmd.client) {
            if cmd.seq <= seq {
                return result;
            }
        }
        let current = self.get(cmd.key);
        let (result, new) = match cmd.op {
            CommandOp::Write(v) => (CommandResult::Written, Some(v)),
            CommandOp::Cas { expected, new } if expected == current => {
                (CommandResult::CasSwapped, Some(new))
            }
            CommandOp::Cas { .. } => (CommandResult::CasFailed, None),
        };
        if let Some(v) = new {
            if let Some(old) = self.data.insert(cmd.key, v) {
                self.digest ^= pair_hash(cmd.key, old);
            }
            self.digest ^= pair_hash(cmd.key, v);
        }
        if self.sessions.len() >= MAX_SESSIONS && !self.sessions.contains_key(&cmd.client) {
            let oldest = *self.sessions.keys().min().expect("non-empty");
            self.sessions.remove(&oldest);
        }
        self.sessions.insert(cmd.client, (cmd.seq, result));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let cmds = [
            Command {
                client: 1,
                seq: 2,
                key: 3,
                op: CommandOp::Write(4),
            },
            Command {
                client: 9,
                seq: 8,
                key: 7,
                op: CommandOp::Cas {
                    expected: None,
                    new: 5,
                },
            },
            Command {
                client: 9,
                seq: 8,
                key: 7,
                op: CommandOp::Cas {
                    expected: Some(0),
                    new: 5,
                },
            },
        ];
        for c in cmds {
            assert_eq!(Command::decode(&c.encode()), Some(c));
        }
        assert_eq!(Command::decode(b"short"), None);
        let mut bad = cmds[0].encode().to_vec();
        bad[0] = 99;
        assert_eq!(Command::decode(&bad), None);
    }

    #[test]
    fn dedup_and_digest() {
        let mut a = KvStateMachine::default();
        let w = |seq, key, v| Command {
            client: 1,
            seq,
            key,
            op: CommandOp::Write(v),
        };
        a.apply(&w(1, 1, 10));
        a.apply(&w(2, 2, 20));
        let d = a.digest();
        // A replayed command changes nothing.
        a.apply(&w(1, 1, 99));
        assert_eq!(a.get(1), Some(10));
        assert_eq!(a.digest(), d);
        // Same state reached in another order gives the same digest.
        let mut b = KvStateMachine::default();
        b.apply(&Command {
            client: 2,
            seq: 1,
            key: 2,
            op: CommandOp::Write(20),
        });
        b.apply(&Command {
            client: 3,
            seq: 1,
            key: 1,
            op: CommandOp::Write(5),
        });
        b.apply(&Command {
            client: 3,
            seq: 2,
            key: 1,
            op: CommandOp::Cas {
                expected: Some(5),
                new: 10,
            },
        });
        assert_eq!(b.digest(), d);
        let failed = b.apply(&Command {
            client: 3,
            seq: 3,
            key: 1,
            op: CommandOp::Cas {
                expected: None,
                new: 1,
            },
        });
        assert_eq!(failed, CommandResult::CasFailed);
    }
}
