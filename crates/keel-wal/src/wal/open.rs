//! Opening: recovery, then the repairs that make the directory match what was recovered —
//! leftovers deleted, a torn tail zeroed, everything read made durable, the log reset to a
//! snapshot it disagrees with.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Instant;

use keel_core::{HardState, LogId};

use super::{Plan, SegmentMeta, Wal, WalConfig};
use crate::damage::{self, DamageKind, DamageReport};
use crate::error::{io_err, sync_err, Result, WalError};
use crate::fs::{FileHandle, Fs};
use crate::promise::{Promise, PromiseFile};
use crate::recover::{self, Recovered};
use crate::segment::{self, SEGMENT_HEADER_SIZE_BYTES};

impl<F: Fs> Wal<F> {
    /// Opens (or creates) the WAL in `dir`: recovers, repairs a torn tail, and makes everything it
    /// read durable before returning, since the node is about to act on it.
    pub fn open(fs: F, dir: impl Into<PathBuf>, config: WalConfig) -> Result<(Self, Recovered)> {
        let (wal, recovered, repaired) = Self::open_inner(fs, dir.into(), config, false)?;
        debug_assert!(repaired.is_none());
        Ok((wal, recovered))
    }

    /// As [`Wal::open`], but damage the cluster can make good is repaired instead of refused, for
    /// a node that will fetch what it lacks from its peers while it *recovers* (keel-core's
    /// `RaftNode::start_recovering`):
    ///
    /// - a log that lost its tail below the promise ([`DamageKind::LostTail`]: a disk that lost
    ///   writes it had reported flushed) is opened on its intact prefix;
    /// - a corrupt segment is set aside (renamed `<name>.damaged`, ignored from then on, left for
    ///   an operator to look at or delete) with every segment after it, and so is a corrupt
    ///   snapshot file (all segments too when the log then joins no snapshot): what remains is
    ///   a log that lost its tail, opened as above. The term and vote survive: a change of either
    ///   is in the promise record before it is acknowledged.
    ///
    /// The report says what was found and what was promised; the promise record keeps the
    /// promised entry (it is never recorded lower until the log holds that index again), so a
    /// crash meanwhile finds the damage again. A promise record neither of whose copies verifies
    /// is refused as by [`Wal::open`]: without it nothing says what the log should hold.
    pub fn open_repairing(
        fs: F,
        dir: impl Into<PathBuf>,
        config: WalConfig,
    ) -> Result<(Self, Recovered, Option<DamageReport>)> {
        Self::open_inner(fs, dir.into(), config, true)
    }

    #[expect(clippy::too_many_lines)]
    fn open_inner(
        fs: F,
        dir: PathBuf,
        config: WalConfig,
        repair: bool,
    ) -> Result<(Self, Recovered, Option<DamageReport>)> {
        config.validate()?;
        fs.create_dir_all(&dir).map_err(io_err(&dir))?;
        let started = Instant::now();
        // Damage repaired by setting files aside, for the report.
        let mut set_aside = Vec::new();
        let mut rounds = 0;
        let (scan, disk_last_index, judged) = loop {
            let mut scan = recover::scan(&fs, &dir)?;
            // Taken before `judge` moves the entries out of the scan.
            let disk_last_index = scan.replay.last_index();
            let trust_tail = config.mutated(keel_core::Mutation::TrustDamagedTail);
            let judged = damage::judge(&fs, &dir, &mut scan, started, trust_tail)?;
            let only_lost_tail = judged.damage.iter().all(|d| d.kind == DamageKind::LostTail);
            if !repair || only_lost_tail || rounds == SET_ASIDE_ROUNDS_MAX {
                break (scan, disk_last_index, judged);
            }
            if !set_aside_damaged_files(&fs, &dir, &judged.damage)? {
                break (scan, disk_last_index, judged);
            }
            set_aside.extend(judged.damage);
            rounds += 1;
        };
        let repairable = repair && judged.damage.iter().all(|d| d.kind == DamageKind::LostTail);
        if !judged.damage.is_empty() && !repairable {
            // Refused before anything is repaired: the files stay as they were found, for the
            // layer above (or an operator) to decide.
            set_aside.extend(judged.damage);
            return Err(WalError::Damaged(Box::new(DamageReport {
                damage: set_aside,
                recovered: judged.assembled.recovered,
                former_terms: Vec::new(),
            })));
        }
        // The promise the intact prefix falls short of: kept as a floor.
        let floor = match judged.damage.is_empty() {
            true => None,
            false => judged.promise.promise().map(|p| (p.acked, p.starts)),
        };
        set_aside.extend(judged.damage);
        let damage = set_aside;
        let assembled = judged.assembled;
        let recovered = assembled.recovered;

        // Leftovers of interrupted preparations, and segments after the last one holding data
        // (spares, or a first write into a new segment that never completed).
        let keep = scan.last_data.map_or(0, |i| i + 1);
        let mut stale: Vec<&PathBuf> = scan.temp_files.iter().collect();
        stale.extend(scan.segments[keep..].iter().map(|s| &s.path));
        for path in &stale {
            fs.remove_file(path).map_err(io_err(*path))?;
        }
        if !stale.is_empty() {
            fs.sync_dir(&dir).map_err(sync_err(&dir))?;
        }

        let state = &recovered.state;
        let base = state.snapshot;
        let mut wal = match scan.last_data {
            None => {
                let (seq, file) = prepare_segment(&fs, &dir, &config, 1)?;
                let mut wal = Wal::new(fs, dir, config, file, SEGMENT_HEADER_SIZE_BYTES);
                wal.segments.push_back(SegmentMeta {
                    seq,
                    path: wal.dir.join(segment::segment_file_name(seq)),
                    index_max: base.index,
                });
                wal.last_index = base.index;
                // The first frame carries the checkpoint that says where the log starts.
                wal.append_frame(&Plan::default(), true)?;
                wal
            }
            Some(last) => {
                let seg = &scan.segments[last];
                let mut file = fs.open(&seg.path).map_err(io_err(&seg.path))?;
                if config.direct_io {
                    file.write_directly().map_err(io_err(&seg.path))?;
                }
                if let Some(torn) = scan.torn.as_ref().filter(|t| t.path == seg.path) {
                    crate::fs::write_zeros(&mut file, torn.offset, torn.garbage_end)
                        .map_err(io_err(&seg.path))?;
                }
                file.sync_data().map_err(sync_err(&seg.path))?;
                let mut wal = Wal::new(fs, dir, config, file, seg.end);
                wal.active_size_bytes = seg.size_bytes;
                wal.segments = scan.segments[..keep]
                    .iter()
                    .map(|s| SegmentMeta {
                        seq: s.seq,
                        path: s.path.clone(),
                        index_max: s.index_max,
                    })
                    .collect();
                wal.last_index = disk_last_index;
                wal.hard_state = scan.replay.hard_state;
                wal.synced_hard_state = scan.replay.hard_state;
                wal.next_frame_seq = scan.last_frame_seq + 1;
                wal
            }
        };
        wal.snapshot = base;
        wal.base = base;
        wal.terms.clear();
        for e in &state.entries {
            wal.note_term(e.term, e.index);
        }
        if let Some(snapshot) = assembled.needs_reset {
            wal.append_frame(
                &Plan {
                    reset: Some(snapshot),
                    ..Plan::default()
                },
                true,
            )?;
        }
        debug_assert_eq!(
            wal.last_index,
            state.entries.last().map_or(base.index, |e| e.index)
        );
        if floor.is_some() && state.hard_state != wal.synced_hard_state {
            // The term and vote were raised to the promised ones (a lost tail took the frame
            // that recorded them): durable before the node acts on them.
            wal.append_frame(
                &Plan {
                    hard_state: Some(state.hard_state),
                    ..Plan::default()
                },
                true,
            )?;
        }
        // Everything read is durable now and the node will act on it: the promise covers it (a
        // directory without a promise file gets one here), and a repaired one keeps its floor.
        let last = LogId::new(wal.term_at(wal.last_index).unwrap_or(0), wal.last_index);
        let starts = wal.term_starts_through(last.index);
        let promise = Promise::of(&wal.synced_hard_state, last, starts);
        wal.promise = Some(PromiseFile::open(
            &wal.fs,
            &wal.dir,
            &judged.promise,
            promise,
            wal.config.promise_write_every_batches,
            floor,
        )?);
        let repaired = (!damage.is_empty()).then(|| DamageReport {
            damage,
            recovered: recovered.clone(),
            former_terms: floor.map_or_else(Vec::new, |(_, starts)| starts.as_slice().to_vec()),
        });
        Ok((wal, recovered, repaired))
    }

    fn new(fs: F, dir: PathBuf, config: WalConfig, active: F::File, synced_end: u64) -> Self {
        Wal {
            fs,
            dir,
            active_size_bytes: config.segment_size_bytes,
            config,
            segments: VecDeque::new(),
            active,
            spare: None,
            zeroed_to: synced_end,
            synced_end,
            end: synced_end,
            prev_segment_end: 0,
            next_frame_seq: 1,
            last_index: 0,
            base: LogId::ZERO,
            terms: Vec::new(),
            hard_state: HardState::default(),
            synced_hard_state: HardState::default(),
            snapshot: LogId::ZERO,
            promise: None,
            poisoned: false,
            buf: Vec::new(),
        }
    }
}

/// Creates segment `seq` under a temporary name, preallocates it, writes and syncs its header,
/// then renames it into place and syncs the directory: a segment file under its final name
/// always has a durable, valid header.
pub(super) fn prepare_segment<F: Fs>(
    fs: &F,
    dir: &Path,
    config: &WalConfig,
    seq: u64,
) -> Result<(u64, F::File)> {
    let temp = dir.join(segment::segment_temp_name(seq));
    let path = dir.join(segment::segment_file_name(seq));
    if fs.open(&temp).is_ok() {
        fs.remove_file(&temp).map_err(io_err(&temp))?;
    }
    let mut file = fs.create(&temp).map_err(io_err(&temp))?;
    // A sparse preallocation: the size is fixed up front so later fdatasyncs need not update it.
    file.set_len(config.segment_size_bytes)
        .map_err(io_err(&temp))?;
    if config.direct_io {
        file.write_directly().map_err(io_err(&temp))?;
    }
    let header = segment::encode_segment_header(seq, config.segment_size_bytes);
    file.write_at(&header, 0).map_err(io_err(&temp))?;
    file.sync_data().map_err(sync_err(&temp))?;
    fs.rename(&temp, &path).map_err(io_err(&path))?;
    fs.sync_dir(dir).map_err(sync_err(dir))?;
    Ok((seq, file))
}

/// Rounds of setting files aside before open gives up (each round sets aside at least one file;
/// the second finds what the first uncovered, such as a log that no longer joins a snapshot).
const SET_ASIDE_ROUNDS_MAX: usize = 4;

/// The suffix of a file set aside as damaged.
pub const DAMAGED_SUFFIX: &str = ".damaged";

/// Where a damaged file is set aside: its name with [`DAMAGED_SUFFIX`].
pub(crate) fn damaged_name(path: &Path) -> PathBuf {
    let mut aside = path.to_path_buf().into_os_string();
    aside.push(DAMAGED_SUFFIX);
    PathBuf::from(aside)
}

/// Renames the files `damage` names out of the WAL's way (see [`Wal::open_repairing`]): a corrupt
/// segment and every later one, newest first, so that what remains is always a contiguous log;
/// a corrupt snapshot file; all segments when the damage names no file (a missing segment, a log
/// that joins no snapshot). Returns whether anything was set aside (nothing can be for a corrupt
/// promise record).
fn set_aside_damaged_files<F: Fs>(fs: &F, dir: &Path, damage: &[damage::Damage]) -> Result<bool> {
    let names = fs.list_dir(dir).map_err(io_err(dir))?;
    let mut segments: Vec<u64> = names
        .iter()
        .filter_map(|n| segment::parse_segment_file_name(n))
        .collect();
    segments.sort_unstable();
    let mut from_seq: Option<u64> = None;
    let mut files: Vec<PathBuf> = Vec::new();
    for d in damage {
        let named_segment = d
            .path
            .as_ref()
            .and_then(|p| segment::parse_segment_file_name(p.file_name()?.to_str()?));
        match (d.kind, &d.path, named_segment) {
            (DamageKind::CorruptLog, _, Some(seq)) => {
                from_seq = Some(from_seq.map_or(seq, |s| s.min(seq)));
            }
            (DamageKind::CorruptLog, _, None) | (DamageKind::CorruptSnapshot, None, _) => {
                from_seq = Some(0);
            }
            (DamageKind::CorruptSnapshot, Some(path), _) => files.push(path.clone()),
            (DamageKind::LostTail | DamageKind::CorruptPromise, _, _) => {}
        }
    }
    if let Some(from) = from_seq {
        for seq in segments.iter().rev().take_while(|s| **s >= from) {
            files.push(dir.join(segment::segment_file_name(*seq)));
        }
    }
    for path in &files {
        fs.rename(path, &damaged_name(path)).map_err(io_err(path))?;
    }
    if !files.is_empty() {
        fs.sync_dir(dir).map_err(sync_err(dir))?;
    }
    Ok(!files.is_empty())
}
