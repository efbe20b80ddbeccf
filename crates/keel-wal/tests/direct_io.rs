//! Direct (`O_DIRECT`) writes of `StdFs` files change how bytes reach the disk, never which
//! bytes: every write, at any offset and length, reads back exactly as a buffered one would, the
//! file's length never changes, and a second handle sees the same bytes. The WAL's conformance
//! suite on the real file system runs with direct writes too (its default), and once without.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};

use keel_wal::fs::{FileHandle, Fs, StdFile};
use keel_wal::StdFs;

/// A file length that is not a multiple of the 4 KiB block, so writes into its last block take
/// the buffered path and the two paths interleave.
const FILE_BYTES: u64 = 64 * 1024 + 100;

/// A small deterministic generator (the test needs variety, not quality).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

fn read_all(file: &impl FileHandle) -> Vec<u8> {
    let mut bytes = vec![0u8; FILE_BYTES as usize];
    let n = file.read_at(&mut bytes, 0).unwrap();
    assert_eq!(n as u64, FILE_BYTES, "the file's length changed");
    bytes
}

/// A new file of `FILE_BYTES` in a fresh directory `label` under the target directory: on the
/// repository's file system, which supports O_DIRECT (tmpfs, a common /tmp, does not, and the
/// file would silently stay buffered).
fn new_file(label: &str) -> (PathBuf, PathBuf, StdFile) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("file.wal");
    let mut file = StdFs.create(&path).unwrap();
    file.set_len(FILE_BYTES).unwrap();
    (dir, path, file)
}

#[test]
fn direct_writes_read_back_exactly_like_buffered_ones() {
    let (dir, path, mut file) = new_file("direct-io");
    assert!(
        file.write_directly().unwrap(),
        "{} does not take O_DIRECT writes: this test needs a file system that does",
        dir.display()
    );
    let mut model = vec![0u8; FILE_BYTES as usize];
    let mut rng = Lcg(7);
    let mut append_at = 0u64;
    for step in 0..2_000u64 {
        // Mostly appends that continue where the last one ended (the WAL's pattern), some
        // anywhere, some reaching into the last, partial block.
        let (offset, len) = match rng.next(10) {
            0..=5 => (append_at, 1 + rng.next(300)),
            6 | 7 => (rng.next(FILE_BYTES), 1 + rng.next(9_000)),
            8 => (FILE_BYTES - 1 - rng.next(200), 1 + rng.next(100)),
            _ => (rng.next(FILE_BYTES / 4096) * 4096, 4096 * (1 + rng.next(3))),
        };
        let len = len.min(FILE_BYTES - offset);
        let data: Vec<u8> = (0..len).map(|i| (step as u8) ^ (i as u8) | 1).collect();
        file.write_at(&data, offset).unwrap();
        model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        append_at = (offset + len) % FILE_BYTES;
        if step % 50 == 0 {
            file.sync_data().unwrap();
        }
        assert!(
            read_all(&file) == model,
            "step {step}: write of {len} at {offset}"
        );
    }
    file.sync_data().unwrap();
    drop(file);
    let reopened = StdFs.open(&path).unwrap();
    assert!(read_all(&reopened) == model, "after reopening");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_handle_sees_direct_writes() {
    let (dir, path, mut file) = new_file("direct-io-second");
    let reader = StdFs.open(&path).unwrap();
    // The reader caches the page before the direct write replaces it.
    assert_eq!(read_all(&reader)[10], 0);
    assert!(file.write_directly().unwrap());
    file.write_at(b"frame", 8).unwrap();
    assert_eq!(&read_all(&reader)[8..13], b"frame");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An append at the end (`write_at_end`) reads nothing after its data: the rest of its last block
/// is written as zeros, so are the blocks up to `zeros_to` (rounded up to the block), and nothing
/// after them changes. Bytes before the data in its first block are kept. The file starts full
/// of non-zero bytes so that a read-back would show.
#[test]
fn appends_at_the_end_write_zeros_after_their_data_without_reading_it() {
    let (dir, _path, mut file) = new_file("direct-io-end");
    let garbage = vec![0xAAu8; FILE_BYTES as usize];
    file.write_at(&garbage, 0).unwrap();
    assert!(file.write_directly().unwrap());
    let mut model = garbage.clone();

    // Mid-block, with no zeros asked for: the first block's head is read back, its tail is zeroed.
    file.write_at_end(b"frame", 4096 + 10, 0).unwrap();
    model[4106..4111].copy_from_slice(b"frame");
    model[4111..8192].fill(0);
    assert!(read_all(&file) == model, "after the first append");

    // The next append continues from the kept block, with zeros asked for up to 20,000: written
    // through the end of the block that holds byte 19,999.
    file.write_at_end(b"next", 4111, 20_000).unwrap();
    model[4111..4115].copy_from_slice(b"next");
    model[4115..20_480].fill(0);
    assert!(
        read_all(&file) == model,
        "after the append with zeros ahead"
    );

    // The buffered fallback (the file's last, partial block) writes exactly the zeros asked for.
    let tail_at = FILE_BYTES - 60;
    file.write_at_end(b"tail", tail_at, tail_at + 20).unwrap();
    let at = tail_at as usize;
    model[at..at + 4].copy_from_slice(b"tail");
    model[at + 4..at + 20].fill(0);
    assert!(read_all(&file) == model, "after the buffered append");
    std::fs::remove_dir_all(&dir).unwrap();
}
