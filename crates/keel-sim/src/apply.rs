//! The simulated application side of a node: one ordered apply pipeline for committed entries and
//! snapshot restores (optionally slow, so apply lags commit), and the snapshot policy.

use keel_core::{EntryPayload, NodeId, SnapshotMeta};
use rand::Rng;

use crate::kv::Command;
use crate::world::{ApplyItem, Event, World};

impl World {
    /// Applies what the pipeline holds: all of it at once, or one batch per `apply_delay` when
    /// the seed draws a slow state machine.
    pub(crate) fn pump_apply(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        if self.params.apply_delay == 0 || self.healing {
            let n = self.nodes[idx].apply_queue.len();
            self.apply_items(id, n);
        } else if !self.nodes[idx].apply_scheduled && !self.nodes[idx].apply_queue.is_empty() {
            self.nodes[idx].apply_scheduled = true;
            let incarnation = self.nodes[idx].incarnation;
            let delay = self.rng.random_range(1..=self.params.apply_delay);
            self.schedule(
                delay,
                Event::Apply {
                    node: id,
                    incarnation,
                },
            );
        }
    }

    /// The `Apply` event of a slow pipeline.
    pub(crate) fn apply_batch(&mut self, id: NodeId, incarnation: u64) {
        let idx = (id - 1) as usize;
        if self.nodes[idx].incarnation != incarnation || self.nodes[idx].raft.is_none() {
            return;
        }
        self.nodes[idx].apply_scheduled = false;
        self.apply_items(id, self.params.apply_batch);
        self.pump_apply(id);
        self.drive(id);
    }

    fn apply_items(&mut self, id: NodeId, count: usize) {
        let idx = (id - 1) as usize;
        for _ in 0..count {
            if self.violation.is_some() {
                return;
            }
            let Some(item) = self.nodes[idx].apply_queue.pop_front() else {
                break;
            };
            match item {
                ApplyItem::Entry(e) => {
                    if let Err(v) = self.checker.applied(id, &e) {
                        return self.fail(v);
                    }
                    let node = &mut self.nodes[idx];
                    node.applied = e.index;
                    let result = match &e.payload {
                        EntryPayload::Normal(_) if node.skip_next_command => {
                            node.skip_next_command = false;
                            None
                        }
                        EntryPayload::Normal(data) => {
                            let cmd = Command::decode(data).expect("simulator commands decode");
                            Some(node.sm.apply(&cmd))
                        }
                        EntryPayload::Membership(m) => {
                            let leader = self.checker.leader_of(e.term);
                            self.membership.applied(e.index, m, leader);
                            None
                        }
                        EntryPayload::Noop => None,
                    };
                    let digest = node.sm.digest();
                    let incarnation = node.incarnation;
                    node.raft.as_mut().expect("live node").applied(e.index);
                    if let Err(v) = self.checker.state_digest(id, e.index, digest) {
                        return self.fail(v);
                    }
                    self.clients.entry_applied(
                        id,
                        incarnation,
                        &e,
                        result,
                        self.now,
                        &mut self.history,
                    );
                }
                ApplyItem::Restore(meta) => self.restore(id, meta),
            }
        }
        self.serve_reads(idx);
        self.maybe_take_snapshot(id);
    }

    /// Replaces the state machine by the snapshot at `meta.last` (received and durable).
    fn restore(&mut self, id: NodeId, meta: SnapshotMeta) {
        let idx = (id - 1) as usize;
        let index = meta.last.index;
        let Some(data) = self.nodes[idx].snapshot_data.get(&index).cloned() else {
            let detail = format!("node {id} must restore snapshot {index} it never received");
            return self.violate("snapshot install", detail);
        };
        if let Err(v) = self.checker.restored(id, index) {
            return self.fail(v);
        }
        self.trace_line(|| format!("n{id} restores snapshot {}", meta.last));
        self.membership.restored(&meta);
        if let Err(v) = self.checker.state_digest(id, index, data.digest()) {
            return self.fail(v);
        }
        let node = &mut self.nodes[idx];
        node.sm = data;
        node.applied = index;
        node.last_snapshot_index = node.last_snapshot_index.max(index);
        let incarnation = node.incarnation;
        node.raft.as_mut().expect("live node").applied(index);
        self.clients.restored(id, incarnation, index);
    }

    /// Takes a snapshot once enough entries were applied since the last one. It becomes durable
    /// (and the log may be purged) only when the `SnapshotSaved` event fires.
    fn maybe_take_snapshot(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        let node = &self.nodes[idx];
        if node.snapshot_in_progress
            || node.applied < node.last_snapshot_index + self.params.snapshot_threshold
        {
            return;
        }
        let Some(meta) = node
            .raft
            .as_ref()
            .and_then(|r| r.snapshot_meta(node.applied))
        else {
            return;
        };
        let data = Box::new(node.sm.clone());
        let incarnation = node.incarnation;
        self.nodes[idx].snapshot_in_progress = true;
        let delay = 1 + self.rng.random_range(0..=self.params.disk_latency_max);
        self.schedule(
            delay,
            Event::SnapshotSaved {
                node: id,
                incarnation,
                meta,
                data,
            },
        );
    }

    pub(crate) fn snapshot_saved(
        &mut self,
        id: NodeId,
        incarnation: u64,
        meta: SnapshotMeta,
        data: crate::kv::KvStateMachine,
    ) {
        let idx = (id - 1) as usize;
        let node = &mut self.nodes[idx];
        if node.incarnation != incarnation || node.raft.is_none() {
            return;
        }
        node.snapshot_in_progress = false;
        let index = meta.last.index;
        if index < node.disk.snapshot_index() {
            // A received snapshot (not necessarily installed) is newer: storage refuses an older
            // one, as the runtime's `Wal::adopt_snapshot` does, and the core is not told.
            self.trace_line(|| format!("n{id} drops its snapshot at {index}: storage has newer"));
            return;
        }
        node.snapshot_data.insert(index, data);
        if let Err(e) = node.disk.save_snapshot(&meta) {
            let detail = format!("node {id}: {e}");
            return self.violate("storage", detail);
        }
        node.last_snapshot_index = node.last_snapshot_index.max(index);
        let raft = node.raft.as_mut().expect("checked");
        raft.snapshot_saved(meta);
        // Keep the data of the core's snapshot (it may have to send it), of the one storage
        // knows, and anything newer (a transfer may have brought one that is not installed
        // yet); older data is never needed again.
        let keep_from = node.disk.snapshot_index().min(raft.snapshot().last.index);
        node.snapshot_data.retain(|i, _| *i >= keep_from);
        self.trace_line(|| format!("n{id} saved snapshot at {index}"));
        self.drive(id);
    }
}
