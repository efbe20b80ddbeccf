//! CONFIG GET / SET: the node's settings under Redis's parameter names.
//!
//! `redis-benchmark` asks `CONFIG GET save` and `CONFIG GET appendonly`; Redis's tests and
//! operators' scripts `CONFIG SET maxmemory` and `timeout`. Only what keel really does is
//! reported, and a value is accepted only if keel then behaves as Redis would with it: each
//! parameter below says why it may (or may not) change at run time. Settings are per node, as
//! in Redis (a CONFIG SET is not replicated).

use std::sync::{RwLock, RwLockReadGuard};

use bytes::Bytes;

use crate::glob::Case;
use crate::resp::{Limits, Reply};

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
    /// `maxmemory` in bytes; 0: no limit.
    pub maxmemory: u64,
    pub protected_mode: bool,
    /// `save` as last set (normalized): accepted but inert, see [`config_set`].
    pub save: String,
}

impl Default for ConfigValues {
    fn default() -> Self {
        ConfigValues {
            maxclients: 10_000,
            maxclients_max: 10_000,
            timeout_seconds: 0,
            maxmemory: 0,
            protected_mode: true,
            save: String::new(),
        }
    }
}

/// The settings a node's connections and its server share: CONFIG SET changes them, the server
/// reads them where they take effect (`maxmemory` on each write, `timeout` on each wait,
/// `maxclients` on each accept).
#[derive(Debug, Default)]
pub struct SharedConfig(RwLock<ConfigValues>);

impl SharedConfig {
    pub fn new(values: ConfigValues) -> Self {
        SharedConfig(RwLock::new(values))
    }

    /// The current values (a writer never panics while holding the lock, so poisoning is
    /// ignored).
    pub fn read(&self) -> RwLockReadGuard<'_, ConfigValues> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The parameters CONFIG GET knows, with values that describe keel truthfully in Redis terms.
fn config_table(limits: &Limits, config: &ConfigValues) -> Vec<(&'static str, String)> {
    vec![
        // Every acknowledged write is in the fsynced Raft log: the equivalent of an AOF with
        // `appendfsync always`. Snapshots are taken by log size, not on a `save` schedule.
        ("appendonly", "yes".to_string()),
        ("appendfsync", "always".to_string()),
        ("save", config.save.clone()),
        ("databases", "1".to_string()),
        ("maxmemory", config.maxmemory.to_string()),
        // The only policy keel has: a write that may grow memory is refused past maxmemory.
        ("maxmemory-policy", "noeviction".to_string()),
        ("maxclients", config.maxclients.to_string()),
        ("timeout", config.timeout_seconds.to_string()),
        ("protected-mode", yes_no(config.protected_mode).to_string()),
        ("cluster-enabled", "no".to_string()),
        ("proto-max-bulk-len", limits.bulk_bytes_max.to_string()),
        (
            "client-query-buffer-limit",
            limits.request_bytes_max.to_string(),
        ),
    ]
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

/// CONFIG GET's matching: Redis-style glob, case-insensitive (`crate::glob`).
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    crate::glob::glob_match(pattern, text, Case::Insensitive)
}

/// Redis's immutable parameters that keel has no counterpart for: setting them at run time is
/// refused in Redis's words (none of them can change at run time here either).
const IMMUTABLE: [&str; 19] = [
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
];

/// `CONFIG SET name value [name value ...]`: all or nothing, as in Redis (every pair is checked
/// before any is applied).
pub(crate) fn config_set(
    pairs: &[(Bytes, Bytes)],
    limits: &Limits,
    shared: &SharedConfig,
) -> Reply {
    let mut lock = shared.0.write().unwrap_or_else(|e| e.into_inner());
    match with_set(pairs, limits, &lock) {
        Ok(values) => {
            *lock = values;
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
            match set_one(&name, &value, limits, &mut values) {
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
    Ok(values)
}

/// Checks one parameter and writes it to `values`; `None` for a name keel does not know.
fn set_one(
    name: &str,
    value: &str,
    limits: &Limits,
    values: &mut ConfigValues,
) -> Option<Result<(), String>> {
    let outcome = match name {
        // Read by the leader on each write that may grow memory; a follower's figure takes
        // effect if it comes to lead (writes are refused only where they are proposed).
        "maxmemory" => memory(value).map(|bytes| values.maxmemory = bytes),
        // Read each time a connection waits for its client's next request.
        "timeout" => integer(value).map(|seconds| values.timeout_seconds = seconds),
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
        // Decided at start, by the command line or config file.
        "protected-mode" => only(
            value,
            yes_no(values.protected_mode),
            "set by --protected-mode at start",
        ),
        "proto-max-bulk-len" => only(
            value,
            &limits.bulk_bytes_max.to_string(),
            "keel's request limits are fixed at start",
        ),
        "client-query-buffer-limit" => only(
            value,
            &limits.request_bytes_max.to_string(),
            "keel's request limits are fixed at start",
        ),
        _ => return None,
    };
    Some(outcome)
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
