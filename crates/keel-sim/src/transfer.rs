//! Snapshot transfer between simulated nodes: chunked, each chunk subject to loss (then resent,
//! resuming from its offset) and to partitions and crashes (then abandoned and reported to the
//! leader, which probes again). The data is durable on the receiver before the core hears of it.

use bytes::Bytes;
use keel_core::{NodeId, SnapshotMeta, Term};
use keel_engine::{Adoption, StorageCommand};
use rand::Rng;

use crate::disk::SnapshotAdoption;
use crate::world::{Event, World};

/// Bound on resends of one chunk before the transfer is abandoned.
const MAX_CHUNK_RETRIES: u32 = 8;

pub(crate) struct Transfer {
    from: NodeId,
    to: NodeId,
    term: Term,
    from_incarnation: u64,
    to_incarnation: u64,
    meta: SnapshotMeta,
    data: Bytes,
    next_chunk: u32,
    chunks: u32,
    retries: u32,
}

impl World {
    pub(crate) fn start_transfer(
        &mut self,
        from: NodeId,
        to: NodeId,
        term: Term,
        meta: SnapshotMeta,
    ) {
        let (fi, ti) = ((from - 1) as usize, (to - 1) as usize);
        let Some(data) = self.nodes[fi].snapshot_data.get(&meta.last.index).cloned() else {
            let detail = format!(
                "node {from} must send snapshot {} it does not hold",
                meta.last
            );
            return self.violate("snapshot transfer", detail);
        };
        self.trace_line(|| format!("snapshot {} n{from}->n{to} starts", meta.last));
        let transfer = Transfer {
            from,
            to,
            term,
            from_incarnation: self.nodes[fi].incarnation,
            to_incarnation: self.nodes[ti].incarnation,
            meta,
            data,
            next_chunk: 0,
            chunks: self.params.snapshot_chunks,
            retries: 0,
        };
        let delay = self
            .rng
            .random_range(self.params.net_delay_min..=self.params.net_delay_max);
        self.schedule(delay, Event::SnapshotChunk(Box::new(transfer)));
    }

    pub(crate) fn snapshot_chunk(&mut self, mut t: Box<Transfer>) {
        let (fi, ti) = ((t.from - 1) as usize, (t.to - 1) as usize);
        if self.nodes[fi].incarnation != t.from_incarnation || self.nodes[fi].raft.is_none() {
            return; // The sender crashed: its transfer is gone with it.
        }
        let receiver_lost =
            self.nodes[ti].incarnation != t.to_incarnation || self.nodes[ti].raft.is_none();
        let cut = self.blocked.contains(&(t.from, t.to));
        if receiver_lost || cut || t.retries > MAX_CHUNK_RETRIES {
            let (from, to) = (t.from, t.to);
            self.trace_line(|| format!("snapshot n{from}->n{to} abandoned"));
            self.nodes[fi]
                .raft
                .as_mut()
                .expect("checked")
                .snapshot_send_failed(t.to);
            self.drive(t.from);
            return;
        }
        let loss = if self.healing {
            0.0
        } else {
            self.params.loss_probability
        };
        if self.rng.random_bool(loss) {
            t.retries += 1;
        } else {
            t.next_chunk += 1;
        }
        if t.next_chunk < t.chunks {
            let delay = self
                .rng
                .random_range(self.params.net_delay_min..=self.params.net_delay_max);
            self.schedule(delay, Event::SnapshotChunk(t));
            return;
        }
        // Complete: adopted on the receiver if worth it (as the runtime decides), durable, then
        // the core decides whether to install it.
        let (from, to, index) = (t.from, t.to, t.meta.last.index);
        let raft = self.nodes[ti].raft.as_ref().expect("checked");
        match keel_engine::adoption(raft, t.from, t.term, &t.meta) {
            Adoption::Refused(e) => {
                let detail = format!("n{to} refused the snapshot {index} of n{from}: {e}");
                self.violate("peer message validation", detail);
            }
            Adoption::NotNeeded => {
                // The runtime's receiver answers the leader's next offer of it "not needed",
                // which the leader takes as a failed transfer and probes the follower at once.
                self.trace_line(|| format!("snapshot {index} n{from}->n{to} not needed"));
                if let Some(raft) = self.nodes[fi].raft.as_mut() {
                    raft.snapshot_send_failed(to);
                    self.drive(from);
                }
            }
            Adoption::Adopt => {
                self.trace_line(|| format!("snapshot {index} n{from}->n{to} delivered"));
                let adoption = SnapshotAdoption {
                    meta: t.meta,
                    data: t.data,
                    from: Some((t.from, t.term)),
                };
                self.submit_storage(to, StorageCommand::Adopt(adoption));
            }
        }
    }
}
