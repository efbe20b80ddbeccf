//! Storage faults (issue 20): a disk that corrupts what it stored or loses writes it reported
//! flushed, on a minority of the voters, while their nodes are down. Each damaged node must come
//! back as the runtime brings it back (`restart.rs`: `Wal::open_repairing`, then
//! `RaftNode::start_recovering` to what its promise record names), recover from the cluster, and
//! end the seed whole; every safety invariant holds throughout, unexempted.
//!
//! # The model
//!
//! A node is stopped as the runtime stops it (`SimDisk::stop`: storage finishes what it was
//! handed and flushes the promise record), so its durable promise covers its whole log. Then,
//! while it is down, one of:
//!
//! - **lost tail**: the device lost log writes it had reported flushed, while the promise write
//!   that came after them survived: the log is zero-filled from the start (or the middle) of one
//!   of its last frames to the end, later segments included;
//! - **corrupt log**: a bit flips in a written frame of a segment, older or active (now and then
//!   in a segment header);
//! - **corrupt snapshot**: a bit flips in a snapshot file (not the bootstrap one at index 0);
//! - **corrupt promise copy**: a bit flips in one of the promise record's two copies (the other
//!   still verifies, and the node starts as usual).
//!
//! Damage is only ever drawn within what the durable promise covers. The promise trails the log
//! by up to `WalConfig::promise_write_every_batches` group commits while a node runs, and what a
//! crash loses beyond it is indistinguishable from writes that never reached their fsync: that
//! window is undetectable (keel-wal's `damage.rs` and docs/disk-faults.md, "The promise record",
//! say so), so faults after an abrupt crash, where the promise trails, would test a promise the
//! WAL never makes.
//!
//! # How many
//!
//! A quarter of the seeds over the WAL draw storage faults (`--storage-faults`: all of them;
//! `--no-storage-faults`: none). Every damaged member must end the seed whole (the `damaged node
//! whole` check; convergence waits for it). Only in seeds over the WAL, only while every
//! configuration that matters (the committed one and every member's latest, a node that is down
//! counting with the one it held when it went down, both halves of a joint one) has at least three
//! voters, and never more than `(voters - 1) / 2` damaged nodes at once, so damaged nodes stay a
//! minority of each. A node counts as damaged from the fault until its core stops recovering (its
//! durable log reaches the promise); while any is, the membership nemesis keeps at least `2 *
//! damaged + 1` voters. A damaged node is not damaged again, nor wiped, until it is whole.

use std::collections::BTreeMap;
use std::path::Path;

use keel_core::{Membership, NodeId};
use keel_wal::segment::{
    check_frame, frame_size_bytes, parse_segment_file_name, read_frame_header, FrameCheck,
    FRAME_HEADER_SIZE_BYTES, SEGMENT_HEADER_SIZE_BYTES,
};
use keel_wal::{FileHandle, Fs, SimFs};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::user::User;
use crate::world::World;

/// Which seeds draw storage faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StorageFaults {
    /// None: every seed runs as before storage faults existed (`--no-storage-faults`).
    Off,
    /// A quarter of the seeds over the WAL (an eighth of all seeds): the default.
    #[default]
    Share,
    /// Every seed over the WAL (`--storage-faults`).
    All,
}

impl StorageFaults {
    /// The nemesis weight of a storage fault in `seed`, from a generator of its own (the run's
    /// generator and every other parameter are untouched): 0 for no storage faults.
    pub fn weight(self, seed: u64, use_wal: bool) -> u32 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7374_6f72_6167_6566);
        let on = match self {
            StorageFaults::Off => false,
            StorageFaults::Share => rng.random_bool(0.25),
            StorageFaults::All => true,
        };
        if on && use_wal {
            rng.random_range(1..=3)
        } else {
            0
        }
    }
}

/// What one fault did to a disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    LostTail,
    CorruptLog,
    CorruptSnapshot,
    CorruptPromiseCopy,
}

/// The storage faults of one run: who is damaged, and counts for the report.
#[derive(Default)]
pub(crate) struct Damage {
    /// Nodes damaged and not yet whole, with the fault.
    damaged: BTreeMap<NodeId, Fault>,
    /// Faults injected, and the damaged nodes that became whole.
    pub injected: u64,
    pub repaired: u64,
    /// Restarts whose WAL reported and repaired damage.
    pub reports: u64,
    /// Recovering nodes that let go of their promise, and that lowered it to a committed entry
    /// (keel-core's `node/repair.rs`).
    pub released: u64,
    pub lowered: u64,
}

impl Damage {
    pub fn is_damaged(&self, id: NodeId) -> bool {
        self.damaged.contains_key(&id)
    }

    pub fn count(&self) -> usize {
        self.damaged.len()
    }

    /// A restart of a damaged node found damage and repaired it.
    pub fn reported(&mut self) {
        self.reports += 1;
    }
}

fn smallest_voter_set(m: &Membership, smallest: &mut usize) {
    *smallest = (*smallest).min(m.voters.len());
    if m.is_joint() {
        *smallest = (*smallest).min(m.outgoing.len());
    }
}

impl<U: User> World<U> {
    /// The nemesis's storage fault: stops a random member over the WAL, damages its disk, and
    /// lets it restart as after a crash (see the module doc).
    pub(crate) fn storage_fault(&mut self) {
        if !self.params.use_wal || !self.may_damage_another() || self.wiped.is_some() {
            return;
        }
        let committed = self.membership.committed().1.clone();
        let candidates: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|n| n.raft.is_some() && !n.retired && committed.contains(n.id))
            .map(|n| n.id)
            .filter(|&id| !self.storage.is_damaged(id))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let id = candidates[self.rng.random_range(0..candidates.len())];
        self.stop(id);
        if self.violation.is_some() {
            return;
        }
        let (fs, dir) = self.nodes[(id - 1) as usize]
            .disk
            .wal_fs()
            .expect("a stopped node over the WAL");
        let wanted = match self.rng.random_range(0..9) {
            0..=2 => Fault::LostTail,
            3..=5 => Fault::CorruptLog,
            6 | 7 => Fault::CorruptSnapshot,
            _ => Fault::CorruptPromiseCopy,
        };
        let done = match wanted {
            Fault::LostTail => self.lose_tail(&fs, &dir),
            Fault::CorruptLog => self.corrupt_log(&fs, &dir),
            Fault::CorruptSnapshot => self.corrupt_snapshot(&fs, &dir),
            Fault::CorruptPromiseCopy => self.corrupt_promise_copy(&fs, &dir),
        };
        let Some(what) = done else {
            return; // nothing of that kind on this disk (no snapshot beyond the bootstrap one)
        };
        self.trace_line(|| format!("storage fault n{id}: {what}"));
        self.storage.damaged.insert(id, wanted);
        self.storage.injected += 1;
    }

    /// Whether one more node may be damaged: every configuration that matters has three voters
    /// or more, and damaged nodes stay at most `(voters - 1) / 2` of the smallest. A node that is
    /// down counts with the configuration it held when it went down: it returns with it, and
    /// may campaign in it (seed 21079922: a leader down with its uncommitted removal of a third
    /// voter came back to a configuration of two, one of them damaged, whose vote it needed).
    fn may_damage_another(&self) -> bool {
        let mut smallest = usize::MAX;
        smallest_voter_set(self.membership.committed().1, &mut smallest);
        for node in self.nodes.iter().filter(|n| !n.retired) {
            let membership = match &node.raft {
                Some(raft) => Some(raft.membership()),
                None => node.membership_when_down.as_ref(),
            };
            if let Some(membership) = membership {
                smallest_voter_set(membership, &mut smallest);
            }
        }
        smallest >= 3 && self.storage.count() < (smallest - 1) / 2
    }

    /// The fewest voters the membership nemesis may leave: a majority beside the damaged nodes.
    pub(crate) fn voters_beside_damage(&self) -> usize {
        match self.storage.count() {
            0 => 0,
            damaged => 2 * damaged + 1,
        }
    }

    /// A damaged node is whole once its core stops recovering (its durable log reached what it
    /// had promised). Called after each restart and each completed write of a damaged node.
    pub(crate) fn note_whole(&mut self, id: NodeId) {
        if !self.storage.is_damaged(id) {
            return;
        }
        let recovering = self.nodes[(id - 1) as usize]
            .raft
            .as_ref()
            .map(|r| r.recovering());
        if recovering == Some(None) {
            self.storage.damaged.remove(&id);
            self.storage.repaired += 1;
            self.trace_line(|| format!("n{id} is whole again"));
        }
    }

    /// The damaged nodes that are not whole though they should be by the end of a seed: every
    /// member of the final configuration (a node removed while damaged, or retired, has no one
    /// to recover from).
    pub(crate) fn damaged_members(&self, members: &Membership) -> Vec<NodeId> {
        self.storage
            .damaged
            .keys()
            .copied()
            .filter(|&id| members.contains(id) && !self.nodes[(id - 1) as usize].retired)
            .collect()
    }

    /// Zero-fills the log from one of its last frames on: a lost tail.
    fn lose_tail(&mut self, fs: &SimFs, dir: &Path) -> Option<String> {
        let frames = log_frames(fs, dir);
        if frames.is_empty() {
            return None;
        }
        let back = self.rng.random_range(1..=frames.len().min(32));
        let (seq, offset, size) = frames[frames.len() - back];
        // A cut inside the frame now and then: the rest reads as a torn write.
        let cut = if self.rng.random_bool(0.25) {
            offset + self.rng.random_range(0..size)
        } else {
            offset
        };
        zero_from(fs, &dir.join(segment_name(seq)), cut);
        for &(later, _, _) in frames.iter().filter(|f| f.0 > seq) {
            zero_from(
                fs,
                &dir.join(segment_name(later)),
                SEGMENT_HEADER_SIZE_BYTES,
            );
        }
        Some(format!(
            "lost tail from segment {seq} offset {cut} ({back} frames)"
        ))
    }

    /// Flips a bit in a written frame of a segment (one in eight in its header).
    fn corrupt_log(&mut self, fs: &SimFs, dir: &Path) -> Option<String> {
        let frames = log_frames(fs, dir);
        if frames.is_empty() {
            return None;
        }
        let (seq, offset, size) = if self.rng.random_bool(0.5) {
            frames[self.rng.random_range(0..frames.len())]
        } else {
            // The active segment's frames are the ones most recently written.
            let last = frames.last().expect("non-empty").0;
            let active: Vec<_> = frames.iter().filter(|f| f.0 == last).collect();
            *active[self.rng.random_range(0..active.len())]
        };
        let (at, bit) = if self.rng.random_bool(0.125) {
            (self.rng.random_range(0..60), self.rng.random_range(0..8))
        } else {
            (
                offset + self.rng.random_range(0..size),
                self.rng.random_range(0..8),
            )
        };
        let path = dir.join(segment_name(seq));
        fs.flip_bit(&path, at, bit).expect("a segment file");
        Some(format!("bit {bit} of byte {at} of segment {seq} flipped"))
    }

    /// Flips a bit in a snapshot file above the bootstrap one, the newest three times in four.
    fn corrupt_snapshot(&mut self, fs: &SimFs, dir: &Path) -> Option<String> {
        let mut files: Vec<_> = keel_wal::snapshot::list_snapshots(fs, dir)
            .ok()?
            .into_iter()
            .filter(|(last, _)| last.index > 0)
            .collect();
        files.sort_by_key(|(last, _)| last.index);
        if files.is_empty() {
            return None;
        }
        let pick = if self.rng.random_bool(0.75) {
            files.len().checked_sub(1)?
        } else {
            self.rng.random_range(0..files.len())
        };
        let (last, path) = files.get(pick)?.clone();
        let len = fs.read_file(&path)?.len() as u64;
        let (at, bit) = (self.rng.random_range(0..len), self.rng.random_range(0..8));
        fs.flip_bit(&path, at, bit).expect("a snapshot file");
        Some(format!("bit {bit} of byte {at} of snapshot {last} flipped"))
    }

    /// Flips a bit in one copy of the promise record; the other still verifies.
    fn corrupt_promise_copy(&mut self, fs: &SimFs, dir: &Path) -> Option<String> {
        use keel_wal::promise::{
            read_promise, SlotState, PROMISE_FILE_NAME, PROMISE_SLOT_SIZE_BYTES,
            PROMISE_SLOT_STRIDE_BYTES,
        };
        // Only a copy whose other copy verifies (a fresh record has one copy still blank).
        let read = read_promise(fs, dir).ok()?;
        let slots: Vec<u64> = (0..2u64)
            .filter(|&s| matches!(read.slots[1 - s as usize], SlotState::Valid { .. }))
            .collect();
        if slots.is_empty() {
            return None;
        }
        let slot = slots[self.rng.random_range(0..slots.len())];
        let at = slot * PROMISE_SLOT_STRIDE_BYTES
            + self.rng.random_range(0..PROMISE_SLOT_SIZE_BYTES as u64);
        let bit = self.rng.random_range(0..8);
        fs.flip_bit(&dir.join(PROMISE_FILE_NAME), at, bit).ok()?;
        Some(format!(
            "bit {bit} of byte {at} of the promise record flipped (copy {slot})"
        ))
    }
}

fn segment_name(seq: u64) -> String {
    keel_wal::segment::segment_file_name(seq)
}

/// The frames of the log that verify, in order: (segment, offset, size). Each segment is read
/// from its first frame up to the first spot that does not verify.
fn log_frames(fs: &SimFs, dir: &Path) -> Vec<(u64, u64, u64)> {
    let mut seqs: Vec<u64> = fs
        .list_dir(dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|name| parse_segment_file_name(name))
        .collect();
    seqs.sort_unstable();
    let mut frames = Vec::new();
    for seq in seqs {
        let Some(bytes) = fs.read_file(&dir.join(segment_name(seq))) else {
            continue;
        };
        let mut offset = SEGMENT_HEADER_SIZE_BYTES as usize;
        while offset + FRAME_HEADER_SIZE_BYTES <= bytes.len() {
            let header = read_frame_header(&bytes[offset..offset + FRAME_HEADER_SIZE_BYTES]);
            if !header.magic_ok {
                break;
            }
            let size = frame_size_bytes(header.body_len);
            let Some(frame) = bytes.get(offset..offset + size) else {
                break;
            };
            if check_frame(frame, &header, offset as u64) != FrameCheck::Valid {
                break;
            }
            frames.push((seq, offset as u64, size as u64));
            offset += size;
        }
    }
    frames
}

/// Zeros `path` from `from` to its end, durably: writes the device had acknowledged and lost.
fn zero_from(fs: &SimFs, path: &Path, from: u64) {
    let mut file = fs.open(path).expect("a segment file");
    let len = file.len_bytes().expect("a segment file");
    if from < len {
        file.write_at(&vec![0; (len - from) as usize], from)
            .expect("a simulated write");
        file.sync_data().expect("a simulated sync");
    }
}
