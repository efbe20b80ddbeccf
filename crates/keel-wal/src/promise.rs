//! The promise record: what a node has promised its peers, kept apart from the log so that a log
//! that lost or damaged acknowledged data can be told from one that merely lost a torn final write.
//!
//! A node promises two things: its term and vote (it never votes twice in a term), and every
//! entry up to the last one it reported durable (a follower's acknowledgement, a leader counting
//! itself toward a commit). Both are in the log already; the log alone cannot show that its own
//! tail is missing (a disk that reported a flush it never did leaves zeros where frames were, which
//! reads exactly like a log that simply ended there). So [`crate::Wal::write_batch`] records the
//! promise here after every synced batch that changed it, and it is durable with the next group
//! commit (below). Recovery compares the two ([`crate::damage`]).
//!
//! # File `promise`, format version 2
//!
//! A fixed-size file of 8,192 bytes holding two copies of the record, a *slot* at offset 0 and one
//! at offset 4,096 (each in a page and a block of its own, so writing one never rewrites the
//! other's sectors). Writes alternate between them: write `n` goes to slot `n % 2`, so a write
//! torn anywhere damages only the slot it was writing, and the other still holds the promise
//! before it. The valid slot with the higher sequence number is the promise; a slot of zeros was
//! never written. The file is created (temporary name `promise.tmp`, all 8,192 bytes written:
//! zeros and the first record — sequence number 1, so slot 1 — then fsync, rename, directory
//! fsync) by [`crate::Wal::open`]: under its final name it always holds a valid slot. After that
//! each write is one 320-byte write in place into blocks the file already has (so no metadata
//! ever needs flushing with it).
//!
//! A slot (all integers little-endian):
//!
//! | offset | size | field                                                                 |
//! |-------:|-----:|-----------------------------------------------------------------------|
//! |      0 |    8 | magic `KEELPRMS`                                                      |
//! |      8 |    2 | format version (2)                                                    |
//! |     10 |    2 | slot size in bytes (320)                                              |
//! |     12 |    4 | slot number (0 or 1: a record found in the other slot is refused)     |
//! |     16 |    8 | sequence number (1, 2, 3, ...: one more at every write)              |
//! |     24 |    8 | term                                                                  |
//! |     32 |    8 | vote (node id; 0 = none)                                              |
//! |     40 |    8 | term of the last acknowledged entry                                   |
//! |     48 |    8 | index of the last acknowledged entry (0: none)                        |
//! |     56 |    4 | number of term starts that follow, `n` (0 to 16)                      |
//! |     60 |  256 | 16 term starts of 16 bytes, the first `n` used (zeros after them):    |
//! |        |      | term (8), then the first index of that term (8)                       |
//! |    316 |    4 | CRC32C of bytes 0..316                                                |
//!
//! The term starts describe the log the promise names, through the acknowledged entry: the
//! first index of each of its last (at most 16) terms, oldest first, rising in both term and
//! index, none beyond the acknowledged entry, the last one of its term. The oldest may be clipped
//! to the first index the log still knew of (a snapshot's position). A node whose log lost its
//! tail tells its peers by them which of their entries are the ones it lost (keel-core's
//! `node/repair.rs`): an entry of a term at an index up to that term's last index in the lost log
//! is one of the lost entries.
//!
//! Version 1 (64-byte slots: the same fields through offset 56, then 4 reserved zero bytes and
//! the CRC32C of bytes 0..60 at offset 60) is still read, as a record without term starts; every
//! write is version 2.
//!
//! The rest of each 4,096-byte half is zeros.
//!
//! # What it means, and when it is written
//!
//! After every synced batch, once the log's fsync returned, the record is raised to the log's
//! synced term and vote and its last entry's (term, index), if that changed. The order matters:
//! written before the log's own fsync returned, the promise could reach the disk ahead of the
//! entries it names, and a crash would leave a promise the log does not hold, which recovery
//! takes for damage (an honest disk writes its cache back in any order until a flush completes).
//!
//! Flushing the record on its own would cost a second device cache flush per group commit, and
//! even a write of it riding on the log's flush costs one more 4 KiB I/O beside the log's. So a
//! raise waits in memory, and only one in [`crate::WalConfig::promise_write_every_batches`] (16)
//! is written: into the
//! page cache at once (a process that stops keeps it); when the next batch's log write is issued
//! its writeback starts, so the two travel to the device together, and it is pushed to the device
//! before the log's fdatasync ([`crate::FileHandle::write_back`]: `sync_file_range` on Linux, no
//! flush), whose flush of the device's whole cache makes it durable with the new entries. When no
//! next batch comes, the runtime writes and flushes the newest raise after a short idle delay, and
//! when it stops ([`crate::Wal::flush_promise`]); where a write cannot be pushed without a flush
//! (platforms other than Linux), it is flushed on its own before the log's fsync. At most one
//! record write is unflushed at any time (writing one flushes the one before if needed), so the
//! other slot always holds a durable promise.
//!
//! So the durable promise trails what was acknowledged by at most that many group commits (or
//! the runtime's idle delay): loss confined to
//! the batches acknowledged that shortly before a crash is not detected (see [`crate::damage`] for
//! everything that is not).
//!
//! A batch that truncates the log below the promise (a follower overwriting entries a newer
//! leader replaced) or resets it to a snapshot first lowers the promise to the entry it keeps,
//! flushed, before the log changes: the promise never names an entry the log may legitimately no
//! longer hold. Lowering is safe: the entries dropped were never committed (a leader of a later
//! term replaced them).
//!
//! So at any crash point the disk holds a promise at or below the log's synced end, and at or
//! above everything reported durable before the last group commit; recovery's checks
//! ([`crate::damage`]) rest on that.
//!
//! After a repaired lost tail ([`crate::Wal::open_repairing`]) the promise is never recorded
//! below the old one (its *floor*) until the log's last entry is at least as up to date in Raft's
//! order (where keel-core's recovery ends; then it is flushed at once), or until the core lets go
//! of the promise (`Write::release_promise`: lowered to the log, flushed) or lowers it to an entry
//! beyond the log (`Write::lower_promise_to`: a committed entry, or a lost one no later commit
//! can follow, becomes the new floor, flushed, knowing only that entry's term). The log's side of
//! all this is in `wal/promise_record.rs`.

use std::path::{Path, PathBuf};

use keel_core::{HardState, LogId, NodeId, Term};

use crate::codec::{get_u16, get_u32, get_u64, put_u32, put_u64};
use crate::error::{io_err, sync_err, Result};
use crate::fs::{FileHandle, Fs};

/// The file's name in the WAL directory.
pub const PROMISE_FILE_NAME: &str = "promise";
/// Its name while it is being created.
pub const PROMISE_TEMP_NAME: &str = "promise.tmp";
/// The first 8 bytes of every slot.
pub const PROMISE_MAGIC: [u8; 8] = *b"KEELPRMS";
/// The slot format every write uses (version 1 is still read).
pub const PROMISE_FORMAT_VERSION: u16 = 2;
/// A version 2 slot's size, checksum included; the rest of its 4 KiB half of the file is zeros.
pub const PROMISE_SLOT_SIZE_BYTES: usize = 320;
/// Version 1's slot size, still read.
pub const PROMISE_V1_SLOT_SIZE_BYTES: usize = 64;
/// How many term starts a record holds.
pub const PROMISE_TERM_STARTS_MAX: usize = 16;
/// Where slot `n` starts: `n * PROMISE_SLOT_STRIDE_BYTES`.
pub const PROMISE_SLOT_STRIDE_BYTES: u64 = 4096;
/// The file's fixed size: two slots, each at the start of a 4 KiB half of its own.
pub const PROMISE_FILE_SIZE_BYTES: u64 = 2 * PROMISE_SLOT_STRIDE_BYTES;

/// What a node has promised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Promise {
    /// The term the node has reached: it never goes back below it.
    pub term: Term,
    /// The node's vote in `term` (`None`: it has not voted; 0 on disk).
    pub vote: Option<NodeId>,
    /// The last entry reported durable: every entry up to it, as the log held it then.
    pub acked: LogId,
    /// The first index of each of the last terms of that log (format above).
    pub starts: TermStarts,
}

/// The first index of each of a log's last terms, oldest first (at most
/// [`PROMISE_TERM_STARTS_MAX`]; the oldest may be clipped to the first index the log knew).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TermStarts {
    len: u8,
    starts: [LogId; PROMISE_TERM_STARTS_MAX],
}

impl TermStarts {
    /// The last [`PROMISE_TERM_STARTS_MAX`] of `starts`, which rise in term and index (an entry
    /// of the same term as the one before it adds nothing and is skipped).
    pub fn new(starts: impl IntoIterator<Item = LogId>) -> TermStarts {
        let mut kept = TermStarts::default();
        for start in starts {
            let len = usize::from(kept.len);
            if let Some(prev) = len.checked_sub(1).map(|i| kept.starts[i]) {
                if start.term == prev.term {
                    continue;
                }
            }
            if len == PROMISE_TERM_STARTS_MAX {
                kept.starts.copy_within(1.., 0);
                kept.starts[len - 1] = start;
            } else {
                kept.starts[len] = start;
                kept.len += 1;
            }
        }
        kept
    }

    /// The kept term starts, oldest first: `LogId::new(term, first index of that term)`.
    pub fn as_slice(&self) -> &[LogId] {
        &self.starts[..usize::from(self.len)]
    }

    /// Whether they could describe a log whose last entry is `last`.
    fn fit(&self, last: LogId) -> bool {
        let s = self.as_slice();
        s.windows(2)
            .all(|w| w[0].term < w[1].term && w[0].index < w[1].index)
            && s.last()
                .is_none_or(|l| l.term == last.term && l.index <= last.index)
    }
}
impl Promise {
    /// The promise of a log whose synced hard state is `hs` and whose last entry is `last`.
    pub fn of(hs: &HardState, last: LogId, starts: TermStarts) -> Promise {
        debug_assert!(starts.fit(last), "{starts:?} do not end at {last}");
        Promise {
            term: hs.term,
            vote: hs.vote,
            acked: last,
            starts,
        }
    }
}

impl std::fmt::Display for Promise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "term {}, vote ", self.term)?;
        match self.vote {
            Some(v) => write!(f, "{v}")?,
            None => write!(f, "none")?,
        }
        write!(f, ", entries through {}", self.acked)
    }
}

/// What one slot holds.
// Two of these exist per read of the file (at open): boxing the promise would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Never written (zeros, or beyond the end of a short file).
    Blank,
    /// A slot that verifies.
    Valid {
        /// The write's sequence number: 1, 2, 3, ... (write `n` goes to slot `n % 2`); the valid
        /// slot with the higher one is the promise.
        seq: u64,
        /// The promise that write recorded.
        promise: Promise,
    },
    /// Something that does not verify: a torn write or damage.
    Corrupt(String),
}

/// The promise file as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromiseRead {
    /// No file: a directory written before the promise existed, a new one, or a lost file.
    pub missing: bool,
    /// Slot 0 (offset 0) and slot 1 (offset 4,096), as found.
    pub slots: [SlotState; 2],
}

impl PromiseRead {
    /// The newest valid slot: its sequence number and promise.
    pub fn newest(&self) -> Option<(u64, Promise)> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                SlotState::Valid { seq, promise } => Some((*seq, *promise)),
                _ => None,
            })
            .max_by_key(|(seq, _)| *seq)
    }

    /// The promise in force: the newest valid slot's. `None` when the file is missing or neither
    /// slot verifies.
    pub fn promise(&self) -> Option<Promise> {
        self.newest().map(|(_, p)| p)
    }

    /// The file exists but neither slot verifies (a file of two blank slots included: creation
    /// writes the first record before the file gets its name).
    pub fn unreadable(&self) -> bool {
        !self.missing && self.newest().is_none()
    }
}

/// Encodes slot `slot` of write number `seq`.
pub fn encode_slot(slot: u32, seq: u64, promise: &Promise) -> [u8; PROMISE_SLOT_SIZE_BYTES] {
    let mut buf = Vec::with_capacity(PROMISE_SLOT_SIZE_BYTES);
    buf.extend_from_slice(&PROMISE_MAGIC);
    buf.extend_from_slice(&PROMISE_FORMAT_VERSION.to_le_bytes());
    buf.extend_from_slice(&(PROMISE_SLOT_SIZE_BYTES as u16).to_le_bytes());
    put_u32(&mut buf, slot);
    put_u64(&mut buf, seq);
    put_u64(&mut buf, promise.term);
    put_u64(&mut buf, promise.vote.unwrap_or(0));
    put_u64(&mut buf, promise.acked.term);
    put_u64(&mut buf, promise.acked.index);
    let starts = promise.starts.as_slice();
    put_u32(&mut buf, starts.len() as u32);
    for start in starts {
        put_u64(&mut buf, start.term);
        put_u64(&mut buf, start.index);
    }
    buf.resize(PROMISE_SLOT_SIZE_BYTES - 4, 0);
    let crc = crc32c::crc32c(&buf);
    put_u32(&mut buf, crc);
    buf.try_into().expect("a slot is 320 bytes")
}

/// Decodes the bytes found at slot `slot` (shorter if the file ends early).
pub fn decode_slot(slot: u32, bytes: &[u8]) -> SlotState {
    if bytes.iter().all(|b| *b == 0) {
        return SlotState::Blank;
    }
    let corrupt = |why: String| SlotState::Corrupt(why);
    let version = if bytes.len() >= 10 {
        get_u16(bytes, 8)
    } else {
        0
    };
    let size = match version {
        1 => PROMISE_V1_SLOT_SIZE_BYTES,
        _ => PROMISE_SLOT_SIZE_BYTES,
    };
    if bytes.len() < size {
        return corrupt(format!("only {} bytes", bytes.len()));
    }
    if crc32c::crc32c(&bytes[..size - 4]) != get_u32(bytes, size - 4) {
        return corrupt("checksum mismatch".into());
    }
    if bytes[..8] != PROMISE_MAGIC {
        return corrupt("bad magic".into());
    }
    if version != 1 && version != PROMISE_FORMAT_VERSION {
        return corrupt(format!("unknown format version {version}"));
    }
    let starts_len = get_u32(bytes, 56) as usize;
    let bad_counts = match version {
        1 => starts_len != 0,
        _ => starts_len > PROMISE_TERM_STARTS_MAX,
    };
    if get_u16(bytes, 10) as usize != size || bad_counts {
        return corrupt("bad slot size or number of term starts".into());
    }
    let found = get_u32(bytes, 12);
    if found != slot {
        return corrupt(format!("record of slot {found} found in slot {slot}"));
    }
    let seq = get_u64(bytes, 16);
    if seq == 0 || seq % 2 != u64::from(slot) {
        return corrupt(format!(
            "sequence number {seq} does not belong in slot {slot}"
        ));
    }
    let vote = get_u64(bytes, 32);
    let acked = LogId::new(get_u64(bytes, 40), get_u64(bytes, 48));
    let starts = TermStarts::new(
        (0..starts_len)
            .map(|i| LogId::new(get_u64(bytes, 60 + 16 * i), get_u64(bytes, 68 + 16 * i))),
    );
    if usize::from(starts.len) != starts_len || !starts.fit(acked) {
        return corrupt("term starts out of order or beyond the acknowledged entry".into());
    }
    SlotState::Valid {
        seq,
        promise: Promise {
            term: get_u64(bytes, 24),
            vote: (vote != 0).then_some(vote),
            acked,
            starts,
        },
    }
}

/// Reads the promise file in `dir` (read-only).
pub fn read_promise<F: Fs>(fs: &F, dir: &Path) -> Result<PromiseRead> {
    let path = dir.join(PROMISE_FILE_NAME);
    let names = fs.list_dir(dir).map_err(io_err(dir))?;
    if !names.iter().any(|n| n == PROMISE_FILE_NAME) {
        return Ok(PromiseRead {
            missing: true,
            slots: [SlotState::Blank, SlotState::Blank],
        });
    }
    let file = fs.open(&path).map_err(io_err(&path))?;
    let read = |slot: u32| -> Result<SlotState> {
        let at = u64::from(slot) * PROMISE_SLOT_STRIDE_BYTES;
        let bytes = file
            .read_vec_at(at, PROMISE_SLOT_SIZE_BYTES)
            .map_err(io_err(&path))?;
        Ok(decode_slot(slot, &bytes))
    };
    Ok(PromiseRead {
        missing: false,
        slots: [read(0)?, read(1)?],
    })
}

/// The open promise file of a running WAL.
pub(crate) struct PromiseFile<F: Fs> {
    file: F::File,
    path: PathBuf,
    /// Sequence number of the last write.
    seq: u64,
    /// The promise last written: durable, or on its way (`unflushed`).
    written: Promise,
    /// `written` is not known durable yet: the next flush makes it so.
    unflushed: bool,
    /// Raised since the last write and not written yet (no I/O until it is due).
    raised: Option<Promise>,
    /// Raises since the last write: every `write_every`th is written.
    raises_since_write: u32,
    /// [`crate::WalConfig::promise_write_every_batches`].
    write_every: u32,
    /// What was promised before the log lost its tail ([`crate::Wal::open_repairing`]), and the
    /// term starts of the log that held it: the promise is never recorded below it until the
    /// log reaches it again (`above_floor`).
    floor: Option<(LogId, TermStarts)>,
}

impl<F: Fs> PromiseFile<F> {
    /// Opens the file `read` describes, or creates it holding `promise` when it is missing or
    /// holds no valid slot (the caller decided that is not damage). The promise is then set to
    /// `promise` (the state the WAL opened with), durably.
    pub(crate) fn open(
        fs: &F,
        dir: &Path,
        read: &PromiseRead,
        promise: Promise,
        write_every: u32,
        floor: Option<(LogId, TermStarts)>,
    ) -> Result<Self> {
        let path = dir.join(PROMISE_FILE_NAME);
        let Some((seq, written)) = read.newest() else {
            // A missing or unreadable file has no floor to keep.
            return Self::create(fs, dir, promise, write_every);
        };
        let file = fs.open(&path).map_err(io_err(&path))?;
        // What was read may be only in the page cache (a process restart, not a power loss, after
        // a write that never got its flush): flushed here along with any change.
        let mut opened = PromiseFile {
            file,
            path,
            seq,
            written,
            unflushed: true,
            raised: None,
            raises_since_write: 0,
            write_every,
            floor,
        };
        opened.set(promise)?;
        Ok(opened)
    }

    fn create(fs: &F, dir: &Path, promise: Promise, write_every: u32) -> Result<Self> {
        let temp = dir.join(PROMISE_TEMP_NAME);
        let path = dir.join(PROMISE_FILE_NAME);
        if fs
            .list_dir(dir)
            .map_err(io_err(dir))?
            .iter()
            .any(|n| n == PROMISE_TEMP_NAME)
        {
            fs.remove_file(&temp).map_err(io_err(&temp))?;
        }
        let mut file = fs.create(&temp).map_err(io_err(&temp))?;
        // Every byte written, not just the length set: both slots get their blocks now, so that
        // writing a slot later changes no metadata (`write_back` carries none).
        let mut content = vec![0u8; PROMISE_FILE_SIZE_BYTES as usize];
        let first = PROMISE_SLOT_STRIDE_BYTES as usize;
        content[first..first + PROMISE_SLOT_SIZE_BYTES]
            .copy_from_slice(&encode_slot(1, 1, &promise));
        file.write_at(&content, 0).map_err(io_err(&temp))?;
        file.sync_data().map_err(sync_err(&temp))?;
        // Replaces a file whose slots were both unreadable (the caller accepted that).
        fs.rename(&temp, &path).map_err(io_err(&path))?;
        fs.sync_dir(dir).map_err(sync_err(dir))?;
        Ok(PromiseFile {
            file,
            path,
            seq: 1,
            written: promise,
            unflushed: false,
            raised: None,
            raises_since_write: 0,
            write_every,
            floor: None,
        })
    }

    /// The newest promise: raised, or written (durable, or made so by the next flush).
    pub(crate) fn current(&self) -> Promise {
        self.raised.unwrap_or(self.written)
    }

    /// Whether the newest promise still waits to be written or flushed ([`PromiseFile::flush`]).
    pub(crate) fn pending(&self) -> bool {
        self.raised.is_some() || self.unflushed
    }

    /// Raises the promise to `promise`, which covers only entries already durable in the log.
    /// Every `write_every`th raise is written at once (into the page cache: a
    /// process that stops keeps it), to become durable with the next log fsync
    /// ([`PromiseFile::start`], [`PromiseFile::before_log_sync`]); [`PromiseFile::flush`] writes
    /// and flushes any raise now.
    pub(crate) fn raise(&mut self, promise: Promise) -> Result<()> {
        let had_floor = self.floor.is_some();
        let promise = self.above_floor(promise);
        if had_floor && self.floor.is_none() {
            // The floor just went: the durable promise still names it, and the log may hold a
            // later term there or below it instead (the lost entries were replaced since),
            // which an open after a crash would take for a lost tail. Flushed now, as before a
            // truncation (once per repair).
            self.raised = (promise != self.written).then_some(promise);
            return self.flush();
        }
        if promise == self.written {
            self.raised = None;
            return Ok(());
        }
        self.raised = Some(promise);
        self.raises_since_write += 1;
        if self.raises_since_write < self.write_every {
            return Ok(());
        }
        self.write_raised()
    }

    /// A log write that will be synced is about to be issued: the promise's writeback starts, so
    /// that it travels to the device beside the log's write.
    pub(crate) fn start(&mut self) -> Result<()> {
        if !self.unflushed {
            return Ok(());
        }
        self.file.start_write_back().map_err(io_err(&self.path))
    }

    /// The log is about to fsync: the promise written since the last flush must be at the device
    /// first, so that the log's fsync (a cache flush of the whole device) makes it durable too.
    /// Where the platform cannot push a write without flushing, it is flushed here.
    pub(crate) fn before_log_sync(&mut self) -> Result<()> {
        if !self.unflushed {
            return Ok(());
        }
        if !self.file.write_back().map_err(io_err(&self.path))? {
            return self.sync();
        }
        // The caller's fsync follows; should it fail, the process stops.
        self.unflushed = false;
        Ok(())
    }

    /// Makes the newest promise durable now: for a log that stays idle (no next fsync), or a
    /// process about to stop.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.write_raised()?;
        self.sync()
    }

    /// Records `promise` durably before returning, replacing any raised one: for lowering it,
    /// which must reach the disk before the log changes.
    pub(crate) fn set(&mut self, promise: Promise) -> Result<()> {
        let promise = self.above_floor(promise);
        self.raised = (promise != self.written).then_some(promise);
        self.flush()
    }

    /// The node let go of the promise it recovered to: the floor goes and the record drops to
    /// `promise`, flushed (a lowering, as before a truncation: `promise` covers only what the
    /// log holds).
    pub(crate) fn release(&mut self, promise: Promise) -> Result<()> {
        self.floor = None;
        self.set(promise)
    }

    /// The node lowered the promise it recovers to, to `point`, an entry committed in the
    /// cluster that its log does not hold yet (keel-core's `node/repair.rs`): the floor becomes
    /// `point` (whose log's term starts are unknown but for its own) and the record drops to it,
    /// flushed.
    pub(crate) fn lower_floor(&mut self, point: LogId, promise: Promise) -> Result<()> {
        self.floor = Some((point, TermStarts::new([point])));
        self.set(promise)
    }

    /// `promise`, its entry raised to the floor while the log is below it; the floor goes once
    /// the log's last entry is at least as up to date as the floor (Raft's order, term first),
    /// which is when keel-core's recovery ends too (`RaftNode::start_recovering`): a log that
    /// continues in a later term below the floor's index holds everything the floor promised
    /// that was ever committed (a leader of that later term replaced the rest). Kept by index
    /// alone, the floor outlived the recovery there, and the next open reported a lost tail
    /// that was not (simulator, storage faults).
    fn above_floor(&mut self, promise: Promise) -> Promise {
        match self.floor {
            Some((floor, starts)) if promise.acked < floor => Promise {
                acked: floor,
                starts,
                ..promise
            },
            Some(_) => {
                self.floor = None;
                promise
            }
            None => promise,
        }
    }

    /// Writes the raised promise, if any.
    fn write_raised(&mut self) -> Result<()> {
        let Some(promise) = self.raised.take() else {
            return Ok(());
        };
        // Two writes in flight could both be lost or torn; the one before must be durable.
        self.sync()?;
        self.write(promise)?;
        self.raises_since_write = 0;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        if self.unflushed {
            self.file.sync_data().map_err(sync_err(&self.path))?;
            self.unflushed = false;
        }
        Ok(())
    }

    /// One write of the next slot. An error is fatal, as for the log.
    fn write(&mut self, promise: Promise) -> Result<()> {
        let seq = self.seq + 1;
        let slot = (seq % 2) as u32;
        let at = u64::from(slot) * PROMISE_SLOT_STRIDE_BYTES;
        self.file
            .write_at(&encode_slot(slot, seq, &promise), at)
            .map_err(io_err(&self.path))?;
        self.seq = seq;
        self.written = promise;
        self.unflushed = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
