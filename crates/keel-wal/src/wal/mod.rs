//! The write-ahead log: group commit of the core's [`Write`]s into frames, segment rotation,
//! truncation, purge, snapshot saving, and opening (recovery plus repair).
//!
//! The invariant everything else rests on: **the log is append-only, and the only unsynced frames
//! are a run of commit-only frames at its end, plus at most one frame after them.** Every frame
//! that carries entries, a term or a vote is fsynced before the next frame is written. A
//! commit-only frame is appended without an fsync; the next frame is appended after it (never over
//! it: a crash could then mix the sectors of both writes into something that looks complete), and
//! while unsynced commit-only frames precede it, it starts with a *supersede* item naming where
//! they begin and sets the commit index itself. So recovery can treat a damaged spot followed by a
//! valid frame as corruption of synced data unless that frame supersedes the spot, and only the
//! end of the log as possibly torn.
//!
//! [`Wal::write_batch`] is the group commit: one buffer, one write, one fdatasync per batch;
//! commit-only writes become frames of their own without an fsync, superseded by the next synced
//! frame (format version 2: nothing is ever overwritten). Rotation finds the next segment already
//! prepared. The frame whose write reaches past the zeros written so far carries the next
//! [`ZERO_AHEAD_BYTES`] (256 KiB) of zeros in the same write, so blocks are allocated before
//! frames reach them and fdatasyncs flush data only (on ext4 half the CPU per fdatasync; a
//! quarter less CPU for the storage threads under 50 clients). Purge deletes whole segments below
//! a durable snapshot. An fsync error poisons the WAL: every later call fails and the process
//! must stop.
//!
//! One group commit, in order: the promise record raised by an earlier batch, if one is due,
//! written and its writeback started; the frames written; the promise pushed to the device; the
//! log fdatasynced (the device's cache flush makes both durable); the completion reported; the
//! promise raised in memory to what is now durable. The promise is never written before the
//! fsync of the entries it names returned: a crash could keep it and lose the entries, which
//! recovery would take for a lost tail (`promise_record.rs`, `crate::promise`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use keel_core::storage::Storage;
use keel_core::{Entry, HardState, Index, LogId, RecoveredState, SnapshotMeta, Write};

use crate::codec;
use crate::error::{io_err, sync_err, Result, WalError};
use crate::fs::{FileHandle, Fs};
use crate::promise::PromiseFile;
use crate::recover;
use crate::segment::{self, FrameBuilder, SEGMENT_HEADER_SIZE_BYTES};
use crate::snapshot::{self, SnapshotFile};

mod config;
mod open;
mod promise_record;

pub use config::WalConfig;
pub(crate) use open::damaged_name;
use open::prepare_segment;

#[derive(Clone, Debug)]
struct SegmentMeta {
    seq: u64,
    path: PathBuf,
    /// Highest last-index the log reached while this segment was active: it may be deleted once
    /// a snapshot covers this.
    index_max: Index,
}

/// How far ahead of a frame's end the active segment is overwritten with zeros, in the same write
/// as the frame, whenever a frame reaches past what was zeroed before (see
/// [`WalConfig::zero_fill_segments`]): one write in every 256 KiB of log allocates the blocks
/// for the next 256 KiB, so the fdatasyncs of the frames written there flush data only.
pub const ZERO_AHEAD_BYTES: u64 = 256 << 10;

/// What one frame records.
#[derive(Default)]
struct Plan<'e> {
    reset: Option<LogId>,
    truncate_from: Option<Index>,
    entries: &'e [&'e Entry],
    /// The hard state after this frame; encoded only if it differs from the synced one.
    hard_state: Option<HardState>,
    commit: Option<Index>,
}

/// The durable log of one node. See the crate documentation for the format and the failure model.
pub struct Wal<F: Fs> {
    fs: F,
    dir: PathBuf,
    config: WalConfig,
    /// Live segments, oldest first; the last is the active one.
    segments: VecDeque<SegmentMeta>,
    active: F::File,
    /// The active segment's size: the configured size for a segment this process prepared, the
    /// size it was created with for one found on disk (the configuration may have changed since;
    /// a frame never goes past a segment's own size, which recovery checks against its header).
    active_size_bytes: u64,
    /// The next segment, created and preallocated ahead of need.
    spare: Option<(u64, F::File)>,
    /// How far the active segment has been written, with frames or with the zeros ahead of
    /// them ([`ZERO_AHEAD_BYTES`]): its blocks up to here are allocated.
    zeroed_to: u64,
    /// End of the last synced frame in the active segment.
    synced_end: u64,
    /// End of the last frame in the active segment: where the next frame goes. Between
    /// `synced_end` and `end` lie unsynced commit-only frames only.
    end: u64,
    /// End of the previous segment, recorded in the next checkpoint.
    prev_segment_end: u64,
    next_frame_seq: u64,
    last_index: Index,
    /// The position the log starts after (snapshot or reset), and the first index of every term
    /// since: enough to know the term at any live index.
    base: LogId,
    terms: Vec<LogId>,
    hard_state: HardState,
    synced_hard_state: HardState,
    /// Newest durable snapshot position: purging never goes beyond it.
    snapshot: LogId,
    /// The promise record, kept at the log's synced end after every synced batch (set once open
    /// has repaired the directory).
    promise: Option<PromiseFile<F>>,
    poisoned: bool,
    buf: Vec<u8>,
}

impl<F: Fs> Wal<F> {
    /// The directory holding the segments, snapshots and promise record.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file layer every read and write goes through.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// The configuration the WAL was opened with; segments found on disk keep the size they were
    /// created with whatever it says now.
    pub fn config(&self) -> &WalConfig {
        &self.config
    }

    /// Index of the last entry in the log: the position it starts after (snapshot or reset) when
    /// it holds none. Always durable: entries are only ever written synced.
    pub fn last_index(&self) -> Index {
        self.last_index
    }

    /// The hard state as last written (including an unsynced commit).
    pub fn hard_state(&self) -> HardState {
        self.hard_state
    }

    /// Position of the newest durable snapshot (0/0 without one).
    pub fn snapshot(&self) -> LogId {
        self.snapshot
    }

    /// Live segments, the active one included and the spare prepared ahead of it not; at least 1.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The term of the entry at `index`, if the log (or its base position) holds it.
    pub fn term_at(&self, index: Index) -> Option<u64> {
        if index == self.base.index {
            return Some(self.base.term);
        }
        if index < self.base.index || index > self.last_index {
            return None;
        }
        let at = self.terms.partition_point(|t| t.index <= index);
        Some(self.terms[at.checked_sub(1)?].term)
    }

    fn check_usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        Ok(())
    }

    /// Persists a group of writes (everything the runtime queued while the previous sync ran)
    /// with one buffer, one write and one `fdatasync` — none if every write is `sync: false`.
    /// Returns once all of them are durable. Any error but `InvalidRequest` is fatal: stop the
    /// process.
    ///
    /// A write's `install` must name a snapshot already saved with [`Wal::save_snapshot`]; its
    /// `purge_to` is carried out (whole segments) once the batch is durable.
    #[expect(clippy::too_many_lines)]
    pub fn write_batch(&mut self, writes: &[Write]) -> Result<()> {
        self.check_usable()?;
        // Coalesce the writes in order: later writes may rewrite entries of earlier ones.
        let mut reset: Option<LogId> = None;
        let mut pending: Vec<&Entry> = Vec::new();
        let mut pending_first = self.last_index + 1;
        let mut last = self.last_index;
        let mut hs = self.hard_state;
        let mut sync = false;
        let mut purge_to: Option<Index> = None;
        let mut release_promise = false;
        let mut lower_promise_to = None;
        for w in writes {
            sync |= w.sync;
            if (w.release_promise || w.lower_promise_to.is_some()) && !w.sync {
                return invalid("a promise release or lowering must be synced");
            }
            release_promise |= w.release_promise;
            if w.lower_promise_to.is_some() {
                lower_promise_to = w.lower_promise_to;
            }
            if let Some(meta) = &w.install {
                if meta.last.index > self.snapshot.index || !w.sync {
                    return invalid(format!(
                        "install of {} needs a synced write and a saved snapshot (newest: {})",
                        meta.last, self.snapshot
                    ));
                }
                reset = Some(meta.last);
                pending.clear();
                pending_first = meta.last.index + 1;
                last = meta.last.index;
            }
            if let Some(first) = w.entries.first() {
                let floor = reset.unwrap_or(self.base);
                let f = first.index;
                if !w.sync || f > last + 1 || f <= floor.index {
                    return invalid(format!(
                        "write at {f} (synced: {}) against a log ending at {last} after {}",
                        w.sync, floor.index
                    ));
                }
                if f < pending_first {
                    pending.clear();
                    pending_first = f;
                } else {
                    pending.truncate((f - pending_first) as usize);
                }
                let prev_term = match f - 1 {
                    i if i >= pending_first => pending[(i - pending_first) as usize].term,
                    i if i == floor.index => floor.term,
                    i => self.term_at(i).unwrap_or(0),
                };
                let mut term = prev_term;
                for (k, e) in w.entries.iter().enumerate() {
                    if e.index != f + k as Index || e.term < term {
                        return invalid(format!("entries not contiguous at index {}", e.index));
                    }
                    let size = codec::entry_size_bytes(e);
                    if size > self.config.entry_size_bytes_max {
                        return invalid(format!(
                            "entry {} of {size} bytes exceeds entry_size_bytes_max ({})",
                            e.index, self.config.entry_size_bytes_max
                        ));
                    }
                    term = e.term;
                    pending.push(e);
                }
                last = f + w.entries.len() as Index - 1;
            }
            if let Some(new) = w.hard_state {
                if new.term < hs.term || new.vote == Some(0) {
                    return invalid(format!("hard state {new:?} after {hs:?}"));
                }
                if !w.sync && (new.term != hs.term || new.vote != hs.vote) {
                    return invalid("a term or vote change must be synced");
                }
                hs = new;
            }
            if let Some(p) = w.purge_to {
                if p > self.snapshot.index {
                    return invalid(format!(
                        "purge to {p} beyond the snapshot {}",
                        self.snapshot
                    ));
                }
                purge_to = purge_to.max(Some(p));
            }
        }
        if hs.commit > last {
            return invalid(format!("commit {} beyond the last index {last}", hs.commit));
        }
        let truncate_from =
            (reset.is_none() && pending_first <= self.last_index).then_some(pending_first);
        if !sync {
            if hs != self.hard_state {
                let plan = Plan {
                    commit: Some(hs.commit),
                    ..Plan::default()
                };
                self.append_frame(&plan, false)?;
            }
        } else if pending.is_empty() && hs == self.hard_state && reset.is_none() {
            // Nothing new, but an earlier commit-only frame must be durable on return.
            self.sync_pending()?;
        } else {
            self.lower_promise(reset, truncate_from)?;
            self.append_entries(reset, truncate_from, &pending, hs)?;
            self.record_promise()?;
        }
        if release_promise {
            self.release_promise()?;
        }
        if let Some(point) = lower_promise_to {
            self.lower_promise_floor(point)?;
        }
        if let Some(p) = purge_to {
            self.purge_up_to(p)?;
        }
        Ok(())
    }

    /// Writes the coalesced batch as one frame, or several (each synced) if it exceeds
    /// `frame_size_bytes_max`: the reset and truncation go first, the hard state last. An entry
    /// larger than a frame's share gets a frame of its own.
    fn append_entries(
        &mut self,
        reset: Option<LogId>,
        truncate_from: Option<Index>,
        pending: &[&Entry],
        hs: HardState,
    ) -> Result<()> {
        let per_frame = self.config.entry_bytes_per_frame();
        let mut rest = pending;
        let mut first = true;
        loop {
            let mut take = 0;
            let mut size = 0;
            while take < rest.len()
                && (take == 0 || size + codec::entry_size_bytes(rest[take]) <= per_frame)
            {
                size += codec::entry_size_bytes(rest[take]);
                take += 1;
            }
            let (chunk, tail) = rest.split_at(take);
            let is_last = tail.is_empty();
            let plan = Plan {
                reset: if first { reset } else { None },
                truncate_from: if first { truncate_from } else { None },
                entries: chunk,
                // Whether it differs from what is on disk is decided when the frame is encoded,
                // after any rotation (which syncs pending commit-only frames).
                hard_state: is_last.then_some(hs),
                commit: None,
            };
            self.append_frame(&plan, true)?;
            rest = tail;
            first = false;
            if is_last {
                break;
            }
        }
        self.maybe_prepare_spare()
    }

    fn poison_on_error(&mut self, result: Result<()>) -> Result<()> {
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Makes the unsynced commit-only frames durable, if there are any.
    fn sync_pending(&mut self) -> Result<()> {
        if self.end > self.synced_end {
            if let Err(e) = self.active.sync_data() {
                self.poisoned = true;
                return Err(sync_err(self.active_path())(e));
            }
            self.synced_end = self.end;
            self.synced_hard_state = self.hard_state;
        }
        Ok(())
    }

    fn active_path(&self) -> PathBuf {
        self.segments
            .back()
            .expect("an active segment")
            .path
            .clone()
    }

    /// Encodes `plan` as one frame, rotating first if it does not fit, appends it after the last
    /// frame and syncs it if `sync` (or if it is the first frame of a segment: a supersede item
    /// never reaches back to a checkpoint).
    fn append_frame(&mut self, plan: &Plan<'_>, sync: bool) -> Result<()> {
        self.check_usable()?;
        let mut size = self.encode(plan) as u64;
        if self.end + size > self.active_size_bytes {
            self.rotate()?;
            size = self.encode(plan) as u64;
        }
        let sync = sync || self.end == SEGMENT_HEADER_SIZE_BYTES;
        assert!(
            self.end + size <= self.active_size_bytes,
            "a frame of {size} bytes at {} past the segment's {} bytes",
            self.end,
            self.active_size_bytes
        );
        let frame_end = self.end + size;
        let zeros_to = if self.config.zero_fill_segments && frame_end > self.zeroed_to {
            (frame_end + ZERO_AHEAD_BYTES).min(self.active_size_bytes)
        } else {
            frame_end
        };
        if sync {
            self.promise_rides(false)?;
        }
        // Everything after `end` is the log's to overwrite: zeros, or a torn tail open zeroed.
        if let Err(e) = self.active.write_at_end(&self.buf, self.end, zeros_to) {
            self.poisoned = true;
            return Err(io_err(self.active_path())(e));
        }
        if self.buf.capacity() > 2 * self.config.frame_size_bytes_max {
            // A frame of one large entry: its buffer is not kept for the ordinary frames after it.
            self.buf = Vec::new();
        }
        if sync {
            self.promise_rides(true)?;
            if let Err(e) = self.active.sync_data() {
                self.poisoned = true;
                return Err(sync_err(self.active_path())(e));
            }
        }
        self.next_frame_seq += 1;
        // The frame superseded the unsynced commit-only frames, if there were any (it sets the
        // commit itself): the state is the synced one plus this frame.
        self.hard_state = self.synced_hard_state;
        self.apply_plan(plan);
        self.end += size;
        self.zeroed_to = self.zeroed_to.max(zeros_to);
        if sync {
            self.synced_end = self.end;
            self.synced_hard_state = self.hard_state;
        }
        Ok(())
    }

    fn encode(&mut self, plan: &Plan<'_>) -> usize {
        self.buf.clear();
        let seq = self.next_frame_seq;
        let mut frame = FrameBuilder::begin(&mut self.buf, seq);
        // Unsynced commit-only frames precede this one: it supersedes them (and states the commit).
        let supersedes = self.end > self.synced_end;
        if self.end == SEGMENT_HEADER_SIZE_BYTES {
            // First frame of a segment (always synced, and nothing unsynced precedes it). The
            // checkpoint describes the log as the previous segment left it.
            frame.checkpoint(
                self.last_index + 1,
                &self.synced_hard_state,
                self.prev_segment_end,
            );
        } else if supersedes {
            frame.supersede(self.synced_end);
        }
        if let Some(snapshot) = plan.reset {
            frame.reset(snapshot);
        }
        if let Some(from) = plan.truncate_from {
            frame.truncate(from);
        }
        if !plan.entries.is_empty() {
            frame.entries(plan.entries);
        }
        let hard_state = plan.hard_state.filter(|hs| *hs != self.synced_hard_state);
        if let Some(hs) = hard_state {
            frame.hard_state(&hs);
        }
        // The commit after this frame is the synced one unless the frame changes it: said
        // explicitly when unsynced commit-only frames precede it, which recovery may skip.
        let commit = plan
            .commit
            .or((supersedes && hard_state.is_none()).then_some(self.synced_hard_state.commit));
        if let Some(commit) = commit {
            frame.commit(commit);
        }
        frame.finish(seq)
    }

    /// Mirrors what recovery does with the frame's items.
    fn apply_plan(&mut self, plan: &Plan<'_>) {
        if let Some(snapshot) = plan.reset {
            self.last_index = snapshot.index;
            self.base = snapshot;
            self.terms.clear();
        }
        if let Some(from) = plan.truncate_from {
            assert!(from > self.base.index && from <= self.last_index);
            self.last_index = from - 1;
            let keep = self.terms.partition_point(|t| t.index < from);
            self.terms.truncate(keep);
        }
        for e in plan.entries {
            assert_eq!(e.index, self.last_index + 1, "frame entries follow the log");
            self.note_term(e.term, e.index);
            self.last_index = e.index;
        }
        if let Some(hs) = plan.hard_state {
            self.hard_state = hs;
        }
        if let Some(commit) = plan.commit {
            self.hard_state.commit = commit;
        }
        let last_index = self.last_index;
        let active = self.segments.back_mut().expect("an active segment");
        active.index_max = active.index_max.max(last_index);
    }

    fn note_term(&mut self, term: u64, index: Index) {
        if self.terms.last().is_none_or(|t| t.term != term) {
            self.terms.push(LogId::new(term, index));
        }
    }

    /// Seals the active segment and continues in the next one.
    fn rotate(&mut self) -> Result<()> {
        // The sealed segment must be entirely synced before the next one receives data:
        // recovery treats any damage in a sealed segment as corruption.
        self.sync_pending()?;
        let seq = self.segments.back().expect("an active segment").seq + 1;
        let (seq, file) = match self.spare.take() {
            Some(spare) => spare,
            None => self.prepare(seq)?,
        };
        assert_eq!(
            seq,
            self.segments.back().expect("active").seq + 1,
            "spare is the next segment"
        );
        self.prev_segment_end = self.synced_end;
        self.segments.push_back(SegmentMeta {
            seq,
            path: self.dir.join(segment::segment_file_name(seq)),
            index_max: self.last_index,
        });
        self.active = file;
        self.active_size_bytes = self.config.segment_size_bytes;
        self.synced_end = SEGMENT_HEADER_SIZE_BYTES;
        self.end = SEGMENT_HEADER_SIZE_BYTES;
        self.zeroed_to = SEGMENT_HEADER_SIZE_BYTES;
        Ok(())
    }

    fn prepare(&mut self, seq: u64) -> Result<(u64, F::File)> {
        prepare_segment(&self.fs, &self.dir, &self.config, seq).inspect_err(|_| {
            self.poisoned = true;
        })
    }

    /// Creates and preallocates the next segment now, so rotation does not wait for it.
    /// [`Wal::write_batch`] calls this once the active segment is half full; a runtime may call it
    /// earlier, off the write path.
    pub fn prepare_next_segment(&mut self) -> Result<()> {
        self.check_usable()?;
        if self.spare.is_none() {
            let seq = self.segments.back().expect("an active segment").seq + 1;
            self.spare = Some(self.prepare(seq)?);
        }
        Ok(())
    }

    fn maybe_prepare_spare(&mut self) -> Result<()> {
        if self.spare.is_none() && self.end * 2 >= self.active_size_bytes {
            self.prepare_next_segment()?;
        }
        Ok(())
    }

    /// Deletes whole segments (oldest first) whose entries all lie at or below `index`, which a
    /// durable snapshot must cover. The active segment is never deleted. Each deletion is made
    /// durable before the next, so a crash leaves a contiguous run of segments. Returns how many
    /// were deleted.
    pub fn purge_up_to(&mut self, index: Index) -> Result<usize> {
        self.check_usable()?;
        if index > self.snapshot.index {
            return invalid(format!(
                "purge up to {index} beyond the durable snapshot at {}",
                self.snapshot.index
            ));
        }
        let mut purged = 0;
        while self.segments.len() > 1 && self.segments[0].index_max <= index {
            let path = self.segments[0].path.clone();
            let result = self
                .fs
                .remove_file(&path)
                .map_err(io_err(&path))
                .and_then(|()| self.fs.sync_dir(&self.dir).map_err(sync_err(&self.dir)));
            if let Err(e) = result {
                self.poisoned = true;
                return Err(e);
            }
            self.segments.pop_front();
            purged += 1;
        }
        Ok(purged)
    }

    /// Writes a snapshot file durably (temporary name, fsync, rename, directory fsync) and keeps
    /// the newest [`WalConfig::snapshots_kept`] (and the bootstrap snapshot). The log is left
    /// alone: see [`Wal::install_snapshot`] for a snapshot received from a leader.
    pub fn save_snapshot(&mut self, meta: &SnapshotMeta, data: &[u8]) -> Result<()> {
        self.check_usable()?;
        if meta.last.index < self.snapshot.index {
            return invalid(format!(
                "snapshot at {} is older than the one at {}",
                meta.last, self.snapshot
            ));
        }
        let kept = self.config.snapshots_kept;
        if let Err(e) = snapshot::save_snapshot(&self.fs, &self.dir, meta, data, kept) {
            self.poisoned = true;
            return Err(e);
        }
        self.snapshot = meta.last;
        self.prune_bootstrap_if_mutated()
    }

    /// The `prune-bootstrap-snapshot` mutation (the simulator's only): the bootstrap snapshot
    /// goes once a newer one is durable, as it did before it was kept for good.
    fn prune_bootstrap_if_mutated(&mut self) -> Result<()> {
        if !self
            .config
            .mutated(keel_core::Mutation::PruneBootstrapSnapshot)
            || self.snapshot == LogId::ZERO
        {
            return Ok(());
        }
        let path = self.dir.join(snapshot::snapshot_file_name(LogId::ZERO));
        if self.fs.open(&path).is_ok() {
            self.fs.remove_file(&path).map_err(io_err(&path))?;
            self.fs.sync_dir(&self.dir).map_err(sync_err(&self.dir))?;
        }
        Ok(())
    }

    /// Makes a complete, synced snapshot file at `temp` (streamed with
    /// [`snapshot::create_snapshot_file`], or received from a leader) the newest snapshot:
    /// verifies its header, renames it into place, fsyncs the directory, keeps the newest
    /// [`WalConfig::snapshots_kept`]. The log is left alone (an install is a later write).
    pub fn adopt_snapshot(&mut self, temp: &Path) -> Result<SnapshotMeta> {
        self.check_usable()?;
        // Nothing changed yet: a missing or unreadable file is refused, not fatal.
        let header = match self.fs.open(temp) {
            Ok(h) => h,
            Err(e) => return invalid(format!("cannot open {}: {e}", temp.display())),
        };
        let file = snapshot::verify_snapshot_header(&header, temp).map_err(|reason| {
            WalError::CorruptSnapshot {
                path: temp.to_owned(),
                reason,
            }
        })?;
        drop(header);
        if file.meta.last.index < self.snapshot.index {
            return invalid(format!(
                "snapshot at {} is older than the one at {}",
                file.meta.last, self.snapshot
            ));
        }
        let kept = self.config.snapshots_kept;
        match snapshot::adopt_snapshot_file(&self.fs, &self.dir, temp, kept) {
            Ok(adopted) => {
                self.snapshot = adopted.meta.last;
                self.prune_bootstrap_if_mutated()?;
                Ok(adopted.meta)
            }
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    /// Installs a snapshot from the leader (Raft Figure 13): saves it, then — unless the log
    /// holds the snapshot's last entry with the same term, in which case the suffix is kept —
    /// resets the log to continue after it. The snapshot is durable before the log changes, so
    /// a crash between the two is recovered the same way (see lib.rs, S05).
    pub fn install_snapshot(&mut self, meta: &SnapshotMeta, data: &[u8]) -> Result<()> {
        self.save_snapshot(meta, data)?;
        if self.term_at(meta.last.index) != Some(meta.last.term) {
            self.reset_log(meta.last)?;
        }
        Ok(())
    }

    /// Drops the whole log; it continues at `snapshot.index + 1`. A durable snapshot must cover
    /// `snapshot`.
    pub fn reset_log(&mut self, snapshot: LogId) -> Result<()> {
        self.check_usable()?;
        if snapshot.index > self.snapshot.index {
            return invalid(format!(
                "reset to {snapshot} beyond the durable snapshot {}",
                self.snapshot
            ));
        }
        if self.hard_state.commit > snapshot.index {
            return invalid(format!(
                "reset to {snapshot} would drop committed entries up to {}",
                self.hard_state.commit
            ));
        }
        let plan = Plan {
            reset: Some(snapshot),
            ..Plan::default()
        };
        self.lower_promise(Some(snapshot), None)?;
        self.append_frame(&plan, true)?;
        self.record_promise()
    }

    /// The newest valid snapshot (verified whole) and the file, open: read its data with
    /// [`snapshot::data_reader`], in bounded memory whatever its size.
    pub fn open_latest_snapshot(&self) -> Result<Option<(SnapshotFile, F::File)>> {
        let latest = snapshot::find_latest_snapshot(&self.fs, &self.dir)?;
        let Some(file) = latest.chosen else {
            return Ok(None);
        };
        let handle = self.fs.open(&file.path).map_err(io_err(&file.path))?;
        Ok(Some((file, handle)))
    }

    /// The newest valid snapshot and its data.
    pub fn read_snapshot_data(&self) -> Result<Option<(SnapshotFile, Vec<u8>)>> {
        let latest = snapshot::find_latest_snapshot(&self.fs, &self.dir)?;
        let Some(file) = latest.chosen else {
            return Ok(None);
        };
        let data =
            snapshot::read_snapshot_data(&self.fs, &file, self.config.snapshot_size_bytes_max)?;
        Ok(Some((file, data)))
    }
}

fn invalid<T>(why: impl Into<String>) -> Result<T> {
    Err(WalError::InvalidRequest(why.into()))
}

impl<F: Fs> Storage for Wal<F> {
    type Error = WalError;

    /// Re-reads the directory (read-only). A runtime should use the state [`Wal::open`] returned
    /// instead of calling this, which replays the whole log again.
    fn recover(&self) -> Result<RecoveredState> {
        Ok(recover::recover(&self.fs, &self.dir)?.state)
    }

    fn write(&mut self, write: &Write) -> Result<()> {
        self.write_batch(std::slice::from_ref(write))
    }

    fn write_batch(&mut self, writes: &[Write]) -> Result<()> {
        Wal::write_batch(self, writes)
    }

    /// Through the trait the snapshot's data lives elsewhere (keel-runtime keeps the files of a
    /// storage of the embedder's apart): the WAL records `meta` in a snapshot file of its own
    /// with no data, unless a file of that position is already here (saved or adopted with its
    /// data, which is never overwritten).
    fn record_snapshot(&mut self, meta: &SnapshotMeta) -> Result<()> {
        if meta.last.index < self.snapshot.index {
            return Ok(());
        }
        let path = self.dir.join(snapshot::snapshot_file_name(meta.last));
        if self.fs.open(&path).is_ok() {
            self.snapshot = meta.last;
            return Ok(());
        }
        self.save_snapshot(meta, &[])
    }
}
