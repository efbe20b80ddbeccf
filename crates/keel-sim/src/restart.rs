//! A node going down and coming back: a crash (what the disk had not synced may be lost or
//! torn), a stop as the runtime's shutdown does it (before a storage fault, `storage_faults.rs`),
//! and the restart from what the disk holds, opened as the runtime opens it: damage repaired by
//! `Wal::open_repairing`, and the node recovering what it had promised from the cluster
//! (`RaftNode::start_recovering`, to `DamageReport::recover_to`, the runtime's own decision).
//! Damage found on a disk no storage fault touched is a violation.

use keel_core::{NodeId, RaftNode, Role};
use keel_engine::handshake::DepartedMembers;
use keel_engine::transfer;
use rand::Rng;

use crate::disk::SimDisk;
use crate::host::{App, SimStateMachine};
use crate::params::TICK_INTERVAL;
use crate::user::User;
use crate::world::{new_gate, new_receiver, Event, World};

impl<U: User> World<U> {
    /// Builds the node from its durable state (at start and after a crash).
    #[expect(clippy::too_many_lines)]
    pub fn start_node(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        let incarnation = self.nodes[idx].incarnation;
        let config = self.node_config(id, incarnation);
        let (recovered, report) = match self.nodes[idx].disk.recover() {
            Ok(r) => r,
            Err(e) => {
                let detail = format!("node {id} cannot open its storage: {e}");
                return self.violate("recovery", detail);
            }
        };
        // What the node had durably committed: it must come back with at least that.
        let persisted_commit = recovered.hard_state.commit.min(
            recovered
                .entries
                .last()
                .map_or(0, |e| e.index)
                .max(recovered.snapshot.index),
        );
        match RaftNode::new(config, recovered) {
            Ok(mut raft) => {
                if let Some(report) = report {
                    // As the runtime's `open_wal`: damage repaired, what was promised recovered
                    // from the cluster. Damage on a disk no storage fault touched is a bug.
                    if !self.storage.is_damaged(id) {
                        let detail = format!("node {id} found damage on an honest disk: {report}");
                        return self.violate("recovery", detail);
                    }
                    self.storage.reported();
                    if let Some(promised) = report.recover_to() {
                        raft.start_recovering(promised, &report.former_terms);
                    }
                    self.trace_line(|| format!("n{id} repaired {report}; recovering"));
                }
                let node = &mut self.nodes[idx];
                if raft.commit_index() < persisted_commit {
                    let detail = format!(
                        "node {id} restarted with commit {} below its persisted commit {}",
                        raft.commit_index(),
                        persisted_commit
                    );
                    self.violate("recovery", detail);
                    return;
                }
                // The state machine restarts from the durable snapshot; the node replays the log
                // from there up to its persisted commit index.
                let snapshot_last = raft.snapshot().last;
                let snapshot = snapshot_last.index;
                let skip_next_command = self.break_replay && node.incarnation > 0;
                let mut sm = SimStateMachine::new(
                    self.user.machine(Some(id), self.mutation),
                    skip_next_command,
                );
                if snapshot > 0 {
                    match node.snapshot_data.get(&snapshot) {
                        Some(data) => {
                            if let Err(e) = keel_engine::StateMachine::restore(
                                &mut sm,
                                snapshot_last,
                                &mut &data[..],
                            ) {
                                let detail = format!("node {id} cannot restore {snapshot}: {e}");
                                self.violate("recovery", detail);
                                return;
                            }
                        }
                        None => {
                            let detail = format!("node {id} has no data for snapshot {snapshot}");
                            self.violate("recovery", detail);
                            return;
                        }
                    }
                }
                let digest = U::digest(sm.machine());
                let replay_target = raft.commit_index();
                // As the runtime does at startup: a partial transfer the core would ignore goes.
                let fs = node.disk.transfer_fs();
                let _ =
                    transfer::discard_stale_partial(&fs, &SimDisk::transfer_dir(), replay_target);
                node.app = Some(App::new(
                    id,
                    sm,
                    snapshot,
                    replay_target,
                    self.params.snapshot_threshold,
                    self.params.clock_policy(),
                    self.mutation,
                ));
                let departed = DepartedMembers::new(raft.log());
                node.gate.configuration_changed(&departed.current());
                node.departed = Some(departed);
                node.raft = Some(raft);
                node.membership_when_down = None;
                self.checker.restarted(id, snapshot);
                if let Err(v) = self.checker.state_digest(id, snapshot, digest) {
                    return self.fail(v);
                }
                self.note_whole(id);
                self.drive(id);
            }
            Err(e) => self.violate("recovery", format!("node {id} failed to restart: {e}")),
        }
    }

    pub fn crash(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        if self.nodes[idx].raft.is_none() {
            return;
        }
        let tear = self.rng.random_bool(self.params.torn_write_probability);
        self.nodes[idx].disk.crash(tear, &mut self.rng);
        self.went_down(id, "crash");
    }

    /// Stops node `id` as the runtime's shutdown stops it (`SimDisk::stop`: what storage was
    /// handed is written, the promise record flushed); it restarts as after a crash. Only for
    /// a node over the WAL, and only the storage faults stop nodes this way.
    pub(crate) fn stop(&mut self, id: NodeId) {
        let idx = (id - 1) as usize;
        match self.nodes[idx].disk.stop() {
            Ok(adopted) => {
                for a in adopted {
                    self.nodes[idx]
                        .snapshot_data
                        .insert(a.meta.last.index, a.data);
                }
            }
            Err(e) => return self.violate("storage", format!("node {id} stopping: {e}")),
        }
        self.went_down(id, "stop");
    }

    /// What a crash and a stop share once the disk is down: the node's memory is gone, its
    /// restart scheduled.
    fn went_down(&mut self, id: NodeId, how: &'static str) {
        let idx = (id - 1) as usize;
        let node = &mut self.nodes[idx];
        node.membership_when_down = node.raft.take().map(|raft| raft.membership().clone());
        node.app = None;
        node.last_role = Role::Follower;
        node.last_commit = 0;
        node.incarnation += 1;
        node.receiver = new_receiver(&node.disk, self.mutation);
        node.departed = None;
        match new_gate(&node.disk, id, self.mutation) {
            Ok(gate) => node.gate = gate,
            Err(e) => {
                return self.violate("recovery", format!("node {id}: peer incarnations: {e}"))
            }
        }
        self.stop_sends(id);
        self.trace_line(|| format!("{how} n{id}"));
        U::node_lost(self, id);
        // Quick restarts matter: a node back within an election timeout meets the messages and
        // candidates of the moment it crashed.
        let et = u64::from(self.params.election_timeout_ticks) * TICK_INTERVAL;
        let delay = if self.healing {
            1
        } else if self.rng.random_bool(0.5) {
            self.rng.random_range(1..=et)
        } else {
            self.rng.random_range(1..=4 * et)
        };
        self.schedule(delay, Event::Restart(id));
    }
}
