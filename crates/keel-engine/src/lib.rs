//! keel-engine: the decisions of a running node, without I/O.
//!
//! keel-core decides the protocol; this crate decides what a node does with the core's output and
//! with its clients' requests — what is sent, persisted and applied, in which order, and what waits
//! for which completion. It has no tokio, no threads and no clock (the wall clock comes in as an
//! argument): keel-runtime's tokio shell and the simulator (keel-sim) run exactly this code, the
//! shell moving bytes and time, the simulator its simulated network, disks and clock.
//!
//! - [`NodeEngine`] (`node.rs`): a `Ready` routed to a [`Shell`] in two phases (messages out and
//!   the write to persist, then committed entries, restores, reads and snapshot sends), proposals
//!   with their bounds and their answers, ReadIndex reads, startup replay.
//! - [`ClockWatch`] (`clock.rs`): each follower's clock offset from the leader's, measured on
//!   heartbeats, and the hold on the campaigns of a node whose clock is too far off.
//! - [`Applier`] and [`ApplyQueue`] (`apply.rs`): the one ordered apply pipeline (entries,
//!   snapshot restores, reads, snapshot requests), its order checks and the snapshot policy.
//! - [`StateMachine`] and [`SnapshotWriter`] (`state_machine.rs`): what the application supplies.
//! - [`SnapshotWriting`] (`snapshot.rs`): one snapshot written at a time, the newest view waiting.
//! - [`StorageWorker`] (`storage.rs`): group commit, completion reports, snapshot adoptions in
//!   order with the writes, over a [`LogStore`].
//! - [`handshake`]: whether a connected peer is heard (cluster id, storage incarnation) and the
//!   addresses it announced that the node adopts; which members left the configuration.
//! - [`transfer`]: snapshot transfer, sender and receiver (offers, chunks, checksums, the
//!   durable partial file, resume, abandonment), over any [`keel_wal::Fs`].
//!
//! With the `mutations` feature, the runtime variants of `keel_core::Mutation` switch on
//! deliberately broken branches of this code, so the simulator can show it catches them.

#![deny(missing_docs)]

mod apply;
mod clock;
mod error;
pub mod handshake;
mod node;
mod snapshot;
mod state_machine;
mod storage;
pub mod transfer;

pub use apply::{Applier, ApplyItem, ApplyQueue, PipelineError, SnapshotPolicy};
pub use clock::{ClockEvent, ClockPolicy, ClockReading, ClockStatus, ClockWatch};
pub use error::ClientError;
pub use node::{EngineLimits, NodeEngine, Shell};
pub use snapshot::{adoption, install_message, Adoption, SnapshotWriting};
pub use state_machine::{ApplyError, RestoreError, SnapshotWriter, StateMachine};
pub use storage::{Completion, LogStore, StorageCommand, StorageWorker, GROUP_COMMIT_WRITES_MAX};
