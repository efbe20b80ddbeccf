//! Opening a node's log at start, before anything else runs: the built-in WAL ([`open_wal`]) or
//! an embedder's storage ([`open_embedder`]). Both end in an [`Opened`]: the state the protocol
//! starts from, the newest snapshot file (verified whole, to restore the state machine from),
//! and the log the storage thread will run.
//!
//! An empty log of a node given `initial_members` is bootstrapped here: the bootstrap snapshot
//! (the initial configuration at 0/0, no data) is made durable before the node starts.
//!
//! An embedder's storage and keel's snapshot files are two places that must agree, and a crash
//! can fall between them (a file renamed into place, not yet recorded): at start, a newer file
//! than the storage recorded is recorded; a recorded snapshot no file holds refuses to start;
//! and a storage that is empty in a data directory a node has used before refuses to start too
//! (a node that lost its log may have voted: under its old identity it could vote twice).

use std::path::PathBuf;

use keel_core::storage::Storage;
use keel_core::{LogId, RecoveredState, SnapshotMeta};
use keel_wal::snapshot::SnapshotFile;
use keel_wal::{bootstrap_meta, Fs, StdFs, Wal};

use super::{NodeConfig, StartError};
use crate::metrics::StorageMetrics;
use crate::storage::{EmbedderStore, WalStore};

/// What a node whose disk lost acknowledged data recovers to: the promised entry, and the first
/// index of each of the last terms of the log that held it (`RaftNode::start_recovering`).
pub(super) type Promised = (LogId, Vec<LogId>);

/// A log opened and recovered, ready to start a node on.
pub(super) struct Opened<L> {
    pub log: L,
    pub state: RecoveredState,
    pub promised: Option<Promised>,
    /// The newest snapshot, verified whole, and the file open (a newer snapshot may prune it).
    pub snapshot: Option<(SnapshotFile, <StdFs as Fs>::File)>,
    /// Where snapshot files are written, received and kept.
    pub snapshot_dir: PathBuf,
    /// Entries the log holds that the newest snapshot covers, up to its last entry: what a
    /// state machine holding less than the snapshot on its own catches up on.
    pub trailing: Vec<keel_core::Entry>,
    /// Whether the scrub may run over the data directory (it knows the WAL's files only).
    pub scrub: bool,
}

fn is_fresh(state: &RecoveredState) -> bool {
    state.snapshot == LogId::ZERO
        && state.entries.is_empty()
        && state.hard_state == Default::default()
}

/// Opens the WAL in the data directory, repairing what the cluster can make good
/// (`Wal::open_repairing`: a lost tail, a corrupt segment or snapshot set aside): the entry the
/// node had promised comes back with it, and the node recovers what it lacks from its peers
/// (`RaftNode::start_recovering`). A corrupt promise record becomes [`StartError::Damaged`].
pub(super) fn open_wal(config: &NodeConfig) -> Result<Opened<WalStore>, StartError> {
    let (mut wal, mut recovered, promised) = open_wal_repairing(config)?;
    if is_fresh(&recovered.state) && !config.initial_members.is_empty() {
        let meta = bootstrap_meta(config.initial_members.iter().copied());
        wal.save_snapshot(&meta, &[])?;
        drop(wal);
        (wal, recovered, _) = open_wal_repairing(config)?;
    }
    let snapshot = wal.open_latest_snapshot()?;
    Ok(Opened {
        log: WalStore {
            wal,
            metrics: StorageMetrics::new(config.id),
        },
        state: recovered.state,
        promised,
        snapshot,
        snapshot_dir: config.data_dir.clone(),
        trailing: recovered.trailing,
        scrub: true,
    })
}

fn open_wal_repairing(
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

/// The entries a storage returned that its snapshot covers (it may keep some).
fn covered_by_snapshot(state: &RecoveredState) -> Vec<keel_core::Entry> {
    let covered = state
        .entries
        .iter()
        .filter(|e| e.index <= state.snapshot.index);
    covered.cloned().collect()
}

/// An empty log storage in a data directory a node has run in (its incarnation file, or
/// snapshot files, are there) is a node that lost its log: it may have voted, and must not
/// vote again under the same identity.
fn refuse_a_forgotten_log(config: &NodeConfig, has_snapshots: bool) -> Result<(), StartError> {
    let used_before = config.data_dir.join(super::INCARNATION_FILE).exists();
    if used_before || has_snapshots {
        return Err(StartError::Storage(format!(
            "the log storage is empty, but the data directory {} belongs to a node that ran \
             before: a node that lost its log may have voted, and must rejoin under a new id \
             with a new data directory",
            config.data_dir.display()
        )));
    }
    Ok(())
}

/// The directory, under the data directory, where keel keeps the snapshot files of a node on an
/// embedder's storage.
pub(super) const SNAPSHOT_DIR_NAME: &str = "snapshots";

/// Opens a node on the embedder's `storage`, its snapshot files in `snapshots/` under the data
/// directory (see the module documentation for how the two are kept in agreement).
pub(super) fn open_embedder<L: Storage + Send + 'static>(
    config: &NodeConfig,
    mut storage: L,
) -> Result<Opened<EmbedderStore<L>>, StartError> {
    let failed =
        |what: &str, e: &dyn std::fmt::Display| StartError::Storage(format!("{what}: {e}"));
    let snapshot_dir = config.data_dir.join(SNAPSHOT_DIR_NAME);
    std::fs::create_dir_all(&snapshot_dir)?;
    let kept = config.wal.snapshots_kept;
    let mut state = storage.recover().map_err(|e| failed("recover", &e))?;
    let mut latest = keel_wal::snapshot::find_latest_snapshot(&StdFs, &snapshot_dir)?.chosen;
    if is_fresh(&state) {
        refuse_a_forgotten_log(config, latest.is_some())?;
        if !config.initial_members.is_empty() {
            state.snapshot_membership = bootstrap_meta(config.initial_members.iter().copied())
                .membership
                .as_ref()
                .clone();
        }
    }
    if latest.is_none() && state.snapshot == LogId::ZERO && !state.snapshot_membership.is_unknown()
    {
        // The configuration at 0/0 (a new cluster's, or one the storage was made with) gets its
        // file, as every snapshot a node may have to send or restore does.
        let meta = SnapshotMeta {
            last: LogId::ZERO,
            membership: std::sync::Arc::new(state.snapshot_membership.clone()),
            term_history: state.snapshot_term_history.clone(),
        };
        keel_wal::snapshot::save_snapshot(&StdFs, &snapshot_dir, &meta, &[], kept)?;
        latest = keel_wal::snapshot::find_latest_snapshot(&StdFs, &snapshot_dir)?.chosen;
    }
    let file_at = latest.as_ref().map_or(LogId::ZERO, |f| f.meta.last);
    if let Some(file) = &latest {
        if file.meta.last.index >= state.snapshot.index {
            // Recording is idempotent: the file renamed into place, not yet recorded, before a
            // crash is recorded now; the bootstrap is recorded the first time.
            storage
                .record_snapshot(&file.meta)
                .map_err(|e| failed("record_snapshot", &e))?;
            state = storage.recover().map_err(|e| failed("recover", &e))?;
        }
    }
    if state.snapshot.index > file_at.index {
        return Err(StartError::Storage(format!(
            "the log storage records a snapshot at {}, but the newest snapshot file in {} is at \
             {file_at}: its data is lost",
            state.snapshot,
            snapshot_dir.display()
        )));
    }
    let snapshot = match latest {
        Some(file) => {
            let handle = StdFs.open(&file.path)?;
            Some((file, handle))
        }
        None => None,
    };
    Ok(Opened {
        log: EmbedderStore {
            storage,
            snapshot_dir: snapshot_dir.clone(),
            snapshots_kept: kept,
            recorded: state.snapshot,
            metrics: StorageMetrics::new(config.id),
        },
        trailing: covered_by_snapshot(&state),
        state,
        promised: None,
        snapshot,
        snapshot_dir,
        scrub: false,
    })
}
