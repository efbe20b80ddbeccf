//! The spare segment is overwritten with zeros (blocks allocated, then synced) while the active
//! segment fills its second half, so fdatasyncs in it later flush data only. Checked on the real
//! file system by the blocks the spare occupies; the crash suite (`crash.rs`) checks that a crash
//! anywhere in the zero-fill changes nothing recovery sees.

mod common;

use std::os::unix::fs::MetadataExt;

use bytes::Bytes;
use common::{new_cluster, TempDir};
use keel_core::{Entry, EntryPayload, HardState, Write};
use keel_wal::segment::segment_file_name;
use keel_wal::{StdFs, WalConfig};

const SEGMENT_BYTES: u64 = 1 << 20;

/// Writes 1 KiB entries one batch at a time until the active segment is past its middle and a
/// few more batches ran; returns the bytes the spare (segment 2) occupies on disk.
fn spare_bytes_allocated(zero_fill_segments: bool) -> u64 {
    let dir = TempDir::new("zero-fill");
    let config = WalConfig {
        segment_size_bytes: SEGMENT_BYTES,
        frame_size_bytes_max: 64 << 10,
        zero_fill_segments,
        ..WalConfig::default()
    };
    let mut wal = new_cluster(StdFs, dir.path().to_owned(), config);
    let payload = Bytes::from(vec![7u8; 1024]);
    // ~600 KiB puts the active segment past its middle; 8 more batches finish the zero-fill.
    for index in 1..=608u64 {
        let write = Write {
            id: index,
            install: None,
            entries: vec![Entry {
                term: 1,
                index,
                payload: EntryPayload::Normal(payload.clone()),
            }],
            hard_state: Some(HardState {
                term: 1,
                vote: None,
                commit: index,
            }),
            purge_to: None,
            sync: true,
        };
        wal.write_batch(&[write]).expect("write");
    }
    let spare = dir.path().join(segment_file_name(2));
    let meta = std::fs::metadata(&spare).expect("the spare exists by now");
    assert_eq!(meta.len(), SEGMENT_BYTES, "preallocated to its full length");
    meta.blocks() * 512
}

#[test]
fn the_spare_segment_is_allocated_before_it_becomes_active() {
    let zeroed = spare_bytes_allocated(true);
    assert!(
        zeroed >= SEGMENT_BYTES,
        "zero-filled spare occupies only {zeroed} bytes"
    );
    // The switch off: the spare stays sparse (its header block only).
    let sparse = spare_bytes_allocated(false);
    assert!(
        sparse < SEGMENT_BYTES / 4,
        "sparse spare occupies {sparse} bytes"
    );
}
