//! The replicated key-value state machine: databases (`SELECT`), each a map of keys to values
//! with optional deadlines, fed committed log entries in order.
//!
//! - Databases: each entry names the database it runs in (`LogCommand::db`, 0 for entries
//!   written before databases existed); a `SELECT` inside a transaction moves the commands after
//!   it. The state machine keeps every database up to the highest a write reached (`Db`:
//!   keys, deadlines, tombstones, its share of the digest); a database no write reached reads as
//!   empty. How many databases clients may use (`databases`) is the server's setting; the state
//!   machine accepts any below [`DATABASES_MAX`]. Between commands it is in database 0: what
//!   [`KvStateMachine::read`] and [`KvStateMachine::get`] see; [`KvStateMachine::read_in`]
//!   names another.
//!
//! - [`KvStateMachine::apply`] runs one logged write or transaction ([`LogCommand`]) at its log
//!   index and returns the client's reply as an [`ApplyReply`] (a [`WriteReply`], or EXEC's array
//!   of replies: a transaction's commands, reads included, run in order as that one entry).
//!   Redis-level errors (INCR of a non-integer, overflow, a too-large string) are *results*:
//!   deterministic, identical on every replica, and the entry still counts as applied. So is an
//!   entry this build cannot decode: it applies as a no-op (the applied index advances, nothing
//!   else changes) and answers [`WriteError::UndecodableEntry`]. A peer that reaches the peer
//!   port can get any bytes committed; stopping on them would crash-loop every replica, while
//!   every replica of this build skipping the same entry keeps them equal. The cost: a new
//!   operation must not be proposed before every replica runs a build that decodes it, or
//!   replicas of the older build would skip what the newer ones apply.
//! - [`KvStateMachine::read`] answers GET, MGET, EXISTS, STRLEN, DBSIZE, TTL and its family, and
//!   the reads of `strings.rs` and `keyspace_commands.rs`, from the current state.
//! - Keys may have a deadline (EXPIRE, SET ... PX, ...), judged at the log time below: how, and
//!   how expired keys are removed on every replica alike, is in `execute.rs`; the index of
//!   deadlines and what WATCH compares are in `key_metadata.rs`.
//! - [`KvStateMachine::state_digest`] is maintained incrementally (see `digest.rs` for why XOR of
//!   pair hashes, and what it cannot detect); it covers the log time below too.
//! - [`KvStateMachine::log_time_ms`] is the state machine's time: the highest `stamp_ms` (the
//!   proposing leader's wall clock, `log_command.rs`) among the entries applied so far. Derived
//!   from the log alone, it is the same on every replica at every applied index (a replica's own
//!   clock never enters it), and it never goes backwards, even when a new leader's clock is behind
//!   the old one's: T(i) = max stamp at or below index i. Entries without a stamp (version 1, the
//!   core's no-ops and configuration entries, which never reach the state machine, and entries
//!   that do not decode) leave it unchanged; 0 means no entry carried a time yet. It is what
//!   time-dependent decisions (expiry) read, never a local clock. It is in snapshots from format
//!   version 3 (older ones restore with 0) and in `INFO raft` (field `log_time_ms`).
//! - [`KvStateMachine::used_bytes`]: what the data is counted as taking (every key and value byte
//!   and 64 bytes per pair), what `maxmemory` bounds; the same on every replica at the same index.
//! - Each member's recorded addresses ([`KvStateMachine::member_addrs`], from MEMBER ADDRS
//!   entries, at most [`MEMBER_ADDRS_MAX`], 1,024): kept in snapshots, outside the digest; they
//!   serve INFO and forwarding.
//! - Request ids are deduplicated over a bounded window (see `dedup.rs` for the bounds).
//! - [`KvStateMachine::snapshot`] / [`KvStateMachine::restore`] use the versioned, checksummed
//!   format documented in `snapshot.rs`.
//!
//! No I/O, no clock, no tokio: the simulator runs this exact code.

mod apply_reply;
mod collections;
mod dedup;
mod digest;
mod execute;
mod key;
mod key_metadata;
pub(crate) mod keyspace_commands;
mod lcs;
mod log_command;
mod map;
mod notify;
mod scratch;
mod snapshot;
mod strings;
mod value;

use std::collections::BTreeMap;

use bytes::Bytes;

pub use apply_reply::ApplyReply;
pub use collections::SORT_RESULT_BYTES_MAX;
pub use dedup::{DedupLimits, RequestId};
pub use key_metadata::TOMBSTONES_MAX;
pub use keyspace_commands::SCAN_COUNT_MAX;
pub use lcs::LCS_CELLS_MAX;
pub use log_command::{DecodeError, LogCommand, LoggedCommand, MemberAddrs};
pub use snapshot::SnapshotError;

use crate::command::ReadCommand;
use crate::command::TtlCommand;
use dedup::{DedupTable, Seen};
use digest::{db_digest_share, log_time_hash};
use keel_resp::Reply;
use key_metadata::{Deadlines, Tombstones};
use map::Map;
use value::Stored;

use keel_redis_types::STRING_BYTES_MAX;

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
    /// A relative deadline that overflows once added to the entry's time (Redis's wording).
    #[error("ERR invalid expire time in '{}' command", .0.name())]
    InvalidExpireTime(TtlCommand),
    /// INCRBYFLOAT of a value that is not a float.
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR increment would produce NaN or Infinity")]
    NanOrInfinity,
    /// SETRANGE (or SETBIT) past [`STRING_BYTES_MAX`], in Redis's words, which name Redis's own
    /// bound: here the bound is [`STRING_BYTES_MAX`].
    #[error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")]
    StringExceedsMaxSize,
    /// RENAME or RENAMENX of a key that does not exist.
    #[error("ERR no such key")]
    NoSuchKey,
    /// A command for one kind of value on a key holding another (a string command on a list,
    /// ...), in Redis's words.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// LSET past either end of the list.
    #[error("ERR index out of range")]
    IndexOutOfRange,
    /// HINCRBY of a field whose value is not an integer.
    #[error("ERR hash value is not an integer")]
    HashValueNotInteger,
    /// HINCRBYFLOAT of a field whose value is not a float.
    #[error("ERR hash value is not a float")]
    HashValueNotFloat,
    /// ZADD INCR or ZINCRBY that would make a score NaN (infinity minus infinity).
    #[error("ERR resulting score is not a number (NaN)")]
    ScoreNotANumber,
    /// SORT without ALPHA of a value that is not a number, in Redis's words.
    #[error("ERR One or more scores can't be converted into double")]
    SortNotDouble,
    /// SORT whose result would be larger than [`SORT_RESULT_BYTES_MAX`].
    #[error(
        "ERR SORT result exceeds {} bytes: ask for less with LIMIT or fewer GET patterns",
        SORT_RESULT_BYTES_MAX
    )]
    SortTooLarge,
    /// MOVE to the key's own database, or COPY ... DB onto itself, in Redis's words.
    #[error("ERR source and destination objects are the same")]
    SameObject,
}

impl From<keel_redis_types::ValueError> for WriteError {
    fn from(error: keel_redis_types::ValueError) -> WriteError {
        use keel_redis_types::ValueError as V;
        match error {
            V::HashValueNotInteger => WriteError::HashValueNotInteger,
            V::HashValueNotFloat => WriteError::HashValueNotFloat,
            V::Overflow => WriteError::Overflow,
            V::NanOrInfinity => WriteError::NanOrInfinity,
            V::ScoreNotANumber => WriteError::ScoreNotANumber,
        }
    }
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
        let mut r = keel_redis_types::wire::Reader::new(Bytes::copy_from_slice(data));
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

/// The key-value state machine. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvStateMachine {
    /// The databases by index (`SELECT`): at least database 0, and every database up to the
    /// highest a write reached; one not in the vector is empty.
    dbs: Vec<Db>,
    /// The database the command running now works in: set from each entry's `db` before it
    /// runs, and by `SELECT` inside a transaction or script. Not state (see [`CurrentDb`]).
    db: CurrentDb,
    /// False after restoring a snapshot of a format without versions, until the next tick entry
    /// numbers every key again (`execute.rs`): until then a transaction that watches keys aborts.
    versions_valid: bool,
    applied_index: u64,
    /// The highest stamp among the entries applied so far (see the module documentation).
    log_time_ms: u64,
    dedup: DedupTable,
    /// Where each member is reached (`RAFT.MEMBER ADD`): cluster metadata, not key-value state,
    /// so it is in snapshots but not in the digest.
    members: BTreeMap<u64, MemberAddrs>,
    /// Bumped on every change of `members`, so a reader republishes only what changed.
    members_version: ChangeCounter,
    /// RANDOMKEY's draws (`keyspace_commands.rs`): not replicated state.
    random_draws: keyspace_commands::Draws,
    /// The keys the entries applied lately filled, for the node's blocked clients: not
    /// replicated state.
    filled: FilledKeys,
    /// The keyspace events of the entries applied lately, for the node's subscribers
    /// (`notify.rs`): not replicated state.
    key_events: notify::KeyEvents,
    /// Test-only: a deliberately broken variant (`crate::Mutation::DedupOff`).
    #[cfg(feature = "mutations")]
    mutation: Option<crate::Mutation>,
}

/// One database: its keys, and what the state machine keeps about them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Db {
    pub(crate) data: Map,
    /// XOR of the pair hashes and the deadlines' hashes of this database alone (the state's
    /// digest mixes in the database index: `digest.rs`).
    pub(crate) digest: u64,
    /// The keys of `data` that have a deadline, in deadline order.
    pub(crate) deadlines: Deadlines,
    /// What WATCH compares absent keys by (`key_metadata.rs`). They belong to the database's
    /// index, not to its contents: SWAPDB leaves them in place.
    pub(crate) tombstones: Tombstones,
}

impl Db {
    /// Whether a snapshot may leave this database out: no keys, no WATCH tokens.
    pub(crate) fn is_blank(&self) -> bool {
        self.data.is_empty() && self.tombstones.len() == 0 && self.tombstones.horizon() == 0
    }
}

/// The empty database every database the vector does not reach reads as.
static EMPTY_DB: std::sync::LazyLock<Db> = std::sync::LazyLock::new(Db::default);

/// Most databases a log entry may name (`databases` is at most this): an entry naming a higher
/// one does not decode. A constant, not a setting: every replica must decode the same entries.
pub const DATABASES_MAX: u32 = 1024;

/// The index of the database commands work in now: where the command being applied or read
/// runs, an argument passed through the state machine rather than state (two state machines are
/// equal whatever it says). A `Cell` so that a read (`&self`) can name its database too.
#[derive(Clone, Debug, Default)]
struct CurrentDb(std::cell::Cell<u32>);

impl PartialEq for CurrentDb {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for CurrentDb {}

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

/// The keys writes may have made serve a blocked client, collected only while some client of
/// this node waits on a key (`command/blocking.rs`): what wakes it. Lists and sorted sets filled
/// (pushed to, created, stored, moved or copied in), streams added to, created, removed, replaced
/// or rid of a group (a blocked XREADGROUP then answers an error, as in Redis). Not state: two
/// state machines are equal whatever they collected.
#[derive(Clone, Debug, Default)]
struct FilledKeys {
    collecting: bool,
    keys: Vec<Bytes>,
    /// A write changed a whole database (FLUSHDB, FLUSHALL, SWAPDB): any key may serve now.
    every_key: bool,
}

impl PartialEq for FilledKeys {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for FilledKeys {}

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
            dbs: vec![Db::default()],
            db: CurrentDb::default(),
            versions_valid: true,
            applied_index: 0,
            log_time_ms: 0,
            dedup: DedupTable::new(limits),
            members: BTreeMap::new(),
            members_version: ChangeCounter::default(),
            random_draws: keyspace_commands::Draws::default(),
            filled: FilledKeys::default(),
            key_events: notify::KeyEvents::default(),
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Test-only: switches on a deliberately broken variant, kept across restores.
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<crate::Mutation>) {
        self.mutation = mutation;
    }

    /// Whether the writes applied from now on note the lists and sorted sets they fill (for
    /// [`Self::take_filled_keys`]); off, noting costs nothing.
    pub fn collect_filled_keys(&mut self, on: bool) {
        self.filled.collecting = on;
        if !on {
            self.filled.keys.clear();
            self.filled.every_key = false;
        }
    }

    /// The keys whose list or sorted set a write filled since the last call (with repeats, in
    /// the order the writes ran), while [`Self::collect_filled_keys`] is on: a client blocked
    /// on one of them may now be served. Each is named with its database
    /// ([`crate::command::blocking::waiting_key`]).
    pub fn take_filled_keys(&mut self) -> Vec<Bytes> {
        std::mem::take(&mut self.filled.keys)
    }

    /// Whether a write since the last call changed whole databases (FLUSHDB, FLUSHALL, SWAPDB),
    /// while [`Self::collect_filled_keys`] is on: then any key may serve a blocked client, and
    /// [`Self::take_filled_keys`] does not name them (there may be millions).
    pub fn take_every_key_filled(&mut self) -> bool {
        std::mem::take(&mut self.filled.every_key)
    }

    /// Notes that `key` may serve a blocked client after a write: a list or sorted set with
    /// something in it, or a stream added to, created, removed or replaced.
    pub(crate) fn note_filled(&mut self, key: &[u8]) {
        if self.filled.collecting {
            let named = crate::command::blocking::waiting_key(self.current_db(), key);
            self.filled.keys.push(named);
        }
    }

    /// Notes that whole databases changed (see [`Self::take_every_key_filled`]).
    pub(crate) fn note_every_key_filled(&mut self) {
        if self.filled.collecting {
            self.filled.every_key = true;
        }
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
        let pairs = self.dbs.iter().enumerate().fold(0, |digest, (i, db)| {
            digest ^ db_digest_share(i as u32, db.digest)
        });
        pairs ^ log_time_hash(self.log_time_ms)
    }

    /// The database the next command runs in (`SELECT`): what an entry's `db` sets before it
    /// runs, and what a read names.
    pub(crate) fn select(&self, db: u32) {
        self.db.0.set(db);
    }

    /// The index of the database commands work in now.
    pub(crate) fn current_db(&self) -> u32 {
        self.db.0.get()
    }

    /// The database commands work in now, as it is (empty when no write reached it).
    pub(crate) fn cur(&self) -> &Db {
        self.db_at(self.current_db())
    }

    /// The database commands work in now, for a write (made first if no write reached it).
    pub(crate) fn cur_mut(&mut self) -> &mut Db {
        self.db_at_mut(self.current_db())
    }

    /// Database `db` as it is (empty when no write reached it).
    pub(crate) fn db_at(&self, db: u32) -> &Db {
        self.dbs.get(db as usize).unwrap_or(&EMPTY_DB)
    }

    /// Database `db`, for a write (made first if no write reached it).
    pub(crate) fn db_at_mut(&mut self, db: u32) -> &mut Db {
        let i = db as usize;
        if i >= self.dbs.len() {
            self.dbs.resize_with(i + 1, Db::default);
        }
        &mut self.dbs[i]
    }

    /// How many keys of database `db` hash to `slot` (`crate::slot`; expired keys not yet
    /// removed included). O(1).
    pub fn count_keys_in_slot(&self, db: u32, slot: u16) -> usize {
        self.db_at(db).data.count_in_slot(slot)
    }

    /// Up to `count` keys of database `db` that hash to `slot`, in ascending order: costs what
    /// that slot holds, not the database.
    pub fn keys_in_slot(&self, db: u32, slot: u16, count: usize) -> Vec<Bytes> {
        (self.db_at(db).data.keys_in_slot(slot, count).into_iter())
            .map(|key| Bytes::copy_from_slice(key))
            .collect()
    }

    /// How many databases a write reached (1: database 0 alone).
    pub fn databases_reached(&self) -> usize {
        self.dbs.len()
    }

    /// Every database that holds a key: (index, keys, keys with a deadline), by index (`INFO
    /// keyspace`).
    pub fn keyspace(&self) -> Vec<(u32, usize, usize)> {
        (self.dbs.iter().enumerate())
            .filter(|(_, db)| !db.data.is_empty())
            .map(|(i, db)| (i as u32, db.data.len(), db.deadlines.len()))
            .collect()
    }

    /// Answers `command` as a read in database `db` (see [`Self::read`]).
    pub fn read_in(&self, db: u32, command: &ReadCommand) -> Reply {
        self.select(db);
        let reply = self.read(command);
        self.select(0);
        reply
    }

    /// The state machine's time in ms since the Unix epoch: the highest stamp among the entries
    /// applied so far (0: none carried one). The same on every replica at the same applied index,
    /// and never decreasing (see the module documentation).
    pub fn log_time_ms(&self) -> u64 {
        self.log_time_ms
    }

    /// Keys in every database.
    pub fn len(&self) -> usize {
        self.dbs.iter().map(|db| db.data.len()).sum()
    }

    /// The memory the data is counted as taking (what `maxmemory` bounds): every key and value
    /// byte and 64 bytes per pair. The same on every replica at the same applied index.
    pub fn used_bytes(&self) -> u64 {
        self.dbs.iter().map(|db| db.data.used_bytes()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.dbs.iter().all(|db| db.data.is_empty())
    }

    /// The value of `key` if it exists (not expired) at the state machine's time.
    /// In the database commands work in now: 0 unless a command selected another.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.live(key).and_then(Stored::string)
    }

    /// The string under `key` if it exists at the state machine's time: Ok(None) for no such
    /// key, WRONGTYPE for a key holding a list, hash, set or sorted set.
    pub(crate) fn string(&self, key: &[u8]) -> Result<Option<&[u8]>, WriteError> {
        match self.live(key) {
            None => Ok(None),
            Some(stored) => stored.string().map(Some).ok_or(WriteError::WrongType),
        }
    }

    /// The stored entry of `key` if it exists at the state machine's time: what every command
    /// sees. An expired key stays in the map until a write or a tick entry removes it (every
    /// replica at the same index), but no command sees it.
    fn live(&self, key: &[u8]) -> Option<&Stored> {
        self.cur()
            .data
            .get(key)
            .filter(|stored| stored.alive_at(self.log_time_ms))
    }

    /// Whether the leader should tick while idle (`crate::expiry`): some key has a deadline, or
    /// the versions are placeholders from an older snapshot, which the next tick numbers (until
    /// then every transaction that watches keys aborts).
    pub fn wants_ticks(&self) -> bool {
        self.keys_with_deadline() > 0 || !self.versions_valid
    }

    /// How many keys have a deadline (expired ones not yet removed included), in every database.
    pub fn keys_with_deadline(&self) -> usize {
        self.dbs.iter().map(|db| db.deadlines.len()).sum()
    }

    /// Up to `max` keys whose deadline is at or before `now_ms`, earliest first: what a leader
    /// proposes to remove in a tick entry (active expiry). `now_ms` may be ahead of the log's
    /// time (the leader's clock, about to stamp the tick); the tick removes only what has expired
    /// at its own time. Keys of every database: a tick removes a key it names from every
    /// database where that key has expired (`execute.rs`), so it need not say which.
    pub fn keys_due(&self, now_ms: u64, max: usize) -> Vec<Bytes> {
        if self.dbs.len() == 1 {
            return self.dbs[0].deadlines.due(now_ms, max);
        }
        let mut due: Vec<(u64, Bytes)> = (self.dbs.iter())
            .flat_map(|db| db.deadlines.due_with_deadlines(now_ms, max))
            .collect();
        due.sort();
        due.dedup_by(|a, b| a.1 == b.1);
        due.into_iter().take(max).map(|(_, key)| key).collect()
    }

    /// The earliest deadline of any key, expired or not, in any database.
    pub fn earliest_deadline(&self) -> Option<u64> {
        self.dbs
            .iter()
            .filter_map(|db| db.deadlines.earliest())
            .min()
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

    /// Applies an already decoded command at log `index`, in its database.
    pub fn apply_command(
        &mut self,
        index: u64,
        command: &LogCommand,
    ) -> Result<ApplyReply, ApplyError> {
        let reply = self.apply_selected(index, command);
        // Between commands the state machine is in database 0 (what `read` and `get` see).
        self.select(0);
        reply
    }

    fn apply_selected(
        &mut self,
        index: u64,
        command: &LogCommand,
    ) -> Result<ApplyReply, ApplyError> {
        self.check_index(index)?;
        self.applied_index = index;
        // Before the command runs (it runs at its own time), and whatever becomes of it: a
        // duplicate or a too-old request is in the log with its stamp like any other entry.
        self.log_time_ms = self.log_time_ms.max(command.stamp_ms);
        self.select(command.db);
        if let LoggedCommand::Tick(keys) = &command.command {
            // No request id: a tick is the leader's, proposed once, never retried.
            return Ok(ApplyReply::Write(self.apply_tick(keys)));
        }
        #[cfg(feature = "mutations")]
        if self.mutation == Some(crate::Mutation::DedupOff) {
            // Broken on purpose: the request id is ignored, so a retried request applies again.
            return Ok(self.execute_logged(&command.command).0);
        }
        let reply = match self.dedup.check(command.client_id, command.request_seq) {
            Seen::Duplicate(reply) => {
                self.dedup.touch(index, command.client_id);
                // A command that answers values is remembered as `Ok` when it answered one
                // (the value is not kept), and as its compact reply otherwise (an error, or the
                // null of a pop that found nothing), which a retry gets again.
                if command.command.reply_is_remembered() || reply != WriteReply::Ok {
                    ApplyReply::Write(reply)
                } else {
                    ApplyReply::AppliedBefore
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
            dbs: restored.dbs,
            db: CurrentDb::default(),
            versions_valid: restored.versions_valid,
            applied_index: restored.applied_index,
            log_time_ms: restored.log_time_ms,
            dedup: restored.dedup,
            members: restored.members,
            members_version: ChangeCounter::default(),
            random_draws: keyspace_commands::Draws::default(),
            filled: FilledKeys::default(),
            key_events: notify::KeyEvents::default(),
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

fn too_large(data: &[u8]) -> bool {
    data.len() > STRING_BYTES_MAX
}

#[cfg(test)]
mod tests;
