//! Starting a node on a log already opened (`open.rs`): the state machine restored from the
//! newest snapshot, the core built from the recovered state, the storage, apply and scrub
//! threads and the peer transport started, then the node task spawned.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle as ThreadHandle;
use std::time::{Duration, Instant};

use keel_core::{Index, RaftNode, RecoveredState, Term};
use keel_transport::{Connector, PeerTransport, Tcp};
use keel_wal::snapshot::SnapshotFile;
use keel_wal::{Fs, StdFs};
use tokio::sync::{mpsc, watch};

use super::open::{Opened, Promised};
use super::SnapshotData;
use super::{clock_hold_ms, driver, incarnation, refused, Node, NodeConfig, StartError};
use crate::apply::{self, StateMachine};
use crate::event::Event;
use crate::failure::{FailureCell, Guarded};
use crate::handle::{Handle, Request};
use crate::scrub::{ScrubConfig, ScrubCounters};
use crate::storage::{self, NodeLog, StorageCommand};

/// The threads beside the node task, started.
struct Threads<S> {
    apply: apply::ApplyWorker<S>,
    joins: Vec<ThreadHandle<()>>,
    scrub_stop: Arc<AtomicBool>,
    scrub_counters: Arc<ScrubCounters>,
}

impl<S: StateMachine> Node<S> {
    /// Starts the node on `opened` (see the module documentation).
    pub(super) async fn start_opened<L: NodeLog>(
        config: NodeConfig,
        mut sm: S,
        opened: Opened<L>,
        started: Instant,
    ) -> Result<Node<S>, StartError> {
        let mut state = opened.state;
        let (snapshot_data, snapshot_bytes) = restore_newest(
            &mut sm,
            &mut state,
            opened.snapshot.as_ref(),
            &opened.trailing,
        )?;
        let durable = sm.durable().map(|held| held.index);
        let (raft, applied) = core_from(&config, state, opened.promised, durable, started)?;
        let config = settle_config(config, opened.snapshot_dir, raft.commit_index())?;
        let failure = FailureCell::new(config.id);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        // The storage queue is bounded: the node awaits room, which throttles it to the disk.
        let (storage_tx, storage_rx) = mpsc::channel(1024);
        let last_snapshot_bytes = Arc::new(AtomicU64::new(snapshot_bytes));
        let threads = spawn_threads(
            &config,
            (sm, applied, Arc::clone(&last_snapshot_bytes)),
            (opened.log, storage_rx, opened.scrub),
            &events_tx,
            &failure,
        )?;
        let (transport, inbound_rx) = bind_transport(&config).await?;
        let peer_addr = transport.local_addr();
        let snapshot_counters = transport.snapshot_counters();
        let (handle, requests_rx, watched) = new_handle(&config, &raft, &transport);
        let (node_messages_inbox, node_messages) = node_message_channel(&config, &handle);
        let io = driver::Io {
            group: config.group,
            transport,
            apply: threads.apply,
            events_tx,
            snapshot_data,
            last_snapshot_bytes,
            snapshot_sends: HashMap::new(),
            metrics: crate::metrics::NodeMetrics::new(config.id),
            failure: Arc::clone(&failure),
            node_messages: node_messages_inbox,
        };
        let proposal_refusal = Arc::clone(&handle.proposal_refusal);
        let driver = new_driver(
            config,
            raft,
            io,
            storage_tx,
            watched,
            proposal_refusal,
            started,
        );
        let task = tokio::spawn(Guarded {
            inner: Box::pin(driver.run(events_rx, inbound_rx, requests_rx)),
            cell: Arc::clone(&failure),
            thread: "the node task",
        });
        Ok(Node {
            handle,
            task: Some(task),
            threads: Arc::new(Mutex::new(threads.joins)),
            peer_addr,
            snapshot_counters,
            scrub_stop: threads.scrub_stop,
            scrub_counters: threads.scrub_counters,
            failure,
            node_messages: Some(node_messages),
        })
    }
}

/// Restores the state machine from the newest snapshot (streamed from its file, which was
/// verified whole when it was chosen), unless it keeps its state durably itself and the log
/// holds every entry after what it holds (`StateMachine::durable`): then it starts there, and
/// `state` says so (applied, and the commit index at least that far). The newest snapshot's
/// position and file, and its size.
fn restore_newest<S: StateMachine>(
    sm: &mut S,
    state: &mut RecoveredState,
    snapshot: Option<&(SnapshotFile, <StdFs as Fs>::File)>,
    trailing: &[keel_core::Entry],
) -> Result<(SnapshotData, u64), StartError> {
    let durable = sm.durable();
    if let Some(held) = durable {
        let in_log = term_in_log(state, held.index);
        if in_log != Some(held.term) {
            return Err(StartError::StateMachine {
                index: held.index,
                message: match in_log {
                    Some(term) => format!(
                        "it holds the entry {held}, but this log's entry at {} has term {term}: \
                         its state is not this log's",
                        held.index
                    ),
                    None => format!(
                        "it holds the entry {held}, beyond this log's last entry at {}",
                        last_index(state)
                    ),
                },
            });
        }
    }
    let Some((file, handle)) = snapshot else {
        return Ok((None, 0));
    };
    let size_bytes = std::fs::metadata(&file.path).map_or(0, |m| m.len());
    let data = Some((file.meta.last, file.path.clone()));
    if let Some(held) = durable {
        if held.index >= file.meta.last.index {
            // Every entry after what it holds is in the log: no restore, a replay of those only.
            tracing::info!("the state machine holds {held} durably: starting it there");
            state.applied = held.index;
            state.hard_state.commit = state.hard_state.commit.max(held.index);
            return Ok((data, size_bytes));
        }
        if apply_up_to_snapshot(sm, trailing, held.index, file.meta.last.index)? {
            return Ok((data, size_bytes));
        }
    }
    if file.meta.last.index > 0 {
        let mut reader = keel_wal::snapshot::data_reader(handle, file);
        sm.restore(file.meta.last, &mut reader)
            .map_err(|e| StartError::StateMachine {
                index: file.meta.last.index,
                message: e.0,
            })?;
    }
    Ok((data, size_bytes))
}

/// A state machine holding less than the newest snapshot covers catches up on the entries the
/// log kept below the snapshot for it (`RaftNode::keep_log_after`), instead of restoring the
/// whole snapshot: they are committed (the snapshot covers them) and applied here, before the
/// node starts at the snapshot. False (nothing applied) when the log does not hold them all.
fn apply_up_to_snapshot<S: StateMachine>(
    sm: &mut S,
    trailing: &[keel_core::Entry],
    held: Index,
    snapshot: Index,
) -> Result<bool, StartError> {
    let kept: Vec<_> = trailing
        .iter()
        .filter(|e| e.index > held && e.index <= snapshot)
        .collect();
    let contiguous = kept.iter().zip(held + 1..).all(|(e, i)| e.index == i);
    if !contiguous || kept.len() as u64 != snapshot - held {
        return Ok(false);
    }
    tracing::info!(
        "the state machine holds entry {held} durably: applying the {} entries up to the \
         snapshot at {snapshot} from the log",
        kept.len()
    );
    for entry in kept {
        if let keel_core::EntryPayload::Normal(data) = &entry.payload {
            match sm.apply(entry.log_id(), data) {
                Ok(_) | Err(keel_engine::ApplyError::Refused(_)) => {}
                Err(e) => {
                    return Err(StartError::StateMachine {
                        index: entry.index,
                        message: e.to_string(),
                    })
                }
            }
        }
    }
    Ok(true)
}

/// The last index the recovered state holds: its last entry's, or the snapshot's.
fn last_index(state: &RecoveredState) -> Index {
    state
        .entries
        .last()
        .map_or(state.snapshot.index, |e| e.index)
        .max(state.snapshot.index)
}

/// The term of the entry at `index` as the recovered state knows it: from its entries, its
/// snapshot, or the snapshot's term history for an index it covers; `None` beyond its end.
fn term_in_log(state: &RecoveredState, index: Index) -> Option<Term> {
    if let Some(entry) = state.entries.iter().find(|e| e.index == index) {
        return Some(entry.term);
    }
    if index == state.snapshot.index {
        return Some(state.snapshot.term);
    }
    if index > state.snapshot.index {
        return None;
    }
    // The term history lists the first index of each term up to the snapshot.
    state
        .snapshot_term_history
        .iter()
        .take_while(|first| first.index <= index)
        .last()
        .map_or(Some(0), |first| Some(first.term))
}

/// The core, from the recovered state (recovering to `promised` when the disk lost what it had
/// promised, keeping the log after what the state machine holds `durable`ly by itself), and
/// the index the state machine holds.
fn core_from(
    config: &NodeConfig,
    mut state: keel_core::RecoveredState,
    promised: Option<Promised>,
    durable: Option<Index>,
    started: Instant,
) -> Result<(RaftNode, Index), StartError> {
    state.applied = state.applied.max(state.snapshot.index);
    let applied = state.applied;
    let mut raft = RaftNode::new(config.raft.clone(), state)?;
    raft.keep_log_after(durable);
    if let Some((promised, former_terms)) = promised {
        raft.start_recovering(promised, &former_terms);
    }
    tracing::info!(
        node = config.id,
        "recovered in {:?}: snapshot {}, commit {}, last {}",
        started.elapsed(),
        raft.snapshot().last,
        raft.commit_index(),
        raft.log().last_index()
    );
    Ok((raft, applied))
}

/// The peer transport (`TransportConfig::connector`: TCP by default), started and told the
/// peers' addresses, and its inbound queue.
async fn bind_transport(
    config: &NodeConfig,
) -> Result<
    (
        Arc<dyn PeerTransport>,
        mpsc::Receiver<keel_transport::Inbound>,
    ),
    StartError,
> {
    let (inbound_tx, inbound_rx) = mpsc::channel(config.transport.send_queue_messages_max);
    let connector: Arc<dyn Connector> = match &config.transport.connector {
        Some(connector) => Arc::clone(connector),
        None => Arc::new(Tcp),
    };
    let transport = connector
        .connect(
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
    Ok((transport, inbound_rx))
}

/// Fills in the transport's directories and incarnation, and drops a partial snapshot transfer
/// at or below `replay_target`: the core would ignore it (one above is resumed if its leader
/// offers it again).
fn settle_config(
    mut config: NodeConfig,
    snapshot_dir: PathBuf,
    replay_target: Index,
) -> Result<NodeConfig, StartError> {
    let snapshot_dir = config
        .transport
        .snapshot_dir
        .get_or_insert(snapshot_dir)
        .clone();
    keel_transport::discard_stale_partial(&snapshot_dir, replay_target)?;
    if config.transport.incarnation == 0 {
        config.transport.incarnation = incarnation(&config.data_dir)?;
    }
    if config.transport.incarnations_dir.is_none() {
        config.transport.incarnations_dir = Some(config.data_dir.clone());
    }
    Ok(config)
}

/// The node's first handle, with the ends the node task keeps: its request queue and the
/// senders of what the handles watch.
fn new_handle<S>(
    config: &NodeConfig,
    raft: &RaftNode,
    transport: &Arc<dyn PeerTransport>,
) -> (Handle<S>, mpsc::Receiver<Request<S>>, driver::Watched) {
    let (requests_tx, requests_rx) = mpsc::channel(config.client_queue_requests_max);
    let (view_tx, view_rx) = watch::channel(driver::view_of(config.group, raft, false));
    let (applied_tx, applied_rx) = watch::channel(raft.applied_index());
    let handle = Handle {
        requests: requests_tx,
        request_timeout: Duration::from_millis(config.request_timeout_ms),
        client_addrs: transport.client_addrs(),
        // Weak: a handle that outlives its node must not keep the node's transport running.
        transport: Arc::downgrade(transport),
        node_id: config.id,
        node_message_counters: Arc::default(),
        proposal_refusal: Arc::default(),
        view: view_rx,
        applied: applied_rx,
    };
    let watched = driver::Watched {
        view: view_tx,
        applied: applied_tx,
    };
    (handle, requests_rx, watched)
}

/// The node message channel: the node task's end, and the application's
/// (`Node::take_node_messages`).
fn node_message_channel<S>(
    config: &NodeConfig,
    handle: &Handle<S>,
) -> (
    crate::node_messages::NodeMessageInbox,
    mpsc::Receiver<crate::node_messages::NodeMessage>,
) {
    let (tx, rx) = mpsc::channel(config.node_message_queue_max.max(1));
    let inbox = crate::node_messages::NodeMessageInbox {
        node: config.id,
        tx,
        counters: Arc::clone(&handle.node_message_counters),
    };
    (inbox, rx)
}

/// Starts the apply thread (on the state machine, at `applied`), the storage thread (on the
/// log) and the scrub (when `scrub` allows it and a rate is set).
fn spawn_threads<S: StateMachine, L: NodeLog>(
    config: &NodeConfig,
    (sm, applied, last_snapshot_bytes): (S, Index, Arc<AtomicU64>),
    (log, storage_rx, scrub): (L, mpsc::Receiver<StorageCommand>, bool),
    events_tx: &mpsc::UnboundedSender<Event>,
    failure: &Arc<FailureCell>,
) -> Result<Threads<S>, StartError> {
    let (apply, apply_thread) = apply::spawn(
        sm,
        applied,
        keel_engine::SnapshotPolicy {
            entries_max: config.snapshot_threshold_entries.max(1),
            bytes_max: config.snapshot_threshold_bytes.max(1),
            bytes_min: config.snapshot_min_log_bytes.max(1),
            log_to_state_ratio: config.snapshot_log_ratio,
        },
        last_snapshot_bytes,
        config.apply_inline_budget_us.saturating_mul(1000),
        events_tx.clone(),
        Arc::clone(failure),
    )?;
    let mut joins = vec![
        storage::spawn(log, storage_rx, events_tx.clone(), Arc::clone(failure))?,
        apply_thread,
    ];
    let scrub_stop = Arc::new(AtomicBool::new(false));
    let scrub_counters = Arc::new(ScrubCounters::default());
    let scrub_config = ScrubConfig {
        rate_bytes_per_s: if scrub {
            config.scrub.rate_bytes_per_s
        } else {
            0
        },
        ..config.scrub.clone()
    };
    joins.extend(crate::scrub::spawn(
        config.id,
        config.data_dir.clone(),
        scrub_config,
        scrub_stop.clone(),
        scrub_counters.clone(),
        Arc::clone(failure),
    )?);
    Ok(Threads {
        apply,
        joins,
        scrub_stop,
        scrub_counters,
    })
}

/// The node task's state, before it runs.
fn new_driver<S: StateMachine>(
    config: NodeConfig,
    raft: RaftNode,
    io: driver::Io<S>,
    storage: mpsc::Sender<StorageCommand>,
    watched: driver::Watched,
    proposal_refusal: Arc<crate::handle::ProposalRefusal>,
    started: Instant,
) -> driver::Driver<S> {
    let engine = keel_engine::NodeEngine::new(
        config.id,
        keel_engine::EngineLimits {
            pending_proposals_max: config.pending_proposals_max,
            pending_reads_max: config.pending_reads_max,
            entry_bytes_max: config.wal.entry_payload_bytes_max(),
        },
        keel_engine::ClockPolicy {
            offset_ms_max: config.clock_offset_ms_max,
            hold_ms: clock_hold_ms(&config),
        },
        raft.applied_index(),
        raft.commit_index(),
    );
    let departed = keel_engine::handshake::DepartedMembers::new(raft.log());
    io.transport.configuration_changed(&departed.current());
    driver::Driver {
        departed,
        raft,
        engine,
        io,
        storage,
        snapshot_writing: keel_engine::SnapshotWriting::default(),
        snapshot_waiters: Vec::new(),
        replay_duration: Duration::ZERO,
        stopping: false,
        refused: refused::RefusedMessages::new(config.id),
        started,
        proposal_refusal: crate::handle::RefusalPublisher::new(proposal_refusal),
        watched,
        config,
    }
}
