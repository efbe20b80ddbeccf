//! Helpers shared by the integration tests and benchmarks.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use keel_wal::segment::{frame_size_bytes, read_frame_header, segment_file_name};
use keel_wal::segment::{FRAME_HEADER_SIZE_BYTES, SEGMENT_HEADER_SIZE_BYTES};
use keel_wal::{bootstrap_meta, Damage, Fs, SimFs, Wal, WalConfig, WalError};

/// A directory under the system temp dir, unique per process and call, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "keel-wal-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const SIM_DIR: &str = "/data/wal";

pub fn sim_dir() -> PathBuf {
    PathBuf::from(SIM_DIR)
}

/// Small segments and frames, so tests rotate and split often.
pub fn small_config() -> WalConfig {
    WalConfig {
        segment_size_bytes: 16 << 10,
        frame_size_bytes_max: 4 << 10,
        // Larger than a batch frame: such an entry gets a frame of its own.
        entry_size_bytes_max: 8 << 10,
        // Every promise written: the damage tests judge the log against the newest one.
        promise_write_every_batches: 1,
        ..WalConfig::default()
    }
}

/// Opens the WAL in the simulated directory; panics on error.
pub fn open_sim(fs: &SimFs) -> (Wal<SimFs>, keel_wal::Recovered) {
    Wal::open(fs.clone(), sim_dir(), small_config()).expect("open")
}

/// A WAL of a new cluster {1, 2, 3}: opened, bootstrap snapshot saved.
pub fn new_cluster<F: Fs>(fs: F, dir: PathBuf, config: WalConfig) -> Wal<F> {
    let (mut wal, _) = Wal::open(fs, dir, config).expect("open");
    wal.save_snapshot(&bootstrap_meta([1, 2, 3]), &[])
        .expect("bootstrap snapshot");
    wal
}

/// Closes `wal` cleanly and opens it again from the same place.
pub fn reopen<F: Fs + Clone>(wal: Wal<F>) -> Wal<F> {
    let (fs, dir, config) = (wal.fs().clone(), wal.dir().to_owned(), wal.config().clone());
    drop(wal);
    Wal::open(fs, dir, config).expect("reopen").0
}

/// Path of simulated segment `seq`.
pub fn segment(seq: u64) -> PathBuf {
    sim_dir().join(segment_file_name(seq))
}

/// Offsets and sizes of the valid frames of a segment's bytes.
pub fn frames(bytes: &[u8]) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    let mut pos = SEGMENT_HEADER_SIZE_BYTES as usize;
    while pos + FRAME_HEADER_SIZE_BYTES <= bytes.len() {
        let header = read_frame_header(&bytes[pos..pos + FRAME_HEADER_SIZE_BYTES]);
        if !header.magic_ok {
            break;
        }
        let size = frame_size_bytes(header.body_len);
        out.push((pos as u64, size));
        pos += size;
    }
    out
}

/// File offset of the payload of the first item of `kind` in the frame at `frame`.
pub fn item_payload(bytes: &[u8], frame: u64, kind: u8) -> u64 {
    let header = read_frame_header(&bytes[frame as usize..]);
    let mut at = frame as usize + FRAME_HEADER_SIZE_BYTES;
    let end = at + header.body_len;
    while at < end {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        if bytes[at] == kind {
            return (at + 8) as u64;
        }
        at += 8 + len;
    }
    panic!("no item of kind {kind} in the frame at {frame}");
}

/// The first damage a refused open or recovery reports; panics on anything else.
pub fn first_damage<T>(result: Result<T, WalError>) -> Damage {
    match result {
        Err(WalError::Damaged(report)) => report.damage[0].clone(),
        Err(other) => panic!("expected a damage report, got {other}"),
        Ok(_) => panic!("expected a damage report, got a clean open"),
    }
}

/// The snapshot files on `fs`, oldest first (their names sort by position).
pub fn snapshot_files(fs: &SimFs) -> Vec<PathBuf> {
    let mut snapshots: Vec<PathBuf> = fs
        .paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "snap"))
        .collect();
    snapshots.sort();
    snapshots
}

/// Every file's bytes, to show that a refused open changed nothing.
pub fn files(fs: &SimFs) -> Vec<(PathBuf, Vec<u8>)> {
    fs.paths()
        .into_iter()
        .map(|p| {
            let bytes = fs.read_file(&p).expect("a listed file");
            (p, bytes)
        })
        .collect()
}
