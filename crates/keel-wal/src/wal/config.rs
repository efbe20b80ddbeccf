//! Tunables of the WAL, with their bounds. Defaults: segments of 128 MiB, frames of at most
//! 8 MiB, entries of at most 80 MiB, two snapshots kept besides the bootstrap one, direct I/O and
//! zero-ahead on, one promise write every 16 synced batches. With the `mutations` feature (the
//! simulator's), `WalConfig::mutation` switches on `trust-damaged-tail` in recovery's judgment.

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
    /// Largest frame the writer fills with a batch of entries; a batch that would exceed it is
    /// split into several frames, each synced. An entry larger than that travels in a frame of
    /// its own, as large as the entry needs (up to [`WalConfig::entry_size_bytes_max`]).
    pub frame_size_bytes_max: usize,
    /// Largest entry the log stores, encoded (its 13-byte header included): the bound on what
    /// a caller may propose ([`WalConfig::entry_payload_bytes_max`]). Every segment must hold
    /// one frame carrying such an entry.
    pub entry_size_bytes_max: usize,
    /// Snapshot files kept (the newest ones), besides the bootstrap snapshot at 0/0, which is
    /// never deleted: the initial configuration lives nowhere else.
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
    /// The promise record (`promise.rs`) is written to ride on the log's fsync once per this many
    /// synced batches, and the durable promise trails the acknowledged log by at most that many
    /// group commits (every write is one more 4 KiB I/O beside the log's). At least 1.
    pub promise_write_every_batches: u32,
    /// Test-only: a deliberately broken recovery (see `keel_core::Mutation`), for the simulator.
    #[cfg(feature = "mutations")]
    pub mutation: Option<keel_core::Mutation>,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            // Holds one frame with the largest entry, and then some.
            segment_size_bytes: 128 << 20,
            frame_size_bytes_max: 8 << 20,
            // The largest value a client may send (64 MiB) with its key and encoding, and room
            // to spare (see keel-server's request limits).
            entry_size_bytes_max: 80 << 20,
            snapshots_kept: 2,
            snapshot_size_bytes_max: 16 << 30,
            zero_fill_segments: true,
            direct_io: true,
            promise_write_every_batches: 16,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }
}

impl WalConfig {
    /// Checks each bound and that they fit together: `promise_write_every_batches` and
    /// `snapshots_kept` at least 1, `frame_size_bytes_max` in 4 KiB ..= 256 MiB, an
    /// `entry_size_bytes_max` that leaves room for a payload and whose frame is at most 256 MiB,
    /// and a `segment_size_bytes`, a multiple of 8, that holds the segment header and the largest
    /// frame. A refusal is [`WalError::InvalidRequest`] naming the field; [`Wal::open`] calls
    /// this first.
    ///
    /// [`Wal::open`]: crate::Wal::open
    pub fn validate(&self) -> Result<()> {
        let fail = |why: &str| Err(WalError::InvalidRequest(format!("config: {why}")));
        if self.promise_write_every_batches == 0 {
            return fail("promise_write_every_batches must be at least 1");
        }
        if self.frame_size_bytes_max < 4096 || self.frame_size_bytes_max > FRAME_SIZE_BYTES_LIMIT {
            return fail("frame_size_bytes_max must be in 4 KiB ..= 256 MiB");
        }
        if self.entry_size_bytes_max <= crate::codec::ENTRY_HEADER_SIZE_BYTES
            || self.single_entry_frame_size_bytes() > FRAME_SIZE_BYTES_LIMIT
        {
            return fail(&format!(
                "entry_size_bytes_max {} must leave room for a payload, and a frame carrying such \
                 an entry must be at most {FRAME_SIZE_BYTES_LIMIT} bytes",
                self.entry_size_bytes_max
            ));
        }
        let largest_frame = self
            .frame_size_bytes_max
            .max(self.single_entry_frame_size_bytes());
        if self.segment_size_bytes < SEGMENT_HEADER_SIZE_BYTES + largest_frame as u64 {
            return fail(&format!(
                "a segment ({} bytes) must hold its header and one largest frame ({largest_frame} \
                 bytes: frame_size_bytes_max {}, or one entry of entry_size_bytes_max {})",
                self.segment_size_bytes, self.frame_size_bytes_max, self.entry_size_bytes_max
            ));
        }
        if self.segment_size_bytes % 8 != 0 {
            return fail("segment_size_bytes must be a multiple of 8");
        }
        if self.snapshots_kept == 0 {
            return fail("snapshots_kept must be at least 1");
        }
        Ok(())
    }

    /// Whether the deliberately broken variant `m` is switched on (never without the `mutations`
    /// feature).
    pub(crate) fn mutated(&self, _m: keel_core::Mutation) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.mutation == Some(_m)
        }
        #[cfg(not(feature = "mutations"))]
        {
            false
        }
    }

    /// The largest entry payload (a normal entry's data) the WAL stores. Callers refuse larger
    /// proposals before they reach the log, where they could only stop the node.
    pub fn entry_payload_bytes_max(&self) -> usize {
        self.entry_size_bytes_max - crate::codec::ENTRY_HEADER_SIZE_BYTES
    }

    /// Bytes of entries one frame of a batch carries (a single larger entry gets a frame of its
    /// own).
    pub(super) fn entry_bytes_per_frame(&self) -> usize {
        self.frame_size_bytes_max - FRAME_OVERHEAD_BYTES
    }

    /// The frame that carries one entry of `entry_size_bytes_max`, with the small items.
    fn single_entry_frame_size_bytes(&self) -> usize {
        (self.entry_size_bytes_max + FRAME_OVERHEAD_BYTES).next_multiple_of(8)
    }
}

/// What a frame holds besides its entries: header, trailer, the small items, the entries item's
/// header and prefix.
const FRAME_OVERHEAD_BYTES: usize = FRAME_HEADER_SIZE_BYTES
    + FRAME_TRAILER_SIZE_BYTES
    + SMALL_ITEMS_SIZE_BYTES
    + ITEM_HEADER_SIZE_BYTES
    + ENTRIES_PREFIX_SIZE_BYTES;

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(config: WalConfig) -> String {
        match config.validate() {
            Err(WalError::InvalidRequest(why)) => why,
            other => panic!("{config:?} answered {other:?}"),
        }
    }

    #[test]
    fn defaults_hold_the_largest_client_value_and_contradictions_are_named() {
        let default = WalConfig::default();
        default.validate().unwrap();
        assert!(default.entry_payload_bytes_max() > (64 << 20) + (1 << 20));
        let why = refusal(WalConfig {
            segment_size_bytes: 64 << 20,
            ..WalConfig::default()
        });
        assert!(
            why.contains("segment") && why.contains("entry_size_bytes_max"),
            "{why}"
        );
        let why = refusal(WalConfig {
            entry_size_bytes_max: FRAME_SIZE_BYTES_LIMIT,
            ..WalConfig::default()
        });
        assert!(why.contains("entry_size_bytes_max"), "{why}");
        let why = refusal(WalConfig {
            entry_size_bytes_max: 13,
            ..WalConfig::default()
        });
        assert!(why.contains("entry_size_bytes_max"), "{why}");
    }
}
