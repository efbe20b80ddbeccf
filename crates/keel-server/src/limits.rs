//! What clients may take of a node: how many connections, how long one may sit idle, how much
//! of their input and output the node buffers. Each bound closes the client that reaches it,
//! never the node (issue 17: nothing a client sends can take keel down).
//!
//! | setting | default | bound |
//! |---|---|---|
//! | `maxclients` | 10,000 | connections served at once; beyond, a new one is answered `-ERR max number of clients reached` and closed |
//! | `timeout` | 0 (never) | seconds a client may stay idle (nothing read from it, nothing written to it) before it is closed |
//! | `client-query-buffer-total-bytes` | 1 GiB | all connections' input buffers together; a connection whose request would take the total past it is answered an error and closed |
//! | `client-output-buffer-limit-bytes` | 256 MiB | reply bytes one connection holds that its client has not read; a client that stops reading is closed once past it |
//!
//! File descriptors: at start a node raises its soft open-file limit to the hard one (as Redis
//! does; `launch.rs`) and checks that `maxclients` fits in it beside what the node itself needs
//! ([`reserved_descriptors`]). Each client may take two descriptors: its own connection and,
//! on a follower, the connection that forwards its requests to the leader. If they do not fit,
//! `maxclients` is lowered to what does, with a warning naming both numbers, as Redis does (a
//! node that serves fewer clients beats one that does not start; the operator sees the warning
//! and `INFO clients`); a limit too low for even one client refuses to start. So clients can
//! never take the descriptors the node's peers, its WAL and snapshots need.
//!
//! One connection's input buffer holds at most one partial request, bounded by
//! [`Limits::request_bytes_max`] (128 MiB), plus one read ([`INPUT_READ_BYTES`]): so the total
//! must be at least that, or a single legitimate request could never be received.
//!
//! [`ClientLimits`] holds these, their defaults and the startup check, and counts the
//! connections; accept errors are logged at most once a second ([`AcceptErrors`]). The resident
//! memory an idle client may add is documented beside the defaults
//! ([`IDLE_CLIENT_RSS_BYTES_MAX`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_resp::Limits;

/// Descriptors each client may take: its connection, and the one forwarding its requests.
pub const DESCRIPTORS_PER_CLIENT: u64 = 2;

/// Descriptors a node needs whatever its peers: standard streams, the client, peer and metrics
/// listeners, the runtime's epoll and wake-up descriptors, WAL segments (the current one and
/// the next, prepared ahead), snapshot files being written, read or received, the data
/// directory, with room to spare.
pub const FIXED_DESCRIPTORS: u64 = 32;

/// Peers reserved for even in a smaller cluster (so members can be added without a restart).
pub const RESERVED_PEERS_MIN: u64 = 6;

/// Connections beyond `maxclients` being told so, which hold a descriptor for up to a second.
pub const REFUSING_MAX: usize = 64;

/// Descriptors a node of a cluster of `members` needs besides its clients': the fixed ones,
/// four per peer (a message and a snapshot connection each way), the connections being refused,
/// and the one an accept takes before it is known to be refused.
pub fn reserved_descriptors(members: usize) -> u64 {
    let peers = (members as u64).saturating_sub(1).max(RESERVED_PEERS_MIN);
    FIXED_DESCRIPTORS + 4 * peers + REFUSING_MAX as u64 + 1
}

/// The `maxclients` that fits in `limit` descriptors for a node of `members`: `maxclients` if
/// it fits, else the most that does (`Ok` with a smaller value), or an error if not one does.
pub fn fit_maxclients(maxclients: usize, members: usize, limit: u64) -> Result<usize, String> {
    let reserved = reserved_descriptors(members);
    let needed = (maxclients as u64)
        .saturating_mul(DESCRIPTORS_PER_CLIENT)
        .saturating_add(reserved);
    if needed <= limit {
        return Ok(maxclients);
    }
    let fits = limit.saturating_sub(reserved) / DESCRIPTORS_PER_CLIENT;
    if fits == 0 {
        return Err(format!(
            "the open file limit (ulimit -n) of {limit} is too low: a node needs {reserved} \
             descriptors for itself and {DESCRIPTORS_PER_CLIENT} per client; raise it to at \
             least {needed} for --maxclients {maxclients}",
        ));
    }
    Ok(fits as usize)
}

/// The resident memory one idle client connection may add to a node, measured with thousands
/// of them (its task, its socket's state in the runtime, its 16 KiB input buffer, of which an
/// idle connection touches only the first pages): so `maxclients` idle clients add at most
/// `maxclients` times this, plus [`RSS_MARGIN_BYTES`]. The flood test in `tests/overload.rs`
/// asserts it.
pub const IDLE_CLIENT_RSS_BYTES_MAX: usize = 32 * 1024;

/// Slack for the allocator's own bookkeeping and what it has not returned yet.
pub const RSS_MARGIN_BYTES: usize = 32 * 1024 * 1024;

/// Room made in a connection's input buffer for one read.
pub const INPUT_READ_BYTES: usize = 16 * 1024;

/// Bounds on what clients may hold; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    pub maxclients: usize,
    /// `None`: clients may stay idle forever (`timeout 0`, Redis's default).
    pub idle_timeout: Option<Duration>,
    pub query_buffer_total_bytes: usize,
    pub output_buffer_bytes: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            // Redis's default.
            maxclients: 10_000,
            idle_timeout: None,
            // Eight maximum-size requests arriving at once; a small fraction of any machine
            // that holds the key space in memory.
            query_buffer_total_bytes: 1024 * 1024 * 1024,
            // Twice the largest reply the default limits let one request build (an EXEC's
            // 128 MiB of read results), so only a client that stops reading reaches it; it
            // still bounds what a slow reader pins (Redis's `normal` class has no limit).
            output_buffer_bytes: 256 * 1024 * 1024,
        }
    }
}

/// The smallest output limit accepted: below a few flushes' worth every ordinary pipeline
/// would trip it.
pub const OUTPUT_BUFFER_MIN_BYTES: usize = 1024 * 1024;

impl ClientLimits {
    /// Refuses settings that contradict each other or the request limits, naming both.
    pub fn validate(&self, request: &Limits) -> Result<(), String> {
        if self.maxclients == 0 {
            return Err("--maxclients must be at least 1".into());
        }
        let one_request = request.request_bytes_max + INPUT_READ_BYTES;
        if self.query_buffer_total_bytes < one_request {
            return Err(format!(
                "--client-query-buffer-total-bytes {} is smaller than one connection's query \
                 buffer for the largest request a client may send ({} bytes: the request limit \
                 of {} bytes plus one read of {INPUT_READ_BYTES}): no such request could be received",
                self.query_buffer_total_bytes, one_request, request.request_bytes_max
            ));
        }
        if self.output_buffer_bytes < OUTPUT_BUFFER_MIN_BYTES {
            return Err(format!(
                "--client-output-buffer-limit-bytes {} is below the minimum of \
                 {OUTPUT_BUFFER_MIN_BYTES} bytes",
                self.output_buffer_bytes
            ));
        }
        Ok(())
    }
}

/// The connections a node serves, bounded by `maxclients`.
#[derive(Debug, Default)]
pub struct ClientCount {
    current: AtomicUsize,
}

/// One admitted connection; gives its place back when dropped.
pub struct ClientSlot(Arc<ServerShared>);

/// What the accept loop and the connections share (in `ServerContext`).
#[derive(Debug, Default)]
pub struct ServerShared {
    pub clients: ClientCount,
    /// Bytes of the input buffers of all connections (their allocations).
    pub query_buffers_bytes: AtomicUsize,
    /// Connections beyond `maxclients` being told so.
    pub refusing: AtomicUsize,
}

impl ClientCount {
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }
}

impl ServerShared {
    /// A place for one more connection, unless `maxclients` are connected.
    pub fn admit(self: &Arc<Self>, maxclients: usize) -> Option<ClientSlot> {
        let admitted = self
            .clients
            .current
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < maxclients).then_some(n + 1)
            })
            .is_ok();
        admitted.then(|| ClientSlot(Arc::clone(self)))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.clients.current.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Logs failed accepts (out of file descriptors, ...) at most once per [`Self::INTERVAL`], with
/// the number of failures since the last line: a node out of descriptors fails every accept
/// until one is freed, and one line per attempt would flood the log.
#[derive(Debug, Default)]
pub struct AcceptErrors {
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptErrors {
    pub const INTERVAL: Duration = Duration::from_secs(1);

    /// Counts one failure at `now`; returns how many to report in a line now (this one
    /// included), or `None` to stay quiet.
    pub fn record(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        if self
            .last_logged
            .is_some_and(|at| now.duration_since(at) < Self::INTERVAL)
        {
            return None;
        }
        self.last_logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_errors_are_reported_once_a_second_with_a_count() {
        let mut errors = AcceptErrors::default();
        let start = Instant::now();
        let ms = |n| start + Duration::from_millis(n);
        assert_eq!(
            errors.record(ms(0)),
            Some(1),
            "the first is reported at once"
        );
        // 50 ms apart (the accept loop's backoff): quiet until a second passed.
        let reported: Vec<_> = (1..=40).filter_map(|i| errors.record(ms(i * 50))).collect();
        assert_eq!(reported, [20, 20], "at 1 s and 2 s, each with its count");
        assert_eq!(errors.record(ms(5_000)), Some(1));
    }

    #[test]
    fn maxclients_is_lowered_to_what_the_descriptors_hold() {
        // A three-node cluster reserves for 6 peers all the same.
        let reserved = reserved_descriptors(3);
        assert_eq!(reserved, FIXED_DESCRIPTORS + 24 + 65);
        assert_eq!(reserved_descriptors(11), FIXED_DESCRIPTORS + 40 + 65);
        assert_eq!(fit_maxclients(10_000, 3, 1 << 20), Ok(10_000));
        assert_eq!(fit_maxclients(10_000, 3, 20_000 + reserved), Ok(10_000));
        assert_eq!(fit_maxclients(10_000, 3, 20_000 + reserved - 1), Ok(9_999));
        assert_eq!(fit_maxclients(10_000, 3, 1_024), Ok((1_024 - 121) / 2));
        let e = fit_maxclients(10_000, 3, reserved + 1).unwrap_err();
        assert!(
            e.contains(&format!("limit (ulimit -n) of {}", reserved + 1))
                && e.contains("--maxclients 10000")
                && e.contains(&(20_000 + reserved).to_string()),
            "{e}"
        );
    }

    #[test]
    fn maxclients_admits_up_to_the_bound_and_slots_come_back() {
        let shared = Arc::new(ServerShared::default());
        let first = shared.admit(2).unwrap();
        let second = shared.admit(2).unwrap();
        assert!(shared.admit(2).is_none());
        assert_eq!(shared.clients.current(), 2);
        drop(first);
        let third = shared.admit(2).unwrap();
        assert!(shared.admit(2).is_none());
        drop((second, third));
        assert_eq!(shared.clients.current(), 0);
    }

    #[test]
    fn contradicting_settings_are_named() {
        let request = Limits::default();
        assert_eq!(ClientLimits::default().validate(&request), Ok(()));
        let small_total = ClientLimits {
            query_buffer_total_bytes: 64 * 1024 * 1024,
            ..ClientLimits::default()
        };
        let e = small_total.validate(&request).unwrap_err();
        assert!(
            e.contains("--client-query-buffer-total-bytes 67108864")
                && e.contains("request limit of 134217728"),
            "{e}"
        );
        let e = ClientLimits {
            maxclients: 0,
            ..ClientLimits::default()
        }
        .validate(&request)
        .unwrap_err();
        assert!(e.contains("--maxclients"), "{e}");
        let e = ClientLimits {
            output_buffer_bytes: 1000,
            ..ClientLimits::default()
        }
        .validate(&request)
        .unwrap_err();
        assert!(e.contains("--client-output-buffer-limit-bytes 1000"), "{e}");
    }
}
