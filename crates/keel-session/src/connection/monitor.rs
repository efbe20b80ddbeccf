//! MONITOR: every command the node's clients run, shown to the connections that asked, in
//! Redis's format: `+<unix seconds>.<microseconds> [0 <client addr>] "cmd" "arg" ...` with
//! Redis's escaping (`sdscatrepr`). Per node, as in Redis: a follower's monitors see the commands
//! its own clients send (a write they forward included), the leader's those of its clients (the
//! followers' forwarding connections included); entries applied from the log are not commands.
//!
//! What is shown, as Redis shows it: a command once it is accepted (one refused before it runs,
//! unknown, of the wrong arity, before AUTH or past `maxmemory`, is not); inside MULTI nothing is
//! shown when queued, and EXEC shows the queued commands, then `exec` (an aborted EXEC shows only
//! `exec`); administrative commands (CONFIG, DEBUG, MONITOR, CLIENT KILL / LIST, keel's RAFT.*)
//! are never shown; AUTH's and HELLO's passwords are shown as `(redacted)`.
//!
//! Bounds: nothing a client does may block the node. A line is formatted once and queued for each
//! monitor under a short lock, never waiting; a monitor's queue holds at most its limit in bytes
//! (the node's `client-output-buffer-limit-bytes`), as Redis's client-output-buffer-limit does:
//! a monitor that does not read fast enough is marked overflowed, its queue dropped, and its
//! connection closed by the server. Without a monitor, feeding costs one atomic load.
//!
//! Commands are recorded by [`dispatch`](super::ClientConnection::dispatch) and fed by
//! [`show_to_monitors`](super::ClientConnection::show_to_monitors) once the server accepted them,
//! into each monitor's queue on its [`ClientRecord`](super::ClientRecord), which the session
//! drains beside the socket. A monitor may not touch keys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};

use keel_redis::command::CommandSpec;

/// A monitor's queue bound when the server sets none.
pub const MONITOR_QUEUE_BYTES_DEFAULT: usize = 64 << 20;

/// What Redis shows in place of a secret.
const REDACTED: &[u8] = b"(redacted)";

/// What the session takes from a monitor's queue ([`MonitorFeed::next`]).
#[derive(Debug, PartialEq, Eq)]
pub enum MonitorEvent {
    /// Lines to send, each `+...\r\n`.
    Lines(BytesMut),
    /// The queue went past its bound: close the connection.
    Overflowed,
}

/// A connection's monitor queue: off until MONITOR.
#[derive(Debug, Default)]
pub struct MonitorFeed {
    state: Mutex<FeedState>,
    /// `state.on`, read without the lock: every request and every wait of every connection
    /// asks, and only monitors are ever on (once on, a queue stays on).
    on: AtomicBool,
}

#[derive(Debug, Default)]
struct FeedState {
    on: bool,
    limit: usize,
    queued: BytesMut,
    overflowed: bool,
    waker: Option<Waker>,
}

impl MonitorFeed {
    fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns the queue on, bounded by `limit` bytes. False if it was on already.
    pub(super) fn start(&self, limit: usize) -> bool {
        let mut state = self.lock();
        if state.on {
            return false;
        }
        state.on = true;
        state.limit = limit;
        self.on.store(true, Ordering::Release);
        true
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Queues `line`, or marks the queue overflowed if it would pass its bound.
    fn push(&self, line: &[u8]) {
        let mut state = self.lock();
        if !state.on || state.overflowed {
            return;
        }
        if state.queued.len() + line.len() > state.limit {
            state.overflowed = true;
            state.queued = BytesMut::new();
        } else {
            state.queued.extend_from_slice(line);
        }
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Waits for lines (or the overflow) and takes them. Never returns while the queue is off
    /// (the session polls it beside the socket).
    pub async fn next(&self) -> MonitorEvent {
        std::future::poll_fn(|cx| {
            if !self.is_on() {
                // Nothing is ever queued while off.
                return Poll::Pending;
            }
            let mut state = self.lock();
            if state.overflowed {
                return Poll::Ready(MonitorEvent::Overflowed);
            }
            if !state.queued.is_empty() {
                return Poll::Ready(MonitorEvent::Lines(std::mem::take(&mut state.queued)));
            }
            wake_here(&mut state.waker, cx);
            Poll::Pending
        })
        .await
    }
}

/// Leaves `cx`'s waker in `slot` for whoever queues next (cloned only when it changed: a
/// connection polls its queues on every wait).
pub(crate) fn wake_here(slot: &mut Option<Waker>, cx: &std::task::Context<'_>) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
        *slot = Some(cx.waker().clone());
    }
}

/// Whether MONITOR shows the request `args` (Redis never shows administrative commands; keel's
/// RAFT.* are its cluster's own).
pub fn shows(args: &[Bytes]) -> bool {
    let name = &args[0];
    if name.len() > 5 && name[..5].eq_ignore_ascii_case(b"raft.") {
        return false;
    }
    if name.eq_ignore_ascii_case(b"client") {
        const ADMIN: [&[u8]; 6] = [
            b"kill",
            b"list",
            b"no-evict",
            b"pause",
            b"unblock",
            b"unpause",
        ];
        return !args
            .get(1)
            .is_some_and(|sub| ADMIN.iter().any(|a| sub.eq_ignore_ascii_case(a)));
    }
    CommandSpec::lookup(name).is_some_and(|spec| !spec.flags.contains(&"admin"))
}

/// `args` as MONITOR shows them: AUTH's arguments and HELLO's AUTH user and password redacted.
pub fn redacted(args: &[Bytes]) -> Vec<Bytes> {
    let mut shown = args.to_vec();
    let name = &args[0];
    if name.eq_ignore_ascii_case(b"auth") {
        shown[1..].fill(Bytes::from_static(REDACTED));
    } else if name.eq_ignore_ascii_case(b"hello") {
        if let Some(at) = args.iter().position(|a| a.eq_ignore_ascii_case(b"auth")) {
            for secret in shown.iter_mut().skip(at + 1).take(2) {
                *secret = Bytes::from_static(REDACTED);
            }
        }
    }
    shown
}

/// Appends `arg` quoted and escaped as Redis's `sdscatrepr` does.
fn push_repr(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'"');
    for &byte in arg {
        match byte {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', byte]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            // C's isprint: space to tilde.
            0x20..=0x7e => out.push(byte),
            _ => out.extend_from_slice(format!("\\x{byte:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

/// The length [`push_repr`] gives `arg`, without building it.
fn repr_len(arg: &[u8]) -> usize {
    2 + arg
        .iter()
        .map(|&byte| match byte {
            b'\\' | b'"' | b'\n' | b'\r' | b'\t' | 0x07 | 0x08 => 2,
            0x20..=0x7e => 1,
            _ => 4,
        })
        .sum::<usize>()
}

/// The prefix of a line: `+<seconds>.<micros> [0 <addr>] `.
fn prefix(now: Duration, addr: &str) -> String {
    format!("+{}.{:06} [0 {addr}] ", now.as_secs(), now.subsec_micros())
}

/// One line as Redis writes it for a monitor, `\r\n` included.
pub fn line(now: Duration, addr: &str, args: &[Bytes]) -> Vec<u8> {
    let head = prefix(now, addr);
    let mut out = Vec::with_capacity(line_len(&head, args));
    out.extend_from_slice(head.as_bytes());
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        push_repr(&mut out, arg);
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn line_len(head: &str, args: &[Bytes]) -> usize {
    let separators = args.len().saturating_sub(1);
    head.len() + args.iter().map(|a| repr_len(a)).sum::<usize>() + separators + 2
}

/// The wall-clock time a line shows.
fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Shows `requests` (each already filtered by [`shows`] and [`redacted`]), run by the client at
/// `addr`, to `monitors`. A line longer than a monitor's bound overflows that monitor without
/// being built for it.
pub(super) fn feed(
    monitors: &[std::sync::Arc<super::ClientRecord>],
    addr: &str,
    requests: &[Vec<Bytes>],
) {
    for args in requests {
        let now = unix_now();
        let head = prefix(now, addr);
        let len = line_len(&head, args);
        let fits: Vec<&MonitorFeed> = monitors
            .iter()
            .map(|record| &record.monitor)
            .filter(|feed| {
                let fits = feed.lock().limit >= len;
                if !fits {
                    feed.overflow();
                }
                fits
            })
            .collect();
        if fits.is_empty() {
            continue;
        }
        let line = line(now, addr, args);
        for feed in fits {
            feed.push(&line);
        }
    }
}

impl MonitorFeed {
    /// Marks the queue overflowed (a line longer than its whole bound).
    fn overflow(&self) {
        let mut state = self.lock();
        if state.on {
            state.overflowed = true;
            state.queued = BytesMut::new();
            if let Some(waker) = state.waker.take() {
                waker.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<Bytes> {
        list.iter().map(|a| Bytes::from(a.to_string())).collect()
    }

    #[test]
    fn lines_are_in_redis_s_format_and_escaping() {
        let now = Duration::from_micros(1_700_000_000_000_042);
        let shown = line(
            now,
            "127.0.0.1:5000",
            &[
                Bytes::from_static(b"set"),
                Bytes::from_static(b"k\"\\ \n\r\t\x07\x08"),
                Bytes::from_static(b"\x00\xff~"),
            ],
        );
        assert_eq!(
            String::from_utf8(shown.clone()).unwrap(),
            "+1700000000.000042 [0 127.0.0.1:5000] \"set\" \"k\\\"\\\\ \\n\\r\\t\\a\\b\" \
             \"\\x00\\xff~\"\r\n"
        );
        let head = prefix(now, "127.0.0.1:5000");
        let parts = [
            Bytes::from_static(b"set"),
            Bytes::from_static(b"k\"\\ \n\r\t\x07\x08"),
            Bytes::from_static(b"\x00\xff~"),
        ];
        assert_eq!(line_len(&head, &parts), shown.len());
    }

    #[test]
    fn administrative_commands_are_not_shown_and_secrets_are_redacted() {
        for shown in [
            &["get", "k"][..],
            &["PING"],
            &["client", "setname", "x"],
            &["multi"],
        ] {
            assert!(shows(&args(shown)), "{shown:?}");
        }
        for hidden in [
            &["config", "get", "*"][..],
            &["CLIENT", "KILL", "ID", "1"],
            &["client", "list"],
            &["monitor"],
            &["debug", "panic"],
            &["RAFT.STATUS"],
            &["raft.watched", "k", "1", "1"],
            &["no-such-command"],
        ] {
            assert!(!shows(&args(hidden)), "{hidden:?}");
        }
        assert_eq!(
            redacted(&args(&["AUTH", "user", "secret"])),
            args(&["AUTH", "(redacted)", "(redacted)"])
        );
        assert_eq!(
            redacted(&args(&[
                "hello", "3", "AUTH", "user", "secret", "SETNAME", "n"
            ])),
            args(&[
                "hello",
                "3",
                "AUTH",
                "(redacted)",
                "(redacted)",
                "SETNAME",
                "n"
            ])
        );
        assert_eq!(redacted(&args(&["get", "auth"])), args(&["get", "auth"]));
    }

    #[test]
    fn a_monitor_that_falls_behind_its_bound_overflows_and_is_never_waited_for() {
        let record = std::sync::Arc::new(super::super::ClientRecord::new(
            1,
            "m".into(),
            String::new(),
            -1,
        ));
        let monitors = [std::sync::Arc::clone(&record)];
        // Off: nothing is queued.
        feed(&monitors, "c", &[args(&["get", "k"])]);
        assert!(record.monitor.lock().queued.is_empty());
        assert!(record.monitor.start(100));
        assert!(!record.monitor.start(100));
        feed(&monitors, "c", &[args(&["get", "k"])]);
        let queued = record.monitor.lock().queued.len();
        assert!(queued > 0 && queued <= 100, "{queued}");
        // Past the bound: overflowed, the queue dropped.
        feed(&monitors, "c", &[args(&["get", "k"]), args(&["get", "k"])]);
        assert!(record.monitor.lock().overflowed);
        assert!(record.monitor.lock().queued.is_empty());
        // A line longer than the whole bound overflows a fresh monitor without being queued.
        let fresh = std::sync::Arc::new(super::super::ClientRecord::new(
            2,
            "n".into(),
            String::new(),
            -1,
        ));
        assert!(fresh.monitor.start(100));
        feed(
            &[std::sync::Arc::clone(&fresh)],
            "c",
            &[vec![Bytes::from(vec![0u8; 200])]],
        );
        assert!(fresh.monitor.lock().overflowed);
    }
}
