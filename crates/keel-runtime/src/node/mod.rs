//! The node task: one tokio task owning the `RaftNode`, plus the storage and apply threads.
//!
//! ```text
//!  clients ──Request──▶ ┌───────────┐ ──messages──▶ transport
//!  transport ─Inbound─▶ │ node task │ ──Write────▶ storage thread (group commit) ─┐
//!  interval ──tick────▶ │ RaftNode  │ ──ApplyItem─▶ apply thread (state machine) ─┤
//!                       └───────────┘ ◀──────────── Event (persisted, applied, ...)┘
//! ```
//!
//! Small batches of committed entries and reads that find the apply thread idle are applied by
//! the node task itself, within `apply_inline_budget_us` (see `apply::ApplyWorker`).
//!
//! Startup recovers before it serves: `Wal::open` → restore the state machine from the newest
//! snapshot → `RaftNode::new` → replay every committed entry up to the persisted commit index
//! through the apply pipeline. Until that replay is done the node neither ticks (so it cannot
//! campaign), nor reads peer messages, nor accepts client requests (they wait in the bounded
//! queue). Damage `Wal::open` reports is repaired by `Wal::open_repairing` and the node starts
//! recovering (`RaftNode::start_recovering`; `whole again` is logged when it is); a corrupt
//! promise record is refused with [`StartError::Damaged`], naming every finding.
//!
//! The node task takes up to 256 queued messages or requests (`INPUTS_PER_READY_MAX` in
//! `driver.rs`) before each `ready()`, so many proposals become one Append and one write. Each
//! `ready()` is routed by keel-engine's `NodeEngine` through the `Io` shell in `driver.rs`:
//! messages first, then the write to the storage thread (a bounded queue of 1,024 commands: the
//! node awaits room, which throttles it to the disk), so the leader's fsync overlaps replication.
//!
//! Bounds: a proposal larger than `WalConfig::entry_payload_bytes_max` (80 MiB by default) is
//! refused before it reaches the core (the WAL could only stop on it, on every node);
//! [`Node::start`] refuses a peer message bound (`TransportConfig::message_size_bytes_max`) too
//! small for an Append of that largest entry, and the transport refuses a frame bound below the
//! parts peers send. Client requests wait in a queue of `client_queue_requests_max` (4,096);
//! the engine holds at most `pending_proposals_max` and `pending_reads_max` (65,536 each).
//!
//! Storage incarnation (S37): the data directory draws a random one the first time a node uses
//! it (file `incarnation`), and the transport announces it in every handshake.
//!
//! Stopping: [`Node::shutdown`] lets the task end after handing its last write to storage; the
//! storage thread completes it, fsync included, and the apply thread what it holds.
//! [`Node::stop`] aborts.

mod driver;
mod open;
mod refused;
mod start;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle as ThreadHandle;
use std::time::Instant;

use keel_core::{GroupId, Index, LogId, NodeId};
use keel_wal::WalConfig;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::apply::StateMachine;
use crate::failure::{FailureCell, NodeFailure};
use crate::handle::Handle;
use keel_transport::TransportConfig;

pub use driver::wall_clock_ms;

/// Everything a node needs to start.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id: unique in its cluster, never reused by another data directory's node
    /// while this one's is a member. Not 0.
    pub id: NodeId,
    /// The Raft group this node is a member of (default 0). Every message and snapshot it sends
    /// names it; what arrives for another group is dropped and counted (`refused_messages`).
    /// Groups share a process's connections; one group per node (and per data directory) today.
    pub group: GroupId,
    /// Where the log, its snapshots and the node's small state files live; created if missing.
    /// One node per directory.
    pub data_dir: PathBuf,
    /// Where the peer listener binds (port 0: any).
    pub peer_listen_addr: SocketAddr,
    /// Peer addresses (this node's own entry, if present, is ignored).
    pub peers: BTreeMap<NodeId, SocketAddr>,
    /// The voters of a new cluster, used only when the data directory is empty. Empty: this node
    /// joins an existing cluster (it is added as a learner by the leader).
    pub initial_members: Vec<NodeId>,
    /// The protocol's settings; election and heartbeat times are in ticks of `tick_ms`.
    pub raft: keel_core::Config,
    /// The peer transport's settings: the cluster id and secret, frame bounds, queues.
    pub transport: TransportConfig,
    /// The write-ahead log's settings: segment size, the largest entry, snapshots kept.
    pub wal: WalConfig,
    /// The length of one tick of the protocol's clock, in milliseconds (default 10).
    pub tick_ms: u64,
    /// When to take a snapshot (see `apply::SnapshotPolicy`): once the entry data applied since
    /// the last snapshot reaches `snapshot_log_ratio` times that snapshot's size, but no sooner
    /// than `snapshot_min_log_bytes` and no later than `snapshot_threshold_bytes` bytes or
    /// `snapshot_threshold_entries` entries. A snapshot rewrites the whole state, so the ratio
    /// bounds the work spent on snapshots to about a quarter of the log's bytes (default 4)
    /// however large the state; the log kept meanwhile (in memory) is bounded by the two
    /// thresholds. With 100-byte values on 100,000 keys that is a snapshot every ≈ 350,000
    /// writes instead of every 100,000 (the default before): +12% SET/s pipelined
    /// (docs/performance-log.md, "The measurements").
    pub snapshot_threshold_entries: u64,
    /// At most this many bytes of entry data between snapshots (default 256 MiB).
    pub snapshot_threshold_bytes: u64,
    /// At least this many bytes of entry data between snapshots, unless the entry threshold
    /// comes first (default 16 MiB: a small state is not rewritten after every few writes).
    pub snapshot_min_log_bytes: u64,
    /// The log since the last snapshot may grow to this multiple of its size (default 4; 0:
    /// only the thresholds decide).
    pub snapshot_log_ratio: u64,
    /// Bounds: queued client requests, proposals awaiting their result, reads in flight.
    pub client_queue_requests_max: usize,
    /// Proposals appended and awaiting their result, at most (65,536).
    pub pending_proposals_max: usize,
    /// Reads waiting for their read index or their apply, at most (65,536).
    pub pending_reads_max: usize,
    /// Past this a request resolves with `ClientError::Unknown`.
    pub request_timeout_ms: u64,
    /// Node messages received and not yet taken by the application, at most (4,096): past it
    /// they are dropped, counted (`crate::node_messages`).
    pub node_message_queue_max: usize,
    /// Committed entries and reads are applied on the apply thread, or on the node task itself
    /// when the thread is idle and the batch (at most 64 KiB of entry data) is predicted, from
    /// the state machine's recent cost per entry or per read, to take at most this long: two
    /// thread wake-ups fewer per batch (default 100 µs; 0: always on the apply thread). This is
    /// how long the node task may be busy applying instead of handling messages and ticks.
    pub apply_inline_budget_us: u64,
    /// The largest offset of this node's clock from its leader's with which it still campaigns
    /// (measured on heartbeats; keel-engine's `ClockWatch`). 0: measured, never enforced.
    pub clock_offset_ms_max: u64,
    /// The background scrub of the data directory (`crate::scrub`; off by default).
    pub scrub: crate::scrub::ScrubConfig,
}

impl NodeConfig {
    /// Node `id` of cluster `cluster_id` (every node of a cluster must agree on it: peers of
    /// another cluster are refused), keeping its data in `data_dir`, with every other setting
    /// at its default: a peer listener on 127.0.0.1 at any free port, no peers known, no
    /// initial members (set them to bootstrap a new cluster).
    pub fn new(id: NodeId, cluster_id: u64, data_dir: impl Into<PathBuf>) -> Self {
        NodeConfig {
            id,
            group: 0,
            data_dir: data_dir.into(),
            peer_listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            peers: BTreeMap::new(),
            initial_members: Vec::new(),
            raft: keel_core::Config {
                // Two Appends in flight per follower, not the core's 64. With the core's
                // `hold_partial_appends`, only a follower catching up has two (full ones): the
                // log's tail leaves when the Append in flight is answered, so entries proposed
                // meanwhile leave together. Under load that means fewer, larger messages and
                // one fsync per round on each follower (docs/performance-log.md), and a single
                // client's latency is unchanged (its next entry waits for nothing).
                inflight_messages_max: 2,
                ..keel_core::Config::new(id)
            },
            transport: TransportConfig::new(cluster_id, id),
            wal: WalConfig::default(),
            tick_ms: 10,
            snapshot_threshold_entries: 1_000_000,
            snapshot_threshold_bytes: 256 << 20,
            snapshot_min_log_bytes: 16 << 20,
            snapshot_log_ratio: 4,
            client_queue_requests_max: 4096,
            pending_proposals_max: 65_536,
            pending_reads_max: 65_536,
            request_timeout_ms: 10_000,
            node_message_queue_max: 4096,
            apply_inline_budget_us: 100,
            clock_offset_ms_max: keel_engine::ClockPolicy::OFFSET_MS_MAX_DEFAULT,
            scrub: crate::scrub::ScrubConfig::default(),
        }
    }
}

/// How long a measurement of this node's clock offset holds its campaigns without a newer one:
/// ten of its longest election timeouts, so a node with a bad clock stays out of several
/// elections after its leader is gone, and nodes held by a leader that was itself off (and died)
/// campaign after all.
fn clock_hold_ms(config: &NodeConfig) -> u64 {
    let election_timeout_max_ms =
        2 * u64::from(config.raft.election_timeout_ticks) * config.tick_ms;
    10 * election_timeout_max_ms
}

/// Why a node did not start; [`StartError::is_retryable`] says whether starting again can help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The log could not be opened or recovered.
    #[error("storage: {0}")]
    Wal(#[from] keel_wal::WalError),
    /// The embedder's log storage failed to recover or to record a snapshot, or disagrees with
    /// the data directory ([`Node::start_with_storage`]; the message says which).
    #[error("log storage: {0}")]
    Storage(String),
    /// The protocol refused the recovered state or the settings (`keel_core::Config`).
    #[error("recovered state: {0}")]
    Core(#[from] keel_core::Error),
    /// A file or a socket could not be used (the peer listener's port, a state file).
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Two settings cannot hold together (the message names them).
    #[error("settings contradict each other: {0}")]
    Settings(String),
    /// The state machine could not restore the newest snapshot (`StateMachine::restore`); the
    /// snapshot is kept for the next start.
    #[error("the state machine could not restore the snapshot at {index}: {message}")]
    StateMachine {
        /// The snapshot's last index.
        index: Index,
        /// The state machine's error.
        message: String,
    },
    /// Recovery found damage it cannot repair by itself (keel-wal's `damage.rs`): a promise
    /// record neither of whose copies verifies, so nothing says what the log should hold. (A lost
    /// tail, a corrupt segment or snapshot are repaired: `open_wal`.) It refuses to start rather
    /// than vote and serve on a log that may be shorter than it promised.
    #[error(
        "the data directory {} is damaged, refusing to start: {report}",
        dir.display()
    )]
    Damaged {
        /// The data directory.
        dir: PathBuf,
        /// Every finding.
        report: Box<keel_wal::DamageReport>,
    },
}

impl StartError {
    /// Whether starting again, unchanged, can succeed: an I/O error on a file or a socket may be
    /// passing (a port still held by the previous process, a full disk being cleared, a
    /// directory lock another process is letting go of), and a node that failed to start left
    /// nothing half-done. Settings that contradict each other, a recovered state the core
    /// refuses, corruption and unrepairable damage fail the same way every time: they need a
    /// person (`keel check --data-dir` lists findings).
    pub fn is_retryable(&self) -> bool {
        match self {
            StartError::Io(_) => true,
            StartError::Wal(e) => matches!(e, keel_wal::WalError::Io { .. }),
            StartError::Core(_)
            | StartError::Storage(_)
            | StartError::Settings(_)
            | StartError::Damaged { .. }
            | StartError::StateMachine { .. } => false,
        }
    }
}

/// Refuses a peer message bound too small for an Append of the largest entry the log accepts:
/// a follower would refuse the Append carrying an entry its own log accepts.
fn check_entry_bound(config: &NodeConfig) -> Result<(), StartError> {
    let entry_bytes_max = config.wal.entry_payload_bytes_max();
    if (config.transport.message_size_bytes_max as usize) < entry_bytes_max + APPEND_OVERHEAD_BYTES
    {
        return Err(StartError::Settings(format!(
            "the peer message bound (transport message_size_bytes_max {}) is smaller than an \
             Append carrying the largest entry the WAL stores (wal entry_size_bytes_max {} \
             allows entries of {entry_bytes_max} bytes)",
            config.transport.message_size_bytes_max, config.wal.entry_size_bytes_max
        )));
    }
    Ok(())
}

/// Room a peer frame needs beside the largest entry it carries: the message header, the Append's
/// fields and the entry's own header, with margin.
const APPEND_OVERHEAD_BYTES: usize = 1024;

/// A running node. Dropping it stops the node task abruptly (like a crash, minus the process).
pub struct Node<S> {
    handle: Handle<S>,
    task: Option<JoinHandle<()>>,
    threads: Arc<Mutex<Vec<ThreadHandle<()>>>>,
    peer_addr: SocketAddr,
    snapshot_counters: Arc<keel_transport::SnapshotCounters>,
    /// Ends the scrub thread (set on stop and drop).
    scrub_stop: Arc<std::sync::atomic::AtomicBool>,
    scrub_counters: Arc<crate::scrub::ScrubCounters>,
    failure: Arc<FailureCell>,
    /// The receiving end of node messages, until the application takes it.
    node_messages: Option<mpsc::Receiver<crate::node_messages::NodeMessage>>,
}

impl<S: StateMachine> Node<S> {
    /// Recovers from `config.data_dir` (or bootstraps it) and starts the node on the built-in
    /// write-ahead log. Returns once the peer listener is bound; replay continues in the
    /// background and clients wait for it.
    pub async fn start(config: NodeConfig, sm: S) -> Result<Node<S>, StartError> {
        let started = Instant::now();
        check_entry_bound(&config)?;
        // Blocking file I/O at startup only; the node is not serving anything yet.
        let opened = open::open_wal(&config)?;
        Self::start_opened(config, sm, opened, started).await
    }

    /// Starts the node on the embedder's log storage (entries, hard state, commit index, the
    /// newest snapshot's position; see `keel_core::storage::Storage`, and keel-wal's
    /// conformance suite for checking one). keel keeps the snapshot files in `snapshots/` under
    /// `config.data_dir`, with the node's small state files; `config.wal` bounds the entries and
    /// says how many snapshots are kept. The data directory's scrub does not run (it checks the
    /// WAL's files). A storage that is empty in a data directory a node has used before is
    /// refused ([`StartError::Storage`]): that node may have voted, and forgot it.
    pub async fn start_with_storage<L>(
        config: NodeConfig,
        sm: S,
        storage: L,
    ) -> Result<Node<S>, StartError>
    where
        L: keel_core::storage::Storage + Send + 'static,
    {
        let started = Instant::now();
        check_entry_bound(&config)?;
        let opened = open::open_embedder(&config, storage)?;
        Self::start_opened(config, sm, opened, started).await
    }

    /// Why the node stopped by itself, if it did ([`NodeFailure`]): a storage error, a panic, a
    /// refused apply order, damage the scrub found. A failed node answers nothing more (its
    /// handles' requests fail with `ClientError::Shutdown`); the process goes on, and deciding
    /// what happens next is the embedder's: restart the node, or exit ([`exit_on_failure`]).
    pub fn failure(&self) -> Option<NodeFailure> {
        self.failure.get()
    }

    /// Resolves when the node stops by itself, with why; never while it runs (a shutdown or stop
    /// is not a failure). Cancel-safe.
    pub fn failed(&self) -> impl std::future::Future<Output = NodeFailure> + Send + 'static {
        let cell = Arc::clone(&self.failure);
        async move { cell.wait().await }
    }

    /// The scrub's passes and findings so far (`crate::scrub`).
    pub fn scrub_counters(&self) -> Arc<crate::scrub::ScrubCounters> {
        self.scrub_counters.clone()
    }

    /// A handle to propose, read and manage the node; cheap to clone, usable from any task.
    pub fn handle(&self) -> Handle<S> {
        self.handle.clone()
    }

    /// The node messages peers send this node, in a bounded channel (`crate::node_messages`):
    /// `Some` once, `None` after. Messages that arrive while it is full, or before it is
    /// taken and past its bound, are dropped (counted).
    pub fn take_node_messages(
        &mut self,
    ) -> Option<mpsc::Receiver<crate::node_messages::NodeMessage>> {
        self.node_messages.take()
    }

    /// Counters of snapshot transfers sent and received by this node.
    pub fn snapshot_transfer_stats(&self) -> keel_transport::SnapshotTransferStats {
        self.snapshot_counters.get()
    }

    /// The live counters behind [`Node::snapshot_transfer_stats`]; they outlive the node (a
    /// stopped node's must stand still: nothing of it keeps streaming).
    pub fn snapshot_transfer_counters(&self) -> Arc<keel_transport::SnapshotCounters> {
        self.snapshot_counters.clone()
    }

    /// The bound address of the peer listener.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// Stops the node cleanly: the node task hands its last write to the storage thread and
    /// ends (pending client requests fail with `Shutdown`, peer connections close), then the
    /// storage thread completes every write it holds, fsync included, and the apply thread what
    /// it was handed. A node still replaying first finishes replay. Not bounded here: put a
    /// timeout around it.
    pub async fn shutdown(mut self) {
        self.handle.shutdown().await;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.stop().await;
    }

    /// Stops the node task at once (no goodbye to peers, nothing flushed beyond what the storage
    /// thread already does) and waits for the storage and apply threads to finish what they
    /// hold, so the data directory can be opened again.
    pub async fn stop(mut self) {
        self.scrub_stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        let threads = std::mem::take(&mut *self.threads.lock().expect("threads lock"));
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

impl<S> Drop for Node<S> {
    fn drop(&mut self) {
        self.scrub_stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The newest snapshot's file (to stream it to followers and restore from it).
type SnapshotData = Option<(LogId, PathBuf)>;

/// The file in the data directory that holds its storage incarnation.
const INCARNATION_FILE: &str = "incarnation";

/// This data directory's storage incarnation (S37): read from the `incarnation` file, or drawn at
/// random and made durable the first time the directory is used. A wiped directory gets a new
/// one, which peers that knew the old one refuse.
fn incarnation(data_dir: &std::path::Path) -> std::io::Result<u64> {
    use std::hash::{BuildHasher, Hasher};
    use std::io::Write as _;
    let path = data_dir.join(INCARNATION_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: not an incarnation number", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            hasher.write_u128(now.as_nanos());
            hasher.write_u32(std::process::id());
            let drawn = hasher.finish().max(1);
            let temp = data_dir.join("incarnation.tmp");
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(format!("{drawn}\n").as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)?;
            std::fs::File::open(data_dir)?.sync_all()?;
            Ok(drawn)
        }
        Err(e) => Err(e),
    }
}

/// Fail-stop for a process that runs one node, as keel's server does: once `node` stops by
/// itself, logs why and exits the process with [`NodeFailure::exit_code`] (a supervisor
/// restarts it, and recovery starts from what the disk holds). Must be called within a tokio
/// runtime; the watcher it spawns lives as long as the runtime.
pub fn exit_on_failure<S: StateMachine>(node: &Node<S>) {
    let failed = node.failed();
    tokio::spawn(async move {
        let failure = failed.await;
        eprintln!("keel: the node stopped: {failure}; stopping the process");
        std::process::exit(failure.exit_code());
    });
}

#[cfg(test)]
mod tests {
    use super::StartError;

    #[test]
    fn only_passing_io_errors_are_worth_a_retry() {
        let io = || std::io::Error::new(std::io::ErrorKind::AddrInUse, "port held");
        assert!(StartError::Io(io()).is_retryable());
        assert!(StartError::Wal(keel_wal::WalError::Io {
            path: "seg".into(),
            source: io()
        })
        .is_retryable());
        assert!(!StartError::Wal(keel_wal::WalError::CorruptLog("gap".into())).is_retryable());
        assert!(!StartError::Settings("contradiction".into()).is_retryable());
    }
}
