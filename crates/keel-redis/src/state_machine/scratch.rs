//! A script's scratch state (`crate::script`): a state machine that holds only the keys a script
//! touched, copied from the replicated one, where the script's commands run before any of them
//! is proposed.
//!
//! The scratch never reaches the log, a snapshot or the digest anyone compares: it exists so
//! that the script's reads see its own earlier writes, and so that its writes can be checked
//! (their replies computed) without changing the replicated state. What the script wrote is then
//! proposed as one transaction that watches every key it touched, each from the point it was
//! copied at: the state machine applies it only if none of them changed since, and then every
//! write answers exactly as it did here (the same command on the same values at the same keys).

use super::{KvStateMachine, Stored};
use crate::command::QueuedCommand;
use keel_resp::Reply;

impl KvStateMachine {
    /// An empty scratch state at `index` and log time `time_ms` (see the module documentation).
    pub(crate) fn scratch(index: u64, time_ms: u64) -> KvStateMachine {
        let mut scratch = KvStateMachine::new();
        scratch.applied_index = index;
        scratch.log_time_ms = time_ms;
        scratch
    }

    /// Copies `key` as this state holds it (expired or not; nothing when it is absent) into
    /// `scratch`, replacing what the scratch held there: what a [`crate::script::view::Fetch`]
    /// does with each key, inside a linearizable read.
    /// `db` is the database of the script's caller: the key is copied from there (the scratch
    /// holds it in its database 0, where the script's commands run).
    pub fn copy_key_into(&self, db: u32, key: &[u8], scratch: &mut KvStateMachine) {
        if scratch.cur().data.get(key).is_some() {
            scratch.remove_stored(key);
        }
        if let Some(stored) = self.db_at(db).data.get(key) {
            scratch.insert_copy(key, stored.clone());
        }
    }

    fn insert_copy(&mut self, key: &[u8], stored: Stored) {
        let db = self.cur_mut();
        db.digest ^= stored.pair_hash ^ super::digest::expiry_hash(key, stored.expire_at_ms);
        if stored.expire_at_ms != 0 {
            db.deadlines.insert(stored.expire_at_ms, key);
        }
        db.data.insert_new(key, stored);
    }

    /// Moves the scratch's point forward to a later copy's (the state it was copied from moved
    /// on): keys are judged expired at the latest time any of them was copied at.
    pub(crate) fn advance_scratch(&mut self, index: u64, time_ms: u64) {
        self.applied_index = self.applied_index.max(index);
        self.log_time_ms = self.log_time_ms.max(time_ms);
    }

    /// Runs one of a script's commands in the scratch, as a transaction's command runs.
    pub(crate) fn run_in_scratch(&mut self, command: &QueuedCommand) -> Reply {
        self.execute_all(std::slice::from_ref(command))
            .pop()
            .unwrap_or(Reply::Null)
    }
}
