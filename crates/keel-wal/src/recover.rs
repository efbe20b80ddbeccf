//! Recovery: rebuild the log, hard state and snapshot position from the directory, telling a torn
//! final write (never acknowledged: discard) from damage to acknowledged data (refuse to start).
//! The case-by-case walk-through is in lib.rs ("Recovery").
//!
//! A bad acknowledged frame is reported naming the file, the offset and the first index at risk,
//! and nothing is truncated. The log is read up to the first corruption, undoing a refused frame
//! (`replay.rs`), so the intact prefix is known; the commit index is clamped into the log; the
//! snapshot and the log are reconciled by the S05 rules. [`inspect`] does the same read-only and
//! reports the state, the promise record and every damage (what `keel check` prints).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keel_core::{Entry, Index, LogId, RecoveredState};

use crate::damage::{self, Damage, DamageReport};
use crate::error::{io_err, Result, WalError};
use crate::fs::{FileHandle, Fs};
use crate::promise::PromiseRead;
use crate::segment::{
    self, check_frame, decode_items, frame_size_bytes, parse_segment_header, read_frame_header,
    FrameCheck, Item, SegmentReader, FRAME_ALIGN_BYTES, FRAME_HEADER_SIZE_BYTES, FRAME_MAGIC,
    SEGMENT_HEADER_SIZE_BYTES,
};
use crate::snapshot::{self, LatestSnapshot, SkippedSnapshot, SnapshotFile};

mod replay;
pub(crate) use replay::Replay;

/// The largest frame a reader accepts, whatever the writer's configuration: the bound checked
/// before a frame is read into memory.
pub const FRAME_SIZE_BYTES_LIMIT: usize = 256 << 20;
/// Segments are read in pieces of this size.
const READ_CHUNK_SIZE_BYTES: usize = 4 << 20;

/// A final write that never completed and was discarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file that ends in it.
    pub path: PathBuf,
    /// Where the incomplete frame starts (the end of the valid log).
    pub offset: u64,
    /// One past the last non-zero byte after `offset`.
    pub garbage_end: u64,
}

/// What recovery did, for the startup report.
#[derive(Clone, Debug, Default)]
pub struct RecoveryStats {
    /// Segment files read, spares after the last one holding data included.
    pub segments: usize,
    /// Valid frames replayed, across all segments.
    pub frames: u64,
    /// Entries in the recovered log (after the snapshot).
    pub entries: u64,
    /// Bytes read from segment files (snapshot files not counted).
    pub bytes_read: u64,
    /// Wall-clock time recovery took, from the start of the scan to the assembled state.
    pub duration: Duration,
    /// The final write found incomplete and discarded, if any (recovery step 4); open zeroes it.
    pub torn_tail: Option<TornTail>,
    /// Newer snapshots that failed verification and were passed over.
    pub skipped_snapshots: Vec<SkippedSnapshot>,
    /// Entries after the snapshot dropped because the log disagreed with the snapshot at its
    /// position (a crash between installing a snapshot and resetting the log).
    pub discarded_conflicting_entries: u64,
    /// The last of those entries in each term (term, index), oldest first (they start right
    /// after the snapshot): which entries they were, for judging a promise that names one of
    /// them (`damage.rs`).
    pub discarded_term_ends: Vec<LogId>,
}

/// Everything a restart needs.
#[derive(Clone, Debug)]
pub struct Recovered {
    /// The state the node starts from: hard state (commit clamped into the log), snapshot position
    /// and membership, and the entries after the snapshot.
    pub state: RecoveredState,
    /// The snapshot the state starts from (its data: [`crate::Wal::read_snapshot_data`]).
    pub snapshot: Option<SnapshotFile>,
    /// The entries the log still holds that the snapshot covers, up to its last entry (empty
    /// when the log does not continue the snapshot): what a state machine holding less than the
    /// snapshot on its own catches up on instead of restoring it (keel-runtime).
    pub trailing: Vec<Entry>,
    /// What recovery read and what it discarded.
    pub stats: RecoveryStats,
}

/// How a segment's bytes end after its last valid frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Only zeros follow.
    Clean,
    /// Something else follows: a torn write, or damage.
    Dirty {
        check: FrameCheck,
        garbage_end: u64,
        /// A valid frame somewhere after the bad bytes.
        valid_after: Option<u64>,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct ScannedSegment {
    pub seq: u64,
    pub path: PathBuf,
    /// The size the segment was created with (its header's, equal to the file's length).
    pub size_bytes: u64,
    /// Offset one past the last valid frame.
    pub end: u64,
    pub has_frames: bool,
    /// The log's last index before this segment (from its checkpoint).
    pub first_index: Index,
    /// Highest last-index the log had while this segment was written (bounds purging).
    pub index_max: Index,
    pub tail: Tail,
    /// The log's last index after this segment's valid frames (names the index at risk).
    pub last_index_at_end: Index,
}

/// The result of reading every segment, before the snapshot is taken into account.
pub(crate) struct Scan {
    pub replay: Replay,
    pub segments: Vec<ScannedSegment>,
    /// Position in `segments` of the last one holding valid frames.
    pub last_data: Option<usize>,
    pub temp_files: Vec<PathBuf>,
    pub torn: Option<TornTail>,
    pub last_frame_seq: u64,
    pub frames: u64,
    pub bytes_read: u64,
    /// The corruption that ended the scan: the replay holds the intact prefix before it (and
    /// no segment after it was read).
    pub damage: Option<WalError>,
    /// `false` for the scrub, which only verifies: the replay keeps just the last entry (so
    /// its memory does not grow with the log).
    keep_entries: bool,
}

fn corrupt_at(seg: &ScannedSegment, offset: u64, reason: impl Into<String>) -> WalError {
    WalError::CorruptRecord {
        path: seg.path.clone(),
        offset,
        index: seg.last_index_at_end + 1,
        reason: reason.into(),
    }
}

/// Reads every segment in `dir` and replays its frames.
pub(crate) fn scan<F: Fs>(fs: &F, dir: &Path) -> Result<Scan> {
    let mut names = fs.list_dir(dir).map_err(io_err(dir))?;
    names.sort();
    let mut seqs = Vec::new();
    let mut temp_files = Vec::new();
    for name in &names {
        if let Some(seq) = segment::parse_segment_file_name(name) {
            seqs.push(seq);
        } else if name.ends_with(".wal.tmp") || snapshot::is_snapshot_temp_name(name) {
            temp_files.push(dir.join(name));
        }
    }
    // A missing segment ends the intact log: the segments before it are read, those after not.
    let mut gap = None;
    if let Some(at) = seqs.windows(2).position(|pair| pair[1] != pair[0] + 1) {
        gap = Some(WalError::CorruptLog(format!(
            "segment {} is missing between {} and {}",
            seqs[at] + 1,
            seqs[at],
            seqs[at + 1]
        )));
        seqs.truncate(at + 1);
    }
    let mut scan = scan_segments(fs, dir, &seqs, temp_files.clone(), true)?;
    if scan.damage.is_none() {
        match classify_tails(&mut scan) {
            Ok(()) => scan.damage = gap,
            Err((at, error)) => {
                // Damage in segment `at` with data after it: read again only up to that segment,
                // whose valid frames end the intact prefix.
                scan = scan_segments(fs, dir, &seqs[..=at], temp_files, true)?;
                scan.torn = None;
                scan.damage = scan.damage.take().or(Some(error));
            }
        }
    }
    Ok(scan)
}

/// Scans the sealed segments `seqs` (the scrub, `scrub.rs`) as recovery would, the last of them
/// judged as the log's end: the corruption found, if any, with the last index read intact
/// before it, and how many segments were read.
pub(crate) fn scan_sealed<F: Fs>(
    fs: &F,
    dir: &Path,
    seqs: &[u64],
) -> Result<(Option<(WalError, Index)>, usize)> {
    let mut scan = scan_segments(fs, dir, seqs, Vec::new(), false)?;
    let error = match scan.damage.take() {
        Some(error) => Some(error),
        None => classify_tails(&mut scan).err().map(|(_, error)| error),
    };
    let intact_through = scan.replay.last_index();
    Ok((error.map(|e| (e, intact_through)), scan.segments.len()))
}

/// Reads the segments `seqs` in order, replaying their frames, up to the first corruption.
fn scan_segments<F: Fs>(
    fs: &F,
    dir: &Path,
    seqs: &[u64],
    temp_files: Vec<PathBuf>,
    keep_entries: bool,
) -> Result<Scan> {
    let mut scan = Scan {
        replay: Replay::default(),
        segments: Vec::new(),
        last_data: None,
        temp_files,
        torn: None,
        last_frame_seq: 0,
        frames: 0,
        bytes_read: 0,
        damage: None,
        keep_entries,
    };
    for &seq in seqs {
        match scan_segment(fs, dir, seq, &mut scan) {
            Ok(scanned) => {
                if scanned.has_frames {
                    scan.last_data = Some(scan.segments.len());
                }
                scan.segments.push(scanned);
            }
            Err(e) if e.is_corruption() => {
                scan.damage = Some(e);
                return Ok(scan);
            }
            Err(e) => return Err(e),
        }
    }
    if scan.last_data.is_none() && scan.segments.first().is_some_and(|s| s.seq != 1) {
        scan.damage = Some(WalError::CorruptLog(format!(
            "no segment holds records, yet numbering starts at {}",
            scan.segments[0].seq
        )));
    }
    Ok(scan)
}

#[expect(clippy::too_many_lines)]
fn scan_segment<F: Fs>(fs: &F, dir: &Path, seq: u64, scan: &mut Scan) -> Result<ScannedSegment> {
    let path = dir.join(segment::segment_file_name(seq));
    let file = fs.open(&path).map_err(io_err(&path))?;
    let len = file.len_bytes().map_err(io_err(&path))?;
    let corrupt_header = |reason: String| WalError::CorruptHeader {
        path: path.clone(),
        reason,
    };
    if len < SEGMENT_HEADER_SIZE_BYTES {
        return Err(corrupt_header(format!("file is only {len} bytes")));
    }
    let mut reader = SegmentReader::new(&file, len, READ_CHUNK_SIZE_BYTES);
    let header = reader
        .window(0, SEGMENT_HEADER_SIZE_BYTES as usize)
        .map_err(io_err(&path))?;
    let size = parse_segment_header(&header, seq).map_err(corrupt_header)?;
    if size != len {
        return Err(corrupt_header(format!(
            "file is {len} bytes, created with {size}"
        )));
    }
    let mut seg = ScannedSegment {
        seq,
        path: path.clone(),
        size_bytes: size,
        end: SEGMENT_HEADER_SIZE_BYTES,
        has_frames: false,
        first_index: 0,
        index_max: 0,
        tail: Tail::Clean,
        last_index_at_end: scan.replay.last_index(),
    };
    let mut pos = SEGMENT_HEADER_SIZE_BYTES;
    // End of the last frame that held more than a commit index: a supersede item may not reach
    // back past it.
    let mut floor = SEGMENT_HEADER_SIZE_BYTES;
    // What `scan_rest` found from `pos`, when the loop ends at a bad or blank spot (it has
    // looked already).
    let mut rest = None;
    let check = loop {
        if pos + frame_size_bytes(0) as u64 > len {
            break None;
        }
        let head = reader
            .window(pos, FRAME_HEADER_SIZE_BYTES)
            .map_err(io_err(&path))?;
        let header = read_frame_header(&head);
        let size = frame_size_bytes(header.body_len);
        let blank = head.iter().all(|b| *b == 0);
        // The frame's bytes once they checked out valid (read below otherwise).
        let mut valid_frame = None;
        let bad = if blank {
            None
        } else if !header.magic_ok || size > FRAME_SIZE_BYTES_LIMIT || pos + size as u64 > len {
            Some(FrameCheck::Torn)
        } else {
            let frame = reader.window(pos, size).map_err(io_err(&path))?;
            match check_frame(&frame, &header, pos) {
                FrameCheck::Valid => {
                    valid_frame = Some(frame);
                    None
                }
                other => Some(other),
            }
        };
        if bad.is_some() || blank {
            // Unsynced commit-only frames that a later frame (which reached the disk) supersedes
            // may be skipped; anything else ends the valid frames here.
            match superseding_frame(&mut reader, pos, floor).map_err(io_err(&path))? {
                (Some(next), _) => {
                    pos = next;
                    continue;
                }
                (None, rest_at_pos) => {
                    rest = Some(rest_at_pos);
                    break bad;
                }
            }
        }
        let frame = match valid_frame {
            Some(frame) => frame,
            None => reader.window(pos, size).map_err(io_err(&path))?,
        };
        // A frame numbered u64::MAX leaves no number for the next frame (the writer never gets
        // near it: only a damaged or forged file holds one); refused like a number that does not
        // follow, before anything is repaired.
        if header.seq <= scan.last_frame_seq || header.seq == u64::MAX {
            return Err(corrupt_at(
                &seg,
                pos,
                format!(
                    "frame sequence {} does not follow {}",
                    header.seq, scan.last_frame_seq
                ),
            ));
        }
        let items = decode_items(&frame, header.body_len).map_err(|r| corrupt_at(&seg, pos, r))?;
        if !items
            .iter()
            .all(|item| matches!(item, Item::Commit(_) | Item::Supersede { .. }))
        {
            floor = pos + size as u64;
        }
        // A segment's first frame starts with its checkpoint. `Replay::apply` checks that per
        // item, so a first frame with no items at all must be refused here: it would leave the
        // log without a start (and the assembly indexing entries that do not exist).
        if !seg.has_frames && items.is_empty() {
            return Err(corrupt_at(
                &seg,
                pos,
                "a segment must start with exactly one checkpoint",
            ));
        }
        // Undone if the frame is refused, so that the replay holds exactly the frames before it:
        // the intact prefix a damage report returns.
        let saved = scan.replay.savepoint(&items);
        if let Err(e) = apply_frame(scan, &mut seg, items, pos) {
            scan.replay.restore(saved);
            return Err(e);
        }
        seg.has_frames = true;
        if !scan.keep_entries {
            scan.replay.forget_all_but_last();
        }
        seg.last_index_at_end = scan.replay.last_index();
        scan.last_frame_seq = header.seq;
        scan.frames += 1;
        pos += size as u64;
        seg.end = pos;
    };
    let (garbage_end, valid_after) = match rest {
        Some(rest) => rest,
        None => scan_rest(&mut reader, pos).map_err(io_err(&path))?,
    };
    if check.is_some() || garbage_end > pos {
        seg.tail = Tail::Dirty {
            check: check.unwrap_or(FrameCheck::Torn),
            garbage_end: garbage_end.max(pos + FRAME_ALIGN_BYTES as u64).min(len),
            valid_after,
        };
    }
    scan.bytes_read += reader.bytes_read;
    Ok(seg)
}

/// Replays one verified frame's items into `scan`.
fn apply_frame(
    scan: &mut Scan,
    seg: &mut ScannedSegment,
    items: Vec<Item>,
    pos: u64,
) -> Result<()> {
    for (i, item) in items.into_iter().enumerate() {
        let first_in_segment = !seg.has_frames && i == 0;
        if let Item::Checkpoint {
            first_index,
            prev_segment_end,
            ..
        } = &item
        {
            seg.first_index = *first_index;
            if let Some(prev) = scan.segments.last() {
                if prev.end != *prev_segment_end {
                    return Err(corrupt_at(
                        prev,
                        prev.end,
                        format!("the next segment says this one ends at {prev_segment_end}"),
                    ));
                }
            }
        }
        scan.replay
            .apply(item, first_in_segment)
            .map_err(|r| corrupt_at(seg, pos, r))?;
        seg.index_max = seg.index_max.max(scan.replay.last_index());
    }
    if scan.replay.hard_state.commit > scan.replay.last_index() {
        return Err(corrupt_at(seg, pos, "commit index beyond the log"));
    }
    Ok(())
}

/// At a bad or blank spot at `at`: the offset of the next valid frame if it declares that
/// everything from a point at or before `at` (and not before `floor`) up to it was unsynced
/// commit-only frames, which it supersedes (write protocol, rule 1). Also returns what
/// `scan_rest(reader, at)` found, which the caller needs when there is no such frame.
fn superseding_frame<H: FileHandle>(
    reader: &mut SegmentReader<'_, H>,
    at: u64,
    floor: u64,
) -> std::io::Result<(Option<u64>, RestScan)> {
    let rest = scan_rest(reader, at)?;
    let (_, Some(next)) = rest else {
        return Ok((None, rest));
    };
    let header = read_frame_header(&reader.window(next, FRAME_HEADER_SIZE_BYTES)?);
    let frame = reader.window(next, frame_size_bytes(header.body_len))?;
    // Only the first item is needed; a frame that does not decode is judged by the caller.
    let superseded = match decode_items(&frame, header.body_len).ok().as_deref() {
        Some([Item::Supersede { from }, ..]) => (floor..=at).contains(from),
        _ => false,
    };
    Ok((superseded.then_some(next), rest))
}

/// What [`scan_rest`] finds: the end of the non-zero bytes, and the first valid frame, if any.
type RestScan = (u64, Option<u64>);

/// Looks past a bad or blank spot at `from`: the end of any non-zero bytes, and the first valid
/// frame (which would prove the bad spot was once followed by a completed, synced write).
fn scan_rest<H: FileHandle>(
    reader: &mut SegmentReader<'_, H>,
    from: u64,
) -> std::io::Result<RestScan> {
    let len = reader.len_bytes();
    let mut garbage_end = from;
    let mut chunk_start = from;
    while chunk_start < len {
        // Holes read as zeros: skip them (a preallocated segment's unwritten tail is one), in
        // whole words so that words stay counted from `from`.
        match reader.next_data(chunk_start)? {
            None => break,
            Some(data) => {
                let align = FRAME_ALIGN_BYTES as u64;
                chunk_start += (data.min(len) - chunk_start) / align * align;
                if chunk_start >= len {
                    break;
                }
            }
        }
        let n = ((len - chunk_start) as usize).min(READ_CHUNK_SIZE_BYTES);
        let chunk = reader.window(chunk_start, n)?;
        // Words (of FRAME_ALIGN_BYTES, counted from `from`) that hold a non-zero byte; runs of
        // zeros, the common case (a segment's unwritten tail), are skipped a block at a time.
        let mut word_start = 0;
        while let Some(nonzero) = first_nonzero(&chunk[word_start..]) {
            let i = (word_start + nonzero) / FRAME_ALIGN_BYTES;
            let word_end = ((i + 1) * FRAME_ALIGN_BYTES).min(chunk.len());
            word_start = word_end;
            let word = &chunk[i * FRAME_ALIGN_BYTES..word_end];
            let at = chunk_start + (i * FRAME_ALIGN_BYTES) as u64;
            garbage_end = at + word.len() as u64;
            if at > from
                && word.len() >= 4
                && crate::codec::get_u32(word, 0) == FRAME_MAGIC
                && is_valid_frame_at(reader, at)?
            {
                return Ok((garbage_end, Some(at)));
            }
        }
        chunk_start += n as u64;
    }
    Ok((garbage_end, None))
}

/// The position of the first non-zero byte of `bytes`.
fn first_nonzero(bytes: &[u8]) -> Option<usize> {
    const BLOCK_BYTES: usize = 64;
    let mut skipped = 0;
    for block in bytes.chunks_exact(BLOCK_BYTES) {
        // An OR over the block vectorises; the byte is found below.
        if block.iter().fold(0u8, |acc, b| acc | b) != 0 {
            break;
        }
        skipped += BLOCK_BYTES;
    }
    bytes[skipped..]
        .iter()
        .position(|b| *b != 0)
        .map(|p| skipped + p)
}

fn is_valid_frame_at<H: FileHandle>(
    reader: &mut SegmentReader<'_, H>,
    at: u64,
) -> std::io::Result<bool> {
    let len = reader.len_bytes();
    if at + FRAME_HEADER_SIZE_BYTES as u64 > len {
        return Ok(false);
    }
    let header = read_frame_header(&reader.window(at, FRAME_HEADER_SIZE_BYTES)?);
    let size = frame_size_bytes(header.body_len);
    if size > FRAME_SIZE_BYTES_LIMIT || at + size as u64 > len {
        return Ok(false);
    }
    let frame = reader.window(at, size)?;
    Ok(check_frame(&frame, &header, at) == FrameCheck::Valid)
}

/// Decides, for every segment with bytes after its valid frames, whether those bytes are a torn
/// final write (discard) or damage (refuse). Only one write is ever in flight unsynced, so only
/// the end of the newest data can be torn.
fn classify_tails(scan: &mut Scan) -> std::result::Result<(), (usize, WalError)> {
    let last_data = scan.last_data;
    for (i, seg) in scan.segments.iter().enumerate() {
        let Tail::Dirty {
            check,
            garbage_end,
            valid_after,
        } = &seg.tail
        else {
            if last_data.is_some_and(|last| i < last) && !seg.has_frames {
                let error = WalError::CorruptLog(format!(
                    "{} holds no records but later segments do",
                    seg.path.display()
                ));
                // The intact log ends with the segment before it.
                return Err((i.saturating_sub(1), error));
            }
            continue;
        };
        if last_data.is_some_and(|last| i < last) {
            return Err((
                i,
                corrupt_at(seg, seg.end, "damaged record in a sealed segment"),
            ));
        }
        if let Some(at) = valid_after {
            return Err((
                i,
                corrupt_at(
                    seg,
                    seg.end,
                    format!("damaged record followed by a valid one at offset {at}"),
                ),
            ));
        }
        if *check == FrameCheck::CompleteButCorrupt {
            return Err((
                i,
                corrupt_at(
                    seg,
                    seg.end,
                    "checksum mismatch in a completely written record",
                ),
            ));
        }
        if scan.torn.is_none() {
            scan.torn = Some(TornTail {
                path: seg.path.clone(),
                offset: seg.end,
                garbage_end: *garbage_end,
            });
        }
    }
    Ok(())
}

/// The scan combined with the newest usable snapshot.
pub(crate) struct Assembled {
    pub recovered: Recovered,
    /// The log disagrees with the snapshot (ends before it, or holds another entry at its
    /// position): the writer must record a reset so its log and the recovered state agree.
    pub needs_reset: Option<LogId>,
}

/// Moves the replayed entries out of `scan`.
#[expect(clippy::too_many_lines)]
pub(crate) fn assemble(
    scan: &mut Scan,
    latest: LatestSnapshot,
    started: Instant,
) -> Result<Assembled> {
    let skipped_paths: Vec<PathBuf> = latest.skipped.iter().map(|s| s.path.clone()).collect();
    if latest.chosen.is_none() {
        if let Some(newest) = latest.skipped.first() {
            // Without it we would not even know the initial configuration.
            return Err(WalError::CorruptSnapshot {
                path: newest.path.clone(),
                reason: format!("no snapshot verifies: {}", newest.reason),
            });
        }
    }
    let meta = latest
        .chosen
        .as_ref()
        .map(|s| s.meta.clone())
        .unwrap_or_else(|| keel_core::SnapshotMeta::initial(Default::default()));
    let snap = meta.last;
    let replay = &mut scan.replay;
    // Not `last_data`: a scan ended by corruption holds the frames it read of a segment it did not
    // finish.
    let (log_start, log_last) = if replay.has_started() {
        (replay.start, replay.last_index())
    } else {
        (snap.index + 1, snap.index)
    };
    if log_start > snap.index + 1 {
        return Err(WalError::SnapshotBehindLog {
            snapshot: snap,
            log_first_index: log_start,
            skipped: skipped_paths,
        });
    }
    let mut entries_from = (snap.index + 1).max(log_start);
    let mut needs_reset = None;
    let mut discarded = 0;
    let mut discarded_term_ends: Vec<LogId> = Vec::new();
    if log_last < snap.index {
        needs_reset = Some(snap);
        entries_from = log_last + 1;
    } else if snap.index >= log_start {
        let at_snapshot = &replay.entries[(snap.index - log_start) as usize];
        if at_snapshot.term != snap.term {
            // The log diverged from the committed history the snapshot holds (Raft Figure 13:
            // with no matching entry, the whole log goes).
            discarded = log_last - snap.index;
            let from = (snap.index + 1 - log_start) as usize;
            for e in &replay.entries[from..] {
                match discarded_term_ends.last_mut() {
                    Some(end) if end.term == e.term => end.index = e.index,
                    _ => discarded_term_ends.push(e.log_id()),
                }
            }
            needs_reset = Some(snap);
            entries_from = log_last + 1;
        }
    }
    let skip = (entries_from - log_start) as usize;
    let mut entries: Vec<Entry> = std::mem::take(&mut replay.entries);
    let covered: Vec<Entry> = entries.drain(..skip.min(entries.len())).collect();
    let trailing = match needs_reset {
        None => covered,
        Some(_) => Vec::new(),
    };
    let last = entries.last().map_or(snap.index, |e| e.index);
    let mut hard_state = replay.hard_state;
    hard_state.commit = hard_state.commit.clamp(snap.index, last);
    let stats = RecoveryStats {
        segments: scan.segments.len(),
        frames: scan.frames,
        entries: entries.len() as u64,
        bytes_read: scan.bytes_read,
        duration: started.elapsed(),
        torn_tail: scan.torn.clone(),
        skipped_snapshots: latest.skipped.clone(),
        discarded_conflicting_entries: discarded,
        discarded_term_ends,
    };
    let state = RecoveredState {
        hard_state,
        snapshot: snap,
        snapshot_membership: (*meta.membership).clone(),
        snapshot_term_history: meta.term_history,
        entries,
        applied: snap.index,
    };
    Ok(Assembled {
        recovered: Recovered {
            state,
            snapshot: latest.chosen,
            trailing,
            stats,
        },
        needs_reset,
    })
}

/// What recovery found, damaged or not (read-only).
#[derive(Clone, Debug)]
pub struct Inspection {
    /// The state a node would start from; with damage, the intact prefix (see
    /// [`DamageReport::recovered`]).
    pub recovered: Recovered,
    /// The promise record as read, both copies.
    pub promise: PromiseRead,
    /// Every damage found; empty for a directory a node may start from.
    pub damage: Vec<Damage>,
}

/// Reads the directory without changing anything and reports what a node would start from and
/// any damage (what `keel check` prints). Only an I/O error is an error.
pub fn inspect<F: Fs>(fs: &F, dir: &Path) -> Result<Inspection> {
    let started = Instant::now();
    let mut scan = scan(fs, dir)?;
    let judged = damage::judge(fs, dir, &mut scan, started, false)?;
    Ok(Inspection {
        recovered: judged.assembled.recovered,
        promise: judged.promise,
        damage: judged.damage,
    })
}

/// Read-only recovery: what a node would start from, without repairing anything; a damaged
/// directory is refused with [`WalError::Damaged`].
pub fn recover<F: Fs>(fs: &F, dir: &Path) -> Result<Recovered> {
    let inspection = inspect(fs, dir)?;
    if !inspection.damage.is_empty() {
        return Err(WalError::Damaged(Box::new(DamageReport {
            damage: inspection.damage,
            recovered: inspection.recovered,
            former_terms: Vec::new(),
        })));
    }
    Ok(inspection.recovered)
}

#[cfg(test)]
mod tests {
    use super::first_nonzero;

    #[test]
    fn first_nonzero_finds_the_first_set_byte_anywhere() {
        for len in [0, 1, 7, 8, 63, 64, 65, 127, 128, 200] {
            assert_eq!(
                first_nonzero(&vec![0u8; len]),
                None,
                "all zeros, {len} bytes"
            );
            for at in 0..len {
                let mut bytes = vec![0u8; len];
                bytes[at] = 1 << (at % 8);
                // Later non-zero bytes do not matter.
                if at + 3 < len {
                    bytes[at + 3] = 0xff;
                }
                assert_eq!(first_nonzero(&bytes), Some(at), "{len} bytes, set at {at}");
            }
        }
    }
}
