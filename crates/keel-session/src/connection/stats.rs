//! The node's counters for INFO's `stats`, `commandstats` and `errorstats` sections, zeroed by
//! `CONFIG RESETSTAT`.
//!
//! Counting is cheap on the request path. The counters are shared by every connection's task, so
//! a connection does not add to them once per request (an atomic addition on a cache line the
//! other cores write too costs more than the rest of counting): it counts a command's calls and
//! time, and the bytes it reads and writes, in its own [`LocalStats`], and adds those to the
//! shared counters ([`ServerStats::flush`]) once it has answered everything it read, before its
//! replies leave — so a client that got its reply finds its request counted. The command's
//! counters are found by its index in the command table, so they are bounded by the table, never
//! one per name a client sends. Errors are counted at once and take a lock, to count them by code
//! ([`ERROR_CODES_MAX`] codes at most). A connection's pipeline counts each request when its
//! reply leaves ([`ServerStats::record_local`]); the server counts connections and bytes. The
//! shared counters are relaxed atomics per command-table entry; the rates are sampled every
//! 100 ms ([`RATE_SAMPLE_INTERVAL`]).
//!
//! What a command's `usec` measures differs from Redis: the time from the request's dispatch on
//! this node until its reply was ready, so for writes and reads it includes the Raft round (the
//! log's replication, or ReadIndex) and any forwarding to the leader. Redis measures the time
//! its main thread spent executing the command.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

use keel_redis::command::metadata::{has_subcommands, SUBCOMMANDS};
use keel_redis::command::{CommandSpec, COMMAND_TABLE};
use keel_resp::Reply;

/// At most this many error codes are counted apart in `errorstats` (Redis 7.2 has the same
/// bound); errors with other codes still count in `total_error_replies`.
pub const ERROR_CODES_MAX: usize = 128;

/// Redis's limit on the length of an error code it counts (longer: counted as `ERR`).
const ERROR_CODE_LEN_MAX: usize = 32;

/// How many samples `instantaneous_*` average over, and how often the server takes one (as
/// Redis: 16 samples, 100 ms apart).
pub const RATE_SAMPLES: usize = 16;
pub const RATE_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Most commands a [`LocalStats`] counts apart before it is added to the shared counters.
const LOCAL_COMMANDS_MAX: usize = 16;

/// A connection's counts not yet added to its node's [`ServerStats`] (see the module
/// documentation): at most `LOCAL_COMMANDS_MAX` (16) commands.
#[derive(Debug, Default)]
pub struct LocalStats {
    /// `(command index, calls, usec)`.
    commands: Vec<(usize, u64, u64)>,
    input_bytes: u64,
    output_bytes: u64,
}

impl LocalStats {
    /// `bytes` were read from the client.
    pub fn input(&mut self, bytes: usize) {
        self.input_bytes += bytes as u64;
    }

    /// `bytes` were written to the client.
    pub fn output(&mut self, bytes: usize) {
        self.output_bytes += bytes as u64;
    }
}

#[derive(Debug, Default)]
struct CommandCounters {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

/// One command's counters, as `commandstats` reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandStat {
    /// `get`, or `client|list` for a subcommand.
    pub name: &'static str,
    pub calls: u64,
    pub usec: u64,
    pub rejected_calls: u64,
    pub failed_calls: u64,
}

/// The counters at one moment, for INFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub total_connections_received: u64,
    pub rejected_connections: u64,
    pub total_net_input_bytes: u64,
    pub total_net_output_bytes: u64,
    pub total_error_replies: u64,
    pub instantaneous_ops_per_sec: u64,
    /// Bytes per second (INFO divides by 1024).
    pub instantaneous_input_bytes_per_sec: u64,
    pub instantaneous_output_bytes_per_sec: u64,
    /// Only the commands with a call, rejection or failure, in table order.
    pub commands: Vec<CommandStat>,
    /// Error replies by code (`ERR`, `WRONGTYPE`, ...).
    pub errors: BTreeMap<String, u64>,
    /// Channels and patterns with a subscriber on this node (the server fills them in from its
    /// `crate::pubsub::PubSub`).
    pub pubsub_channels: u64,
    pub pubsub_patterns: u64,
}

impl StatsSnapshot {
    /// `total_commands_processed`: every call (rejected ones are not calls, as in Redis).
    pub fn total_commands_processed(&self) -> u64 {
        self.commands.iter().map(|c| c.calls).sum()
    }
}

/// One of the `instantaneous_*` metrics: per-second rates over the last samples.
#[derive(Debug, Default)]
struct Rates {
    /// When the last sample was taken, with the totals then.
    last: Option<(Instant, [u64; 3])>,
    /// The rates of the last [`RATE_SAMPLES`] intervals, per second: ops, input, output.
    samples: Vec<[u64; 3]>,
    next: usize,
}

/// A node's counters. Shared by its connections (and the server).
#[derive(Debug)]
pub struct ServerStats {
    connections_received: AtomicU64,
    rejected_connections: AtomicU64,
    net_input_bytes: AtomicU64,
    net_output_bytes: AtomicU64,
    error_replies: AtomicU64,
    /// The commands of [`COMMAND_TABLE`], then the [`SUBCOMMANDS`], in order.
    commands: Box<[CommandCounters]>,
    errors: Mutex<BTreeMap<String, u64>>,
    rates: Mutex<Rates>,
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            net_input_bytes: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
            error_replies: AtomicU64::new(0),
            commands: (0..COMMAND_TABLE.len() + SUBCOMMANDS.len())
                .map(|_| CommandCounters::default())
                .collect(),
            errors: Mutex::default(),
            rates: Mutex::default(),
        }
    }
}

/// The name of the counters at `index` ([`ServerStats::command_index`]).
fn command_name(index: usize) -> &'static str {
    match COMMAND_TABLE.get(index) {
        Some(spec) => spec.name,
        None => SUBCOMMANDS[index - COMMAND_TABLE.len()].full_name,
    }
}

impl ServerStats {
    /// The counters a request (`args`, its name first) counts in: its subcommand's if it names
    /// one keel knows (`CLIENT LIST`: `client|list`), else its command's; `None` for an unknown
    /// command (counted only as an error).
    pub fn command_index(args: &[Bytes]) -> Option<usize> {
        let name = args.first()?;
        let index = CommandSpec::index(name)?;
        let spec = &COMMAND_TABLE[index];
        if !has_subcommands(spec.name) {
            return Some(index);
        }
        let sub = args.get(1).and_then(|sub| {
            SUBCOMMANDS.iter().position(|s| {
                s.full_name.split_once('|').is_some_and(|(parent, name)| {
                    parent == spec.name && name.as_bytes().eq_ignore_ascii_case(sub)
                })
            })
        });
        Some(sub.map_or(index, |sub| COMMAND_TABLE.len() + sub))
    }

    /// Counts a request's reply, given `elapsed` after its dispatch. A `+QUEUED` reply is not a
    /// call (the command runs at EXEC, which is counted). An error counts by its code; it is a
    /// rejected call if the command was refused before it ran (wrong arity, unknown subcommand,
    /// `NOAUTH`, `OOM`), else a failed one. The errors inside EXEC's array count as errors too.
    pub fn record(&self, command: Option<usize>, reply: &Reply, elapsed: Duration) {
        if matches!(reply, Reply::Simple(s) if s == "QUEUED") {
            return;
        }
        let counters = command.and_then(|i| self.commands.get(i));
        if let Reply::Error(message) = reply {
            self.count_error(message);
            if let Some(counters) = counters {
                if is_rejection(message) {
                    counters.rejected.fetch_add(1, Relaxed);
                    return;
                }
                counters.failed.fetch_add(1, Relaxed);
            }
        }
        if let Some(counters) = counters {
            counters.calls.fetch_add(1, Relaxed);
            let usec = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
            counters.usec.fetch_add(usec, Relaxed);
        }
        if let (Reply::Array(replies), Some(index)) = (reply, command) {
            if command_name(index) == "exec" {
                for reply in replies {
                    if let Reply::Error(message) = reply {
                        self.count_error(message);
                    }
                }
            }
        }
    }

    /// [`ServerStats::record`], with a call that did not fail counted in `local` (added to the
    /// shared counters by [`ServerStats::flush`]); a failure, a refusal, and an EXEC's array (whose
    /// errors count) are counted here at once.
    pub fn record_local(
        &self,
        local: &mut LocalStats,
        command: Option<usize>,
        reply: &Reply,
        elapsed: Duration,
    ) {
        let counted_apart = match reply {
            Reply::Error(_) => true,
            Reply::Simple(s) => s == "QUEUED",
            Reply::Array(_) => command.is_some_and(|index| command_name(index) == "exec"),
            _ => false,
        };
        let Some(index) = command.filter(|_| !counted_apart) else {
            return self.record(command, reply, elapsed);
        };
        let usec = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        match local.commands.iter_mut().find(|(i, _, _)| *i == index) {
            Some((_, calls, total)) => {
                *calls += 1;
                *total = total.saturating_add(usec);
            }
            None => {
                if local.commands.len() == LOCAL_COMMANDS_MAX {
                    self.flush(local);
                }
                local.commands.push((index, 1, usec));
            }
        }
    }

    /// Adds `local`'s counts to the shared counters, and empties it.
    pub fn flush(&self, local: &mut LocalStats) {
        for (index, calls, usec) in local.commands.drain(..) {
            if let Some(counters) = self.commands.get(index) {
                counters.calls.fetch_add(calls, Relaxed);
                counters.usec.fetch_add(usec, Relaxed);
            }
        }
        if local.input_bytes > 0 {
            self.input(std::mem::take(&mut local.input_bytes) as usize);
        }
        if local.output_bytes > 0 {
            self.output(std::mem::take(&mut local.output_bytes) as usize);
        }
    }

    fn count_error(&self, message: &str) {
        self.error_replies.fetch_add(1, Relaxed);
        let code = error_code(message);
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = errors.get_mut(code) {
            *count += 1;
        } else if errors.len() < ERROR_CODES_MAX {
            errors.insert(code.to_string(), 1);
        }
    }

    /// A client connection was accepted.
    pub fn connection_received(&self) {
        self.connections_received.fetch_add(1, Relaxed);
    }

    /// A client connection was refused (`maxclients`).
    pub fn connection_rejected(&self) {
        self.rejected_connections.fetch_add(1, Relaxed);
    }

    /// `bytes` were read from a client.
    pub fn input(&self, bytes: usize) {
        self.net_input_bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// `bytes` were written to a client.
    pub fn output(&self, bytes: usize) {
        self.net_output_bytes.fetch_add(bytes as u64, Relaxed);
    }

    fn totals(&self) -> [u64; 3] {
        [
            self.commands.iter().map(|c| c.calls.load(Relaxed)).sum(),
            self.net_input_bytes.load(Relaxed),
            self.net_output_bytes.load(Relaxed),
        ]
    }

    /// Takes a sample of the rates (the server calls it every [`RATE_SAMPLE_INTERVAL`]).
    pub fn sample(&self, now: Instant) {
        let totals = self.totals();
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((then, before)) = rates.last {
            let ms = now.saturating_duration_since(then).as_millis() as u64;
            if ms > 0 {
                let rate = |i: usize| totals[i].saturating_sub(before[i]) * 1000 / ms;
                let sample = [rate(0), rate(1), rate(2)];
                if rates.samples.len() < RATE_SAMPLES {
                    rates.samples.push(sample);
                } else {
                    let next = rates.next;
                    rates.samples[next] = sample;
                }
                rates.next = (rates.next + 1) % RATE_SAMPLES;
            }
        }
        rates.last = Some((now, totals));
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        let average = |i: usize| {
            let n = rates.samples.len() as u64;
            rates.samples.iter().map(|s| s[i]).sum::<u64>() / n.max(1)
        };
        StatsSnapshot {
            pubsub_channels: 0,
            pubsub_patterns: 0,
            total_connections_received: self.connections_received.load(Relaxed),
            rejected_connections: self.rejected_connections.load(Relaxed),
            total_net_input_bytes: self.net_input_bytes.load(Relaxed),
            total_net_output_bytes: self.net_output_bytes.load(Relaxed),
            total_error_replies: self.error_replies.load(Relaxed),
            instantaneous_ops_per_sec: average(0),
            instantaneous_input_bytes_per_sec: average(1),
            instantaneous_output_bytes_per_sec: average(2),
            commands: self
                .commands
                .iter()
                .enumerate()
                .map(|(i, c)| CommandStat {
                    name: command_name(i),
                    calls: c.calls.load(Relaxed),
                    usec: c.usec.load(Relaxed),
                    rejected_calls: c.rejected.load(Relaxed),
                    failed_calls: c.failed.load(Relaxed),
                })
                .filter(|c| c.calls + c.rejected_calls + c.failed_calls > 0)
                .collect(),
            errors: self
                .errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// `CONFIG RESETSTAT`: every counter back to zero, the rates' samples forgotten.
    pub fn reset(&self) {
        for counter in [
            &self.connections_received,
            &self.rejected_connections,
            &self.net_input_bytes,
            &self.net_output_bytes,
            &self.error_replies,
        ] {
            counter.store(0, Relaxed);
        }
        for c in self.commands.iter() {
            for counter in [&c.calls, &c.usec, &c.rejected, &c.failed] {
                counter.store(0, Relaxed);
            }
        }
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *self.rates.lock().unwrap_or_else(|e| e.into_inner()) = Rates::default();
    }
}

/// Whether an error means the command was refused before it ran (Redis's `rejected_calls`).
fn is_rejection(message: &str) -> bool {
    message.starts_with("ERR wrong number of arguments")
        || message.starts_with("ERR unknown subcommand")
        || message.starts_with("NOAUTH ")
        || message.starts_with("OOM ")
}

/// The code an error counts under: its first word (at most [`ERROR_CODE_LEN_MAX`] bytes, of
/// letters, digits, `_` and `-`), else `ERR`, as Redis counts them.
fn error_code(message: &str) -> &str {
    let head = &message.as_bytes()[..message.len().min(ERROR_CODE_LEN_MAX)];
    match head.iter().position(|&b| b == b' ') {
        Some(end)
            if end > 0
                && head[..end]
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')) =>
        {
            &message[..end]
        }
        _ => "ERR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    #[test]
    fn commands_and_subcommands_have_counters_unknown_ones_none() {
        let get = ServerStats::command_index(&args(&["GeT", "k"])).unwrap();
        assert_eq!(command_name(get), "get");
        let list = ServerStats::command_index(&args(&["client", "LIST"])).unwrap();
        assert_eq!(command_name(list), "client|list");
        // An unknown subcommand counts on its command.
        let client = ServerStats::command_index(&args(&["client", "nope"])).unwrap();
        assert_eq!(command_name(client), "client");
        assert_eq!(ServerStats::command_index(&args(&["nosuch"])), None);
    }

    #[test]
    fn calls_failures_rejections_and_errors_are_counted_apart() {
        let stats = ServerStats::default();
        let set = ServerStats::command_index(&args(&["set"]));
        let ms = Duration::from_millis(1);
        stats.record(set, &Reply::OK, ms);
        stats.record(set, &Reply::OK, ms * 2);
        stats.record(set, &Reply::error("ERR syntax error"), ms);
        stats.record(
            set,
            &Reply::error("ERR wrong number of arguments for 'set' command"),
            ms,
        );
        stats.record(None, &Reply::error("ERR unknown command 'x'"), ms);
        stats.record(set, &Reply::simple("QUEUED"), ms);
        let snapshot = stats.snapshot();
        assert_eq!(
            snapshot.commands,
            vec![CommandStat {
                name: "set",
                calls: 3,
                usec: 4000,
                rejected_calls: 1,
                failed_calls: 1,
            }]
        );
        assert_eq!(snapshot.total_commands_processed(), 3);
        assert_eq!(snapshot.total_error_replies, 3);
        assert_eq!(snapshot.errors, BTreeMap::from([("ERR".to_string(), 3)]));
    }

    #[test]
    fn errors_count_by_code_and_exec_counts_the_errors_inside() {
        let stats = ServerStats::default();
        let exec = ServerStats::command_index(&args(&["exec"]));
        let reply = Reply::Array(vec![
            Reply::OK,
            Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ]);
        stats.record(exec, &reply, Duration::ZERO);
        stats.record(
            None,
            &Reply::error("NOAUTH Authentication required."),
            Duration::ZERO,
        );
        stats.record(None, &Reply::error("no-code-here"), Duration::ZERO);
        let errors = stats.snapshot().errors;
        assert_eq!(errors.get("WRONGTYPE"), Some(&1));
        assert_eq!(errors.get("NOAUTH"), Some(&1));
        assert_eq!(errors.get("ERR"), Some(&1));
        assert_eq!(stats.snapshot().commands[0].failed_calls, 0);
    }

    #[test]
    fn local_counts_reach_the_shared_ones_at_a_flush_and_errors_at_once() {
        let stats = ServerStats::default();
        let mut local = LocalStats::default();
        let set = ServerStats::command_index(&args(&["set"]));
        let exec = ServerStats::command_index(&args(&["exec"]));
        let ms = Duration::from_millis(1);
        stats.record_local(&mut local, set, &Reply::OK, ms);
        stats.record_local(&mut local, set, &Reply::OK, ms * 2);
        local.input(100);
        local.output(10);
        // Counted at once: a failure, QUEUED (never a call), an EXEC's array with its error.
        stats.record_local(&mut local, set, &Reply::error("ERR syntax error"), ms);
        stats.record_local(&mut local, set, &Reply::simple("QUEUED"), ms);
        let exec_reply = Reply::Array(vec![Reply::error("WRONGTYPE wrong kind")]);
        stats.record_local(&mut local, exec, &exec_reply, ms);
        let before = stats.snapshot();
        assert_eq!(before.total_error_replies, 2);
        assert_eq!(before.total_net_input_bytes, 0);
        let calls = |s: &StatsSnapshot, name: &str| {
            s.commands.iter().find(|c| c.name == name).map(|c| c.calls)
        };
        assert_eq!(calls(&before, "set"), Some(1), "only the failure so far");
        assert_eq!(calls(&before, "exec"), Some(1));
        stats.flush(&mut local);
        let after = stats.snapshot();
        assert_eq!(calls(&after, "set"), Some(3));
        assert_eq!(after.commands[0].usec, 4000);
        assert_eq!(after.total_net_input_bytes, 100);
        assert_eq!(after.total_net_output_bytes, 10);
        stats.flush(&mut local);
        assert_eq!(stats.snapshot(), after, "a flush empties the local counts");
    }

    #[test]
    fn local_counts_of_many_commands_flush_themselves_and_lose_nothing() {
        let stats = ServerStats::default();
        let mut local = LocalStats::default();
        let names: Vec<usize> = (0..LOCAL_COMMANDS_MAX * 2 + 3).collect();
        for index in &names {
            stats.record_local(&mut local, Some(*index), &Reply::OK, Duration::ZERO);
            assert!(local.commands.len() <= LOCAL_COMMANDS_MAX);
        }
        assert!(stats.snapshot().commands.len() >= LOCAL_COMMANDS_MAX);
        stats.flush(&mut local);
        let counted = stats.snapshot().commands;
        assert_eq!(counted.len(), names.len());
        assert!(counted.iter().all(|c| c.calls == 1));
    }

    #[test]
    fn error_codes_are_bounded() {
        let stats = ServerStats::default();
        for i in 0..ERROR_CODES_MAX + 10 {
            stats.record(None, &Reply::error(format!("E{i} boom")), Duration::ZERO);
        }
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.errors.len(), ERROR_CODES_MAX);
        assert_eq!(snapshot.total_error_replies, ERROR_CODES_MAX as u64 + 10);
    }

    #[test]
    fn rates_average_the_samples() {
        let stats = ServerStats::default();
        let get = ServerStats::command_index(&args(&["get"]));
        let start = Instant::now();
        stats.sample(start);
        for _ in 0..50 {
            stats.record(get, &Reply::Null, Duration::ZERO);
        }
        stats.input(1000);
        stats.output(2000);
        stats.sample(start + Duration::from_millis(100));
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.instantaneous_ops_per_sec, 500);
        assert_eq!(snapshot.instantaneous_input_bytes_per_sec, 10_000);
        assert_eq!(snapshot.instantaneous_output_bytes_per_sec, 20_000);
    }

    #[test]
    fn reset_zeroes_everything() {
        let stats = ServerStats::default();
        let get = ServerStats::command_index(&args(&["get"]));
        stats.record(get, &Reply::error("ERR x"), Duration::from_micros(5));
        stats.connection_received();
        stats.connection_rejected();
        stats.input(10);
        stats.output(20);
        let start = Instant::now();
        stats.sample(start);
        stats.record(get, &Reply::Null, Duration::ZERO);
        stats.sample(start + Duration::from_millis(100));
        assert_ne!(stats.snapshot(), StatsSnapshot::default());
        stats.reset();
        assert_eq!(stats.snapshot(), StatsSnapshot::default());
    }
}
