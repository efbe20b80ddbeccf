//! Tunables of the WAL, with their bounds.

use crate::error::{Result, WalError};
use crate::recover::FRAME_SIZE_BYTES_LIMIT;
use crate::segment::{
    ENTRIES_PREFIX_SIZE_BYTES, FRAME_HEADER_SIZE_BYTES, FRAME_TRAILER_SIZE_BYTES,
    ITEM_HEADER_SIZE_BYTES, SEGMENT_HEADER_SIZE_BYTES,
};

/// Room kept in every frame for the small items (checkpoint, reset, truncate, hard state, commit)
/// beside the entries.
const SMALL_ITEMS_SIZE_BYTES: usize = 256;

/// Tunables. Sizes are bounds, checked by [`WalConfig::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalConfig {
    /// Size every segment file is preallocated to.
    pub segment_size_bytes: u64,
    /// Largest frame the writer produces; a batch that would exceed it is split into several
    /// frames, each synced. A single entry must fit in one frame.
    pub frame_size_bytes_max: usize,
    /// Snapshot files kept (the newest ones).
    pub snapshots_kept: usize,
    /// Largest snapshot [`crate::Wal::read_snapshot_data`] loads into memory.
    pub snapshot_size_bytes_max: u64,
    /// Overwrite the active segment with zeros ahead of the log's end, [`ZERO_AHEAD_BYTES`] at a
    /// time, in the same write as the frame that reaches past the zeros so far. Segments are
    /// preallocated sparse; without this every fdatasync of a frame that enters a new block
    /// also makes that block's allocation durable (on ext4 about twice the CPU per fdatasync,
    /// and more I/O). Costs one extra write of every segment's bytes, in large pieces.
    ///
    /// [`ZERO_AHEAD_BYTES`]: crate::ZERO_AHEAD_BYTES
    pub zero_fill_segments: bool,
    /// Write segments around the page cache (`O_DIRECT`, Linux; see `direct_io.rs`) where the
    /// file system allows it. Same bytes, same durability, less CPU per group commit.
    pub direct_io: bool,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            segment_size_bytes: 64 << 20,
            frame_size_bytes_max: 8 << 20,
            snapshots_kept: 2,
            snapshot_size_bytes_max: 16 << 30,
            zero_fill_segments: true,
            direct_io: true,
        }
    }
}

impl WalConfig {
    pub fn validate(&self) -> Result<()> {
        let fail = |why: &str| Err(WalError::InvalidRequest(format!("config: {why}")));
        if self.frame_size_bytes_max < 4096 || self.frame_size_bytes_max > FRAME_SIZE_BYTES_LIMIT {
            return fail("frame_size_bytes_max must be in 4 KiB ..= 64 MiB");
        }
        if self.segment_size_bytes < SEGMENT_HEADER_SIZE_BYTES + self.frame_size_bytes_max as u64 {
            return fail("a segment must hold its header and one largest frame");
        }
        if self.segment_size_bytes % 8 != 0 {
            return fail("segment_size_bytes must be a multiple of 8");
        }
        if self.snapshots_kept == 0 {
            return fail("snapshots_kept must be at least 1");
        }
        Ok(())
    }

    /// The largest entry payload (a normal entry's data) the WAL stores: an entry must fit in
    /// one frame. Callers refuse larger proposals before they reach the log, where they could
    /// only stop the node.
    pub fn entry_payload_bytes_max(&self) -> usize {
        self.entry_bytes_per_frame() - crate::codec::ENTRY_HEADER_SIZE_BYTES
    }

    /// Bytes of entries one frame can carry.
    pub(super) fn entry_bytes_per_frame(&self) -> usize {
        self.frame_size_bytes_max
            - FRAME_HEADER_SIZE_BYTES
            - FRAME_TRAILER_SIZE_BYTES
            - SMALL_ITEMS_SIZE_BYTES
            - ITEM_HEADER_SIZE_BYTES
            - ENTRIES_PREFIX_SIZE_BYTES
    }
}
