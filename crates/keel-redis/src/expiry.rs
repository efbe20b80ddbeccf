//! When the leader proposes a tick entry: the decision, without tokio or a clock (the server's
//! expiry task and the simulator run it, each with its own clock as an input).
//!
//! A tick does two things (`LoggedCommand::Tick`, applied in `state_machine/execute.rs`):
//!
//! - it moves the log's time on when nothing else does. The state machine's time only advances
//!   with stamped entries, so on an idle cluster TTL would report a stale time left and a key
//!   would be seen to expire late. While any key has a deadline, the leader proposes an empty
//!   tick once the log's time is `tick_ms` (`--time-tick-ms`) behind its clock: expiry and TTL are
//!   then behind by at most about `tick_ms` plus a commit's latency. While no key has one, nothing
//!   reads the time, and an idle cluster writes nothing (no entry, no fsync, ten times a second
//!   for ever);
//! - it names keys whose deadline has passed on the leader's clock (active expiry), so memory is
//!   freed even for keys nobody touches again. At most [`TICK_KEYS_MAX`] keys and
//!   [`TICK_KEY_BYTES_MAX`] bytes of keys per tick (at least one key, whatever its size), one tick
//!   in flight at a time: a backlog of expired keys drains one bounded entry after another.
//!
//! Replicas never expire anything on their own clock: a tick removes only the keys that have
//! expired at the tick's own time T(i), identical on every replica.

use bytes::Bytes;

use crate::state_machine::{LogCommand, LoggedCommand};

/// Most keys one tick names.
pub const TICK_KEYS_MAX: usize = 256;
/// Most key bytes one tick names (a single larger key still goes, alone).
pub const TICK_KEY_BYTES_MAX: usize = 256 << 10;
/// `--time-tick-ms` by default.
pub const TIME_TICK_MS_DEFAULT: u64 = 100;

/// The leader's decision of when to tick; see the module documentation.
#[derive(Debug)]
pub struct TimeKeeper {
    tick_ms: u64,
    in_flight: bool,
}

impl TimeKeeper {
    /// `tick_ms` above 0.
    pub fn new(tick_ms: u64) -> TimeKeeper {
        assert!(tick_ms > 0, "a tick interval of 0 would tick without end");
        TimeKeeper {
            tick_ms,
            in_flight: false,
        }
    }

    /// The tick to propose now, if any: `now_ms` is the leader's clock, `log_time_ms` the state
    /// machine's time, `has_deadlines` whether idle ticks are wanted (some key has a deadline:
    /// `KvStateMachine::wants_ticks`), `due` the keys whose
    /// deadline is at or before `now_ms`, earliest first (`KvStateMachine::keys_due`). The caller
    /// proposes it and reports [`Self::tick_done`] once it has an outcome, whatever it is.
    pub fn next_tick(
        &mut self,
        now_ms: u64,
        log_time_ms: u64,
        has_deadlines: bool,
        due: Vec<Bytes>,
    ) -> Option<LogCommand> {
        if self.in_flight {
            return None;
        }
        let idle = has_deadlines && now_ms >= log_time_ms.saturating_add(self.tick_ms);
        if due.is_empty() && !idle {
            return None;
        }
        let mut key_bytes = 0usize;
        let keys: Vec<Bytes> = due
            .into_iter()
            .take(TICK_KEYS_MAX)
            .take_while(|key| {
                let first = key_bytes == 0;
                key_bytes += key.len().max(1);
                first || key_bytes <= TICK_KEY_BYTES_MAX
            })
            .collect();
        self.in_flight = true;
        Some(LogCommand::new(0, 0, now_ms, LoggedCommand::Tick(keys)))
    }

    /// The tick proposed last has an outcome (applied, refused, or unknown): another may go.
    pub fn tick_done(&mut self) {
        self.in_flight = false;
    }

    /// How often the caller should ask [`Self::next_tick`]: twice per tick interval.
    pub fn poll_interval_ms(&self) -> u64 {
        (self.tick_ms / 2).max(1)
    }

    /// How long the caller may wait before asking again: the poll interval, or less when the
    /// earliest deadline comes sooner, so that a key is removed (and seen gone) about one commit
    /// after its deadline on the leader's clock rather than up to a poll interval later.
    pub fn wait_ms(&self, now_ms: u64, earliest_deadline_ms: Option<u64>) -> u64 {
        let poll = self.poll_interval_ms();
        match earliest_deadline_ms {
            Some(deadline) => deadline.saturating_sub(now_ms).clamp(1, poll),
            None => poll,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(tick: &LogCommand) -> Vec<Bytes> {
        match &tick.command {
            LoggedCommand::Tick(keys) => keys.clone(),
            other => panic!("not a tick: {other:?}"),
        }
    }

    #[test]
    fn ticks_when_idle_or_keys_are_due_one_at_a_time() {
        let mut keeper = TimeKeeper::new(100);
        // The log's time is recent and nothing is due: no tick.
        assert!(keeper.next_tick(1_050, 1_000, true, Vec::new()).is_none());
        // 100 ms behind but no key has a deadline: nothing reads the time, no tick.
        assert!(keeper.next_tick(9_000, 1_000, false, Vec::new()).is_none());
        // 100 ms behind: an empty tick, stamped with the leader's clock.
        let tick = keeper
            .next_tick(1_100, 1_000, true, Vec::new())
            .expect("idle");
        assert_eq!(tick.stamp_ms, 1_100);
        assert_eq!((tick.client_id, tick.request_seq), (0, 0));
        assert!(keys(&tick).is_empty());
        // One in flight: nothing more until it has an outcome.
        assert!(keeper
            .next_tick(5_000, 1_000, true, vec![Bytes::from_static(b"k")])
            .is_none());
        keeper.tick_done();
        // Keys due: a tick even though the log's time is recent.
        let tick = keeper
            .next_tick(1_101, 1_100, true, vec![Bytes::from_static(b"k")])
            .expect("due");
        assert_eq!(keys(&tick), vec![Bytes::from_static(b"k")]);
    }

    #[test]
    fn a_tick_is_bounded_in_keys_and_bytes_but_takes_one_key_of_any_size() {
        let mut keeper = TimeKeeper::new(100);
        let many: Vec<Bytes> = (0..1_000).map(|i| Bytes::from(format!("k{i}"))).collect();
        let tick = keeper.next_tick(0, 0, true, many).unwrap();
        assert_eq!(keys(&tick).len(), TICK_KEYS_MAX);
        keeper.tick_done();
        let big = Bytes::from(vec![b'x'; TICK_KEY_BYTES_MAX + 1]);
        let tick = keeper
            .next_tick(0, 0, true, vec![big.clone(), Bytes::from_static(b"small")])
            .unwrap();
        assert_eq!(keys(&tick), vec![big]);
        keeper.tick_done();
        let half = Bytes::from(vec![b'y'; TICK_KEY_BYTES_MAX / 2]);
        let tick = keeper
            .next_tick(0, 0, true, vec![half.clone(), half.clone(), half.clone()])
            .unwrap();
        assert_eq!(keys(&tick).len(), 2);
        assert_eq!(keeper.poll_interval_ms(), 50);
        assert_eq!(keeper.wait_ms(1_000, None), 50);
        assert_eq!(keeper.wait_ms(1_000, Some(1_020)), 20);
        assert_eq!(keeper.wait_ms(1_000, Some(5_000)), 50);
        assert_eq!(
            keeper.wait_ms(1_000, Some(900)),
            1,
            "due already: soon, never 0"
        );
    }
}
