//! The storage thread: owns the WAL and does group commit.
//!
//! Writes arrive in `ready()` order. While one `write_batch` (and its fdatasync) runs, the node
//! keeps queueing; the next batch takes everything queued, so one fsync covers many writes under
//! load and the leader's own write overlaps with replication (it sent its Appends before handing
//! the write here). Completion is reported as the last write id of the batch: `persisted(id)`
//! means "this and every earlier write".
//!
//! A snapshot adoption is ordered with the writes around it (a later write may purge up to it or
//! install it, which the WAL refuses unless it is already saved). The snapshot's bytes were
//! written and fsynced elsewhere (a snapshot thread, or the transport receiving one), so this
//! thread only verifies the header, renames and fsyncs the directory: a large snapshot never
//! holds up group commit.
//!
//! A fatal WAL error (failed fsync, I/O error) stops the process: never retry an fsync.

use std::path::PathBuf;

use keel_core::{NodeId, Term, Write};
use keel_wal::{StdFs, Wal};
use tokio::sync::mpsc;

use crate::node::Event;

/// Bound on the writes one group commit takes, so one batch's buffer stays bounded even when the
/// node produces writes as fast as they are drained.
const GROUP_COMMIT_WRITES_MAX: usize = 1024;

pub(crate) enum StorageCommand {
    Write(Write),
    /// Make the complete, fsynced snapshot file at `temp` the newest snapshot. `from` names the
    /// leader for a received one (`None`: taken locally).
    AdoptSnapshot {
        temp: PathBuf,
        from: Option<(NodeId, Term)>,
    },
}

/// Logs and exits: the only safe reaction to a failed fsync or write (docs/DESIGN.md section 3).
pub(crate) fn fatal(what: &str, error: &dyn std::fmt::Display) -> ! {
    tracing::error!("fatal storage error, stopping the process: {what}: {error}");
    eprintln!("keel: fatal storage error, stopping the process: {what}: {error}");
    std::process::exit(70)
}

pub(crate) fn spawn(
    mut wal: Wal<StdFs>,
    mut commands: mpsc::Receiver<StorageCommand>,
    events: mpsc::UnboundedSender<Event>,
    metrics: crate::metrics::StorageMetrics,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("keel-storage".into())
        .spawn(move || {
            let mut writes = Vec::new();
            // Ends when the node task drops its sender.
            while let Some(first) = commands.blocking_recv() {
                let mut next = Some(first);
                while let Some(cmd) = next.take() {
                    match cmd {
                        StorageCommand::Write(w) => {
                            writes.push(w);
                            // Group commit: everything queued meanwhile, up to a snapshot save.
                            if writes.len() < GROUP_COMMIT_WRITES_MAX {
                                next = commands.try_recv().ok();
                            }
                            if !matches!(next, Some(StorageCommand::Write(_))) {
                                let timer = metrics.group_commit(&writes);
                                flush(&mut wal, &mut writes, &events);
                                timer.done();
                            }
                        }
                        StorageCommand::AdoptSnapshot { temp, from } => {
                            adopt(&mut wal, temp, from, &events);
                        }
                    }
                }
            }
        })
}

fn flush(wal: &mut Wal<StdFs>, writes: &mut Vec<Write>, events: &mpsc::UnboundedSender<Event>) {
    let Some(last_id) = writes.last().map(|w| w.id) else {
        return;
    };
    if let Err(e) = wal.write_batch(writes) {
        // Even InvalidRequest means the core and the WAL disagree: continuing could lose data.
        fatal("write_batch", &e);
    }
    writes.clear();
    let _ = events.send(Event::Persisted(last_id));
}

fn adopt(
    wal: &mut Wal<StdFs>,
    temp: PathBuf,
    from: Option<(NodeId, Term)>,
    events: &mpsc::UnboundedSender<Event>,
) {
    match wal.adopt_snapshot(&temp) {
        Ok(meta) => {
            let path = wal.dir().join(keel_wal::snapshot_file_name(meta.last));
            let _ = events.send(Event::SnapshotSaved { meta, path, from });
        }
        Err(e) if e.is_fatal() => fatal("adopt_snapshot", &e),
        // An older snapshot than one already saved (a received one overtook a local one, or
        // the reverse), or a file that does not verify: nothing to do but drop it.
        Err(e) => {
            tracing::info!("snapshot {} not adopted: {e}", temp.display());
            let _ = std::fs::remove_file(&temp);
        }
    }
}
