//! Per-seed simulation parameters: cluster shape, fault probabilities and timings, all drawn from
//! the seed so that every seed explores a different corner.
//!
//! Everything drawn per seed: the shape, the timings, the fault probabilities, adversarial crash
//! points, whether the disks are the WAL over `SimFs` or `MemStorage` (half the seeds each),
//! whether followers forward (`forward_writes`, two thirds of the seeds), and each node slot's
//! wall clock (`clock.rs`). Half the seeds keep the three- or five-voter shape (never below three
//! voters); the other half (`every_size`, drawn from a generator of its own so that the first
//! half replays as before) start with 1 to 5 voters and at least five slots, with membership
//! changes down to one voter and back. `--classic-shapes` (`RunConfig::classic_shapes`) draws
//! only the first kind, to replay seeds recorded before the second existed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::clock::{draw_clocks, WallClock};

/// The cluster id every simulated node and handshake carries.
pub const CLUSTER_ID: u64 = 0x6b65_656c_5f73_696d;

/// Simulated time is counted in abstract units; a node ticks every `TICK_INTERVAL` units.
pub const TICK_INTERVAL: u64 = 10;

#[derive(Clone, Debug)]
pub struct Params {
    /// Voters at bootstrap: 3 or 5, or 1 to 5 when `every_size` is drawn.
    pub initial_voters: usize,
    /// Storage: the real write-ahead log over the fault-injecting file layer, or the in-memory
    /// storage (faster; both must behave the same).
    pub use_wal: bool,
    /// Node slots; those beyond `initial_voters` start empty and may be added by membership
    /// changes.
    pub node_count: usize,
    pub clients: usize,
    pub keys: u64,
    pub election_timeout_ticks: u32,
    pub pre_vote: bool,
    pub check_quorum: bool,
    pub heartbeat_interval_ticks: u32,
    pub entries_per_message_max: usize,
    pub inflight_messages_max: usize,
    /// The core's `hold_partial_appends`: batching while an Append is in flight, or not.
    pub hold_partial_appends: bool,
    /// Network: one-way delay in `[min, max]` units (different delays reorder messages).
    pub net_delay_min: u64,
    pub net_delay_max: u64,
    pub loss_probability: f64,
    pub duplicate_probability: f64,
    /// Disk: write completion latency in units, and the slow-disk outlier.
    pub disk_latency_max: u64,
    pub slow_disk_probability: f64,
    pub slow_disk_latency: u64,
    /// Probability that a crash tears the oldest unfinished write instead of dropping it whole.
    pub torn_write_probability: f64,
    /// Mean units between nemesis actions, and the weights of each action.
    pub nemesis_interval: u64,
    pub crash_weight: u32,
    pub partition_weight: u32,
    pub membership_weight: u32,
    /// Membership of every size: the nemesis adds and removes voters down to a single one and
    /// back up (the leader included), adds voters directly or through learners, promotes and
    /// removes learners. Without it, the voters never drop below three and learners are only
    /// added and promoted.
    pub every_size: bool,
    /// A follower asked for a write forwards it to the leader under the client's request id and
    /// retries it there (keel-session's forwarding decisions), instead of sending the client away.
    pub forward_writes: bool,
    /// A follower forwards its connection's refused writes one at a time, each once everything
    /// before it is answered, as every seed did before grouped forwarding (`RunConfig`'s
    /// `single_forwards`; never drawn). Otherwise the refused writes right behind one go with it.
    pub single_forwards: bool,
    /// The nemesis never proposes a configuration with fewer voters than this (3 without
    /// `every_size`, 1 with it).
    pub min_voters: usize,
    pub transfer_weight: u32,
    pub clock_jump_weight: u32,
    /// Weight of wiping a member's disk (scenario S37: it restarts empty under its id with a new
    /// storage incarnation, and is removed and added back). 0 in most seeds.
    pub wipe_weight: u32,
    /// Weight of a storage fault (`storage_faults.rs`: a member stopped, its disk damaged, and
    /// restarted to repair itself). 0 in most seeds; set by `World::new` from the run's
    /// `StorageFaults`.
    pub storage_fault_weight: u32,
    /// Probability of crashing a node right after it sends a vote or an acknowledgement.
    pub crash_after_promise_probability: f64,
    /// Probability of crashing a node right after it becomes leader, before its first entries
    /// spread: the way logs with divergent uncommitted suffixes of many terms arise (Figure 8).
    pub crash_new_leader_probability: f64,
    /// Probability of crashing or isolating a leader right after its commit index moved, before
    /// followers hear of it.
    pub crash_after_commit_probability: f64,
    /// Client operation timeout, in units.
    pub client_timeout: u64,
    /// A node snapshots its state machine after this many entries applied since its last one.
    pub snapshot_threshold: u64,
    /// Entries kept in the log below a snapshot.
    pub snapshot_trailing: u64,
    /// Chunks a snapshot transfer is split into (each can be lost and is then resent).
    pub snapshot_chunks: u32,
    /// Apply pipeline: 0 applies at once; otherwise a batch of `apply_batch` items every
    /// `apply_delay` units (a slow state machine, so apply lags commit).
    pub apply_delay: u64,
    pub apply_batch: usize,
    /// Each node slot's wall clock (`clock.rs`), slot `id` at `clocks[id - 1]`: what it stamps
    /// the entries it proposes with.
    pub clocks: Vec<WallClock>,
}

impl Params {
    /// The trace's `params` line: the derived `Debug`, except that the two fields renamed after
    /// traces were first recorded keep their old names there (`max_entries_per_message`,
    /// `max_inflight_messages`), so that a seed's trace stays byte-identical.
    pub fn trace_text(&self) -> String {
        format!("{self:?}")
            .replacen("entries_per_message_max: ", "max_entries_per_message: ", 1)
            .replacen("inflight_messages_max: ", "max_inflight_messages: ", 1)
    }

    /// Draws the parameters of `seed` from `rng` (the run's generator, seeded by it).
    pub fn draw(seed: u64, rng: &mut ChaCha8Rng) -> Params {
        let mut p = Params::draw_classic(rng);
        p.draw_every_size(seed);
        // From the seed, not the generator: the draws above and the run replay as before.
        p.forward_writes = seed % 3 != 0;
        p.draw_wipes(seed);
        p.draw_clocks(seed);
        p
    }

    /// Draws every node slot's wall clock from a generator of its own (`clock.rs`): no other
    /// parameter and nothing of the run's generator moves. `draw` calls it; a caller of
    /// `draw_classic` calls it after.
    pub fn draw_clocks(&mut self, seed: u64) {
        self.clocks = draw_clocks(seed, self.node_count);
    }

    /// The bound on clock offsets the nodes enforce (the server's default) and how long a
    /// measurement holds campaigns: twenty election timeouts, as the runtime's ten of its longest
    /// (twice the base) ones.
    pub fn clock_policy(&self) -> keel_engine::ClockPolicy {
        keel_engine::ClockPolicy {
            offset_ms_max: keel_engine::ClockPolicy::OFFSET_MS_MAX_DEFAULT,
            hold_ms: 20 * u64::from(self.election_timeout_ticks) * TICK_INTERVAL,
        }
    }

    /// The parameters drawn before membership of every size existed: 3 or 5 voters, never
    /// fewer than three. Regression seeds recorded before then replay their runs with these.
    pub fn draw_classic(rng: &mut ChaCha8Rng) -> Params {
        let initial_voters = if rng.random_bool(0.75) { 3 } else { 5 };
        let spare = if rng.random_bool(0.5) { 2 } else { 0 };
        let election_timeout_ticks = rng.random_range(5..=15);
        let net_delay_min = rng.random_range(1..=3);
        Params {
            initial_voters,
            use_wal: rng.random_bool(0.5),
            node_count: initial_voters + spare,
            clients: rng.random_range(2..=6),
            keys: rng.random_range(1..=4),
            election_timeout_ticks,
            pre_vote: rng.random_bool(0.6),
            check_quorum: rng.random_bool(0.6),
            heartbeat_interval_ticks: rng.random_range(1..=(election_timeout_ticks / 3).max(1)),
            entries_per_message_max: [1, 1, 4, 64][rng.random_range(0..4)],
            inflight_messages_max: [1, 1, 4, 32][rng.random_range(0..4)],
            net_delay_min,
            net_delay_max: net_delay_min + rng.random_range(0..=30),
            loss_probability: [0.0, 0.01, 0.05, 0.15][rng.random_range(0..4)],
            duplicate_probability: [0.0, 0.01, 0.05][rng.random_range(0..3)],
            disk_latency_max: rng.random_range(1..=8),
            slow_disk_probability: [0.0, 0.02, 0.1][rng.random_range(0..3)],
            slow_disk_latency: rng.random_range(20..=200),
            torn_write_probability: [0.0, 0.5][rng.random_range(0..2)],
            nemesis_interval: rng.random_range(50..=400),
            crash_weight: rng.random_range(0..=4),
            partition_weight: rng.random_range(0..=4),
            membership_weight: if spare > 0 {
                rng.random_range(0..=3)
            } else {
                0
            },
            transfer_weight: rng.random_range(0..=2),
            clock_jump_weight: rng.random_range(0..=2),
            crash_after_promise_probability: [0.0, 0.01, 0.02, 0.05][rng.random_range(0..4)],
            crash_new_leader_probability: [0.0, 0.0, 0.05, 0.3][rng.random_range(0..4)],
            crash_after_commit_probability: [0.0, 0.0, 0.01, 0.05][rng.random_range(0..4)],
            client_timeout: rng.random_range(100..=600),
            snapshot_threshold: rng.random_range(1..=64),
            snapshot_trailing: [0, 0, 4, 32][rng.random_range(0..4)],
            snapshot_chunks: rng.random_range(1..=8),
            apply_delay: [0, 0, 5, 40][rng.random_range(0..4)],
            apply_batch: rng.random_range(1..=16),
            // Drawn last: every parameter drawn before it keeps its value for a given seed.
            hold_partial_appends: rng.random_bool(0.5),
            every_size: false,
            forward_writes: false,
            single_forwards: false,
            wipe_weight: 0,
            storage_fault_weight: 0,
            min_voters: 3,
            clocks: Vec::new(),
        }
    }

    /// Decides whether `seed` wipes disks, from a generator of its own (as `draw_every_size`): a
    /// quarter of the seeds do.
    fn draw_wipes(&mut self, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7769_7065_5f64_6973);
        if rng.random_bool(0.25) {
            self.wipe_weight = rng.random_range(1..=2);
        }
    }

    /// Decides whether `seed` runs membership of every size, and its shape if so. This draws from
    /// a generator of its own, derived from the seed: the run's generator is left exactly where
    /// `draw` left it, so a seed that keeps the three- or five-voter shape runs as it did before
    /// this option existed (its regression seeds still replay the runs they were recorded for).
    ///
    /// Half the seeds run it. Their sizes at bootstrap are 1 and 2 (a quarter each), 3 and 5 (an
    /// eighth each) and 4 (a quarter), so that 3- and 5-voter clusters stay the most common
    /// overall (3: 44%, 5: 19%, 1, 2 and 4: 12.5% each). Every size has spare slots to grow into:
    /// at least five slots, and at least one spare.
    fn draw_every_size(&mut self, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6576_6572_795f_737a);
        if !rng.random_bool(0.5) {
            return;
        }
        let initial_voters = [1, 1, 2, 2, 3, 4, 4, 5][rng.random_range(0..8)];
        self.every_size = true;
        self.min_voters = 1;
        self.initial_voters = initial_voters;
        self.node_count = initial_voters.max(4) + 1 + rng.random_range(0..=1);
        self.membership_weight = rng.random_range(1..=4);
    }
}
