//! Noting what each applied write did to its keys, for keyspace notifications
//! ([`crate::notify`]): the events Redis fires for the same command, with their names.
//!
//! Off by default and then free: [`KvStateMachine::collect_key_events`] is switched on by the
//! node's listener (`adapter.rs`) only while some flag is set and the node is live, so
//! `keel bench` never pays for it. On, a write is watched from outside: each key it names is
//! looked at before and after it runs (live, expired but still held, its pair hash), and its
//! events follow from the command, its reply and that difference. Nothing here writes the
//! state: the same entries give the same state and digest whether or not events are noted.
//!
//! Events per key, in order: `expired` when the write removed or replaced a key that had
//! expired (Redis finds it expired on lookup), `new` before the first event on a key the write
//! created, then the command's own. A key a write emptied gets `del` after its command's event,
//! as Redis deletes an emptied collection. Tick entries note `expired` for each key they remove
//! (`execute.rs`). FLUSHALL, FLUSHDB and SWAPDB fire nothing, as in Redis.

use bytes::Bytes;

use super::execute::WriteAnswer;
use super::KvStateMachine;
use crate::command::{Expiry, SetCondition, WriteCommand};
use crate::notify::{self, KeyEvent};
use keel_redis_types::list::End;
use keel_redis_types::set::SetAlgebra;
use keel_resp::Reply;

#[path = "notify_commands.rs"]
mod commands;

/// The events noted since the last [`KvStateMachine::take_key_events`]. Not state: two state
/// machines are equal whatever they noted.
#[derive(Clone, Debug, Default)]
pub(super) struct KeyEvents {
    collecting: bool,
    events: Vec<KeyEvent>,
}

impl PartialEq for KeyEvents {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for KeyEvents {}

/// One key as a write found or left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probe {
    /// Held and not expired.
    live: bool,
    /// Held although expired: no command sees it, a write that touches it removes it.
    stale: bool,
    pair_hash: u64,
    expire_at_ms: u64,
}

/// What a write answered, as far as its events depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Error,
    /// Null, or an empty array: it did nothing.
    Nothing,
    Ok,
    Int(i64),
    /// Any other value (an element, an id, an array of them).
    Value,
}

fn outcome(answer: &WriteAnswer) -> Outcome {
    let reply = match answer {
        WriteAnswer::Compact(reply) => {
            return match reply {
                super::WriteReply::Ok => Outcome::Ok,
                super::WriteReply::Nil => Outcome::Nothing,
                super::WriteReply::Integer(n) => Outcome::Int(*n),
                super::WriteReply::Error(_) => Outcome::Error,
            }
        }
        WriteAnswer::Value(reply) => reply,
    };
    match reply {
        Reply::Error(_) => Outcome::Error,
        Reply::Null | Reply::NullArray => Outcome::Nothing,
        Reply::Array(items) if items.is_empty() => Outcome::Nothing,
        Reply::Integer(n) => Outcome::Int(*n),
        Reply::Simple(s) if s == "OK" => Outcome::Ok,
        _ => Outcome::Value,
    }
}

/// A write's keys as it found and left them, and the events noted for it so far.
struct Watched {
    db: u32,
    keys: Vec<(u32, Bytes)>,
    before: Vec<Probe>,
    after: Vec<Probe>,
    /// The command's own events, in order.
    events: Vec<KeyEvent>,
}

impl Watched {
    fn at(&self, db: u32, key: &[u8]) -> Option<usize> {
        self.keys
            .iter()
            .position(|(d, k)| *d == db && k[..] == *key)
    }

    /// Whether `key` of the write's database was live before it ran.
    fn existed(&self, key: &[u8]) -> bool {
        self.at(self.db, key).is_some_and(|i| self.before[i].live)
    }

    /// Whether the write left `key` of `db` other than it found it (created, removed, changed).
    fn changed_in(&self, db: u32, key: &[u8]) -> bool {
        self.at(db, key).is_some_and(|i| {
            let (b, a) = (self.before[i], self.after[i]);
            b.live != a.live
                || (a.live && (b.pair_hash, b.expire_at_ms) != (a.pair_hash, a.expire_at_ms))
        })
    }

    fn after_live(&self, key: &[u8]) -> bool {
        self.at(self.db, key).is_some_and(|i| self.after[i].live)
    }

    /// Whether an event on `key` of the write's database is noted already.
    fn noted(&self, key: &[u8]) -> bool {
        self.events
            .iter()
            .any(|e| e.db == self.db && e.key[..] == *key)
    }

    fn changed(&self, key: &[u8]) -> bool {
        self.changed_in(self.db, key)
    }

    /// Whether the write removed `key` (live before, gone after).
    fn removed(&self, key: &[u8]) -> bool {
        self.at(self.db, key)
            .is_some_and(|i| self.before[i].live && !self.after[i].live)
    }

    fn push_in(&mut self, db: u32, class: u16, event: &'static str, key: &Bytes) {
        self.events.push(KeyEvent {
            db,
            class,
            event,
            key: key.clone(),
        });
    }

    fn push(&mut self, class: u16, event: &'static str, key: &Bytes) {
        self.push_in(self.db, class, event, key);
    }

    /// `event`, then `del` if the write emptied the key.
    fn push_then_del(&mut self, class: u16, event: &'static str, key: &Bytes) {
        self.push(class, event, key);
        self.del_if_removed(key);
    }

    fn del_if_removed(&mut self, key: &Bytes) {
        if self.removed(key) {
            self.push(notify::GENERIC, "del", key);
        }
    }
}

impl KvStateMachine {
    /// Whether the writes applied from now on note their keyspace events (for
    /// [`Self::take_key_events`]); off, noting costs nothing.
    pub fn collect_key_events(&mut self, on: bool) {
        self.key_events.collecting = on;
        if !on {
            self.key_events.events.clear();
        }
    }

    /// The events noted since the last call, in the order the writes ran.
    pub fn take_key_events(&mut self) -> Vec<KeyEvent> {
        std::mem::take(&mut self.key_events.events)
    }

    /// Notes that a tick removed `key` of `db` because it expired.
    pub(super) fn note_expired(&mut self, db: u32, key: &[u8]) {
        if self.key_events.collecting {
            self.key_events.events.push(KeyEvent {
                db,
                class: notify::EXPIRED,
                event: "expired",
                key: Bytes::copy_from_slice(key),
            });
        }
    }

    fn probe(&self, db: u32, key: &[u8]) -> Probe {
        match self.db_at(db).data.get(key) {
            None => Probe {
                live: false,
                stale: false,
                pair_hash: 0,
                expire_at_ms: 0,
            },
            Some(stored) => {
                let live = stored.alive_at(self.log_time_ms);
                Probe {
                    live,
                    stale: !live,
                    pair_hash: stored.pair_hash,
                    expire_at_ms: stored.expire_at_ms,
                }
            }
        }
    }

    /// Runs a write, noting its events while collecting is on.
    pub(super) fn execute_noting(&mut self, command: &WriteCommand) -> WriteAnswer {
        if !self.key_events.collecting {
            return self.execute(command);
        }
        let db = self.current_db();
        let mut keys = commands::keys_of(command, db);
        let mut seen = Vec::with_capacity(keys.len());
        keys.retain(|k| {
            let first = !seen.contains(k);
            seen.push(k.clone());
            first
        });
        let before: Vec<Probe> = keys.iter().map(|(d, k)| self.probe(*d, k)).collect();
        let streams = commands::streams_before(self, command);
        let answer = self.execute(command);
        let after: Vec<Probe> = keys.iter().map(|(d, k)| self.probe(*d, k)).collect();
        let mut watched = Watched {
            db,
            keys,
            before,
            after,
            events: Vec::new(),
        };
        commands::events(self, command, outcome(&answer), &streams, &mut watched);
        self.note_watched(watched);
        answer
    }

    /// Puts a write's events in order: every `expired` first, then `new` before the first event
    /// on each key the write created.
    fn note_watched(&mut self, watched: Watched) {
        let out = &mut self.key_events.events;
        for (i, (db, key)) in watched.keys.iter().enumerate() {
            if watched.before[i].stale && !watched.after[i].stale {
                out.push(KeyEvent {
                    db: *db,
                    class: notify::EXPIRED,
                    event: "expired",
                    key: key.clone(),
                });
            }
        }
        let mut announced = vec![false; watched.keys.len()];
        for event in watched.events.iter() {
            if let Some(i) = watched.at(event.db, &event.key) {
                if !watched.before[i].live && watched.after[i].live && !announced[i] {
                    announced[i] = true;
                    out.push(KeyEvent {
                        db: event.db,
                        class: notify::NEW,
                        event: "new",
                        key: event.key.clone(),
                    });
                }
            }
            out.push(event.clone());
        }
    }
}

/// LPUSH or RPUSH, as a push at `end` fires.
fn push_event(end: End) -> &'static str {
    match end {
        End::Left => "lpush",
        End::Right => "rpush",
    }
}

fn pop_event(end: End) -> &'static str {
    match end {
        End::Left => "lpop",
        End::Right => "rpop",
    }
}

fn store_event(algebra: SetAlgebra) -> &'static str {
    match algebra {
        SetAlgebra::Inter => "sinterstore",
        SetAlgebra::Union => "sunionstore",
        SetAlgebra::Diff => "sdiffstore",
    }
}

/// Whether a SET's condition held, given whether the key existed.
fn condition_held(condition: SetCondition, existed: bool) -> bool {
    match condition {
        SetCondition::Always => true,
        SetCondition::IfAbsent => !existed,
        SetCondition::IfPresent => existed,
    }
}

/// Whether an expiry gives the key a deadline.
fn sets_deadline(expiry: Expiry) -> bool {
    matches!(expiry, Expiry::AfterMs(_) | Expiry::AtMs(_))
}
