//! The active segment is overwritten with zeros ahead of the log's end, in the same write as the
//! frame that reaches past the zeros so far, so the fdatasyncs of the frames written there find
//! their blocks allocated. Checked on the real file system by the blocks the segment occupies;
//! the crash suite (`crash.rs`, on the simulated disk) checks that crashes in the middle of such
//! writes change nothing recovery sees.

mod common;

use std::os::unix::fs::MetadataExt;

use bytes::Bytes;
use common::{new_cluster, TempDir};
use keel_core::{Entry, EntryPayload};
use keel_wal::conformance::{self, hard_state};
use keel_wal::segment::segment_file_name;
use keel_wal::{StdFs, WalConfig, ZERO_AHEAD_BYTES};

const SEGMENT_BYTES: u64 = 1 << 20;
const ENTRY_BYTES: usize = 1024;

/// Writes `batches` batches of one 1 KiB entry each into a new WAL; returns the bytes the first
/// segment occupies on disk.
fn first_segment_bytes_allocated(zero_fill_segments: bool, batches: u64) -> u64 {
    let dir = TempDir::new("zero-ahead");
    let config = WalConfig {
        segment_size_bytes: SEGMENT_BYTES,
        frame_size_bytes_max: 64 << 10,
        entry_size_bytes_max: 64 << 10,
        zero_fill_segments,
        ..WalConfig::default()
    };
    let mut wal = new_cluster(StdFs, dir.path().to_owned(), config);
    let payload = Bytes::from(vec![7u8; ENTRY_BYTES]);
    for index in 1..=batches {
        let entry = Entry {
            term: 1,
            index,
            payload: EntryPayload::Normal(payload.clone()),
        };
        let write = conformance::write(index, vec![entry], Some(hard_state(1, None, index)));
        wal.write_batch(&[write]).expect("write");
    }
    let first = dir.path().join(segment_file_name(1));
    let meta = std::fs::metadata(&first).expect("the first segment");
    assert_eq!(meta.len(), SEGMENT_BYTES, "preallocated to its full length");
    meta.blocks() * 512
}

#[test]
fn blocks_ahead_of_the_log_end_are_allocated_before_frames_reach_them() {
    // 100 frames of a little over 1 KiB: the log ends past 100 KiB, and the first frame's write
    // zeroed the segment to just past 256 KiB.
    let log_bytes = 100 * ENTRY_BYTES as u64;
    let zeroed = first_segment_bytes_allocated(true, 100);
    assert!(
        zeroed >= log_bytes + ZERO_AHEAD_BYTES / 2,
        "with zeros ahead the segment occupies only {zeroed} bytes"
    );
    // 300 frames went past that: the frame that did wrote the next 256 KiB.
    let zeroed = first_segment_bytes_allocated(true, 300);
    assert!(
        zeroed >= 2 * ZERO_AHEAD_BYTES,
        "after 300 frames the segment occupies only {zeroed} bytes"
    );
    // Never past the segment's end, however close the log gets to it.
    let nearly_full = first_segment_bytes_allocated(true, 900);
    assert!(
        nearly_full <= SEGMENT_BYTES,
        "a segment of {SEGMENT_BYTES} bytes occupies {nearly_full}"
    );
    // The switch off: only what the frames themselves wrote is allocated.
    let sparse = first_segment_bytes_allocated(false, 100);
    assert!(
        sparse < log_bytes + ZERO_AHEAD_BYTES / 2,
        "sparse segment occupies {sparse} bytes"
    );
}
