//! keel-wal: durable storage for a keel node — a segmented write-ahead log holding the entries,
//! the hard state (term, vote) and the commit index in one stream, snapshot files, and a file
//! layer with a fault-injecting implementation so that simulated crashes exercise this code.
//!
//! ```text
//! Wal::open(fs, dir, config) -> (Wal, Recovered { state: RecoveredState, snapshot, stats })
//! wal.write_batch(&[Write])          group commit: one buffer, one write, one fdatasync
//! wal.save_snapshot(&meta, data)     temp file, fsync, rename, directory fsync; keep the newest N
//! create_snapshot_file(fs, dir, meta) stream a large snapshot into a temp file (io::Write), fsync
//! wal.adopt_snapshot(temp)           a complete temp file (streamed, or received whole from a
//!                                    leader): header check, rename, directory fsync; keep N
//! wal.install_snapshot / reset_log   a snapshot from the leader replaces the log
//! wal.purge_up_to(index)             delete whole segments a durable snapshot covers
//! recover(&fs, dir)                  read-only recovery (what `Storage::recover` does)
//! inspect(&fs, dir)                  read-only: the state, the promise record and every damage
//! ```
//!
//! A `Write`'s `install` becomes a reset item in the same frame as its entries and hard state (the
//! snapshot file must already be saved); its `purge_to` deletes whole segments once the batch is
//! durable. `Wal` implements [`keel_core::storage::Storage`]. Every error from a write path is fatal
//! ([`WalError::is_fatal`]): the process must stop and never retry an fsync. Recovery refuses to
//! start on damaged acknowledged data instead of truncating it: [`WalError::Damaged`] reports every
//! finding with the intact prefix ([`damage`]), judged against the promise record ([`promise`]),
//! which every synced batch updates after its fsync.
//!
//! # On-disk format, version 2
//!
//! All integers are little-endian. Checksums are CRC32C (Castagnoli). One directory holds:
//!
//! | file name                                  | contents                                            |
//! |--------------------------------------------|-----------------------------------------------------|
//! | `{seq:020}.wal`                            | log segment number `seq` (1, 2, 3, ...)             |
//! | `{seq:020}.wal.tmp`                        | a segment being prepared (deleted on open)          |
//! | `snapshot-{index:020}-{term:020}.snap`     | a snapshot                                          |
//! | `snapshot-...snap.tmp`                     | a snapshot being written, or received and not yet adopted (deleted on open) |
//! | `promise`                                  | the promise record: two checksummed copies of the term, vote, last acknowledged entry and its log's last terms (format in [`promise`]) |
//! | `promise.tmp`                              | the promise record being created (replaced on open) |
//!
//! Other files are ignored (keel-runtime keeps a partial incoming snapshot transfer there:
//! `incoming.snap.part` and `incoming.snap.state`).
//!
//! ## Segment header (64 bytes at offset 0)
//!
//! | offset | size | field                                                          |
//! |-------:|-----:|----------------------------------------------------------------|
//! |      0 |    8 | magic `KEELWAL\0`                                              |
//! |      8 |    2 | format version (2; version 1 segments are read too)            |
//! |     10 |    2 | header size in bytes (64)                                      |
//! |     12 |    4 | reserved, zero                                                 |
//! |     16 |    8 | segment sequence number (must equal the file name's)           |
//! |     24 |    8 | segment size in bytes (the file's preallocated length)         |
//! |     32 |   28 | reserved, zero                                                 |
//! |     60 |    4 | CRC32C of bytes 0..60                                          |
//!
//! A segment keeps the size it was created with: a writer that finds one on disk never writes
//! past that size, whatever size it is configured to create, and recovery refuses a segment whose
//! file length differs from its header's. The header is written and fsynced under the temporary
//! name before the file is renamed into place, and never rewritten: a segment under its final name always has a durable header, so a
//! bad header is corruption, never a torn write. The header does not hold the segment's first
//! index (it is prepared before that is known); the first frame's checkpoint item does.
//!
//! ## Frame (from offset 64, each starting at a multiple of 8)
//!
//! A frame is the unit of writing, checksumming and tearing: each batch is one frame, written
//! with one `write` and one `fdatasync`. A batch larger than the writer's frame bound
//! (`frame_size_bytes_max`) is split into several frames, each synced in turn; an entry is never
//! split: an entry larger than that bound gets a frame of its own, as large as it needs (up to
//! `entry_size_bytes_max`, which every segment must have room for).
//!
//! | offset       | size      | field                                                         |
//! |-------------:|----------:|---------------------------------------------------------------|
//! |            0 |         4 | magic `KFRM`                                                  |
//! |            4 |         4 | body length in bytes, `L` (frame at most 256 MiB)             |
//! |            8 |         8 | frame sequence number (strictly increasing through the log)   |
//! |           16 |         L | body: items, back to back                                     |
//! |       16 + L |   pad     | zeros up to a multiple of 8 (`P = L` rounded up to 8)         |
//! |       16 + P |         4 | CRC32C of bytes `0 .. 16 + P` (padding included)              |
//! |       20 + P |         4 | end mark: low 32 bits of the sequence number XOR `KEND`       |
//!
//! The end mark is the last thing a write puts down: a frame torn part-way lacks it, or holds
//! only its first bytes (the rest are zero; the checksum before it may then verify). Frames are
//! only ever appended, never written over older bytes, and after the last frame a segment holds
//! zeros (it was preallocated sparse; the write of a frame that reaches past the zeros written
//! so far also writes [`ZERO_AHEAD_BYTES`] more of them after it, so the blocks ahead are
//! allocated before frames reach them; open zeroes a torn tail). Writing zeros over zeros changes
//! nothing recovery can see, whatever a crash keeps of it.
//! Recovery looks past a bad or blank spot for any later valid frame; it asks the file system
//! where data resumes (`FileHandle::next_data`, `SEEK_DATA`) and skips the holes, which read as
//! zeros, instead of reading them: a fresh node opens its 128 MiB segment in milliseconds.
//!
//! ## Items
//!
//! Every item is `kind: u8`, 3 reserved zero bytes, `length: u32`, then `length` bytes:
//!
//! | kind | name       | payload                                                                 |
//! |-----:|------------|-------------------------------------------------------------------------|
//! |    1 | checkpoint | first index u64 (the log's last index + 1 when the segment started), hard state (24), previous segment's end offset u64 (0 for segment 1) |
//! |    2 | truncate   | index u64: drop every entry at or after it                              |
//! |    3 | entries    | first index u64, count u32, then `count` entries (below)                |
//! |    4 | hard state | term u64, vote u64 (0 = none), commit u64                               |
//! |    5 | commit     | commit u64 (a commit-only change)                                       |
//! |    6 | reset      | snapshot index u64, snapshot term u64: drop the whole log; it continues at index + 1 |
//! |    7 | supersede  | offset u64: the frames from this offset up to this one were unsynced commit-only frames; this frame sets the commit itself (version 2) |
//!
//! Within a frame items appear in this order: checkpoint (first frame of a segment only, and
//! then first) or supersede, reset, truncate, entries, hard state, commit. A frame with a
//! supersede item holds a hard state or a commit item: the commit after it does not depend on
//! the frames it supersedes. Entries must continue the log
//! exactly (`first index = last index + 1`); a rewrite is an explicit truncate before them.
//!
//! An entry is `term u64`, `payload kind u8` (0 noop, 1 normal, 2 membership), `payload length
//! u32`, payload. A membership payload is three sets — voters, outgoing voters, learners — each
//! `count u32` followed by `count` node ids (u64).
//!
//! ## Snapshot file
//!
//! | offset | size | field                                                                  |
//! |-------:|-----:|------------------------------------------------------------------------|
//! |      0 |    8 | magic `KEELSNAP`                                                       |
//! |      8 |    2 | format version (1)                                                     |
//! |     10 |    2 | reserved, zero                                                         |
//! |     12 |    4 | header length `H` in bytes, including the trailing header CRC (≤ 64 MiB) |
//! |     16 |    8 | last included index                                                    |
//! |     24 |    8 | last included term                                                     |
//! |     32 |    8 | data length `D` in bytes                                               |
//! |     40 |    4 | CRC32C of the data                                                     |
//! |     44 |    4 | reserved, zero                                                         |
//! |     48 |  var | membership (as in an entry payload)                                   |
//! |    var |  var | term history: count u32, then (term u64, first index u64) per term     |
//! |  H - 4 |    4 | CRC32C of bytes `0 .. H - 4`                                           |
//! |      H |    D | data                                                                   |
//!
//! The newest [`WalConfig::snapshots_kept`] files are kept, and always the bootstrap snapshot
//! (0/0, the initial configuration and no data), which nothing else records: a node whose newer
//! snapshots are all damaged falls back to it and replays its log from the start.
//!
//! # Failure model
//!
//! The disk **may**: lose any write or directory change (create, rename, remove) not yet made
//! durable by `fdatasync` / a directory fsync; persist only part of an unsynced write, torn at
//! any byte, or any subset of its 512-byte sectors (writeback in any order); flip bits in stored
//! data at any time. The disk **may not**: lose, alter or reorder data after an fsync of it
//! returned success (it does not lie about fsync), or return one file's data for another.
//! An fsync that fails is fatal: the process stops and never retries it, because the kernel may
//! already have dropped the unsynced pages ([`WalError::SyncFailed`]).
//!
//! Beyond that model, disks do lie about fsync (volatile caches, firmware bugs) and lose whole
//! files or blocks. The WAL does not survive that, but it *detects* it: the promise record
//! ([`promise`]) says what was acknowledged, and recovery reports a log that lost any of it as
//! damage ([`damage`]) rather than starting on it.
//! [`SimFs`] implements exactly this model.
//!
//! On Linux the segments are written around the page cache (`O_DIRECT`, [`WalConfig::direct_io`],
//! on by default where the file system allows it). Such a write covers whole 4 KiB blocks, so an
//! append also rewrites the synced bytes before it in its first block, with their same values:
//! torn anywhere, every sector of that block still holds them, old or new. That is the exposure
//! buffered writes have too (the kernel writes back the whole page that holds the log's tail),
//! and it changes nothing above.
//!
//! # Write protocol
//!
//! The rules that make recovery's decisions sound:
//!
//! 1. **Append only; unsynced frames only at the end, superseded.** A frame with entries, a term
//!    or a vote is fsynced before anything else is written. A commit-only write is appended
//!    without an fsync. The next frame is appended after it — never over it: an unsynced frame
//!    written over other bytes could survive a crash as a mix of old and new sectors that looks
//!    completely written — and, while unsynced commit-only frames precede it, starts with a
//!    supersede item naming where they begin and states the commit itself (its hard state, or a
//!    commit item). So the unsynced part of a segment is a run of commit-only frames plus at most
//!    one more frame, and whatever a crash leaves of the run, the frame after it makes it moot.
//!    The commit index rides in the same fsync as the entries it covers, and is never written
//!    above the last entry on disk. The first frame of a segment is always synced.
//! 2. **Segments are prepared ahead**: create `*.wal.tmp`, set its length, write the header,
//!    fsync, rename, fsync the directory. Rotation syncs the old segment (its commit-only
//!    frames) before the new one receives its first frame, whose checkpoint records where the
//!    old one ended.
//! 3. **Purge** deletes whole segments, oldest first, fsyncing the directory after each, only
//!    below a durable snapshot: the live segments stay a contiguous run.
//! 4. **Snapshots** become durable (temp file, fsync, rename, directory fsync) before a reset or
//!    a purge refers to them.
//! 5. **Open** clears a torn tail with zeros and fsyncs the last segment before returning: a node
//!    must not act on data that is only in the page cache.
//!
//! # Recovery, case by case
//!
//! 1. *Listing.* Segments sort by number; a number missing between two present ones is
//!    [`WalError::CorruptLog`]. Temporary files are ignored (and deleted on open).
//! 2. *Header* fails magic, checksum, version, number or length: [`WalError::CorruptHeader`].
//! 3. *Frames* are read in order while they verify. The first frame of a segment starts with a
//!    checkpoint that must agree with the log replayed so far and with where the previous
//!    segment ended. A frame that verifies but breaks the log's rules (gap, term going back,
//!    commit beyond the log) is [`WalError::CorruptRecord`]: a writer bug or a forged frame.
//! 4. *The first spot that does not verify* (or the first zero header). The rest of the segment
//!    is searched for non-zero bytes and for a valid frame. Then:
//!    - the next valid frame starts with a supersede item reaching back to or before the spot
//!      (but not past the last frame holding more than a commit): the spot lies in unsynced
//!      commit-only frames that frame made moot (rule 1). It is skipped and reading resumes at
//!      that frame (in any segment; the bytes stay, and every later recovery skips them too);
//!    - in a segment followed by one holding data (sealed, fully synced), anything but zeros:
//!      [`WalError::CorruptRecord`] naming file, offset and the first index at risk;
//!    - any other valid frame after the bad spot: the bad frame was synced before that one was
//!      written (rule 1), so this is damage to acknowledged data — `CorruptRecord` (S36, S38
//!      case 2);
//!    - a completely written last frame — end mark present, no blank sector — whose checksum
//!      fails, or whose checksum verifies but whose end mark is wrong (not merely cut short): a
//!      flipped bit, not a tear — `CorruptRecord` (S38 case 3: a damaged term or vote is never
//!      silently rolled back);
//!    - otherwise the final write never completed, so it was never acknowledged: a **torn
//!      tail**, discarded, reported in [`RecoveryStats::torn_tail`], zeroed on open (S38 case 1).
//!
//!    Segments after the last one holding data are spares or an unfinished first write into a
//!    new segment; open deletes them.
//! 5. *Snapshot.* The newest file whose header and data checksums verify. A corrupt newer one is
//!    passed over and reported ([`RecoveryStats::skipped_snapshots`]); if none verifies while
//!    some exist: [`WalError::CorruptSnapshot`].
//! 6. *Log against snapshot* (S05). A log starting after `snapshot + 1` is
//!    [`WalError::SnapshotBehindLog`] — also when the newest snapshot was skipped and the log had
//!    been purged past the older one. A log ending before the snapshot is fully covered
//!    (`first = last + 1 = snapshot + 1`). A log holding the snapshot's index with another term
//!    is the remains of an interrupted install: dropped. Entries the snapshot covers are not
//!    returned. Open records a reset frame in both cases so disk and memory agree.
//! 7. *Commit* is clamped into `[snapshot index, last index]` (S05, S16, S17).
//! 8. *Promise* ([`promise`], [`damage`]). The state is compared with the promise record: a log
//!    that ends below the promised entry, holds another term at its index, or whose term or vote
//!    is behind the promised ones, lost acknowledged data — [`DamageKind::LostTail`], even where
//!    the bytes after it look like a torn tail (zeros: a disk that reported a flush it did not
//!    do). A promised entry at or below the snapshot is covered by it. Every corruption of steps
//!    1–6 is damage too ([`DamageKind::CorruptLog`], [`DamageKind::CorruptSnapshot`], also for a
//!    corrupt newer snapshot passed over), and so is a promise file neither of whose copies
//!    verifies ([`DamageKind::CorruptPromise`]). With any damage, open changes nothing on disk and
//!    returns [`WalError::Damaged`]: every finding, and the intact prefix (the log up to the first
//!    damage, its term and vote raised to the promised ones). A torn tail above the promise is
//!    discarded as before: it was never acknowledged. Open then sets the promise to what it
//!    recovered (it is all durable now, and the node will act on it); a directory without a
//!    promise file (written before it existed) gets one.
//!
//! **What cannot be told apart**, and which way it falls: damage to the 16-byte header of the
//! very last frame (its magic, sequence number, or a length that moves the trailer), or a
//! flipped bit in a last frame that also lost a whole sector, may look torn: when the promise
//! covers that frame it is damage (step 8), otherwise it is discarded (the frame was never
//! acknowledged); a last frame that was completely written but whose fsync never returned, and
//! then had a bit flipped, is refused although it was never acknowledged. Each needs a crash and a
//! corruption at the same spot. A flipped bit in commit-only frames that a later frame supersedes
//! is skipped even after that frame's fsync made them durable: nothing is lost, the later frame
//! restates the commit. What the promise record cannot show (a lost promise file, both copies
//! rolled back) is listed in [`damage`].

#![deny(missing_docs)]

mod codec;
pub mod conformance;
pub mod damage;
#[cfg(target_os = "linux")]
mod direct_io;
pub mod error;
pub mod fs;
pub mod promise;
pub mod records;
pub mod recover;
pub mod scrub;
pub mod segment;
pub mod simfs;
pub mod snapshot;
mod wal;

pub use codec::membership_payload;
pub use damage::{Damage, DamageKind, DamageReport};
pub use error::WalError;
pub use fs::{FileHandle, Fs, ReadOnlyFs, StdFs};
pub use keel_core::SnapshotMeta;
pub use promise::{Promise, PromiseRead};
pub use recover::{inspect, recover, Inspection, Recovered, RecoveryStats, TornTail};
pub use scrub::{scrub_pass, set_aside_spare_snapshots, ScrubPass, Throttled};
pub use simfs::{Crash, SimFs};
pub use snapshot::{
    bootstrap_meta, create_snapshot_file, snapshot_file_name, LatestSnapshot, SkippedSnapshot,
    SnapshotFile, SnapshotFileWriter,
};
pub use wal::{Wal, WalConfig, ZERO_AHEAD_BYTES};
