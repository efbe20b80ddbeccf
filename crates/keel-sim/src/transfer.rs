//! Snapshot transfer between simulated nodes: chunked, each chunk subject to loss (then resent,
//! resuming from its offset) and to partitions and crashes (then abandoned and reported to the
//! leader, which probes again). The data is durable on the receiver before the core hears of it.

use bytes::Bytes;
use keel_core::{Message, MessageBody, NodeId, SnapshotMeta, Term};
use rand::Rng;

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
        // Complete: durable on the receiver, then the core decides whether to install it.
        let index = t.meta.last.index;
        self.nodes[ti].snapshot_data.entry(index).or_insert(t.data);
        if let Err(e) = self.nodes[ti].disk.save_snapshot(&t.meta) {
            let detail = format!("node {}: {e}", t.to);
            return self.violate("storage", detail);
        }
        let msg = Message {
            from: t.from,
            to: t.to,
            term: t.term,
            body: MessageBody::InstallSnapshot { meta: t.meta },
        };
        let (from, to) = (t.from, t.to);
        self.trace_line(|| format!("snapshot {index} n{from}->n{to} delivered"));
        // The transport may deliver its final message twice, the copy much later (a
        // retransmission): the install rules must make the late copy harmless (S03, S13).
        if !self.healing
            && self
                .rng
                .random_bool(self.params.duplicate_probability.max(0.05))
        {
            let delay = self.rng.random_range(1..=20 * self.params.net_delay_max);
            self.schedule(delay, Event::Deliver(msg.clone()));
        }
        let raft = self.nodes[ti].raft.as_mut().expect("checked");
        if let Err(e) = raft.validate(&msg) {
            let detail = format!("n{to} refused {msg:?}: {e}");
            return self.violate("peer message validation", detail);
        }
        raft.step(msg);
        self.drive(to);
    }
}
