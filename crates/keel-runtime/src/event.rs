//! [`Event`]: what the storage thread, the apply pipeline and the snapshot tasks tell the node
//! task. Its own module, below all of them, so that each reports to the node task without
//! depending on it.

use std::path::PathBuf;

use keel_core::{Index, NodeId, SnapshotMeta, Term};
use keel_engine::SnapshotWriter;

/// Completions from the storage thread, the apply pipeline and snapshot transfers.
#[derive(Debug)]
pub enum Event {
    Persisted(u64),
    /// The state machine applied up to `index`; it holds up to `durable` durably by itself, if
    /// it keeps its own durable state (`StateMachine::durable`).
    Applied {
        index: Index,
        durable: Option<Index>,
    },
    /// The apply thread captured a view of the state at `index`.
    SnapshotTaken {
        index: Index,
        view: Box<dyn SnapshotWriter>,
    },
    /// A snapshot thread finished writing a view to a file (and queued its adoption).
    SnapshotWritten,
    SnapshotSaved {
        meta: SnapshotMeta,
        /// The snapshot file, under its final name.
        path: PathBuf,
        /// The leader (and its term) for a received snapshot; `None` for one taken here.
        from: Option<(NodeId, Term)>,
    },
    /// The storage kept a newer snapshot than the one it was given to adopt.
    SnapshotNotAdopted,
    SnapshotSendFailed(NodeId),
}
