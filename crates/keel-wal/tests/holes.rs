//! Recovery on real files skips a segment's holes (its unwritten, preallocated tail) instead of
//! reading them, and still sees every byte of data beyond them: a valid frame after a hole still
//! proves the damaged frame before it was acknowledged. (Needs a file system that reports holes,
//! as ext4, xfs, btrfs and tmpfs do; the test checks that this one did.) Checked to fail when the
//! scan skips data: the damaged frame then passes for a torn tail and is cut off.

mod common;

use std::path::Path;

use common::{frames, new_cluster, segment, sim_dir, small_config, TempDir};
use keel_wal::conformance::{entries, hard_state, write};
use keel_wal::{recover, DamageKind, FileHandle, Fs, SimFs, StdFs, Wal, WalConfig, WalError};

const SEGMENT_BYTES: u64 = 16 << 20;
/// Where the third frame is moved to: past a hole of several read chunks (4 MiB each).
const FAR_OFFSET: u64 = 12 << 20;

fn config() -> WalConfig {
    WalConfig {
        segment_size_bytes: SEGMENT_BYTES,
        direct_io: false,
        ..small_config()
    }
}

#[test]
fn a_valid_frame_past_a_hole_still_proves_the_damage_before_it() {
    // Three synced frames (entries 1..=3, 4..=6, 7..=9) on the simulated disk.
    let sim = SimFs::new();
    let mut wal = new_cluster(sim.clone(), sim_dir(), config());
    for (i, first) in [(1u64, 1u64), (2, 4), (3, 7)] {
        let commit = first - 1;
        wal.write_batch(&[write(
            i,
            entries(1, first, first + 2),
            Some(hard_state(1, Some(1), commit)),
        )])
        .unwrap();
    }
    drop(wal);

    // The same files on a real disk, with the second frame damaged and the third moved far
    // past a hole.
    let dir = TempDir::new("holes");
    for path in sim.paths() {
        let bytes = sim.read_file(&path).expect("a listed file");
        let real = dir
            .path()
            .join(path.strip_prefix(sim_dir()).expect("under the WAL dir"));
        // Without the promise record (as a directory written before it existed), only the frame
        // past the hole tells the damaged frame from a torn final write.
        if path.ends_with("promise") {
            continue;
        }
        if path != segment(1) {
            std::fs::write(&real, bytes).unwrap();
            continue;
        }
        let all = frames(&bytes);
        let (second, second_size) = all[2];
        let (third, third_size) = all[3];
        let mut file = StdFs.create(&real).unwrap();
        file.set_len(SEGMENT_BYTES).unwrap();
        let mut head = bytes[..third as usize].to_vec();
        // The second frame loses its end mark: alone, it would look like a torn final write.
        let end_mark = second as usize + second_size - 4;
        head[end_mark..end_mark + 4].fill(0);
        file.write_at(&head, 0).unwrap();
        file.write_at(
            &bytes[third as usize..third as usize + third_size],
            FAR_OFFSET,
        )
        .unwrap();
        file.sync_data().unwrap();
        // The file system reports the hole: what is skipped is never read.
        assert_eq!(
            file.next_data(4 << 20).unwrap(),
            Some(FAR_OFFSET - FAR_OFFSET % 4096)
        );
        check_refused(dir.path(), second);
    }
}

/// Opening refuses the directory, naming the damaged frame of segment 1 and the entries intact
/// before it (1..=3).
fn check_refused(dir: &Path, damaged_at: u64) {
    for result in [
        Wal::open(StdFs, dir.to_path_buf(), config()).map(|_| ()),
        recover(&StdFs, dir).map(|_| ()),
    ] {
        match result {
            Err(WalError::Damaged(report)) => {
                let d = &report.damage[0];
                assert_eq!(d.kind, DamageKind::CorruptLog, "{d}");
                assert_eq!((d.offset, d.intact_through), (Some(damaged_at), 3), "{d}");
            }
            other => panic!("expected the damage to be reported, got {other:?}"),
        }
    }
}
