//! Each node's wall clock. Simulated time (`World::now`, one unit = 1 ms) is the true time; a
//! node's clock reads it as a real machine's would, off by a fixed offset and running a little
//! fast or slow:
//!
//! ```text
//! wall_ms(now) = EPOCH_BASE_MS + now * (1 + drift_ppm / 1e6) + offset_ms
//! ```
//!
//! computed in integers (the drift term rounded down), so every run of a seed reads the same
//! times. `EPOCH_BASE_MS` is 1.7e12 (a date in 2023). Offsets are drawn in `[-spread, spread]`,
//! the spread one of `OFFSET_SPREADS_MS` per seed (100, 400 or 2,000 ms, at most
//! `OFFSET_MS_MAX`: some seeds keep every clock within the nodes' default 500 ms bound, others
//! do not), and drifts in `[-DRIFT_PPM_MAX, DRIFT_PPM_MAX]` (±200 ppm), per node slot, from a
//! generator of their own derived from the seed (as `Params::draw_every_size` does): the run's
//! generator is not touched, so adding clocks shifted no other draw. A clock is hardware: a
//! crash or a wiped disk keeps it.
//!
//! The clock is what heartbeats carry for measuring offsets (`clock_watch.rs`) and what a node
//! stamps the entries it proposes with (keel-redis's
//! `Pipeline::take_batch`): the state machine's time (`KvStateMachine::log_time_ms`) is derived
//! from the stamps in the log, so it must agree on every replica whatever their clocks say, and
//! the state-digest invariant (which covers it) checks that at every applied index.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The wall-clock time every clock reads at simulated time 0 before its offset: 2023-11-14, ms
/// since the Unix epoch.
pub const EPOCH_BASE_MS: u64 = 1_700_000_000_000;
/// The largest offset of a node's clock from the true time, either way.
pub const OFFSET_MS_MAX: i64 = 2_000;
/// The largest drift of a node's clock, either way, in parts per million.
pub const DRIFT_PPM_MAX: i64 = 200;

/// One node's clock (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallClock {
    pub offset_ms: i64,
    pub drift_ppm: i64,
}

impl WallClock {
    /// What this clock reads at simulated time `now`, in ms since the Unix epoch. Never
    /// decreasing in `now` (a drift of at most 200 ppm loses at most one ms per ms).
    pub fn wall_ms(&self, now: u64) -> u64 {
        let now = i128::from(now);
        let drift = (now * i128::from(self.drift_ppm)).div_euclid(1_000_000);
        let ms = i128::from(EPOCH_BASE_MS) + now + drift + i128::from(self.offset_ms);
        u64::try_from(ms).expect("far from the epoch's ends")
    }
}

/// How far apart a seed's clocks may be: each seed draws one of these as its offsets' bound, so
/// that some seeds keep every clock within the nodes' 500 ms bound on offsets
/// (`ClockPolicy::OFFSET_MS_MAX_DEFAULT`), some have a few pairs beyond it, and some most.
pub const OFFSET_SPREADS_MS: [i64; 3] = [100, 400, OFFSET_MS_MAX];

/// The clocks of node slots 1..=`nodes` of `seed`: slot i's clock is the i-th draw after the
/// seed's spread, whatever the number of slots.
pub fn draw_clocks(seed: u64, nodes: usize) -> Vec<WallClock> {
    // "clock_sk": a generator of its own (see the module documentation).
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x636c_6f63_6b5f_736b);
    let spread_ms = OFFSET_SPREADS_MS[rng.random_range(0..OFFSET_SPREADS_MS.len())];
    (0..nodes)
        .map(|_| WallClock {
            offset_ms: rng.random_range(-spread_ms..=spread_ms),
            drift_ppm: rng.random_range(-DRIFT_PPM_MAX..=DRIFT_PPM_MAX),
        })
        .collect()
}

#[cfg(all(test, feature = "kv"))]
mod tests {
    use super::*;
    use bytes::Bytes;
    use keel_redis::command::{SetCondition, WriteCommand};
    use keel_redis::KvStateMachine;
    use keel_redis::LogCommand;

    #[test]
    fn a_clock_reads_the_base_plus_its_offset_and_drift() {
        let fast = WallClock {
            offset_ms: 1_500,
            drift_ppm: 200,
        };
        assert_eq!(fast.wall_ms(0), EPOCH_BASE_MS + 1_500);
        assert_eq!(
            fast.wall_ms(1_000_000),
            EPOCH_BASE_MS + 1_500 + 1_000_000 + 200
        );
        let slow = WallClock {
            offset_ms: -2_000,
            drift_ppm: -200,
        };
        assert_eq!(slow.wall_ms(0), EPOCH_BASE_MS - 2_000);
        assert_eq!(
            slow.wall_ms(1_000_000),
            EPOCH_BASE_MS - 2_000 + 1_000_000 - 200
        );
        assert_eq!(slow.wall_ms(1), EPOCH_BASE_MS - 2_000, "rounded down");
        let mut last = 0;
        for now in 0..20_000 {
            let t = slow.wall_ms(now);
            assert!(t >= last, "never backwards");
            last = t;
        }
    }

    #[test]
    fn clocks_are_drawn_within_bounds_per_seed_from_a_generator_of_their_own() {
        for seed in 0..200 {
            let clocks = draw_clocks(seed, 7);
            assert_eq!(clocks, draw_clocks(seed, 7), "the same for a seed");
            assert_eq!(
                clocks[..3],
                draw_clocks(seed, 3)[..],
                "a slot's clock is fixed"
            );
            for c in &clocks {
                assert!(c.offset_ms.abs() <= OFFSET_MS_MAX && c.drift_ppm.abs() <= DRIFT_PPM_MAX);
            }
        }
        assert_ne!(draw_clocks(1, 3), draw_clocks(2, 3));
    }

    fn set(key: &str, value: &str) -> WriteCommand {
        WriteCommand::Set {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
            condition: SetCondition::Always,
        }
    }

    /// Three nodes' clocks apart by seconds; leadership moves from the fastest to the slowest
    /// and back, each leader stamping what it proposes with its own clock. Replicas apply the
    /// same log at different simulated times (one restores a snapshot on the way): at every
    /// index they hold the same time and digest, and the time never goes backwards, though the
    /// stamps do.
    #[test]
    fn replicas_whose_clocks_differ_agree_on_the_log_time_and_digest() {
        let clocks = [
            WallClock {
                offset_ms: 2_000,
                drift_ppm: 200,
            },
            WallClock {
                offset_ms: -2_000,
                drift_ppm: -200,
            },
            WallClock {
                offset_ms: 0,
                drift_ppm: 37,
            },
        ];
        let mut log = Vec::new();
        let mut stamps = Vec::new();
        for step in 0..60u64 {
            let leader = [0, 0, 1, 1, 1, 2][(step / 10) as usize];
            let now = 100 + step * 250;
            let stamp = clocks[leader].wall_ms(now);
            stamps.push(stamp);
            let key = format!("k{}", step % 4);
            log.push(LogCommand::new(leader as u64 + 1, step + 1, stamp, set(&key, "v")).encode());
        }
        assert!(
            stamps.windows(2).any(|w| w[1] < w[0]),
            "a new leader's clock is behind: a stamp goes down"
        );
        let mut replicas = [
            KvStateMachine::new(),
            KvStateMachine::new(),
            KvStateMachine::new(),
        ];
        let mut expected_time = 0;
        for (at, entry) in log.iter().enumerate() {
            let index = at as u64 + 1;
            expected_time = expected_time.max(stamps[at]);
            for sm in &mut replicas {
                sm.apply(index, entry).unwrap();
            }
            if index == 25 {
                // The third replica is replaced by a snapshot of the first (a restart, or one
                // sent by a leader) and goes on from there.
                replicas[2] = KvStateMachine::from_snapshot(&replicas[0].snapshot()).unwrap();
            }
            for sm in &replicas {
                assert_eq!(sm.log_time_ms(), expected_time, "index {index}");
                assert_eq!(
                    sm.state_digest(),
                    replicas[0].state_digest(),
                    "index {index}"
                );
            }
        }
        assert_eq!(replicas[0], replicas[2]);
        assert!(expected_time > clocks[0].wall_ms(100));
    }
}
