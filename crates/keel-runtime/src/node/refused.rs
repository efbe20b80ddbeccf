//! Peer messages the core's validator refused (`RaftNode::validate`): dropped before the core
//! sees them, counted ([`crate::metrics::PEER_MESSAGES_REFUSED`], by rule) and logged at warn
//! level, at most one line per peer per [`LOG_INTERVAL`] with the number dropped since that
//! peer's last line, so a peer that floods garbage cannot flood the log too.
//!
//! A received snapshot passes the same check before it is adopted. Every peer message goes
//! through `Driver::step_peer`; the count is also [`crate::NodeStatus::refused_messages`]. The
//! transport already closes a connection whose message names another `from` than its handshake.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use keel_core::{GroupId, InvalidMessage, Message, NodeId};

/// At most one warning per peer per interval.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Peers remembered for rate limiting. Peer ids come from handshakes, which anyone reaching the
/// port can choose: beyond this many, peers that logged longer than an interval ago are
/// forgotten (their next refusal logs at once, which is all they lose).
const PEERS_TRACKED_MAX: usize = 1024;

#[derive(Debug)]
struct PeerLog {
    last_line: Instant,
    /// Refused since `last_line` and not logged yet.
    unlogged: u64,
}

#[derive(Debug)]
pub(crate) struct RefusedMessages {
    node: NodeId,
    total: u64,
    peers: HashMap<NodeId, PeerLog>,
}

impl RefusedMessages {
    pub(crate) fn new(node: NodeId) -> Self {
        RefusedMessages {
            node,
            total: 0,
            peers: HashMap::new(),
        }
    }

    /// Messages refused since the node started.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Counts and (rate limited) logs one refused message.
    pub(crate) fn refused(&mut self, msg: &Message, why: InvalidMessage, now: Instant) {
        let line = format_args!("dropped a message no honest peer sends: {why}");
        self.count(msg, why.kind(), line, now);
    }

    /// Counts and (rate limited) logs one message of a Raft group this node is not a member of:
    /// a peer configured for another group at this node's address.
    pub(crate) fn other_group(
        &mut self,
        msg: &Message,
        group: GroupId,
        mine: GroupId,
        now: Instant,
    ) {
        let line = format_args!(
            "dropped a message of Raft group {group}: this node is a member of group {mine} only"
        );
        self.count(msg, "other_group", line, now);
    }

    /// One dropped message: counted (in total and by `reason` in the metrics), and logged as
    /// `line` unless this peer had a line within the interval.
    fn count(
        &mut self,
        msg: &Message,
        reason: &'static str,
        line: std::fmt::Arguments<'_>,
        now: Instant,
    ) {
        self.total += 1;
        crate::metrics::peer_message_refused(self.node, reason);
        if let Some(dropped) = self.note(msg.from, now) {
            tracing::warn!(
                node = self.node,
                peer = msg.from,
                dropped,
                term = msg.term,
                reason,
                "{line} ({dropped} from this peer since its last such line)",
            );
        }
    }

    /// Records a refusal from `from`; returns how many to report if a line is due now.
    fn note(&mut self, from: NodeId, now: Instant) -> Option<u64> {
        if self.peers.len() >= PEERS_TRACKED_MAX && !self.peers.contains_key(&from) {
            self.peers
                .retain(|_, p| now.saturating_duration_since(p.last_line) < LOG_INTERVAL);
        }
        match self.peers.get_mut(&from) {
            None => {
                self.peers.insert(
                    from,
                    PeerLog {
                        last_line: now,
                        unlogged: 0,
                    },
                );
                Some(1)
            }
            Some(p) => {
                p.unlogged += 1;
                if now.saturating_duration_since(p.last_line) < LOG_INTERVAL {
                    return None;
                }
                p.last_line = now;
                Some(std::mem::take(&mut p.unlogged))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_peer_per_interval_with_the_count_since_the_last() {
        let mut r = RefusedMessages::new(1);
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(
            r.note(2, t0),
            Some(1),
            "the first refusal is logged at once"
        );
        assert_eq!(r.note(2, ms(10)), None);
        assert_eq!(r.note(2, ms(500)), None);
        assert_eq!(
            r.note(3, ms(500)),
            Some(1),
            "another peer has its own budget"
        );
        assert_eq!(r.note(2, ms(1000)), Some(3), "two held back, and this one");
        assert_eq!(r.note(2, ms(1999)), None);
        assert_eq!(r.note(2, ms(5000)), Some(2));
    }

    #[test]
    fn the_peers_tracked_stay_bounded() {
        let mut r = RefusedMessages::new(1);
        let t0 = Instant::now();
        for peer in 0..PEERS_TRACKED_MAX as u64 {
            r.note(peer + 10, t0);
        }
        let later = t0 + LOG_INTERVAL;
        assert_eq!(r.note(5, later), Some(1));
        assert!(r.peers.len() <= 1, "the stale ones were forgotten");
        assert_eq!(r.note(5, later), None, "the new one is still rate limited");
    }
}
