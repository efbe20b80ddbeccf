//! One seed of keel's own key-value simulation, from start to report.

use keel_core::Index;

use crate::coverage::MembershipCoverage;
use crate::invariants::Violation;
use crate::kv_user::KvState;
use crate::mutation::Layers;
use crate::user::User;
use crate::world::{RunConfig, World};

/// The outcome of one seed.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub seed: u64,
    pub steps: u64,
    pub violation: Option<Violation>,
    pub ops_completed: usize,
    pub ops_unknown: usize,
    pub commit_max: Index,
    /// Client operations in the history and the time the linearizability check took
    /// (wall clock: reported, never part of the trace).
    pub history_ops: usize,
    pub linearizability_check_us: u64,
    pub trace: Vec<String>,
    pub trace_digest: u64,
    /// Whether the seed drew membership of every size (`Params::every_size`), and what its
    /// membership changes covered.
    pub every_size: bool,
    pub membership: MembershipCoverage,
    /// Simulated time when the run ended.
    pub end_time: u64,
    /// The highest state-machine time (`KvStateMachine::log_time_ms`) of any node up at the end:
    /// the newest stamp that reached a state machine.
    pub log_time_ms: u64,
    /// Expired keys the leaders' tick entries removed (as their replies counted them).
    pub keys_expired_by_ticks: u64,
    /// Campaign holds for a clock too far from the leader's, and leaders that found their own
    /// clock the outlier.
    pub clock_holds: u64,
    pub clock_outliers: u64,
    /// Watched transactions whose EXEC applied, and those aborted.
    pub watched_swapped: u64,
    pub watched_aborted: u64,
    /// Scripts whose writes applied, and runs of a script again after a key it touched changed
    /// (`scripts.rs`).
    pub scripts_applied: u64,
    pub scripts_rerun: u64,
    /// Refused writes a follower forwarded with the one before them (grouped forwarding).
    pub forwards_grouped: u64,
    /// Storage faults injected, damaged nodes that became whole again, and restarts whose WAL
    /// reported and repaired damage (`storage_faults.rs`).
    pub storage_faults: u64,
    pub storage_repaired: u64,
    pub damage_reports: u64,
    /// Recovering nodes that let go of their promise, or lowered it (`storage_faults.rs`).
    pub promises_released: u64,
    pub promises_lowered: u64,
    /// Operations the queue clients got an answer to (`queues/`), the elements and stream
    /// entries they saw delivered, and the blocking pops served after they waited.
    pub queue_ops: u64,
    pub queue_deliveries: u64,
    pub stream_deliveries: u64,
    pub served_after_waiting: u64,
}

/// Runs one seed; a panic anywhere (an assertion in the core, say) becomes a violation of the
/// report instead of ending the process.
pub fn run_catching(cfg: &RunConfig) -> RunReport {
    match std::panic::catch_unwind(|| run(cfg)) {
        Ok(report) => report,
        Err(payload) => {
            let message = crate::panic_message(payload.as_ref());
            RunReport {
                seed: cfg.seed,
                steps: 0,
                violation: Some(Violation {
                    invariant: "panic",
                    detail: message,
                }),
                ops_completed: 0,
                ops_unknown: 0,
                commit_max: 0,
                history_ops: 0,
                linearizability_check_us: 0,
                trace: Vec::new(),
                trace_digest: 0,
                every_size: false,
                membership: Default::default(),
                end_time: 0,
                log_time_ms: 0,
                keys_expired_by_ticks: 0,
                clock_holds: 0,
                clock_outliers: 0,
                watched_swapped: 0,
                watched_aborted: 0,
                scripts_applied: 0,
                scripts_rerun: 0,
                forwards_grouped: 0,
                storage_faults: 0,
                storage_repaired: 0,
                damage_reports: 0,
                promises_released: 0,
                promises_lowered: 0,
                queue_ops: 0,
                queue_deliveries: 0,
                stream_deliveries: 0,
                served_after_waiting: 0,
            }
        }
    }
}

/// The furthest log time any live node's state machine reached.
fn log_time_max_ms(w: &World<KvState>) -> u64 {
    let log_time_ms = |n: &crate::world::SimNode<KvState>| {
        let app = n.app.as_ref()?;
        Some(app.applier.state().machine().state().log_time_ms())
    };
    w.nodes.iter().filter_map(log_time_ms).max().unwrap_or(0)
}

pub fn run(cfg: &RunConfig) -> RunReport {
    let mut w = World::with_user(cfg, |p| KvState::new(p, cfg.queues, cfg.scripts, cfg.seed));
    w.user.clients.connections.mutation = cfg.mutation.redis();
    w.start_queue_clients();
    w.run_to_end(cfg.fault_steps);
    let check_started = std::time::Instant::now();
    if w.violation.is_none() {
        if let Err(v) = w.user.check_history() {
            w.fail(v);
        }
    }
    if w.violation.is_none() {
        if let Err(v) = w.check_queues() {
            w.fail(v);
        }
    }
    let linearizability_check_us = check_started.elapsed().as_micros() as u64;
    let ops_unknown = w
        .user
        .history
        .ops
        .iter()
        .filter(|o| o.result == Some(crate::history::OpResult::Unknown))
        .count();
    RunReport {
        seed: cfg.seed,
        steps: w.steps,
        violation: w.violation.clone(),
        ops_completed: w.user.history.ops.len() - ops_unknown,
        ops_unknown,
        commit_max: w.checker.committed_max(),
        history_ops: w.user.history.ops.len(),
        linearizability_check_us,
        trace_digest: w.trace_digest(),
        trace: std::mem::take(&mut w.trace),
        every_size: w.params.every_size,
        membership: w.membership.coverage.clone(),
        end_time: w.now,
        log_time_ms: log_time_max_ms(&w),
        keys_expired_by_ticks: w.user.keys_expired_by_ticks,
        clock_holds: w.clock_holds,
        clock_outliers: w.clock_outliers,
        watched_swapped: w.user.watched_swapped,
        watched_aborted: w.user.watched_aborted,
        scripts_applied: w.user.scripts_applied,
        scripts_rerun: w.user.scripts_rerun,
        forwards_grouped: w.user.forwards_grouped,
        storage_faults: w.storage.injected,
        storage_repaired: w.storage.repaired,
        damage_reports: w.storage.reports,
        promises_released: w.storage.released,
        promises_lowered: w.storage.lowered,
        queue_ops: w.user.queues.as_ref().map_or(0, |q| q.answered),
        queue_deliveries: (w.user.queues.as_ref()).map_or(0, |q| q.history.delivered.len() as u64),
        stream_deliveries: (w.user.queues.as_ref())
            .map_or(0, |q| q.history.stream_delivered.len() as u64),
        served_after_waiting: w.user.served_after_waiting,
    }
}
