//! The replicated key-value state machine: an ordered map of bytes to bytes, fed committed log
//! entries in order.
//!
//! - [`KvStateMachine::apply`] runs one logged write or transaction ([`LogCommand`]) at its log
//!   index and returns the client's reply as an [`ApplyReply`] (a [`WriteReply`], or EXEC's array
//!   of replies: a transaction's commands, reads included, run in order as that one entry). Redis-level errors (INCR of a non-integer, overflow,
//!   a too-large string) are *results*: deterministic, identical on every replica, and the entry
//!   still counts as applied. So is an entry this build cannot decode: it applies as a no-op
//!   (the applied index advances, nothing else changes) and answers
//!   [`WriteError::UndecodableEntry`]. A peer that reaches the peer port can get any bytes
//!   committed; stopping on them would crash-loop every replica, while every replica of this
//!   build skipping the same entry keeps them equal. The cost: a new operation must not be
//!   proposed before every replica runs a build that decodes it, or replicas of the older build
//!   would skip what the newer ones apply.
//! - [`KvStateMachine::read`] answers GET, MGET, EXISTS, STRLEN, DBSIZE from the current state.
//! - [`KvStateMachine::state_digest`] is maintained incrementally (see `digest.rs` for why XOR of
//!   pair hashes, and what it cannot detect); it covers the log time below too.
//! - [`KvStateMachine::log_time_ms`] is the state machine's time: the highest `stamp_ms` (the
//!   proposing leader's wall clock, `log_command.rs`) among the entries applied so far. Derived
//!   from the log alone, it is the same on every replica at every applied index (a replica's own
//!   clock never enters it), and it never goes backwards, even when a new leader's clock is behind
//!   the old one's: T(i) = max stamp at or below index i. Entries without a stamp (version 1, the
//!   core's no-ops and configuration entries, which never reach the state machine, and entries
//!   that do not decode) leave it unchanged; 0 means no entry carried a time yet. It is what
//!   time-dependent decisions (expiry, built on it) must read, never a local clock.
//! - Request ids are deduplicated over a bounded window (see `dedup.rs` for the bounds).
//! - [`KvStateMachine::snapshot`] / [`KvStateMachine::restore`] use the versioned, checksummed
//!   format documented in `snapshot.rs`.
//!
//! No I/O, no clock, no tokio: the simulator runs this exact code.

mod apply_reply;
mod dedup;
mod digest;
mod key;
mod log_command;
mod map;
mod snapshot;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

pub use apply_reply::ApplyReply;
pub use dedup::DedupLimits;
pub use log_command::{DecodeError, LogCommand, LoggedCommand, MemberAddrs};
pub use snapshot::SnapshotError;

use crate::command::{QueuedCommand, ReadCommand, SetCondition, WriteCommand};
use crate::number::parse_i64;
use crate::resp::Reply;
use dedup::{DedupTable, Seen};
use digest::{log_time_hash, pair_hash};
use map::Map;

/// Largest key or value the state machine stores (APPEND cannot grow a value past it). A constant,
/// not a setting: the outcome of a write must be the same on every replica.
pub const STRING_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Largest reply of one EXEC (RESP bytes, roughly). A read that would make it larger answers an
/// error in its place instead of its value (the transaction's writes still apply). A constant,
/// not a setting: the reply is computed by every replica and must be the same everywhere.
pub const EXEC_REPLY_BYTES_MAX: usize = 2 * STRING_BYTES_MAX;

/// Most members whose addresses the state machine keeps (`RAFT.MEMBER REMOVE` forgets one). A
/// constant, not a setting: whether a record is refused must be the same on every replica.
pub const MEMBER_ADDRS_MAX: usize = 1024;

/// The outcome of a write, as compact as the deduplication table needs to remember it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteReply {
    /// `+OK` (SET, MSET).
    Ok,
    /// Null: SET NX/XX whose condition did not hold.
    Nil,
    /// DEL's count, INCR's new value, APPEND's new length, CAS's 1 (swapped) or 0 (not).
    Integer(i64),
    Error(WriteError),
}

/// Write errors that are results: the entry applied and changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("ERR string exceeds maximum allowed size (64 MiB)")]
    StringTooLarge,
    /// The request id is below its client's deduplication window: it may have been applied
    /// already, so it is not applied again. The outcome is unknown, hence TRYAGAIN.
    #[error("TRYAGAIN request id is older than the deduplication window: the outcome of the original request is unknown")]
    RequestTooOld,
    /// The committed entry is not a key-value command this build can decode (forged by a peer,
    /// or from a newer build): it applied as a no-op on every replica.
    #[error("ERR the log entry could not be decoded and was applied as a no-op")]
    UndecodableEntry,
    #[error("ERR too many members with recorded addresses (1024): remove members first")]
    TooManyMembers,
}

impl WriteReply {
    pub fn to_reply(&self) -> Reply {
        match self {
            WriteReply::Ok => Reply::OK,
            WriteReply::Nil => Reply::Null,
            WriteReply::Integer(n) => Reply::Integer(*n),
            WriteReply::Error(e) => Reply::error(e.to_string()),
        }
    }

    /// Appends the reply's compact encoding (the one snapshots use): for relaying a leader's
    /// result to the follower that forwarded the request.
    pub fn encode(&self, out: &mut Vec<u8>) {
        snapshot::encode_reply(out, self);
    }

    /// Decodes what [`Self::encode`] wrote; `data` must hold exactly one reply.
    pub fn decode(data: &[u8]) -> Option<WriteReply> {
        let mut r = wire::Reader::new(Bytes::copy_from_slice(data));
        let reply = snapshot::read_reply(&mut r).ok()?;
        (r.remaining() == 0).then_some(reply)
    }
}

/// A log entry the state machine could not apply. Fatal for the node: it must stop applying rather
/// than skip the entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("log index {index} is not after the applied index {applied_index}")]
    IndexNotIncreasing { index: u64, applied_index: u64 },
}

/// A stored value with its pair hash, so that replacing a large value does not rehash the old one.
///
/// The value is an exact-size copy (see `key.rs` for why a copy), reference-counted so that a
/// snapshot view or a GET reply shares it instead of copying it. While nothing shares it, a value
/// of the same length is overwritten in place ([`KvStateMachine::put`]): the common overwrite
/// allocates and frees nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    value: Arc<[u8]>,
    pair_hash: u64,
}

impl Stored {
    pub(crate) fn new(value: &[u8], pair_hash: u64) -> Stored {
        Stored {
            value: Arc::from(value),
            pair_hash,
        }
    }

    pub(crate) fn value(&self) -> &[u8] {
        &self.value
    }
}

/// The key-value state machine. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvStateMachine {
    data: Map,
    /// XOR of the pair hashes (the log time is folded in when the digest is read).
    digest: u64,
    applied_index: u64,
    /// The highest stamp among the entries applied so far (see the module documentation).
    log_time_ms: u64,
    dedup: DedupTable,
    /// Where each member is reached (`RAFT.MEMBER ADD`): cluster metadata, not key-value state,
    /// so it is in snapshots but not in the digest.
    members: BTreeMap<u64, MemberAddrs>,
    /// Bumped on every change of `members`, so a reader republishes only what changed.
    members_version: ChangeCounter,
    /// Test-only: a deliberately broken variant (`keel_core::Mutation::DedupOff`).
    #[cfg(feature = "mutations")]
    mutation: Option<keel_core::Mutation>,
}

/// A counter for readers of the state, not part of it: two states are equal whatever their
/// counters say (a restored state equals the one it was taken from).
#[derive(Clone, Copy, Debug, Default)]
struct ChangeCounter(u64);

impl PartialEq for ChangeCounter {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ChangeCounter {}

impl Default for KvStateMachine {
    fn default() -> Self {
        KvStateMachine::new()
    }
}

impl KvStateMachine {
    pub fn new() -> Self {
        KvStateMachine::with_dedup_limits(DedupLimits::default())
    }

    /// A state machine with a different deduplication window; every replica must use the same.
    pub fn with_dedup_limits(limits: DedupLimits) -> Self {
        KvStateMachine {
            data: Map::default(),
            digest: 0,
            applied_index: 0,
            log_time_ms: 0,
            dedup: DedupTable::new(limits),
            members: BTreeMap::new(),
            members_version: ChangeCounter::default(),
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Test-only: switches on a deliberately broken variant, kept across restores.
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<keel_core::Mutation>) {
        self.mutation = mutation;
    }

    /// Every member's recorded addresses, by node id.
    pub fn member_addrs(&self) -> &BTreeMap<u64, MemberAddrs> {
        &self.members
    }

    /// Changes whenever [`Self::member_addrs`] does (a record applied, a snapshot restored).
    pub fn member_addrs_version(&self) -> u64 {
        self.members_version.0
    }

    fn record_member_addrs(&mut self, addrs: &MemberAddrs) -> WriteReply {
        self.members_version.0 += 1;
        if addrs.peer.is_empty() && addrs.client.is_empty() {
            self.members.remove(&addrs.id);
            return WriteReply::Ok;
        }
        if !self.members.contains_key(&addrs.id) && self.members.len() >= MEMBER_ADDRS_MAX {
            return WriteReply::Error(WriteError::TooManyMembers);
        }
        self.members.insert(addrs.id, addrs.clone());
        WriteReply::Ok
    }

    /// The log index of the last entry applied (or noted with [`Self::advance_applied`]).
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// XOR of the pair hashes of every stored (key, value), and of the hash of
    /// [`Self::log_time_ms`] when it is not 0 (see `digest.rs`); 0 for the empty map with no
    /// time. One hash of 8 bytes more than the pairs' digest, computed here rather than kept.
    pub fn state_digest(&self) -> u64 {
        self.digest ^ log_time_hash(self.log_time_ms)
    }

    /// The state machine's time in ms since the Unix epoch: the highest stamp among the entries
    /// applied so far (0: none carried one). The same on every replica at the same applied index,
    /// and never decreasing (see the module documentation).
    pub fn log_time_ms(&self) -> u64 {
        self.log_time_ms
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// The memory the data is counted as taking (what `maxmemory` bounds): every key and value
    /// byte and 64 bytes per pair. The same on every replica at the same applied index.
    pub fn used_bytes(&self) -> u64 {
        self.data.used_bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.data.get(key).map(Stored::value)
    }

    /// Number of client sessions in the deduplication table.
    pub fn dedup_sessions(&self) -> usize {
        self.dedup.len()
    }

    /// Records that the entry at `index` carried no key-value command (a no-op or membership
    /// entry), so `applied_index` matches the node's.
    pub fn advance_applied(&mut self, index: u64) -> Result<(), ApplyError> {
        self.check_index(index)?;
        self.applied_index = index;
        Ok(())
    }

    fn check_index(&self, index: u64) -> Result<(), ApplyError> {
        if index <= self.applied_index {
            return Err(ApplyError::IndexNotIncreasing {
                index,
                applied_index: self.applied_index,
            });
        }
        Ok(())
    }

    /// Applies the encoded [`LogCommand`] at log `index` (indexes must increase). An entry that
    /// does not decode is the same no-op on every replica (see the module documentation).
    pub fn apply(&mut self, index: u64, entry: &Bytes) -> Result<ApplyReply, ApplyError> {
        self.check_index(index)?;
        match LogCommand::decode(entry) {
            Ok(command) => self.apply_command(index, &command),
            Err(_) => {
                self.applied_index = index;
                Ok(ApplyReply::Write(WriteReply::Error(
                    WriteError::UndecodableEntry,
                )))
            }
        }
    }

    /// Applies an already decoded command at log `index`.
    pub fn apply_command(
        &mut self,
        index: u64,
        command: &LogCommand,
    ) -> Result<ApplyReply, ApplyError> {
        self.check_index(index)?;
        self.applied_index = index;
        // Before the command runs (it runs at its own time), and whatever becomes of it: a
        // duplicate or a too-old request is in the log with its stamp like any other entry.
        self.log_time_ms = self.log_time_ms.max(command.stamp_ms);
        #[cfg(feature = "mutations")]
        if self.mutation == Some(keel_core::Mutation::DedupOff) {
            // Broken on purpose: the request id is ignored, so a retried request applies again.
            return Ok(self.execute_logged(&command.command).0);
        }
        let reply = match self.dedup.check(command.client_id, command.request_seq) {
            Seen::Duplicate(reply) => {
                self.dedup.touch(index, command.client_id);
                match command.command {
                    LoggedCommand::Write(_) | LoggedCommand::MemberAddrs(_) => {
                        ApplyReply::Write(reply)
                    }
                    LoggedCommand::Exec(_) => ApplyReply::ExecDuplicate,
                }
            }
            Seen::TooOld => ApplyReply::Write(WriteReply::Error(WriteError::RequestTooOld)),
            Seen::New => {
                let (reply, remembered) = self.execute_logged(&command.command);
                self.dedup
                    .record(index, command.client_id, command.request_seq, remembered);
                reply
            }
        };
        Ok(reply)
    }

    /// Runs a transaction's commands in order: one reply each. A failing command answers its
    /// error and the others still run (no rollback, as in Redis). Reads see the writes before
    /// them; their replies are bounded by [`EXEC_REPLY_BYTES_MAX`] in all.
    fn execute_all(&mut self, commands: &[QueuedCommand]) -> Vec<Reply> {
        let mut reply_bytes = 0usize;
        let mut replies = Vec::with_capacity(commands.len());
        for command in commands {
            let reply = match command {
                QueuedCommand::Write(write) => self.execute(write).to_reply(),
                QueuedCommand::Read(read) => {
                    let reply = self.read(read);
                    if reply_bytes + apply_reply::reply_bytes(&reply) > EXEC_REPLY_BYTES_MAX {
                        Reply::error(format!(
                            "ERR EXEC reply would exceed {EXEC_REPLY_BYTES_MAX} bytes: this read \
                             is not answered (the transaction's writes still apply)"
                        ))
                    } else {
                        reply
                    }
                }
                QueuedCommand::Ping => Reply::PONG,
                QueuedCommand::Echo(message) => Reply::Bulk(message.clone()),
            };
            reply_bytes += apply_reply::reply_bytes(&reply);
            replies.push(reply);
        }
        replies
    }

    fn execute(&mut self, command: &WriteCommand) -> WriteReply {
        match command {
            WriteCommand::Set {
                key,
                value,
                condition,
            } => {
                if too_large(key) || too_large(value) {
                    return WriteReply::Error(WriteError::StringTooLarge);
                }
                // A plain SET needs no lookup before its insert (one tree walk, the hot path).
                let allowed = match condition {
                    SetCondition::Always => true,
                    SetCondition::IfAbsent => !self.data.contains_key(&key[..]),
                    SetCondition::IfPresent => self.data.contains_key(&key[..]),
                };
                if !allowed {
                    return WriteReply::Nil;
                }
                self.put(key, value);
                WriteReply::Ok
            }
            WriteCommand::Del { keys } => {
                let removed = keys.iter().filter(|key| self.remove(key)).count();
                WriteReply::Integer(removed as i64)
            }
            WriteCommand::IncrBy { key, delta } => {
                if too_large(key) {
                    return WriteReply::Error(WriteError::StringTooLarge);
                }
                let current = match self.get(key) {
                    None => 0,
                    Some(value) => match parse_i64(value) {
                        Some(n) => n,
                        None => return WriteReply::Error(WriteError::NotInteger),
                    },
                };
                let Some(new) = current.checked_add(*delta) else {
                    return WriteReply::Error(WriteError::Overflow);
                };
                self.put(key, new.to_string().as_bytes());
                WriteReply::Integer(new)
            }
            WriteCommand::MSet { pairs } => {
                // All or nothing: check every pair before changing anything.
                if pairs.iter().any(|(k, v)| too_large(k) || too_large(v)) {
                    return WriteReply::Error(WriteError::StringTooLarge);
                }
                for (key, value) in pairs {
                    self.put(key, value);
                }
                WriteReply::Ok
            }
            WriteCommand::Append { key, value } => {
                let old = self.get(key).unwrap_or_default();
                let new_len = old.len() + value.len();
                if too_large(key) || new_len > STRING_BYTES_MAX {
                    return WriteReply::Error(WriteError::StringTooLarge);
                }
                // Values are exact-size: an append copies the value (O(length), unlike Redis's
                // amortised O(1)); the 64 MiB bound keeps that finite.
                let mut joined = Vec::with_capacity(new_len);
                joined.extend_from_slice(old);
                joined.extend_from_slice(value);
                self.put(key, &joined);
                WriteReply::Integer(new_len as i64)
            }
            WriteCommand::Cas { key, expected, new } => {
                if too_large(key) || too_large(new) {
                    return WriteReply::Error(WriteError::StringTooLarge);
                }
                if self.get(key) != Some(&expected[..]) {
                    return WriteReply::Integer(0);
                }
                self.put(key, new);
                WriteReply::Integer(1)
            }
        }
    }

    /// Runs a logged command; returns its reply and what deduplication remembers of it.
    fn execute_logged(&mut self, command: &LoggedCommand) -> (ApplyReply, WriteReply) {
        match command {
            LoggedCommand::Write(write) => {
                let reply = self.execute(write);
                (ApplyReply::Write(reply), reply)
            }
            // Only "applied" is remembered (see apply_reply.rs).
            LoggedCommand::Exec(commands) => {
                (ApplyReply::Exec(self.execute_all(commands)), WriteReply::Ok)
            }
            LoggedCommand::MemberAddrs(addrs) => {
                let reply = self.record_member_addrs(addrs);
                (ApplyReply::Write(reply), reply)
            }
        }
    }

    /// Stores a copy of `value` under `key`: in place when the key holds an unshared value of the
    /// same length (see [`Stored`]).
    fn put(&mut self, key: &[u8], value: &[u8]) {
        let hash = pair_hash(key, value);
        self.digest ^= hash;
        match self.data.get_mut(key) {
            Some(stored) => {
                self.digest ^= stored.pair_hash;
                stored.pair_hash = hash;
                let old_len = stored.value.len();
                match Arc::get_mut(&mut stored.value) {
                    Some(buffer) if buffer.len() == value.len() => buffer.copy_from_slice(value),
                    _ => stored.value = Arc::from(value),
                }
                self.data.value_resized(old_len, value.len());
            }
            None => self.data.insert_new(key, Stored::new(value, hash)),
        }
    }

    fn remove(&mut self, key: &[u8]) -> bool {
        match self.data.remove(key) {
            Some(old) => {
                self.digest ^= old.pair_hash;
                true
            }
            None => false,
        }
    }

    /// Answers a read from the current state. Linearizability is the caller's job (serve it only
    /// once this state machine has applied the read index).
    pub fn read(&self, command: &ReadCommand) -> Reply {
        // The reply shares the stored value (which is then copied, not overwritten, by a later
        // write of the key while the reply is alive).
        let value = |key: &Bytes| match self.data.get(key) {
            Some(stored) => Reply::Bulk(Bytes::from_owner(Arc::clone(&stored.value))),
            None => Reply::Null,
        };
        match command {
            ReadCommand::Get { key } => value(key),
            ReadCommand::MGet { keys } => Reply::Array(keys.iter().map(value).collect()),
            ReadCommand::Exists { keys } => {
                // Redis counts a key named twice twice.
                Reply::Integer(
                    keys.iter()
                        .filter(|k| self.data.contains_key(&k[..]))
                        .count() as i64,
                )
            }
            ReadCommand::StrLen { key } => {
                Reply::Integer(self.get(key).map_or(0, |v| v.len()) as i64)
            }
            ReadCommand::DbSize => Reply::Integer(self.data.len() as i64),
        }
    }

    /// Encodes the whole state at `applied_index` (format in `snapshot.rs`).
    pub fn snapshot(&self) -> Vec<u8> {
        snapshot::encode(self)
    }

    /// A copy of the state for encoding elsewhere (another thread) while this one keeps applying.
    /// Cheap: values (and keys too long to be inline) are reference-counted, so copying the map
    /// copies pointers and short keys, not values.
    pub fn snapshot_view(&self) -> SnapshotView {
        SnapshotView(self.clone())
    }

    /// Replaces the whole state with a snapshot's. On error the state is unchanged.
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), SnapshotError> {
        let version = self.members_version.0 + 1;
        #[cfg(feature = "mutations")]
        let mutation = self.mutation;
        *self = KvStateMachine::from_snapshot(snapshot)?;
        self.members_version.0 = version;
        #[cfg(feature = "mutations")]
        {
            self.mutation = mutation;
        }
        Ok(())
    }

    pub fn from_snapshot(snapshot: &[u8]) -> Result<Self, SnapshotError> {
        let restored = snapshot::decode(snapshot)?;
        Ok(KvStateMachine {
            data: restored.data,
            digest: restored.digest,
            applied_index: restored.applied_index,
            log_time_ms: restored.log_time_ms,
            dedup: restored.dedup,
            members: restored.members,
            members_version: ChangeCounter::default(),
            #[cfg(feature = "mutations")]
            mutation: None,
        })
    }
}

/// A frozen copy of the state at one applied index; see [`KvStateMachine::snapshot_view`].
#[derive(Clone, Debug)]
pub struct SnapshotView(KvStateMachine);

impl SnapshotView {
    pub fn applied_index(&self) -> u64 {
        self.0.applied_index
    }

    pub fn log_time_ms(&self) -> u64 {
        self.0.log_time_ms
    }

    pub fn encode(&self) -> Vec<u8> {
        self.0.snapshot()
    }
}

fn too_large(data: &Bytes) -> bool {
    data.len() > STRING_BYTES_MAX
}

#[cfg(test)]
mod tests;
