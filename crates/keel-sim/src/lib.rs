//! keel-sim: the deterministic cluster simulator and the checkers it runs.
//!
//! One `u64` seed decides everything: cluster shape, fault probabilities, every delay and every
//! choice. A run drives a cluster of `keel-core` nodes through faults, checks the invariants of
//! docs/SCENARIOS.md after every step, heals the cluster, demands liveness and convergence, and checks
//! the client history for linearizability. Two users run on it: keel's own key-value simulation
//! (`run`, the `keel-sim` binary; the default feature `kv`) and an embedder's state machine
//! ([`embed`]; `default-features = false` leaves out the server's crates).
//!
//! Everything random comes from one `ChaCha8Rng` seeded by the seed; the nodes' PRNG seeds are
//! derived from it. A few per-seed draws added later (membership of every size, disk
//! replacements, node clocks) come from generators of their own derived from the seed, so that
//! they shifted nothing drawn before them. The same seed gives the same trace
//! (`tests/simulator.rs` checks it).

#[cfg(feature = "kv")]
mod blocking;
#[cfg(feature = "kv")]
mod client;
pub mod clock;
mod clock_watch;
#[cfg(feature = "kv")]
mod connection;
mod converge;
pub mod coverage;
mod disk;
pub mod embed;
#[cfg(feature = "kv")]
mod forward;
#[cfg(feature = "kv")]
pub mod history;
mod host;
pub mod invariants;
#[cfg(feature = "kv")]
mod kv_run;
#[cfg(feature = "kv")]
mod kv_user;
pub mod linearizability;
#[cfg(feature = "kv")]
mod linearize;
pub mod mutation;
pub mod params;
#[cfg(feature = "kv")]
mod queues;
mod restart;
mod run;
#[cfg(feature = "kv")]
mod scripts;
mod storage_faults;
#[cfg(feature = "kv")]
mod time;
mod transfer;
mod user;
mod wipe;
mod world;

pub use coverage::MembershipCoverage;
#[cfg(feature = "kv")]
pub use kv_run::{run, run_catching, RunReport};
pub use mutation::Mutation;
pub use storage_faults::StorageFaults;
pub use world::{DiskReplacements, RunConfig};

/// What a caught panic said.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".to_string())
}

/// The command that replays one seed, printed with every failure.
pub fn replay_command(seed: u64, mutation: Option<crate::Mutation>, steps: u64) -> String {
    let mut cmd =
        format!("cargo run --release -p keel-sim -- --seed {seed} --steps {steps} --trace");
    if let Some(m) = mutation {
        cmd.push_str(&format!(" --mutation {}", m.name()));
    }
    cmd
}
