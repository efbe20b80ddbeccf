//! Segment files and the frames inside them: encoding, validation and a chunked reader. The
//! layout is drawn byte by byte in the crate documentation (lib.rs, "On-disk format"); the
//! constants here are the single source of truth for it.
//!
//! Segments are preallocated files (128 MiB by default) with a checksummed header. Each batch of
//! `Write`s becomes one CRC32C-framed *frame* of typed items (checkpoint, truncate, entries, hard
//! state, commit, reset, supersede; their encodings in `codec.rs`); a batch over
//! `WalConfig::frame_size_bytes_max` (8 MiB) is split into frames, and an entry larger than that
//! gets a frame of its own (up to `WalConfig::entry_size_bytes_max`, 80 MiB, which every segment
//! must have room for).

use std::io;

use bytes::Bytes;
use keel_core::{Entry, HardState, Index, LogId};

use crate::codec::{
    self, get_u32, get_u64, put_u32, put_u64, put_u8, DecodeError, ReadWal, Reader,
};
use crate::fs::FileHandle;

/// Version of the segment and frame format. Bumped on any layout change; a reader refuses
/// versions it does not know. Version 2 added the supersede item (kind 7).
pub const FORMAT_VERSION: u16 = 2;
/// The oldest version this build reads: version 1 segments are version 2 without supersede items.
pub const FORMAT_VERSION_READ_MIN: u16 = 1;
/// The first 8 bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"KEELWAL\0";
/// Size of a segment's header: the first frame starts at this offset.
pub const SEGMENT_HEADER_SIZE_BYTES: u64 = 64;
/// "KFRM" read as a little-endian u32: the first four bytes of every frame.
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"KFRM");
/// Mixed into the end mark so an all-zero trailer never matches (see [`end_mark`]).
const END_MARK_SALT: u32 = u32::from_le_bytes(*b"KEND");
/// A frame's header: magic (4), body length (4), frame sequence number (8).
pub const FRAME_HEADER_SIZE_BYTES: usize = 16;
/// A frame's trailer: CRC32C (4), then the end mark (4).
pub const FRAME_TRAILER_SIZE_BYTES: usize = 8;
/// Frames start at, and bodies are padded to, multiples of this.
pub const FRAME_ALIGN_BYTES: usize = 8;
/// Size of an item's own header: kind (1), reserved (3), payload length (4).
pub const ITEM_HEADER_SIZE_BYTES: usize = 8;
/// The sector size the torn-write heuristic assumes a disk writes atomically.
pub const SECTOR_SIZE_BYTES: u64 = 512;

/// Item kind of [`Item::Checkpoint`].
pub const ITEM_CHECKPOINT: u8 = 1;
/// Item kind of [`Item::Truncate`].
pub const ITEM_TRUNCATE: u8 = 2;
/// Item kind of [`Item::Entries`].
pub const ITEM_ENTRIES: u8 = 3;
/// Item kind of [`Item::HardState`].
pub const ITEM_HARD_STATE: u8 = 4;
/// Item kind of [`Item::Commit`].
pub const ITEM_COMMIT: u8 = 5;
/// Item kind of [`Item::Reset`].
pub const ITEM_RESET: u8 = 6;
/// Item kind of [`Item::Supersede`] (format version 2).
pub const ITEM_SUPERSEDE: u8 = 7;

const CHECKPOINT_SIZE_BYTES: usize = 8 + codec::HARD_STATE_SIZE_BYTES + 8;
/// Entries item payload before the entries: first index (8) and count (4).
pub const ENTRIES_PREFIX_SIZE_BYTES: usize = 12;

/// File name of segment `seq`. Zero-padded so names sort like numbers.
pub fn segment_file_name(seq: u64) -> String {
    format!("{seq:020}.wal")
}

/// Name used while a segment is being prepared; renamed once its header is durable.
pub fn segment_temp_name(seq: u64) -> String {
    format!("{seq:020}.wal.tmp")
}

/// The sequence number a segment's file name carries: `Some` only for exactly 20 digits then `.wal`
/// (temporary and other files are `None`).
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The 64-byte header of segment `seq`, preallocated to `segment_size_bytes`, in the current
/// [`FORMAT_VERSION`].
pub fn encode_segment_header(seq: u64, segment_size_bytes: u64) -> Vec<u8> {
    let mut buf = Vec::with_capacity(SEGMENT_HEADER_SIZE_BYTES as usize);
    buf.extend_from_slice(&SEGMENT_MAGIC);
    buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    buf.extend_from_slice(&(SEGMENT_HEADER_SIZE_BYTES as u16).to_le_bytes());
    put_u32(&mut buf, 0);
    put_u64(&mut buf, seq);
    put_u64(&mut buf, segment_size_bytes);
    buf.resize(60, 0);
    let crc = crc32c::crc32c(&buf);
    put_u32(&mut buf, crc);
    debug_assert_eq!(buf.len() as u64, SEGMENT_HEADER_SIZE_BYTES);
    buf
}

/// Validates a segment header; returns the segment size it was created with.
pub fn parse_segment_header(bytes: &[u8], expected_seq: u64) -> Result<u64, DecodeError> {
    if bytes.len() < SEGMENT_HEADER_SIZE_BYTES as usize {
        return Err(format!("header is {} bytes, expected 64", bytes.len()));
    }
    if bytes[..8] != SEGMENT_MAGIC {
        return Err("bad magic".into());
    }
    if crc32c::crc32c(&bytes[..60]) != get_u32(bytes, 60) {
        return Err("header checksum mismatch".into());
    }
    let version = codec::get_u16(bytes, 8);
    if !(FORMAT_VERSION_READ_MIN..=FORMAT_VERSION).contains(&version) {
        return Err(format!(
            "format version {version}, this build reads {FORMAT_VERSION_READ_MIN} to \
             {FORMAT_VERSION}"
        ));
    }
    let seq = get_u64(bytes, 16);
    if seq != expected_seq {
        return Err(format!(
            "header names segment {seq}, file name {expected_seq}"
        ));
    }
    Ok(get_u64(bytes, 24))
}

/// Total on-disk size of a frame with a body of `body_len` bytes.
pub fn frame_size_bytes(body_len: usize) -> usize {
    FRAME_HEADER_SIZE_BYTES
        + body_len.next_multiple_of(FRAME_ALIGN_BYTES)
        + FRAME_TRAILER_SIZE_BYTES
}

/// The end mark: the low 32 bits of the frame's sequence number, salted. A frame torn before its
/// last bytes lacks it; an older frame at the same offset carries a different sequence number.
pub fn end_mark(frame_seq: u64) -> u32 {
    (frame_seq as u32) ^ END_MARK_SALT
}

/// Builds one frame in a reusable buffer: header, items, padding, trailer.
pub struct FrameBuilder<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> FrameBuilder<'a> {
    /// Starts frame number `frame_seq` at the end of `buf`, whose length must be a multiple of
    /// [`FRAME_ALIGN_BYTES`]. Items are then added in the order the format requires (the builder
    /// does not check it), and [`FrameBuilder::finish`] seals the frame.
    pub fn begin(buf: &'a mut Vec<u8>, frame_seq: u64) -> Self {
        let start = buf.len();
        assert_eq!(start % FRAME_ALIGN_BYTES, 0, "frames start aligned");
        put_u32(buf, FRAME_MAGIC);
        put_u32(buf, 0); // body length, patched in finish()
        put_u64(buf, frame_seq);
        FrameBuilder { buf, start }
    }

    fn item(&mut self, kind: u8, payload_len: usize) {
        put_u8(self.buf, kind);
        self.buf.extend_from_slice(&[0; 3]);
        put_u32(
            self.buf,
            u32::try_from(payload_len).expect("item fits a frame"),
        );
    }

    /// Adds [`Item::Checkpoint`]: the first item of a segment's first frame, and only there.
    pub fn checkpoint(&mut self, first_index: Index, hs: &HardState, prev_segment_end: u64) {
        self.item(ITEM_CHECKPOINT, CHECKPOINT_SIZE_BYTES);
        put_u64(self.buf, first_index);
        codec::put_hard_state(self.buf, hs);
        put_u64(self.buf, prev_segment_end);
    }

    /// Adds [`Item::Truncate`].
    pub fn truncate(&mut self, from_index: Index) {
        self.item(ITEM_TRUNCATE, 8);
        put_u64(self.buf, from_index);
    }

    /// Adds [`Item::Entries`].
    ///
    /// # Panics
    ///
    /// If `entries` is empty or its indexes are not contiguous.
    pub fn entries(&mut self, entries: &[&Entry]) {
        assert!(!entries.is_empty(), "empty entries item");
        let size: usize = entries.iter().map(|e| codec::entry_size_bytes(e)).sum();
        self.item(ITEM_ENTRIES, ENTRIES_PREFIX_SIZE_BYTES + size);
        put_u64(self.buf, entries[0].index);
        put_u32(self.buf, u32::try_from(entries.len()).expect("entry count"));
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.index, entries[0].index + i as u64, "entries contiguous");
            codec::put_entry(self.buf, e);
        }
    }

    /// Adds [`Item::HardState`].
    pub fn hard_state(&mut self, hs: &HardState) {
        self.item(ITEM_HARD_STATE, codec::HARD_STATE_SIZE_BYTES);
        codec::put_hard_state(self.buf, hs);
    }

    /// Adds [`Item::Commit`].
    pub fn commit(&mut self, commit: Index) {
        self.item(ITEM_COMMIT, 8);
        put_u64(self.buf, commit);
    }

    /// Declares that every frame from offset `from` up to this one was an unsynced commit-only
    /// frame whose effect this frame restates (see [`Item::Supersede`]).
    pub fn supersede(&mut self, from: u64) {
        self.item(ITEM_SUPERSEDE, 8);
        put_u64(self.buf, from);
    }

    /// Adds [`Item::Reset`]: index, then term, on disk.
    pub fn reset(&mut self, snapshot: LogId) {
        self.item(ITEM_RESET, 16);
        put_u64(self.buf, snapshot.index);
        put_u64(self.buf, snapshot.term);
    }

    /// Pads, checksums and seals the frame; returns its total size.
    pub fn finish(self, frame_seq: u64) -> usize {
        let body_len = self.buf.len() - self.start - FRAME_HEADER_SIZE_BYTES;
        self.buf[self.start + 4..self.start + 8].copy_from_slice(
            &u32::try_from(body_len)
                .expect("body fits u32")
                .to_le_bytes(),
        );
        let padded = self.start + FRAME_HEADER_SIZE_BYTES + body_len.next_multiple_of(8);
        self.buf.resize(padded, 0);
        // The padding is covered too: every byte of a frame is checked.
        let crc = crc32c::crc32c(&self.buf[self.start..]);
        put_u32(self.buf, crc);
        put_u32(self.buf, end_mark(frame_seq));
        let size = self.buf.len() - self.start;
        debug_assert_eq!(size, frame_size_bytes(body_len));
        size
    }
}

/// One decoded item of a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// First item of every segment: the state of the log when the segment was started, so older
    /// segments can be deleted without losing it.
    Checkpoint {
        /// The index the segment's first entry has or would have: the log's last index + 1 when the
        /// segment was started.
        first_index: Index,
        /// The synced hard state (term, vote, commit) when the segment was started.
        hard_state: HardState,
        /// Byte offset where the previous segment's last frame ends (0 for segment 1): recovery
        /// refuses the log when the previous segment's valid frames end elsewhere.
        prev_segment_end: u64,
    },
    /// Drop every entry at or after `from_index`.
    Truncate {
        /// The first index dropped.
        from_index: Index,
    },
    /// Append these entries (contiguous, starting right after the last one).
    Entries(Vec<Entry>),
    /// The hard state after this frame: term, vote (0 on disk for none) and commit.
    HardState(HardState),
    /// A commit-only change (written without an fsync).
    Commit(Index),
    /// Drop the whole log; it continues after the snapshot position.
    Reset(LogId),
    /// The frames from file offset `from` up to this frame were unsynced commit-only frames, and
    /// this frame sets the commit index itself: if their bytes are damaged (a crash tore them
    /// while this frame reached the disk), recovery may skip them. Always the first item.
    Supersede {
        /// Byte offset, in this frame's segment, where the first superseded frame starts.
        from: u64,
    },
}

/// The fields of a frame header, read without trusting them.
#[derive(Clone, Copy, Debug)]
pub struct FrameHeader {
    /// Whether the first 4 bytes are [`FRAME_MAGIC`].
    pub magic_ok: bool,
    /// The body length in bytes as written (unpadded), not yet checked against any bound.
    pub body_len: usize,
    /// The frame sequence number as written.
    pub seq: u64,
}

/// Reads the fields of the frame header at the start of `bytes` (at least
/// [`FRAME_HEADER_SIZE_BYTES`] long), without checking any of them.
pub fn read_frame_header(bytes: &[u8]) -> FrameHeader {
    FrameHeader {
        magic_ok: get_u32(bytes, 0) == FRAME_MAGIC,
        body_len: get_u32(bytes, 4) as usize,
        seq: get_u64(bytes, 8),
    }
}

/// What a complete frame's bytes say about themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameCheck {
    /// The checksum verifies and the end mark is the one this frame's sequence number gives.
    Valid,
    /// The frame was written to its end but does not verify: the checksum fails under the right
    /// end mark, or verifies under a wrong one (not merely cut short), and no sector inside it is
    /// blank. A bit flip, not a torn write.
    CompleteButCorrupt,
    /// The frame was not completely written.
    Torn,
}

/// Checks the frame occupying `frame` (its full size per the header), which starts at file
/// offset `file_offset`.
pub fn check_frame(frame: &[u8], header: &FrameHeader, file_offset: u64) -> FrameCheck {
    let trailer = frame.len() - FRAME_TRAILER_SIZE_BYTES;
    let crc_ok = crc32c::crc32c(&frame[..trailer]) == get_u32(frame, trailer);
    let mark = get_u32(frame, trailer + 4);
    let mark_ok = mark == end_mark(header.seq);
    if crc_ok && mark_ok {
        return FrameCheck::Valid;
    }
    // Torn inside the end mark: the checksum was written whole, the mark only in part (the rest
    // is still zero). The write never completed.
    if crc_ok && is_partial_mark(mark, end_mark(header.seq)) {
        return FrameCheck::Torn;
    }
    // No end mark: the write stopped before its last bytes (even if, torn right before the
    // mark, the checksum happens to verify). Both wrong: an older frame's bytes show through.
    if mark == 0 || (!crc_ok && !mark_ok) {
        return FrameCheck::Torn;
    }
    // Writeback may persist the sectors of one write out of order; a blank sector inside the
    // frame means part of it never reached the disk (the heuristic etcd's WAL uses too).
    let frame_end = file_offset + frame.len() as u64;
    let mut sector = file_offset.next_multiple_of(SECTOR_SIZE_BYTES);
    while sector + SECTOR_SIZE_BYTES <= frame_end {
        let at = (sector - file_offset) as usize;
        if frame[at..at + SECTOR_SIZE_BYTES as usize]
            .iter()
            .all(|b| *b == 0)
        {
            return FrameCheck::Torn;
        }
        sector += SECTOR_SIZE_BYTES;
    }
    FrameCheck::CompleteButCorrupt
}

/// Whether `found` is the first 0 to 3 bytes of `expected` (little-endian, as written) followed
/// by zeros: an end mark whose write was cut short.
fn is_partial_mark(found: u32, expected: u32) -> bool {
    let (found, expected) = (found.to_le_bytes(), expected.to_le_bytes());
    (0..4).any(|k| found[..k] == expected[..k] && found[k..].iter().all(|b| *b == 0))
}

/// Decodes the items of a valid frame. `frame` holds the whole frame.
pub fn decode_items(frame: &Bytes, body_len: usize) -> Result<Vec<Item>, DecodeError> {
    let mut r = Reader::range(
        frame.clone(),
        FRAME_HEADER_SIZE_BYTES,
        FRAME_HEADER_SIZE_BYTES + body_len,
    );
    let mut items = Vec::new();
    while r.remaining() > 0 {
        let kind = r.u8("item kind")?;
        r.skip(3, "item reserved")?;
        let len = r.u32("item length")? as usize;
        if len > r.remaining() {
            return Err(format!("item of kind {kind} longer than its frame"));
        }
        let end = r.position() + len;
        let mut p = Reader::range(frame.clone(), r.position(), end);
        let item = match kind {
            ITEM_CHECKPOINT => Item::Checkpoint {
                first_index: p.u64("checkpoint first index")?,
                hard_state: p.hard_state()?,
                prev_segment_end: p.u64("checkpoint previous segment end")?,
            },
            ITEM_TRUNCATE => Item::Truncate {
                from_index: p.u64("truncate index")?,
            },
            ITEM_ENTRIES => {
                let first = p.u64("entries first index")?;
                let count = p.count(codec::ENTRY_HEADER_SIZE_BYTES, "entry count")?;
                let mut entries = Vec::with_capacity(count);
                for i in 0..count as u64 {
                    // Indexes near u64::MAX only come from a damaged or forged frame: refused
                    // like any other bad item rather than overflowing.
                    let index = first.checked_add(i).ok_or("entry index beyond u64::MAX")?;
                    entries.push(p.entry(index)?);
                }
                if count == 0 {
                    return Err("empty entries item".into());
                }
                Item::Entries(entries)
            }
            ITEM_HARD_STATE => Item::HardState(p.hard_state()?),
            ITEM_COMMIT => Item::Commit(p.u64("commit")?),
            ITEM_RESET => {
                let index = p.u64("reset index")?;
                Item::Reset(LogId::new(p.u64("reset term")?, index))
            }
            ITEM_SUPERSEDE => Item::Supersede {
                from: p.u64("supersede offset")?,
            },
            _ => return Err(format!("unknown item kind {kind}")),
        };
        if p.remaining() != 0 {
            return Err(format!(
                "item of kind {kind} has {} trailing bytes",
                p.remaining()
            ));
        }
        r.skip(len, "item payload")?;
        items.push(item);
    }
    Ok(items)
}

/// Reads a segment through large chunks so recovery makes a few big reads instead of two small
/// ones per frame. Returned slices share the chunk buffer (zero-copy entry payloads).
pub struct SegmentReader<'f, H: FileHandle> {
    file: &'f H,
    len_bytes: u64,
    chunk: Bytes,
    chunk_offset: u64,
    chunk_size_bytes: usize,
    /// Bytes read from the file so far (whole chunks, however little of them a window used).
    pub bytes_read: u64,
}

impl<'f, H: FileHandle> SegmentReader<'f, H> {
    /// A reader of `file`, whose length is `len_bytes`, reading at least `chunk_size_bytes` at a
    /// time (less only at the end of the file).
    pub fn new(file: &'f H, len_bytes: u64, chunk_size_bytes: usize) -> Self {
        SegmentReader {
            file,
            len_bytes,
            chunk: Bytes::new(),
            chunk_offset: 0,
            chunk_size_bytes,
            bytes_read: 0,
        }
    }

    /// The file length the reader was created with: no window reaches past it.
    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// The file's [`FileHandle::next_data`]: where data may resume at or after `offset`.
    pub fn next_data(&self, offset: u64) -> io::Result<Option<u64>> {
        self.file.next_data(offset)
    }

    /// The bytes `[offset, offset + len)`; the caller guarantees they lie inside the file.
    pub fn window(&mut self, offset: u64, len: usize) -> io::Result<Bytes> {
        assert!(
            offset + len as u64 <= self.len_bytes,
            "window past the end of the segment"
        );
        let in_chunk = offset >= self.chunk_offset
            && offset + len as u64 <= self.chunk_offset + self.chunk.len() as u64;
        if !in_chunk {
            let want = len
                .max(self.chunk_size_bytes)
                .min((self.len_bytes - offset) as usize);
            let buf = self.file.read_vec_at(offset, want)?;
            let n = buf.len();
            if n < want {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment shorter than its length",
                ));
            }
            self.bytes_read += n as u64;
            self.chunk = Bytes::from(buf);
            self.chunk_offset = offset;
        }
        let at = (offset - self.chunk_offset) as usize;
        Ok(self.chunk.slice(at..at + len))
    }
}
