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
mod refused;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle as ThreadHandle;
use std::time::{Duration, Instant};

use keel_core::{Index, LogId, NodeId, RaftNode};
use keel_wal::{bootstrap_meta, StdFs, Wal, WalConfig};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::apply::{self, StateMachine};
use crate::failure::{FailureCell, Guarded, NodeFailure};
use crate::handle::Handle;
use crate::storage;
use keel_transport::{Transport, TransportConfig};

pub use driver::wall_clock_ms;

/// Everything a node needs to start.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id: unique in its cluster, never reused by another data directory's node
    /// while this one's is a member. Not 0.
    pub id: NodeId,
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
            | StartError::Settings(_)
            | StartError::Damaged { .. }
            | StartError::StateMachine { .. } => false,
        }
    }
}

/// Opens the WAL, repairing what the cluster can make good (`Wal::open_repairing`: a lost tail,
/// a corrupt segment or snapshot set aside): the entry the node had promised comes back with it,
/// and the node recovers what it lacks from its peers (`RaftNode::start_recovering`). A corrupt
/// promise record becomes [`StartError::Damaged`].
/// What a node whose disk lost acknowledged data recovers to: the promised entry, and the first
/// index of each of the last terms of the log that held it (`RaftNode::start_recovering`).
type Promised = (LogId, Vec<LogId>);

fn open_wal(
    config: &NodeConfig,
) -> Result<(Wal<StdFs>, keel_wal::Recovered, Option<Promised>), StartError> {
    let opened = Wal::open_repairing(StdFs, config.data_dir.clone(), config.wal.clone());
    let (wal, recovered, repaired) = opened.map_err(|e| match e {
        keel_wal::WalError::Damaged(report) => {
            tracing::error!(
                "the data directory {} is damaged: {report}",
                config.data_dir.display()
            );
            StartError::Damaged {
                dir: config.data_dir.clone(),
                report,
            }
        }
        e => e.into(),
    })?;
    let promised = repaired.and_then(|report| {
        let set_aside = report
            .damage
            .iter()
            .any(|d| d.kind != keel_wal::DamageKind::LostTail);
        tracing::error!(
            "the data directory {} is damaged: {report}; {}what the node lacks of what it had \
             acknowledged is recovered from the cluster (no campaigns, votes only for logs that \
             reach what was promised)",
            config.data_dir.display(),
            if set_aside {
                "the damaged files were set aside (`.damaged`), and "
            } else {
                ""
            }
        );
        report
            .recover_to()
            .map(|promised| (promised, report.former_terms.clone()))
    });
    Ok((wal, recovered, promised))
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
}

impl<S: StateMachine> Node<S> {
    /// Recovers from `config.data_dir` (or bootstraps it) and starts the node. Returns once the
    /// peer listener is bound; replay continues in the background and clients wait for it.
    #[expect(clippy::too_many_lines)]
    pub async fn start(config: NodeConfig, mut sm: S) -> Result<Node<S>, StartError> {
        let started = Instant::now();
        let entry_bytes_max = config.wal.entry_payload_bytes_max();
        if (config.transport.message_size_bytes_max as usize)
            < entry_bytes_max + APPEND_OVERHEAD_BYTES
        {
            // A follower would refuse the Append carrying an entry its own log accepts.
            return Err(StartError::Settings(format!(
                "the peer message bound (transport message_size_bytes_max {}) is smaller than an \
                 Append carrying the largest entry the WAL stores (wal entry_size_bytes_max {} \
                 allows entries of {entry_bytes_max} bytes)",
                config.transport.message_size_bytes_max, config.wal.entry_size_bytes_max
            )));
        }
        // Blocking file I/O at startup only; the node is not serving anything yet.
        let (mut wal, mut recovered, promised) = open_wal(&config)?;
        let fresh = recovered.snapshot.is_none()
            && recovered.state.entries.is_empty()
            && recovered.state.hard_state == Default::default();
        if fresh && !config.initial_members.is_empty() {
            let meta = bootstrap_meta(config.initial_members.iter().copied());
            wal.save_snapshot(&meta, &[])?;
            drop(wal);
            (wal, recovered, _) = open_wal(&config)?;
        }
        let mut snapshot_data = None;
        let mut snapshot_bytes = 0;
        if let Some((file, handle)) = wal.open_latest_snapshot()? {
            snapshot_bytes = std::fs::metadata(&file.path).map_or(0, |m| m.len());
            if file.meta.last.index > 0 {
                // Verified whole when it was chosen; streamed into the state machine now.
                let mut data = keel_wal::snapshot::data_reader(&handle, &file);
                sm.restore(&mut data)
                    .map_err(|e| StartError::StateMachine {
                        index: file.meta.last.index,
                        message: e.0,
                    })?;
            }
            snapshot_data = Some((file.meta.last, file.path));
        }
        let mut state = recovered.state;
        state.applied = state.applied.max(state.snapshot.index);
        let applied = state.applied;
        let mut raft = RaftNode::new(config.raft.clone(), state)?;
        if let Some((promised, former_terms)) = promised {
            raft.start_recovering(promised, &former_terms);
        }
        let replay_target = raft.commit_index();
        // A partial snapshot transfer at or below what is committed here is of no use: the core
        // would ignore it. One above is resumed if its leader offers it again.
        keel_transport::discard_stale_partial(&config.data_dir, replay_target)?;
        let mut config = config;
        if config.transport.snapshot_dir.is_none() {
            config.transport.snapshot_dir = Some(config.data_dir.clone());
        }
        if config.transport.incarnation == 0 {
            config.transport.incarnation = incarnation(&config.data_dir)?;
        }
        if config.transport.incarnations_dir.is_none() {
            config.transport.incarnations_dir = Some(config.data_dir.clone());
        }
        tracing::info!(
            node = config.id,
            "recovered in {:?}: snapshot {}, commit {replay_target}, last {}",
            started.elapsed(),
            raft.snapshot().last,
            raft.log().last_index()
        );

        let failure = FailureCell::new(config.id);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        // The storage queue is bounded: the node awaits room, which throttles it to the disk.
        let (storage_tx, storage_rx) = mpsc::channel(1024);
        let last_snapshot_bytes = Arc::new(AtomicU64::new(snapshot_bytes));
        let (apply_queue, apply_thread) = apply::spawn(
            sm,
            applied,
            keel_engine::SnapshotPolicy {
                entries_max: config.snapshot_threshold_entries.max(1),
                bytes_max: config.snapshot_threshold_bytes.max(1),
                bytes_min: config.snapshot_min_log_bytes.max(1),
                log_to_state_ratio: config.snapshot_log_ratio,
            },
            Arc::clone(&last_snapshot_bytes),
            config.apply_inline_budget_us.saturating_mul(1000),
            events_tx.clone(),
            Arc::clone(&failure),
        )?;
        let mut threads = vec![
            storage::spawn(
                wal,
                storage_rx,
                events_tx.clone(),
                crate::metrics::StorageMetrics::new(config.id),
                Arc::clone(&failure),
            )?,
            apply_thread,
        ];
        let scrub_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let scrub_counters = Arc::new(crate::scrub::ScrubCounters::default());
        threads.extend(crate::scrub::spawn(
            config.id,
            config.data_dir.clone(),
            config.scrub.clone(),
            scrub_stop.clone(),
            scrub_counters.clone(),
            Arc::clone(&failure),
        )?);
        let (inbound_tx, inbound_rx) = mpsc::channel(config.transport.send_queue_messages_max);
        let transport = Transport::bind(
            config.transport.clone(),
            config.peer_listen_addr,
            inbound_tx,
        )
        .await?;
        for (&id, &addr) in &config.peers {
            if id != config.id {
                transport.set_peer(id, addr);
            }
        }
        let peer_addr = transport.local_addr();
        let snapshot_counters = transport.snapshot_counters();
        let (requests_tx, requests_rx) = mpsc::channel(config.client_queue_requests_max);
        let (view_tx, view_rx) = tokio::sync::watch::channel(driver::view_of(&raft, false));
        let handle = Handle {
            requests: requests_tx,
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            client_addrs: transport.client_addrs(),
            proposal_refusal: Arc::default(),
            view: view_rx,
        };
        let engine = keel_engine::NodeEngine::new(
            config.id,
            keel_engine::EngineLimits {
                pending_proposals_max: config.pending_proposals_max,
                pending_reads_max: config.pending_reads_max,
                entry_bytes_max,
            },
            keel_engine::ClockPolicy {
                offset_ms_max: config.clock_offset_ms_max,
                hold_ms: clock_hold_ms(&config),
            },
            applied,
            replay_target,
        );
        let departed = keel_engine::handshake::DepartedMembers::new(raft.log());
        transport.configuration_changed(&departed.current());
        let driver = driver::Driver {
            departed,
            raft,
            engine,
            io: driver::Io {
                transport,
                apply: apply_queue,
                events_tx,
                snapshot_data,
                last_snapshot_bytes,
                snapshot_sends: HashMap::new(),
                metrics: crate::metrics::NodeMetrics::new(config.id),
                failure: Arc::clone(&failure),
            },
            storage: storage_tx,
            snapshot_writing: keel_engine::SnapshotWriting::default(),
            snapshot_waiters: Vec::new(),
            replay_duration: Duration::ZERO,
            stopping: false,
            refused: refused::RefusedMessages::new(config.id),
            started,
            proposal_refusal: crate::handle::RefusalPublisher::new(Arc::clone(
                &handle.proposal_refusal,
            )),
            view: view_tx,
            config,
        };
        let task = tokio::spawn(Guarded {
            inner: Box::pin(driver.run(events_rx, inbound_rx, requests_rx)),
            cell: Arc::clone(&failure),
            thread: "the node task",
        });
        Ok(Node {
            handle,
            task: Some(task),
            threads: Arc::new(Mutex::new(threads)),
            peer_addr,
            snapshot_counters,
            scrub_stop,
            scrub_counters,
            failure,
        })
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

/// This data directory's storage incarnation (S37): read from the `incarnation` file, or drawn at
/// random and made durable the first time the directory is used. A wiped directory gets a new
/// one, which peers that knew the old one refuse.
fn incarnation(data_dir: &std::path::Path) -> std::io::Result<u64> {
    use std::hash::{BuildHasher, Hasher};
    use std::io::Write as _;
    let path = data_dir.join("incarnation");
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
