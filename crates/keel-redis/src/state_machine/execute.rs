//! Running commands against the state: writes (at the index and time of the entry that carries
//! them), reads, transactions and tick entries.
//!
//! ## Time and expiry
//!
//! Every command runs at the state machine's time `now` = T(i), the log time once the entry's
//! stamp is taken into account (`log_time_ms` in `mod.rs`); a read runs at the time of the state
//! it reads. A key whose deadline is at or before `now` does not exist for any command. It stays
//! in the map until removed: by a write that touches it (before the write runs), or by a tick
//! entry that names it (active expiry, proposed by the leader). Both happen at the same index on
//! every replica, so replicas stay equal key for key, not only in what commands see. A relative
//! deadline (EX, PX, EXPIRE, PEXPIRE) is `now + ttl`, computed here when the entry applies; the
//! log carries the duration, never a node's idea of the deadline.

use bytes::Bytes;

use super::apply_reply::{self, ApplyReply};
use super::digest::{expiry_hash, pair_hash};
use super::lcs;
use super::value::{Stored, Value};
use super::{
    too_large, KvStateMachine, LoggedCommand, WriteError, WriteReply, EXEC_REPLY_BYTES_MAX,
    STRING_BYTES_MAX,
};
use crate::command::{
    ExpireCondition, Expiry, QueuedCommand, ReadCommand, SetCondition, TtlCommand, TtlForm,
    WatchedKey, WriteCommand,
};
use crate::kind::Kind;
use keel_resp::number::parse_i64;
use keel_resp::Reply;
use std::sync::Arc;

/// What a write answers: compact (remembered by deduplication as it is), or a value (SET GET,
/// GETDEL, GETEX, INCRBYFLOAT), of which deduplication remembers only that it applied.
pub(super) enum WriteAnswer {
    Compact(WriteReply),
    Value(Reply),
}

impl From<WriteReply> for WriteAnswer {
    fn from(reply: WriteReply) -> Self {
        WriteAnswer::Compact(reply)
    }
}

impl From<WriteError> for WriteAnswer {
    fn from(error: WriteError) -> Self {
        WriteAnswer::Compact(WriteReply::Error(error))
    }
}

impl WriteAnswer {
    fn into_reply(self) -> Reply {
        match self {
            WriteAnswer::Compact(reply) => reply.to_reply(),
            WriteAnswer::Value(reply) => reply,
        }
    }
}

impl LoggedCommand {
    /// Whether deduplication remembers this command's reply itself (else only that it applied:
    /// a retry of it answers [`ApplyReply::AppliedBefore`]).
    pub(crate) fn reply_is_remembered(&self) -> bool {
        match self {
            LoggedCommand::Write(write) => !write.replies_with_value(),
            LoggedCommand::MemberAddrs(_) => true,
            LoggedCommand::Exec(_) | LoggedCommand::WatchedExec { .. } | LoggedCommand::Tick(_) => {
                false
            }
        }
    }
}

impl WriteCommand {
    /// Whether the reply carries a stored value (see `LoggedCommand::reply_is_remembered`).
    pub fn replies_with_value(&self) -> bool {
        if let WriteCommand::Collection(typed) = self {
            return typed.op.replies_with_value();
        }
        matches!(
            self,
            WriteCommand::SetWith { get: true, .. }
                | WriteCommand::GetDel { .. }
                | WriteCommand::GetEx { .. }
                | WriteCommand::IncrByFloat { .. }
        )
    }
}

/// A deadline computed from an [`Expiry`] at `now_ms`: `Ok(None)` for "no deadline", an error for
/// one that does not fit (Redis's "invalid expire time"). A deadline at or before `now_ms` (EXPIRE
/// with a negative or past time) is returned as it is: the caller removes the key.
fn deadline_of(
    expiry: Expiry,
    now_ms: u64,
    current_ms: u64,
    command: TtlCommand,
) -> Result<Option<i64>, WriteError> {
    let invalid = WriteError::InvalidExpireTime(command);
    let now = i64::try_from(now_ms).map_err(|_| invalid)?;
    Ok(match expiry {
        Expiry::Clear => None,
        Expiry::Keep => (current_ms != 0).then_some(current_ms as i64),
        Expiry::AfterMs(ttl_ms) => Some(now.checked_add(ttl_ms).ok_or(invalid)?),
        Expiry::AtMs(at_ms) => Some(at_ms),
    })
}

impl KvStateMachine {
    /// Runs a logged command; returns its reply and what deduplication remembers of it.
    pub(super) fn execute_logged(&mut self, command: &LoggedCommand) -> (ApplyReply, WriteReply) {
        match command {
            LoggedCommand::Write(write) => match self.execute_noting(write) {
                WriteAnswer::Compact(reply) => {
                    // What a duplicate of a command that answers values relies on: its `Ok` in
                    // the table means "applied, answered a value" (`mod.rs`, `apply_command`).
                    debug_assert!(
                        !(write.replies_with_value() && reply == WriteReply::Ok),
                        "a value command answered a compact +OK"
                    );
                    (ApplyReply::Write(reply), reply)
                }
                // Only "applied" is remembered (see apply_reply.rs).
                WriteAnswer::Value(reply) => (ApplyReply::Value(reply), WriteReply::Ok),
            },
            LoggedCommand::Exec(commands) => {
                (ApplyReply::Exec(self.execute_all(commands)), WriteReply::Ok)
            }
            LoggedCommand::WatchedExec { watched, commands } => {
                // Decided here, at this index, so every replica decides the same.
                if watched.iter().any(|w| self.watched_changed(w)) && !self.ignores_watches() {
                    (ApplyReply::ExecAborted, WriteReply::Ok)
                } else {
                    (ApplyReply::Exec(self.execute_all(commands)), WriteReply::Ok)
                }
            }
            LoggedCommand::MemberAddrs(addrs) => {
                let reply = self.record_member_addrs(addrs);
                (ApplyReply::Write(reply), reply)
            }
            LoggedCommand::Tick(keys) => (ApplyReply::Write(self.apply_tick(keys)), WriteReply::Ok),
        }
    }

    /// A tick entry: the log's time moved on (already taken), and the keys it names are removed
    /// if they have expired by now (a key written again since the leader chose it is not).
    /// Answers how many were removed. Also where versions are numbered again after a restore of
    /// a snapshot without them (`versions_valid`).
    pub(super) fn apply_tick(&mut self, keys: &[Bytes]) -> WriteReply {
        if !self.versions_valid {
            let index = self.applied_index;
            for db in &mut self.dbs {
                db.data.for_each_mut(|stored| stored.version = index);
                db.tombstones.clear_at(index);
            }
            self.versions_valid = true;
        }
        // A key is named once whatever database it is in: it goes from each where it expired.
        let mut removed = 0;
        for db in 0..self.dbs.len() as u32 {
            self.select(db);
            for key in keys {
                if self.expire_if_due(key) {
                    removed += 1;
                    self.note_expired(db, key);
                }
            }
        }
        self.select(0);
        WriteReply::Integer(removed as i64)
    }

    /// Runs a transaction's commands in order: one reply each. A failing command answers its
    /// error and the others still run (no rollback, as in Redis). Reads see the writes before
    /// them; their replies are bounded by [`EXEC_REPLY_BYTES_MAX`] in all.
    pub(super) fn execute_all(&mut self, commands: &[QueuedCommand]) -> Vec<Reply> {
        let mut reply_bytes = 0usize;
        let mut replies = Vec::with_capacity(commands.len());
        for command in commands {
            let reply = match command {
                QueuedCommand::Write(write) => self.execute_noting(write).into_reply(),
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
                QueuedCommand::Select(db) => {
                    self.select(*db);
                    Reply::OK
                }
            };
            reply_bytes += apply_reply::reply_bytes(&reply);
            replies.push(reply);
        }
        replies
    }

    #[expect(clippy::too_many_lines)]
    pub(super) fn execute(&mut self, command: &WriteCommand) -> WriteAnswer {
        match command {
            WriteCommand::Set {
                key,
                value,
                condition,
            } => {
                if too_large(key) || too_large(value) {
                    return WriteError::StringTooLarge.into();
                }
                // A plain SET needs no lookup before its insert (one table probe, the hot path);
                // an expired key it overwrites is simply replaced.
                let allowed = match condition {
                    SetCondition::Always => true,
                    SetCondition::IfAbsent => self.live(key).is_none(),
                    SetCondition::IfPresent => self.live(key).is_some(),
                };
                if !allowed {
                    return WriteReply::Nil.into();
                }
                self.put(key, value, 0);
                WriteReply::Ok.into()
            }
            WriteCommand::SetWith {
                key,
                value,
                condition,
                expiry,
                get,
                command,
            } => self.set_with(key, value, *condition, *expiry, *get, *command),
            WriteCommand::Del { keys } => {
                let removed = keys.iter().filter(|key| self.remove_live(key)).count();
                WriteReply::Integer(removed as i64).into()
            }
            WriteCommand::IncrBy { key, delta } => {
                let current = match self.counter(key, parse_i64, 0, WriteError::NotInteger) {
                    Ok(current) => current,
                    Err(error) => return error.into(),
                };
                let Some(new) = current.checked_add(*delta) else {
                    return WriteError::Overflow.into();
                };
                self.put_keeping_deadline(key, new.to_string().as_bytes());
                WriteReply::Integer(new).into()
            }
            WriteCommand::MSet { pairs } => {
                // All or nothing: check every pair before changing anything.
                if pairs.iter().any(|(k, v)| too_large(k) || too_large(v)) {
                    return WriteError::StringTooLarge.into();
                }
                for (key, value) in pairs {
                    self.put(key, value, 0);
                }
                WriteReply::Ok.into()
            }
            WriteCommand::MSetNx { pairs } => {
                if pairs.iter().any(|(k, v)| too_large(k) || too_large(v)) {
                    return WriteError::StringTooLarge.into();
                }
                for (key, _) in pairs {
                    self.expire_if_due(key);
                }
                if pairs.iter().any(|(key, _)| self.live(key).is_some()) {
                    return WriteReply::Integer(0).into();
                }
                for (key, value) in pairs {
                    self.put(key, value, 0);
                }
                WriteReply::Integer(1).into()
            }
            WriteCommand::Append { key, value } => {
                self.expire_if_due(key);
                let old = match self.string(key) {
                    Ok(old) => old.unwrap_or_default(),
                    Err(error) => return error.into(),
                };
                let new_len = old.len() + value.len();
                if too_large(key) || new_len > STRING_BYTES_MAX {
                    return WriteError::StringTooLarge.into();
                }
                // Values are exact-size: an append copies the value (O(length), unlike Redis's
                // amortised O(1)); the 64 MiB bound keeps that finite.
                let mut joined = Vec::with_capacity(new_len);
                joined.extend_from_slice(old);
                joined.extend_from_slice(value);
                self.put_keeping_deadline(key, &joined);
                WriteReply::Integer(new_len as i64).into()
            }
            WriteCommand::Cas { key, expected, new } => {
                if too_large(key) || too_large(new) {
                    return WriteError::StringTooLarge.into();
                }
                match self.string(key) {
                    Err(error) => return error.into(),
                    Ok(current) if current != Some(&expected[..]) => {
                        return WriteReply::Integer(0).into()
                    }
                    Ok(_) => {}
                }
                self.put(key, new, 0);
                WriteReply::Integer(1).into()
            }
            WriteCommand::GetDel { key } => {
                let value = match self.string(key) {
                    Ok(value) => value.map(Bytes::copy_from_slice),
                    Err(error) => return error.into(),
                };
                self.expire_if_due(key);
                if value.is_some() {
                    self.remove_live(key);
                }
                WriteAnswer::Value(value.map_or(Reply::Null, Reply::Bulk))
            }
            WriteCommand::GetEx { key, expiry } => self.get_ex(key, *expiry),
            WriteCommand::Expire {
                key,
                deadline,
                condition,
                command,
            } => self.expire(key, *deadline, *condition, *command),
            WriteCommand::Persist { key } => {
                self.expire_if_due(key);
                match self.cur().data.get(key) {
                    Some(stored) if stored.expire_at_ms != 0 => {
                        self.set_deadline(key, 0);
                        WriteReply::Integer(1).into()
                    }
                    _ => WriteReply::Integer(0).into(),
                }
            }
            WriteCommand::FlushAll => {
                for db in 0..self.dbs.len() as u32 {
                    self.flush(db);
                }
                WriteReply::Ok.into()
            }
            WriteCommand::FlushDb => {
                self.flush(self.current_db());
                WriteReply::Ok.into()
            }
            WriteCommand::SwapDb { a, b } => self.swap_dbs(*a, *b),
            WriteCommand::Move { key, db } => self.move_key(key, *db),
            WriteCommand::IncrByFloat { key, delta } => self.incr_by_float(key, delta.0),
            WriteCommand::SetRange { key, offset, value } => self.set_range(key, *offset, value),
            WriteCommand::SetBit { key, offset, bit } => self.set_bit(key, *offset, *bit),
            WriteCommand::Rename {
                key,
                new_key,
                only_if_absent,
            } => self.rename(key, new_key, *only_if_absent),
            WriteCommand::Copy {
                source,
                destination,
                replace,
                db,
            } => self.copy(source, destination, *replace, *db),
            WriteCommand::Collection(typed) => self.execute_collection(&typed.op),
        }
    }

    fn set_with(
        &mut self,
        key: &[u8],
        value: &[u8],
        condition: SetCondition,
        expiry: Expiry,
        get: bool,
        command: TtlCommand,
    ) -> WriteAnswer {
        if too_large(key) || too_large(value) {
            return WriteError::StringTooLarge.into();
        }
        self.expire_if_due(key);
        let current = self
            .cur()
            .data
            .get(key)
            .map(|s| s.expire_at_ms)
            .unwrap_or(0);
        let deadline = match deadline_of(expiry, self.log_time_ms, current, command) {
            Ok(deadline) => deadline,
            Err(error) => return error.into(),
        };
        let exists = self.cur().data.get(key).is_some();
        // SET ... GET answers the value replaced, so it must be a string; a plain SET replaces
        // whatever the key holds.
        let old = match self.string(key) {
            Ok(old) => old.map(Bytes::copy_from_slice),
            Err(error) if get => return error.into(),
            Err(_) => None,
        };
        let allowed = match condition {
            SetCondition::Always => true,
            SetCondition::IfAbsent => !exists,
            SetCondition::IfPresent => exists,
        };
        if allowed {
            match deadline {
                // Already past (EXAT or PXAT in the past): set and at once expired, as in Redis:
                // the key is gone.
                Some(at) if at <= self.log_time_ms as i64 => {
                    self.remove_live(key);
                }
                at => self.put(key, value, at.map_or(0, |at| at as u64)),
            }
        }
        match (get, allowed) {
            (true, _) => WriteAnswer::Value(old.map_or(Reply::Null, Reply::Bulk)),
            (false, true) => WriteReply::Ok.into(),
            (false, false) => WriteReply::Nil.into(),
        }
    }

    fn get_ex(&mut self, key: &[u8], expiry: Expiry) -> WriteAnswer {
        self.expire_if_due(key);
        let Some(stored) = self.cur().data.get(key) else {
            return WriteAnswer::Value(Reply::Null);
        };
        let Some(value) = stored.string().map(Bytes::copy_from_slice) else {
            return WriteError::WrongType.into();
        };
        let current = stored.expire_at_ms;
        match deadline_of(expiry, self.log_time_ms, current, TtlCommand::GetEx) {
            Err(error) => return error.into(),
            Ok(Some(at)) if at <= self.log_time_ms as i64 => {
                self.remove_live(key);
            }
            Ok(at) => {
                let at = at.map_or(0, |at| at as u64);
                if at != current {
                    self.set_deadline(key, at);
                }
            }
        }
        WriteAnswer::Value(Reply::Bulk(value))
    }

    fn expire(
        &mut self,
        key: &[u8],
        deadline: Expiry,
        condition: ExpireCondition,
        command: TtlCommand,
    ) -> WriteAnswer {
        self.expire_if_due(key);
        let Some(current) = self.cur().data.get(key).map(|s| s.expire_at_ms) else {
            return WriteReply::Integer(0).into();
        };
        let new = match deadline_of(deadline, self.log_time_ms, current, command) {
            Ok(Some(new)) => new,
            Ok(None) => unreachable!("EXPIRE always names a deadline"),
            Err(error) => return error.into(),
        };
        // No deadline counts as infinitely far (GT never holds against it, LT always does).
        let allowed = match condition {
            ExpireCondition::Always => true,
            ExpireCondition::IfNone => current == 0,
            ExpireCondition::IfSome => current != 0,
            ExpireCondition::IfLater => current != 0 && new > current as i64,
            ExpireCondition::IfEarlier => current == 0 || new < current as i64,
            ExpireCondition::IfEarlierWithDeadline => current != 0 && new < current as i64,
        };
        if !allowed {
            return WriteReply::Integer(0).into();
        }
        if new <= self.log_time_ms as i64 {
            self.remove_live(key);
        } else {
            self.set_deadline(key, new as u64);
        }
        WriteReply::Integer(1).into()
    }

    /// The number `key` holds for INCRBY and INCRBYFLOAT to add to (`zero` for no key), once an
    /// expired entry is removed; `not_a_number` if the value does not `parse`.
    pub(super) fn counter<T>(
        &mut self,
        key: &[u8],
        parse: impl Fn(&[u8]) -> Option<T>,
        zero: T,
        not_a_number: WriteError,
    ) -> Result<T, WriteError> {
        if too_large(key) {
            return Err(WriteError::StringTooLarge);
        }
        self.expire_if_due(key);
        match self.string(key)? {
            None => Ok(zero),
            Some(value) => parse(value).ok_or(not_a_number),
        }
    }

    /// Stores a copy of `value` under `key` with deadline `expire_at_ms` (0: none), changed at
    /// the current index: in place when the key holds an unshared value of the same length (see
    /// [`Stored`]).
    pub(super) fn put(&mut self, key: &[u8], value: &[u8], expire_at_ms: u64) {
        if self.holds_stream(key) {
            // A blocked XREADGROUP on it answers that the stream is gone, as in Redis.
            self.note_filled(key);
        }
        let hash = pair_hash(key, value);
        let index = self.applied_index;
        let db = self.cur_mut();
        db.digest ^= hash ^ expiry_hash(key, expire_at_ms);
        match db.data.get_mut(key) {
            Some(stored) => {
                db.digest ^= stored.pair_hash ^ expiry_hash(key, stored.expire_at_ms);
                db.deadlines.moved(key, stored.expire_at_ms, expire_at_ms);
                stored.pair_hash = hash;
                stored.expire_at_ms = expire_at_ms;
                stored.version = index;
                let old_len = stored.counted_bytes() as usize;
                match &mut stored.value {
                    Value::Str(buffer) => match Arc::get_mut(buffer) {
                        Some(buffer) if buffer.len() == value.len() => {
                            buffer.copy_from_slice(value)
                        }
                        _ => *buffer = Arc::from(value),
                    },
                    // A SET over a list, hash, set or sorted set replaces it.
                    other => *other = Value::Str(Arc::from(value)),
                }
                db.data.value_resized(old_len, value.len());
            }
            None => {
                if expire_at_ms != 0 {
                    db.deadlines.insert(expire_at_ms, key);
                }
                db.tombstones.forget(key);
                db.data
                    .insert_new(key, Stored::new(value, hash, expire_at_ms, index));
            }
        }
    }

    /// [`Self::put`] keeping the deadline the key has (INCR, APPEND, SETRANGE, ...: they change
    /// the value, not the expiry, as in Redis). The caller removed it first if it had expired.
    pub(super) fn put_keeping_deadline(&mut self, key: &[u8], value: &[u8]) {
        let deadline = self
            .cur()
            .data
            .get(key)
            .map_or(0, |stored| stored.expire_at_ms);
        self.put(key, value, deadline);
    }

    /// Changes the deadline of a key the map holds (0: none), at the current index.
    fn set_deadline(&mut self, key: &[u8], expire_at_ms: u64) {
        let index = self.applied_index;
        let db = self.cur_mut();
        let stored = db.data.get_mut(key).expect("the caller checked the key");
        db.digest ^= expiry_hash(key, stored.expire_at_ms) ^ expiry_hash(key, expire_at_ms);
        db.deadlines.moved(key, stored.expire_at_ms, expire_at_ms);
        stored.expire_at_ms = expire_at_ms;
        stored.version = index;
    }

    /// Removes `key` if it is held and has expired; true if it was. Every write runs this (or
    /// looks only at live keys) before touching a key, at the same index on every replica.
    pub(super) fn expire_if_due(&mut self, key: &[u8]) -> bool {
        match self.cur().data.get(key) {
            Some(stored) if !stored.alive_at(self.log_time_ms) => {
                self.remove_stored(key);
                let index = self.applied_index;
                self.cur_mut().tombstones.record(key, index);
                true
            }
            _ => false,
        }
    }

    /// Removes `key` if it exists (not expired); true if it did. An expired key is removed too,
    /// but does not count.
    pub(super) fn remove_live(&mut self, key: &[u8]) -> bool {
        if self.expire_if_due(key) || self.cur().data.get(key).is_none() {
            return false;
        }
        self.remove_stored(key);
        let index = self.applied_index;
        self.cur_mut().tombstones.record(key, index);
        true
    }

    pub(super) fn remove_stored(&mut self, key: &[u8]) {
        let old = self
            .cur_mut()
            .data
            .remove(key)
            .expect("the caller checked the key");
        if old.value.kind() == Kind::Stream {
            // A blocked XREADGROUP on it answers that the stream is gone, as in Redis.
            self.note_filled(key);
        }
        self.cur_mut().digest ^= old.pair_hash ^ expiry_hash(key, old.expire_at_ms);
        if old.expire_at_ms != 0 {
            self.cur_mut().deadlines.remove(old.expire_at_ms, key);
        }
    }

    /// Whether `key` holds a stream (expired or not).
    fn holds_stream(&self, key: &[u8]) -> bool {
        self.cur()
            .data
            .get(key)
            .is_some_and(|stored| stored.value.kind() == Kind::Stream)
    }

    /// FLUSHDB of database `db`: every key removed; every removed key's WATCH token changes.
    fn flush(&mut self, db: u32) {
        self.note_every_key_filled();
        let index = self.applied_index;
        let db = self.db_at_mut(db);
        let data = std::mem::take(&mut db.data);
        tombstone_all(&mut db.tombstones, &data, index);
        db.digest = 0;
        db.deadlines.clear();
    }

    /// Whether `watched` changed since it was watched (`key_metadata.rs`). Every key counts as
    /// changed while versions are placeholders (`versions_valid`).
    /// Test-only: the `watch-ignored` mutation (a broken variant for the simulator to catch).
    fn ignores_watches(&self) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.mutation == Some(crate::Mutation::WatchIgnored)
        }
        #[cfg(not(feature = "mutations"))]
        {
            false
        }
    }

    pub fn watched_changed(&self, watched: &WatchedKey) -> bool {
        if !self.versions_valid {
            return true;
        }
        let db = self.db_at(watched.db);
        match db.data.get(&watched.key[..]) {
            Some(stored) => {
                let expired_since =
                    stored.expire_at_ms > watched.time_ms && !stored.alive_at(self.log_time_ms);
                stored.version > watched.index || expired_since
            }
            None => db.tombstones.removed_at(&watched.key) > watched.index,
        }
    }

    /// Answers a read from the current state, at the state's time. Linearizability is the
    /// caller's job (serve it only once this state machine has applied the read index).
    pub fn read(&self, command: &ReadCommand) -> Reply {
        // MGET answers null for a key holding a list, hash, set or sorted set; GET answers WRONGTYPE.
        let value = |key: &Bytes| {
            self.live(key)
                .and_then(Stored::shared_string)
                .map_or(Reply::Null, Reply::Bulk)
        };
        let wrong_type = || Reply::error(WriteError::WrongType.to_string());
        match command {
            // One table probe, as before collections: GET is the hot read.
            ReadCommand::Get { key } => match self.live(key) {
                None => Reply::Null,
                Some(stored) => stored.shared_string().map_or_else(wrong_type, Reply::Bulk),
            },
            ReadCommand::MGet { keys } => Reply::Array(keys.iter().map(value).collect()),
            ReadCommand::Exists { keys } => {
                // Redis counts a key named twice twice.
                Reply::Integer(keys.iter().filter(|k| self.live(k).is_some()).count() as i64)
            }
            ReadCommand::StrLen { key } => match self.string(key) {
                Ok(value) => Reply::Integer(value.map_or(0, |v| v.len()) as i64),
                Err(_) => wrong_type(),
            },
            // Expired keys not yet removed count, as in Redis.
            ReadCommand::DbSize => Reply::Integer(self.cur().data.len() as i64),
            ReadCommand::Ttl { key, form } => Reply::Integer(self.ttl(key, *form)),
            ReadCommand::WatchPoint => Reply::Array(vec![
                Reply::Integer(self.applied_index as i64),
                Reply::Integer(self.log_time_ms as i64),
            ]),
            ReadCommand::GetRange { key, start, end } => self.get_range(key, *start, *end),
            ReadCommand::GetBit { key, offset } => self.get_bit(key, *offset),
            ReadCommand::BitCount { key, range } => self.bit_count(key, *range),
            ReadCommand::Lcs { key1, key2, form } => match (self.string(key1), self.string(key2)) {
                (Ok(a), Ok(b)) => lcs::longest_common_subsequence(
                    a.unwrap_or_default(),
                    b.unwrap_or_default(),
                    *form,
                ),
                _ => Reply::error("WRONGTYPE The specified keys must contain string values"),
            },
            ReadCommand::Type { key } => self.key_type(key),
            ReadCommand::RandomKey => self.random_key(),
            ReadCommand::Keys { pattern } => self.keys(pattern),
            ReadCommand::Scan(args) => self.scan(args),
            ReadCommand::Collection(typed) => self.read_collection(&typed.op),
        }
    }

    /// TTL and friends: -2 no such key, -1 no deadline.
    fn ttl(&self, key: &[u8], form: TtlForm) -> i64 {
        let Some(stored) = self.live(key) else {
            return -2;
        };
        if stored.expire_at_ms == 0 {
            return -1;
        }
        let left_ms = (stored.expire_at_ms - self.log_time_ms) as i64;
        match form {
            // Redis rounds to the nearest second.
            TtlForm::RemainingSeconds => (left_ms + 500) / 1000,
            TtlForm::RemainingMs => left_ms,
            TtlForm::AtSeconds => (stored.expire_at_ms / 1000) as i64,
            TtlForm::AtMs => stored.expire_at_ms as i64,
        }
    }
}

/// Gives every key of `data` its tombstone at `index` (a key that did not exist is untouched: a
/// transaction watching it still runs, as in Redis), or, when they would not fit, moves the
/// horizon, which changes every absent key's token.
pub(super) fn tombstone_all(tombstones: &mut super::Tombstones, data: &super::Map, index: u64) {
    if tombstones.len() + data.len() <= super::key_metadata::TOMBSTONES_MAX {
        for key in data.keys() {
            tombstones.record(key, index);
        }
    } else {
        tombstones.clear_at(index);
    }
}
