//! CONFIG GET / SET: the node's settings under Redis's parameter names.
//!
//! `redis-benchmark` asks `CONFIG GET save` and `CONFIG GET appendonly`; Redis's tests and
//! operators' scripts `CONFIG SET maxmemory` and `timeout`. Only what keel really does is
//! reported, and a value is accepted only if keel then behaves as Redis would with it: each
//! parameter below says why it may (or may not) change at run time. Settings are per node, as
//! in Redis (a CONFIG SET is not replicated).
//!
//! The settings live in a [`SharedConfig`] the server reads where they take effect (the client
//! listener's `bind` and `port` included). CONFIG SET is all-or-nothing in Redis's two phases:
//! every pair is checked, then what cannot take effect at run time (`port`, `bind`, the request
//! limits unless unchanged) is refused; inert settings are kept and reported back; errors are
//! Redis's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

use keel_redis::glob::Case;
use keel_resp::{Limits, Reply};

/// The node's settings CONFIG GET reports (the server fills it in; the defaults are keel's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigValues {
    /// The effective `maxclients` (lowered at start if the file descriptors do not fit it).
    pub maxclients: u64,
    /// The highest `maxclients` CONFIG SET may ask for: the one the file descriptors were
    /// checked against at start.
    pub maxclients_max: u64,
    /// `timeout`: seconds a client may stay idle; 0: forever.
    pub timeout_seconds: u64,
    /// `busy-reply-threshold` (alias `lua-time-limit`): after how many ms a running script makes
    /// its node answer `-BUSY` (`keel_redis::script`); 0: never.
    pub busy_reply_threshold_ms: u64,
    /// `maxmemory` in bytes; 0: no limit.
    pub maxmemory: u64,
    /// `databases` (`--databases`): SELECT, SWAPDB, MOVE and COPY ... DB name databases below
    /// it. Per node, fixed at start (as in Redis).
    pub databases: u64,
    pub protected_mode: bool,
    /// `save` as last set (normalized): accepted but inert, see `config_set`.
    pub save: String,
    /// `repl-backlog-size` as last set, in bytes: accepted but inert, see `set_one`.
    pub repl_backlog_size: u64,
    /// `maxmemory-samples` as last set: accepted but inert (keel never evicts).
    pub maxmemory_samples: u64,
    /// The client listener's address (`--client-addr`, as bound): `bind` and `port` report it;
    /// `None` until the server tells ([`SharedConfig::set_listener`]).
    pub listener: Option<SocketAddr>,
    /// Redis's encoding thresholds as last set, in `ENCODING_HINTS`'s order: accepted but
    /// inert (keel has one representation per kind of value).
    pub encoding_hints: [i64; ENCODING_HINTS.len()],
    /// `notify-keyspace-events`: the classes of keyspace events this node's subscribers hear
    /// (`keel_redis::notify` flags; 0: none, the default).
    pub notify_keyspace_events: u16,
}

/// Redis's encoding thresholds (name, its older alias or "", default). Redis picks a compact
/// representation for small values below them; keel has one representation per kind, so they
/// change nothing but what CONFIG GET reports. Clients and Redis's tests set them.
pub const ENCODING_HINTS: [(&str, &str, i64); 7] = [
    ("hash-max-listpack-entries", "hash-max-ziplist-entries", 128),
    ("hash-max-listpack-value", "hash-max-ziplist-value", 64),
    ("list-max-listpack-size", "list-max-ziplist-size", -2),
    ("list-compress-depth", "", 0),
    ("set-max-intset-entries", "", 512),
    ("zset-max-listpack-entries", "zset-max-ziplist-entries", 128),
    ("zset-max-listpack-value", "zset-max-ziplist-value", 64),
];

impl Default for ConfigValues {
    fn default() -> Self {
        ConfigValues {
            maxclients: 10_000,
            maxclients_max: 10_000,
            timeout_seconds: 0,
            busy_reply_threshold_ms: keel_redis::script::BUSY_REPLY_THRESHOLD_MS_DEFAULT,
            maxmemory: 0,
            databases: DATABASES_DEFAULT,
            protected_mode: true,
            save: String::new(),
            repl_backlog_size: REPL_BACKLOG_SIZE_DEFAULT,
            maxmemory_samples: 5,
            listener: None,
            encoding_hints: ENCODING_HINTS.map(|(_, _, default)| default),
            notify_keyspace_events: 0,
        }
    }
}

/// `databases` by default, as in Redis.
pub const DATABASES_DEFAULT: u64 = 16;

/// Redis's default `repl-backlog-size` (1 MB).
const REPL_BACKLOG_SIZE_DEFAULT: u64 = 1 << 20;

/// The settings a node's connections and its server share: CONFIG SET changes them, the server
/// reads them where they take effect (`maxmemory` on each write, `timeout` on each wait,
/// `maxclients` on each accept).
#[derive(Debug, Default)]
pub struct SharedConfig {
    values: RwLock<ConfigValues>,
    /// The two values read on every request or wait, copied out of the lock so those reads
    /// touch no shared lock word (every connection of the node reads them; CONFIG SET writes
    /// them under the write lock).
    timeout_seconds: AtomicU64,
    maxmemory: AtomicU64,
    /// Read by the apply thread before every entry.
    notify_keyspace_events: AtomicU32,
}

impl SharedConfig {
    pub fn new(values: ConfigValues) -> Self {
        let shared = SharedConfig::default();
        shared.replace(&mut shared.write(), values);
        shared
    }

    fn write(&self) -> RwLockWriteGuard<'_, ConfigValues> {
        self.values.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the values, under the write lock `lock` of this config.
    fn replace(&self, lock: &mut ConfigValues, values: ConfigValues) {
        self.timeout_seconds
            .store(values.timeout_seconds, Ordering::Relaxed);
        self.maxmemory.store(values.maxmemory, Ordering::Relaxed);
        self.notify_keyspace_events
            .store(u32::from(values.notify_keyspace_events), Ordering::Relaxed);
        *lock = values;
    }

    /// `timeout`: seconds a client may stay idle (0: forever).
    pub fn timeout_seconds(&self) -> u64 {
        self.timeout_seconds.load(Ordering::Relaxed)
    }

    /// `maxmemory` in bytes (0: no limit).
    pub fn maxmemory(&self) -> u64 {
        self.maxmemory.load(Ordering::Relaxed)
    }

    /// `notify-keyspace-events` as flags (`keel_redis::notify`).
    pub fn notify_keyspace_events(&self) -> u16 {
        self.notify_keyspace_events.load(Ordering::Relaxed) as u16
    }

    /// The current values (a writer never panics while holding the lock, so poisoning is
    /// ignored).
    pub fn read(&self) -> RwLockReadGuard<'_, ConfigValues> {
        self.values.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the address the client listener is bound to (`bind` and `port` report it).
    pub fn set_listener(&self, addr: SocketAddr) {
        self.write().listener = Some(addr);
    }
}

/// The parameters CONFIG GET knows, with values that describe keel truthfully in Redis terms.
fn config_table(limits: &Limits, config: &ConfigValues) -> Vec<(&'static str, String)> {
    let hints =
        ENCODING_HINTS
            .iter()
            .zip(config.encoding_hints)
            .flat_map(|(&(name, alias, _), value)| {
                [(name, value.to_string()), (alias, value.to_string())]
                    .into_iter()
                    .filter(|(name, _)| !name.is_empty())
            });
    let mut table = vec![
        // Every acknowledged write is in the fsynced Raft log: the equivalent of an AOF with
        // `appendfsync always`. Snapshots are taken by log size, not on a `save` schedule.
        ("appendonly", "yes".to_string()),
        ("appendfsync", "always".to_string()),
        ("save", config.save.clone()),
        ("databases", config.databases.to_string()),
        ("maxmemory", config.maxmemory.to_string()),
        // The only policy keel has: a write that may grow memory is refused past maxmemory.
        ("maxmemory-policy", "noeviction".to_string()),
        ("maxclients", config.maxclients.to_string()),
        ("timeout", config.timeout_seconds.to_string()),
        (
            "busy-reply-threshold",
            config.busy_reply_threshold_ms.to_string(),
        ),
        ("lua-time-limit", config.busy_reply_threshold_ms.to_string()),
        ("protected-mode", yes_no(config.protected_mode).to_string()),
        ("cluster-enabled", "no".to_string()),
        ("proto-max-bulk-len", limits.bulk_bytes_max.to_string()),
        (
            "client-query-buffer-limit",
            limits.request_bytes_max.to_string(),
        ),
        ("maxmemory-samples", config.maxmemory_samples.to_string()),
        // keel bounds each client's buffers instead (client-output-buffer-limit-bytes,
        // client-query-buffer-total-bytes): there is no eviction of clients by their total.
        ("maxmemory-clients", "0".to_string()),
        ("repl-backlog-size", config.repl_backlog_size.to_string()),
        // A keel node replicates through its Raft log, never from a Redis master.
        ("replicaof", String::new()),
        ("slaveof", String::new()),
        ("bind", bind(config)),
        ("port", port(config).to_string()),
        (
            "notify-keyspace-events",
            keel_redis::notify::format_flags(config.notify_keyspace_events),
        ),
    ];
    table.extend(hints);
    table
}

/// The client listener's address as `bind` reports it (empty before the server tells).
fn bind(config: &ConfigValues) -> String {
    config
        .listener
        .map(|addr| addr.ip().to_string())
        .unwrap_or_default()
}

/// The client listener's port (0, as Redis reports no TCP port, before the server tells).
fn port(config: &ConfigValues) -> u16 {
    config.listener.map_or(0, |addr| addr.port())
}

fn yes_no(flag: bool) -> &'static str {
    if flag {
        "yes"
    } else {
        "no"
    }
}

/// `CONFIG GET pattern...`: every parameter matching any pattern (glob, case-insensitive), each
/// once, as a map (RESP3) or a flat name/value array (RESP2).
pub(crate) fn config_get(patterns: &[Bytes], limits: &Limits, config: &ConfigValues) -> Reply {
    let pairs = config_table(limits, config)
        .into_iter()
        .filter(|(name, _)| patterns.iter().any(|p| glob_match(p, name.as_bytes())))
        .map(|(name, value)| (Reply::text(name), Reply::text(value)))
        .collect();
    Reply::Map(pairs)
}

/// CONFIG GET's matching: Redis-style glob, case-insensitive (`keel_redis::glob`).
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    keel_redis::glob::glob_match(pattern, text, Case::Insensitive)
}

/// Redis's immutable parameters that keel has no counterpart for: setting them at run time is
/// refused in Redis's words (none of them can change at run time here either).
const IMMUTABLE: [&str; 21] = [
    "daemonize",
    "databases",
    "cluster-enabled",
    "io-threads",
    "logfile",
    "pidfile",
    "supervised",
    "unixsocket",
    "tcp-backlog",
    "always-show-logo",
    "set-proc-title",
    "enable-debug-command",
    "enable-protected-configs",
    "enable-module-command",
    "aclfile",
    "appendfilename",
    "appenddirname",
    "cluster-config-file",
    "cluster-port",
    // A node's replication is its Raft membership (RAFT.MEMBER), never a Redis master's.
    "replicaof",
    "slaveof",
];

/// `CONFIG SET name value [name value ...]`: all or nothing, as in Redis (every pair is checked
/// before any is applied).
pub(crate) fn config_set(
    pairs: &[(Bytes, Bytes)],
    limits: &Limits,
    shared: &SharedConfig,
) -> Reply {
    let mut lock = shared.write();
    match with_set(pairs, limits, &lock) {
        Ok(values) => {
            shared.replace(&mut lock, values);
            Reply::OK
        }
        Err(error) => error,
    }
}

/// CONFIG SET's error if `pairs` cannot be set whatever the current values (inside MULTI, where
/// a valid CONFIG SET is refused but an invalid one is answered with its error, as at EXEC).
pub(crate) fn config_set_error(
    pairs: &[(Bytes, Bytes)],
    limits: &Limits,
    shared: &SharedConfig,
) -> Option<Reply> {
    with_set(pairs, limits, &shared.read()).err()
}

/// `current` with `pairs` set, or the error of the first that cannot be.
fn with_set(
    pairs: &[(Bytes, Bytes)],
    limits: &Limits,
    current: &ConfigValues,
) -> Result<ConfigValues, Reply> {
    let mut values = current.clone();
    let mut seen: Vec<String> = Vec::with_capacity(pairs.len());
    for (name, value) in pairs {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let failed = |reason: &str| {
            Reply::error(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}"
            ))
        };
        if seen.contains(&name) {
            return Err(failed("duplicate parameter"));
        }
        let value = String::from_utf8_lossy(value);
        let outcome = if IMMUTABLE.contains(&name.as_str()) {
            Err("can't set immutable config".to_string())
        } else {
            match set_one(&name, &value, &mut values) {
                Some(outcome) => outcome,
                None => {
                    return Err(Reply::error(format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                    )))
                }
            }
        };
        if let Err(reason) = outcome {
            return Err(failed(&reason));
        }
        seen.push(name);
    }
    // Redis's "apply" phase, once every pair is checked: what cannot take effect at run time
    // fails here, the first in the order given, and nothing changes.
    for (name, value) in pairs {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        if let Some(reason) = apply_error(&name, &String::from_utf8_lossy(value), limits, current) {
            return Err(Reply::error(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}"
            )));
        }
    }
    Ok(values)
}

/// Checks one parameter and writes it to `values`; `None` for a name keel does not know.
fn set_one(name: &str, value: &str, values: &mut ConfigValues) -> Option<Result<(), String>> {
    let outcome = match name {
        // Read by the leader on each write that may grow memory; a follower's figure takes
        // effect if it comes to lead (writes are refused only where they are proposed).
        "maxmemory" => memory(value).map(|bytes| values.maxmemory = bytes),
        // Read each time a connection waits for its client's next request.
        "timeout" => integer(value).map(|seconds| values.timeout_seconds = seconds),
        // Read each time a request is dispatched while a script runs.
        "busy-reply-threshold" | "lua-time-limit" => {
            integer(value).map(|ms| values.busy_reply_threshold_ms = ms)
        }
        // Read on each accept. Raising it past what the file descriptors were checked for at
        // start could run the node out of them, so that needs a restart.
        "maxclients" => integer(value).and_then(|n| match n {
            0 => Err("argument must be between 1 and 4294967295 inclusive".to_string()),
            n if n > values.maxclients_max => Err(format!(
                "keel checked its file descriptors for at most {} clients at start \
                 (raise --maxclients and restart)",
                values.maxclients_max
            )),
            n => {
                values.maxclients = n;
                Ok(())
            }
        }),
        // Every acknowledged write is already durable in the fsynced Raft log, so any RDB
        // schedule's promise is kept without it: the schedule is checked and reported back,
        // and changes nothing.
        "save" => save_schedule(value).map(|schedule| values.save = schedule),
        // Read by the apply thread before each entry: events of the entries applied from then
        // on reach this node's subscribers.
        "notify-keyspace-events" => keel_redis::notify::parse_flags(value.as_bytes())
            .map(|flags| values.notify_keyspace_events = flags)
            .ok_or_else(|| "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".to_string()),
        // What keel always does; anything else would be a promise it cannot keep.
        "appendonly" => only(
            value,
            "yes",
            "keel always appends writes to its fsynced Raft log",
        ),
        "appendfsync" => only(
            value,
            "always",
            "keel fsyncs its Raft log before acknowledging",
        ),
        "maxmemory-policy" => only(value, "noeviction", "keel never evicts keys"),
        // Used only by eviction policies, which keel has none of: checked as Redis does, kept
        // and reported back, and inert.
        "maxmemory-samples" => integer(value).and_then(|n| match n {
            1..=64 => {
                values.maxmemory_samples = n;
                Ok(())
            }
            _ => Err("argument must be between 1 and 64 inclusive".to_string()),
        }),
        "maxmemory-clients" => memory_or_percent(value).and_then(|limit| match limit {
            0 => Ok(()),
            _ => Err(
                "only '0' is supported: keel bounds each client's buffers instead \
                 (client-output-buffer-limit-bytes, client-query-buffer-total-bytes)"
                    .to_string(),
            ),
        }),
        // Followers catch up from the Raft log (or a snapshot), which keeps what they need
        // whatever this is: there is no backlog to size. Checked, kept, reported back, inert.
        "repl-backlog-size" => memory(value).map(|bytes| values.repl_backlog_size = bytes),
        // Decided at start, by the command line or config file.
        "protected-mode" => only(
            value,
            yes_no(values.protected_mode),
            "set by --protected-mode at start",
        ),
        // Fixed at start: checked here, and refused in the apply phase unless unchanged
        // ([`apply_error`]).
        "proto-max-bulk-len" | "client-query-buffer-limit" => memory(value).map(drop),
        "port" => port_number(value).map(drop),
        "bind" => Ok(()),
        hint => {
            let at = ENCODING_HINTS.iter().position(|&(name, alias, _)| {
                hint == name || (!alias.is_empty() && hint == alias)
            })?;
            value
                .parse::<i64>()
                .map(|n| values.encoding_hints[at] = n)
                .map_err(|_| "argument couldn't be parsed into an integer".to_string())
        }
    };
    Some(outcome)
}

/// Why a checked pair cannot take effect (Redis's apply phase), if it cannot: the client
/// listener and the request limits are fixed at start, so only their current values apply.
fn apply_error(name: &str, value: &str, limits: &Limits, current: &ConfigValues) -> Option<String> {
    let fixed = |wanted: u64, now: u64| {
        (wanted != now).then(|| format!("keel's request limits are fixed at start ({now})"))
    };
    match name {
        "port" => {
            let wanted = port_number(value).ok()?;
            (wanted != port(current)).then(|| {
                format!(
                    "Unable to listen on this port: keel listens for clients only on its \
                     --client-addr (port {}), fixed at start",
                    port(current)
                )
            })
        }
        "bind" => (value != bind(current)).then(|| {
            format!(
                "Failed to bind to specified addresses: keel listens for clients only on its \
                 --client-addr ({}), fixed at start",
                bind(current)
            )
        }),
        "proto-max-bulk-len" => fixed(memory(value).ok()?, limits.bulk_bytes_max as u64),
        "client-query-buffer-limit" => fixed(memory(value).ok()?, limits.request_bytes_max as u64),
        _ => None,
    }
}

fn port_number(value: &str) -> Result<u16, String> {
    integer(value).and_then(|n| {
        u16::try_from(n).map_err(|_| "argument must be between 0 and 65535 inclusive".to_string())
    })
}

/// Accepts `value` only if it is `current` (case-insensitive); otherwise explains why not.
fn only(value: &str, current: &str, why: &str) -> Result<(), String> {
    if value.eq_ignore_ascii_case(current) {
        Ok(())
    } else {
        Err(format!("only '{current}' is supported: {why}"))
    }
}

fn integer(value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer".to_string())
}

/// Redis's memory values: bytes, or with a unit (`k`/`m`/`g` are powers of 1000, `kb`/`mb`/`gb`
/// powers of 1024; case-insensitive).
fn memory(value: &str) -> Result<u64, String> {
    let lower = value.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(digits_end);
    let multiplier: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return Err("argument must be a memory value".to_string()),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| "argument must be a memory value".to_string())
}

/// `maxmemory-clients`: a memory value, or a percentage of `maxmemory` (`N%`, N at most 100);
/// what it amounts to (0 or not) is what matters here.
fn memory_or_percent(value: &str) -> Result<u64, String> {
    match value.strip_suffix('%') {
        Some(percent) => match percent.parse::<u64>() {
            Ok(n) if n <= 100 => Ok(n),
            Ok(_) => Err("percentage argument must be less or equal to 100".to_string()),
            Err(_) => Err("argument must be a memory or percent value".to_string()),
        },
        None => memory(value),
    }
}

/// `save "seconds changes [seconds changes ...]"` (or empty): normalized to single spaces.
fn save_schedule(value: &str) -> Result<String, String> {
    let fields: Vec<&str> = value.split_whitespace().collect();
    if fields.len() % 2 != 0 || fields.iter().any(|f| f.parse::<u64>().is_err()) {
        return Err("Invalid save parameters".to_string());
    }
    Ok(fields.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(shared: &SharedConfig, args: &[&str]) -> Reply {
        let pairs: Vec<(Bytes, Bytes)> = args
            .chunks(2)
            .map(|p| (Bytes::from(p[0].to_string()), Bytes::from(p[1].to_string())))
            .collect();
        config_set(&pairs, &Limits::default(), shared)
    }

    fn error_text(reply: Reply) -> String {
        match reply {
            Reply::Error(text) => text.to_string(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn settings_keel_has_change_and_are_reported() {
        let shared = SharedConfig::default();
        let reply = set(
            &shared,
            &[
                "maxmemory",
                "10mb",
                "timeout",
                "30",
                "maxclients",
                "50",
                "save",
                "3000  5",
            ],
        );
        assert_eq!(reply, Reply::OK);
        let values = shared.read().clone();
        assert_eq!(values.maxmemory, 10 << 20);
        assert_eq!(values.timeout_seconds, 30);
        assert_eq!(values.maxclients, 50);
        assert_eq!(values.save, "3000 5");
        assert_eq!(memory("2k"), Ok(2000));
        assert_eq!(memory("1GB"), Ok(1 << 30));
    }

    #[test]
    fn a_bad_pair_changes_nothing() {
        let shared = SharedConfig::default();
        let error = error_text(set(&shared, &["maxmemory", "5", "appendonly", "no"]));
        assert!(
            error.starts_with("ERR CONFIG SET failed (possibly related to argument 'appendonly')"),
            "{error}"
        );
        assert_eq!(*shared.read(), ConfigValues::default());
        let error = error_text(set(&shared, &["maxmemory", "1", "maxmemory", "2"]));
        assert!(error.ends_with("duplicate parameter"), "{error}");
        let error = error_text(set(&shared, &["daemonize", "yes"]));
        assert!(error.ends_with("can't set immutable config"), "{error}");
        assert_eq!(
            error_text(set(&shared, &["no-such-thing", "1"])),
            "ERR Unknown option or number of arguments for CONFIG SET - 'no-such-thing'"
        );
        let error = error_text(set(&shared, &["maxclients", "10001"]));
        assert!(error.contains("at most 10000 clients"), "{error}");
        assert_eq!(*shared.read(), ConfigValues::default());
    }

    #[test]
    fn inert_parameters_are_checked_kept_and_reported() {
        let shared = SharedConfig::default();
        let reply = set(
            &shared,
            &["repl-backlog-size", "10000002", "maxmemory-samples", "10"],
        );
        assert_eq!(reply, Reply::OK);
        assert_eq!(shared.read().repl_backlog_size, 10_000_002);
        assert_eq!(shared.read().maxmemory_samples, 10);
        let error = error_text(set(&shared, &["maxmemory-samples", "65"]));
        assert!(error.ends_with("between 1 and 64 inclusive"), "{error}");
        assert_eq!(set(&shared, &["maxmemory-clients", "0%"]), Reply::OK);
        let error = error_text(set(&shared, &["maxmemory-clients", "10mb"]));
        assert!(error.contains("only '0' is supported"), "{error}");
    }

    #[test]
    fn a_set_error_is_reported_before_an_apply_error_and_nothing_changes() {
        let shared = SharedConfig::default();
        shared.set_listener("127.0.0.1:6379".parse().unwrap());
        let before = shared.read().clone();
        // Redis's words for a percentage over 100, for the first bad pair of the set phase.
        assert_eq!(
            error_text(set(
                &shared,
                &[
                    "maxmemory",
                    "10000001",
                    "maxmemory-clients",
                    "200%",
                    "client-query-buffer-limit",
                    "invalid",
                ],
            )),
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - \
             percentage argument must be less or equal to 100"
        );
        // Every pair is valid; the port cannot change at run time: the apply phase refuses it,
        // before the request limit that comes after it.
        let error = error_text(set(
            &shared,
            &[
                "maxmemory",
                "10000001",
                "port",
                "6380",
                "client-query-buffer-limit",
                "10m",
            ],
        ));
        assert!(
            error.starts_with(
                "ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen \
                 on this port"
            ),
            "{error}"
        );
        let error = error_text(set(&shared, &["client-query-buffer-limit", "10m"]));
        assert!(error.contains("fixed at start"), "{error}");
        assert_eq!(*shared.read(), before);
        assert_eq!(
            set(&shared, &["port", "6379", "bind", "127.0.0.1"]),
            Reply::OK
        );
        let error = error_text(set(&shared, &["port", "65536"]));
        assert!(error.ends_with("between 0 and 65535 inclusive"), "{error}");
    }

    #[test]
    fn get_with_several_patterns_names_each_parameter_once() {
        let config = ConfigValues {
            listener: Some("0.0.0.0:7000".parse().unwrap()),
            ..ConfigValues::default()
        };
        let patterns: Vec<Bytes> = ["maxmemory", "maxmemory*", "bind", "*of", "port"]
            .into_iter()
            .map(|p| Bytes::from_static(p.as_bytes()))
            .collect();
        let Reply::Map(pairs) = config_get(&patterns, &Limits::default(), &config) else {
            panic!("CONFIG GET answers a map");
        };
        let names: Vec<String> = pairs
            .iter()
            .map(|(name, _)| match name {
                Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect();
        for name in [
            "maxmemory",
            "maxmemory-policy",
            "maxmemory-samples",
            "maxmemory-clients",
            "replicaof",
            "slaveof",
            "bind",
            "port",
        ] {
            assert_eq!(
                names.iter().filter(|n| *n == name).count(),
                1,
                "{name}: {names:?}"
            );
        }
        let value = |name: &str| {
            pairs
                .iter()
                .zip(&names)
                .find(|(_, n)| *n == name)
                .map(|((_, v), _)| v.clone())
        };
        assert_eq!(value("bind"), Some(Reply::text("0.0.0.0")));
        assert_eq!(value("port"), Some(Reply::text("7000")));
        assert_eq!(value("replicaof"), Some(Reply::text("")));
    }

    #[test]
    fn every_reported_value_can_be_set_again() {
        let shared = SharedConfig::default();
        let limits = Limits::default();
        let before = config_table(&limits, &shared.read());
        for (name, value) in &before {
            if IMMUTABLE.contains(name) {
                continue;
            }
            assert_eq!(set(&shared, &[name, value]), Reply::OK, "{name} {value}");
        }
        assert_eq!(config_table(&limits, &shared.read()), before);
    }
}
