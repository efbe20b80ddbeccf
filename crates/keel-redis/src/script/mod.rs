//! Lua scripts (`EVAL`, `EVALSHA`, `EVAL_RO`, `EVALSHA_RO`, `SCRIPT LOAD | EXISTS | FLUSH |
//! KILL`): atomic under consensus without running a script on every replica.
//!
//! Redis runs a script to its end while nothing else runs, then replicates what it changed.
//! keel cannot stop the cluster for a script, and must not run it on every replica either: a
//! script may loop (every replica's apply would stop with it, the whole cluster's writes
//! behind), read the clock or draw random numbers (replicas would diverge). So a script runs
//! once, on the leader, optimistically, and only its effects go through the log:
//!
//! 1. The script runs in a sandboxed Lua 5.1 state (`lua.rs`) on a thread of its own. Each
//!    `redis.call` runs in the script's scratch state (`view.rs`): the keys the command names
//!    are copied from the replicated state the first time the script touches them, by a
//!    linearizable read that also records the applied index `w` and log time `t` of the state
//!    they came from; the command then runs on the copies. Nothing is proposed while the script
//!    runs, so it can be killed at any moment (`SCRIPT KILL`), and a script that fails proposes
//!    nothing.
//! 2. At its end, its writes, in order, become one transaction that watches every key the script
//!    touched, each from its own `(w, t)`: the `EXEC WATCHED` entry a client's `WATCH` ...
//!    `EXEC` makes (`state_machine/key_metadata.rs` decides what "changed" means, expiry included).
//! 3. If the state machine applies it, no key the script touched changed between the copy and
//!    the entry's index `i`: every value the script read is the value at `i`, and every write it
//!    made runs at `i` on exactly the values it ran on in the scratch, so it answers the same.
//!    The script took effect atomically at `i`, a point inside the call: linearizable. If a key
//!    changed, the entry applies as nothing (every replica decides alike) and the script runs
//!    again from step 1, at most [`SCRIPT_ATTEMPTS_MAX`] times in all; then the client gets
//!    `-TRYAGAIN` and nothing of the script applied.
//! 4. A script that wrote nothing proposes nothing. When all its keys came in one copy, that
//!    copy was one linearizable read of every key: done. Otherwise a last read checks that none
//!    changed since its copy (the check `EXEC WATCHED` makes, done locally), or runs the script
//!    again.
//!
//! What a client may notice: a script's reply is what it computed (Redis's effects
//! replication, not script replication); `TIME` and random numbers are read once; commands that
//! reach keys they do not name (KEYS, SCAN, RANDOMKEY, DBSIZE, FLUSHALL, FLUSHDB, SORT ... BY or
//! GET patterns) are refused inside scripts, because what they read could not be watched.
//! Scripts run on the leader: a follower forwards `EVAL` (once: a lost link leaves the outcome
//! unknown, `-TRYAGAIN`) unless the script reads no key, which runs where it was sent. Each node
//! keeps its own script cache: `SCRIPT LOAD` on one node does not load the script on the others
//! (`EVALSHA` elsewhere answers `NOSCRIPT`, and clients fall back to `EVAL`, as they do after a
//! Redis restart); a follower forwards `EVALSHA` of a script in its cache as `EVAL` of its body,
//! so that a script loaded on a follower runs there (whether or not the leader has it).
//!
//! **Scripts in a transaction.** `EVAL` and its kin (and `SCRIPT LOAD | EXISTS | FLUSH`) queued
//! between `MULTI` and `EXEC` run at `EXEC`, as in Redis, atomically with the transaction's other
//! commands. keel runs such a transaction whole the way it runs one script: its commands and
//! scripts, in order, in one scratch view (each script in its own Lua state, the view shared, so
//! each sees the writes before it); their writes, in order, become one `EXEC WATCHED` entry
//! watching every key touched and every key the client watched with `WATCH`. A watched key that
//! changed answers EXEC nil, as for any transaction; another key touched that changed runs the
//! transaction again (steps 1 to 4 above, the same bound). EXEC's array holds each request's
//! reply in its place: a script's error is its element, and its writes before the error apply,
//! as in Redis. In such a transaction the commands that reach keys they do not name are refused
//! as they are inside scripts. A follower forwards the transaction whole (`MULTI` ... `EXEC`)
//! to the leader, once.
//!
//! While a script has run longer than `busy-reply-threshold` (`lua-time-limit`, 5 s by
//! default) its node answers other commands `-BUSY`, as Redis does, except those Redis lets
//! through (`SCRIPT KILL`, `AUTH`, `HELLO`, `MULTI`, `DISCARD`, `WATCH`, `UNWATCH`, `QUIT`,
//! `SHUTDOWN`, `CLIENT`); a command refused that way inside `MULTI` aborts the transaction, and
//! `EXEC` answers `-EXECABORT ... BUSY`. Unlike Redis, `SCRIPT KILL` works on a script that
//! already wrote: nothing of it was proposed yet.
//!
//! The libraries Redis embeds for scripts (`cjson`, `cmsgpack`, `struct`, `bit`) are keel's own
//! Rust, in the crate keel-lua-libs, each matching Redis 7.0's byte for byte where a script can tell.
//!
//! Bounds: [`SCRIPTS_RUNNING_MAX`] scripts at once per node, [`SCRIPT_MEMORY_BYTES_MAX`] of Lua
//! heap each, their effects within a transaction's bounds (`multi-commands-max`,
//! `multi-bytes-max`), the cache within [`CACHE_SCRIPTS_MAX`] scripts and
//! [`CACHE_BYTES_MAX`] bytes (the oldest script loaded by `EVAL` goes first).

pub mod lua;
mod registry;
pub mod sha1;
pub mod view;

pub use registry::{RunningScript, ScriptCache, ScriptRegistry};

/// Most times a script runs for one call before the client gets `-TRYAGAIN`.
pub const SCRIPT_ATTEMPTS_MAX: u32 = 8;

/// Most scripts running on a node at once; beyond, `EVAL` answers `-BUSY`.
pub const SCRIPTS_RUNNING_MAX: usize = 8;

/// Bound on one script's Lua heap.
pub const SCRIPT_MEMORY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bound on the scripts a node's cache keeps.
pub const CACHE_SCRIPTS_MAX: usize = 10_000;

/// Bound on the bytes of the scripts a node's cache keeps.
pub const CACHE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// `busy-reply-threshold` (`lua-time-limit`) when not configured, in ms.
pub const BUSY_REPLY_THRESHOLD_MS_DEFAULT: u64 = 5_000;

/// Redis's reply to commands refused while a script is busy.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

#[cfg(test)]
mod tests;
