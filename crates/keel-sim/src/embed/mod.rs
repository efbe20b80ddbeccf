//! Your state machine under keel's simulator.
//!
//! An embedder hands the simulator a [`Workload`]: the `StateMachine` they run in production, a
//! generator of their operations and the sequential [`Model`] that says what each operation
//! returns. The simulator runs a cluster of that machine through the faults keel itself is tested
//! with (lost, duplicated and delayed messages, partitions, crashes with torn writes, slow disks
//! and state machines, membership changes, leadership transfers, clock offsets), with the same
//! engine, apply pipeline and snapshot code the runtime runs, and checks:
//!
//! - after every apply and restore, that replicas which applied the same index agree on the
//!   state's digest ([`Workload::digest`]; by default a hash of the machine's snapshot bytes),
//!   and that they answered the entry at that index alike;
//! - that every snapshot a node takes, restored into a fresh machine, has the digest of its
//!   index (a restart, which restores the snapshot and replays the log, must reach the same
//!   digests again);
//! - every invariant of the core keel's own simulation checks;
//! - once the cluster healed, that it converges, and that the history the clients saw is
//!   linearizable against the model.
//!
//! A seed replays byte for byte ([`simulate`] with the same seed gives the same trace).
//!
//! The clients talk to nodes as an embedder's code talks to `keel::Handle`: a write is proposed
//! at the node the client believes leads (a refusal that says "not applied" sends it elsewhere),
//! a read is a linearizable read answered from the replica's state once it applied far enough,
//! and a client that waited longer than its timeout records the outcome as unknown and moves on
//! (an operation that cannot have taken effect, a read or a write no node appended, is left out
//! of the history instead).

mod clients;
mod sequential;
mod sweep;

use bytes::Bytes;
use keel_engine::StateMachine;

pub use crate::linearizability::{Effect, Key, Model};

pub use clients::{simulate, WorkloadReport};
pub use sequential::{Sequential, Spec};
pub use sweep::{check, explain, sweep, SweepSummary};

/// An operation a client runs: a write goes through the log, a read is answered from a replica's
/// state.
#[derive(Clone, Debug)]
pub enum Op<I> {
    /// `command` is proposed to the log and applied by every replica; the client is told
    /// [`Workload::write_output`] of the answer.
    Write {
        /// The object the linearizability checker files the operation under.
        key: Key,
        /// The operation as the model knows it.
        input: I,
        /// The entry's bytes, as the embedder's code proposes them.
        command: Bytes,
    },
    /// Answered by [`Workload::read`] from the state of a replica that applied far enough.
    Read {
        /// The object the linearizability checker files the operation under.
        key: Key,
        /// The operation as the model knows it.
        input: I,
    },
}

/// The random source a workload draws its operations from: the run's own, so that a seed
/// replays exactly.
pub struct OpRng<'a>(pub(crate) &'a mut rand_chacha::ChaCha8Rng);

impl OpRng<'_> {
    /// A uniformly random `u64`.
    pub fn next_u64(&mut self) -> u64 {
        rand::RngCore::next_u64(self.0)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "OpRng::below(0)");
        rand::Rng::random_range(self.0, 0..n)
    }

    /// True with probability `p` (0.0..=1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        rand::Rng::random_bool(self.0, p)
    }
}

/// What an embedder hands the simulator: their state machine, their operations and the model
/// that says what each operation returns.
pub trait Workload {
    /// The state machine, the same type the embedder runs in production.
    type Machine: StateMachine;
    /// The sequential specification of one object (one [`Key`]): see [`Model`].
    type Model: Model;

    /// A fresh state machine, as a node starts with it (empty: a restart restores the node's
    /// snapshot into it and replays the log).
    fn machine(&self) -> Self::Machine;

    /// The next operation of client `client`.
    fn next_op(&mut self, client: usize, rng: &mut OpRng<'_>) -> Op<<Self::Model as Model>::Input>;

    /// What a write's client is told: from the bytes `apply` answered, or the reason it refused
    /// the entry (`ApplyError::Refused`).
    fn write_output(
        key: &str,
        input: &<Self::Model as Model>::Input,
        answer: Result<&Bytes, &Bytes>,
    ) -> <Self::Model as Model>::Output;

    /// A read of `key`, answered from `machine`'s state.
    fn read(
        machine: &Self::Machine,
        key: &str,
        input: &<Self::Model as Model>::Input,
    ) -> <Self::Model as Model>::Output;

    /// A digest of the machine's state: replicas that applied the same index must agree on it.
    /// By default a hash of the bytes its snapshot writes, which requires those bytes to be
    /// deterministic (no iteration over a `HashMap` in them, say).
    fn digest(machine: &Self::Machine) -> u64 {
        let mut bytes = Vec::new();
        machine
            .snapshot_view()
            .write_to(&mut bytes)
            .expect("writing a snapshot to memory");
        fnv1a(&[&bytes])
    }
}

/// FNV-1a over the concatenation of `parts`: a digest, not a defence against an adversary.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|part| part.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}
