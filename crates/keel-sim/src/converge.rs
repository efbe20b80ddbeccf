//! What the end of a seed demands once the faults heal: the liveness bound, and the converged
//! cluster (a leader, every member applied and agreeing, nothing outstanding, every damaged
//! member whole again).
//!
//! The liveness bound includes the core's snapshot timeout and the time to ship the longest log
//! any node holds, committed or not, one message per round trip (`heal_bound`).

use keel_core::{NodeId, Role};

use crate::params::TICK_INTERVAL;
use crate::user::User;
use crate::world::World;

/// After healing, the cluster must elect a leader and converge within this many election
/// timeouts, plus the time to ship the whole log one message at a time (see `heal_bound`).
const HEAL_BOUND_ELECTION_TIMEOUTS: u64 = 30;

impl<U: User> World<U> {
    /// The stated liveness bound after healing: elections settle within a number of election
    /// timeouts, clients give up within their timeout, a snapshot whose answer was lost before
    /// the healing is abandoned within the core's snapshot timeout (a leader waits that long
    /// before it probes the follower again: seed 419728), and a lagging member is sent at most
    /// the whole log, one message per round trip in the worst case. The whole log is the longest
    /// one any node holds, committed or not: a leader commits nothing of its term until a
    /// majority holds its entries up to its no-op, however many uncommitted ones come before
    /// it (seed 3001668 at 100,000 steps: two voters, 65 entries committed, and a leader with
    /// 690 more to ship one per round trip). Nodes whose clocks a leader that then died found too
    /// far from its own hold their campaigns for the clock policy's `hold_ms` at most.
    pub(crate) fn heal_bound(&self) -> u64 {
        let p = &self.params;
        let et = u64::from(p.election_timeout_ticks) * TICK_INTERVAL;
        let snapshot_timeout = u64::from(keel_core::Config::new(1).snapshot_timeout_ticks);
        let round_trip = 2 * p.net_delay_max + p.disk_latency_max + 2;
        let longest_log = self
            .nodes
            .iter()
            .filter_map(|n| n.raft.as_ref())
            .map(|r| r.log().last_index())
            .max()
            .unwrap_or(0)
            .max(self.checker.committed_max());
        let messages = longest_log / p.entries_per_message_max as u64 + 1;
        HEAL_BOUND_ELECTION_TIMEOUTS * et
            + p.clock_policy().hold_ms
            + snapshot_timeout * TICK_INTERVAL
            + p.client_timeout
            + messages * round_trip
    }

    /// The members of the leader's configuration a storage fault damaged that are not whole
    /// yet (`None` without a leader, or with none).
    pub(crate) fn damaged_not_whole(&self) -> Option<Vec<NodeId>> {
        let leader = self.leader()?;
        let raft = self.nodes[(leader - 1) as usize].raft.as_ref()?;
        let ids = self.damaged_members(raft.membership());
        (!ids.is_empty()).then_some(ids)
    }

    /// A leader exists, every member of its configuration applied everything it committed, all
    /// state machines agree, no client operation is outstanding, and every member a storage
    /// fault damaged is whole again.
    pub(crate) fn converged(&self) -> bool {
        if self.wiped.is_some() {
            return false; // a wiped member is not back yet
        }
        let Some(leader) = self
            .nodes
            .iter()
            .filter_map(|n| n.raft.as_ref())
            .find(|r| r.role() == Role::Leader)
        else {
            return false;
        };
        let status = leader.status();
        if status.commit != status.last_log_id.index || status.membership.is_joint() {
            return false;
        }
        let leader_node = &self.nodes[(leader.id() - 1) as usize];
        let Some((leader_applied, digest)) = leader_node.applied_state() else {
            return false;
        };
        status
            .membership
            .members()
            .into_iter()
            .all(|m| self.nodes[(m - 1) as usize].applied_state() == Some((status.commit, digest)))
            && leader_applied == status.commit
            && self.user.pending_ops() == 0
            && self.damaged_members(&status.membership).is_empty()
    }

    pub(crate) fn describe_cluster(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            match &n.raft {
                None => out.push_str(&format!("[n{} down] ", n.id)),
                Some(r) => {
                    let s = r.status();
                    let recovering = s
                        .recovering_to
                        .map(|p| format!(" recovering to {p}"))
                        .unwrap_or_default();
                    out.push_str(&format!(
                        "[n{}{recovering} {:?} t{} lead {:?} commit {} applied {} last {} voters {:?} learners {:?}] ",
                        s.id,
                        s.role,
                        s.term,
                        s.leader,
                        s.commit,
                        n.applied_state().map_or(0, |(applied, _)| applied),
                        s.last_log_id,
                        s.membership.voters,
                        s.membership.learners
                    ));
                }
            }
        }
        out.push_str(&format!("pending client ops {}", self.user.pending_ops()));
        out
    }
}
