//! Damage made to a stopped node's data directory, as a disk makes it, and `keel check` run on it
//! (issue 20's process tests: `disk_damage.rs`, `fault_table.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `keel check --data-dir dir`: exit code and stdout.
pub fn keel_check(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["check", "--data-dir"])
        .arg(dir)
        .output()
        .expect("run keel check");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "keel check wrote to stderr: {stderr}");
    (out.status.code(), stdout)
}

/// The files of `dir` with extension `extension`, sorted by name.
pub fn files_ending_in(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == extension))
        .collect();
    found.sort();
    found
}

/// The segment the log ends in: the highest-numbered one holding more than its header (the one
/// after it, if any, is a spare prepared ahead).
pub fn active_segment(dir: &Path) -> (PathBuf, Vec<u8>) {
    files_ending_in(dir, "wal")
        .into_iter()
        .rev()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .find(|(_, bytes)| bytes[64..].iter().any(|b| *b != 0))
        .expect("a segment holding frames")
}

/// Overwrites the last `len_bytes` of the log's data with zeros, durably.
pub fn zero_fill_tail(dir: &Path, len_bytes: usize) -> PathBuf {
    let (path, mut bytes) = active_segment(dir);
    let end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    let from = end.saturating_sub(len_bytes).max(64);
    bytes[from..end].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    path
}

/// Flips a byte near the end of the newest snapshot file (in its data, which its checksum
/// covers), durably; returns the file.
pub fn flip_newest_snapshot(dir: &Path) -> PathBuf {
    let newest = files_ending_in(dir, "snap").pop().expect("a snapshot");
    let len = std::fs::metadata(&newest).unwrap().len() as usize;
    flip_byte_in(&newest, len - 10);
    newest
}

/// Flips one byte in the middle of a file.
pub fn flip_byte_in(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(path, &bytes).unwrap();
    std::fs::File::open(path).unwrap().sync_all().unwrap();
}

/// A run of bytes found only inside the values the damage tests write (`"v"` repeated 100
/// times): a byte within it is entry data, never a frame header or a commit-only frame.
const VALUE_RUN: &[u8] = b"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv";

/// Flips a byte inside an acknowledged record: in a written value (see [`VALUE_RUN`]), the one
/// nearest the middle of the data of the newest segment holding one (the active segment, unless
/// it holds only commit-only frames). Not simply the middle byte: that may lie in a commit-only
/// frame a later frame supersedes, which recovery rightly skips as moot (keel-wal's "Recovery,
/// case by case", step 4), so the damage would go unseen.
pub fn flip_acknowledged_record(dir: &Path) {
    for segment in files_ending_in(dir, "wal").into_iter().rev() {
        let bytes = std::fs::read(&segment).unwrap();
        let Some(end) = bytes.iter().rposition(|b| *b != 0) else {
            continue;
        };
        let nearest_middle = bytes
            .windows(VALUE_RUN.len())
            .enumerate()
            .filter(|(_, window)| *window == VALUE_RUN)
            .map(|(at, _)| at + VALUE_RUN.len() / 2)
            .min_by_key(|at| at.abs_diff(end / 2));
        if let Some(at) = nearest_middle {
            return flip_byte_in(&segment, at);
        }
    }
    panic!("no segment holds a written value");
}
