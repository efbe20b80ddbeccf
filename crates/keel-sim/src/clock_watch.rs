//! keel-engine's `ClockWatch` in the simulated world: heartbeats carry the nodes' own wall clocks
//! (`clock.rs`, offsets and drifts per node), leaders measure their followers' offsets, and a
//! node too far from its leader's clock holds its campaigns, as the runtime does. The readings
//! come from delivered heartbeats and their answers; holds age at every tick.
//!
//! The invariant checked after every measurement: **a measured offset is never larger than the
//! true one** (the truth being the two simulated clocks' difference), whatever the network's
//! delays, duplicates and reorderings do to the heartbeats and their answers. An overstated
//! offset would keep a node with a good clock out of elections. The slack allows for the drift
//! of both clocks since the measurement (at most 200 ppm each) and for rounding.

use keel_core::NodeId;
use keel_engine::{ClockEvent, ClockReading};

use crate::clock::DRIFT_PPM_MAX;
use crate::user::User;
use crate::world::World;

impl<U: User> World<U> {
    /// Node `id` ticked: its hold may have aged out.
    pub(crate) fn clock_tick(&mut self, id: NodeId) {
        let now_ms = self.wall_ms(id);
        let node = &mut self.nodes[(id - 1) as usize];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return;
        };
        let events = app.engine.clock().tick(raft, now_ms);
        self.clock_events(id, events);
    }

    /// Node `to` stepped a message from `from` in `term` carrying `reading`.
    pub(crate) fn clock_heard(
        &mut self,
        to: NodeId,
        from: NodeId,
        term: u64,
        reading: ClockReading,
    ) {
        let now_ms = self.wall_ms(to);
        let node = &mut self.nodes[(to - 1) as usize];
        let (Some(raft), Some(app)) = (node.raft.as_mut(), node.app.as_mut()) else {
            return;
        };
        let events = app.engine.clock().heard(raft, from, term, reading, now_ms);
        // Only an answer to a heartbeat changes a measurement.
        let measured = matches!(reading, ClockReading::Response(_))
            .then(|| app.engine.clock().status(now_ms).follower_offsets);
        self.clock_events(to, events);
        if let Some(measured) = measured {
            self.check_measured_offsets(to, &measured);
        }
    }

    fn clock_events(&mut self, id: NodeId, events: Vec<ClockEvent>) {
        for event in events {
            match event {
                ClockEvent::Held { .. } => self.clock_holds += 1,
                ClockEvent::Outlier { .. } => self.clock_outliers += 1,
                _ => {}
            }
            self.trace_line(|| format!("clock n{id} {event:?}"));
        }
    }

    /// Leader `leader`'s measurements against the simulated clocks.
    fn check_measured_offsets(&mut self, leader: NodeId, measured: &[(NodeId, i64)]) {
        let hold_ms = self.params.clock_policy().hold_ms;
        let slack_ms = 2 + (hold_ms * 2 * DRIFT_PPM_MAX as u64).div_ceil(1_000_000) as i64;
        for &(follower, offset_ms) in measured {
            let truth_ms = self.wall_ms(follower) as i64 - self.wall_ms(leader) as i64;
            let overstated = offset_ms.abs() > truth_ms.abs() + slack_ms
                || (offset_ms != 0
                    && truth_ms.abs() > slack_ms
                    && offset_ms.signum() != truth_ms.signum());
            if overstated {
                let detail = format!(
                    "n{leader} measured n{follower}'s clock offset as {offset_ms} ms; the clocks \
                     are {truth_ms} ms apart (slack {slack_ms} ms)"
                );
                return self.violate("clock offsets are never overstated", detail);
            }
        }
    }
}
