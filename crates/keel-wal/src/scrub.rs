//! The scrub: re-reading a live node's files to find rot before a restart or a peer needs them.
//!
//! A running node replicates and applies from memory, so a bit that flips on the device in an
//! acknowledged record or a snapshot shows nowhere until the node restarts — and if another node
//! is lost meanwhile, the cluster may be left holding that entry only on the rotten copy. A scrub
//! pass reads, at a bounded rate, what no write can be touching:
//!
//! - the **sealed segments**: every segment but the two highest-numbered (the active one and the
//!   spare prepared ahead of it), replayed with recovery's own scan and judged with its own rules
//!   (`recover.rs`), so a pass finds exactly what a restart would refuse — never more: the newest
//!   scanned segment's tail is judged as the log's end (lenient), where a restart would see the
//!   active segment after it. The replay keeps only the last entry, so a pass holds one read
//!   chunk (4 MiB) of the log at a time, however long the log;
//! - every **snapshot** file (header and data checksums, `snapshot.rs`).
//!
//! The promise record is not scrubbed: it is rewritten every few group commits (a pass could read
//! a copy mid-write), which overwrites a rotten copy, and a restart reads both copies anyway.
//!
//! A pass changes nothing. Files deleted while it reads them (purged segments, pruned snapshots)
//! are skipped, not reported: only a checksum or structure that does not verify is a finding.
//! What to do about a finding is the caller's decision (keel-runtime restarts the node, and
//! [`crate::Wal::open_repairing`] sets the damaged files aside and the node recovers the rest from
//! its peers).
//!
//! Reads go through [`Throttled`], which spaces them to a rate in bytes per second and asks the
//! operating system to drop each file's cached pages before reading it (so the device, not the
//! page cache, is what gets verified), and can be stopped.
//!
//! [`scrub_pass`] is one pass; [`set_aside_spare_snapshots`] sets aside a damaged snapshot other
//! than the newest (which no restart reads).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::damage::{log_damage, Damage, DamageKind};
use crate::error::{io_err, sync_err, Result, WalError};
use crate::fs::{FileHandle, Fs};
use crate::recover;
use crate::segment;
use crate::snapshot;
use crate::wal::damaged_name;

/// The outcome of one pass.
#[derive(Clone, Debug, Default)]
pub struct ScrubPass {
    /// What does not verify; empty for a clean pass.
    pub findings: Vec<Damage>,
    /// Sealed segments read to their end (not one the scan stopped in at a corruption).
    pub segments_read: usize,
    /// Snapshot files read to the end whose header and data checksums verified.
    pub snapshots_read: usize,
    /// Files that disappeared while the pass read them (purged or pruned): not findings.
    pub files_gone: usize,
    /// The newest snapshot file when the pass listed them.
    pub newest_snapshot: Option<PathBuf>,
}

impl ScrubPass {
    /// Whether the pass found nothing that does not verify (files that vanished do not count).
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// One scrub pass over the files of `dir` that no write touches (see the module docs). Only an
/// I/O error other than a vanished file is an error (and [`Throttled`]'s stop, as
/// `io::ErrorKind::Interrupted`).
pub fn scrub_pass<F: Fs>(fs: &F, dir: &Path) -> Result<ScrubPass> {
    let mut pass = ScrubPass::default();
    let mut seqs: Vec<u64> = fs
        .list_dir(dir)
        .map_err(io_err(dir))?
        .iter()
        .filter_map(|name| segment::parse_segment_file_name(name))
        .collect();
    seqs.sort_unstable();
    seqs.truncate(seqs.len().saturating_sub(2));
    if !seqs.is_empty() {
        match recover::scan_sealed(fs, dir, &seqs) {
            Ok((error, read)) => {
                pass.segments_read = read;
                pass.findings.extend(
                    error.and_then(|(e, intact_through)| sealed_damage(&e, intact_through)),
                );
            }
            Err(e) if is_gone(&e) => pass.files_gone += 1,
            Err(e) => return Err(e),
        }
    }
    let snapshots = snapshot::list_snapshots(fs, dir)?;
    pass.newest_snapshot = snapshots.last().map(|(_, path)| path.clone());
    for (_, path) in snapshots {
        match snapshot::verify_snapshot(fs, &path) {
            Ok(_) => pass.snapshots_read += 1,
            Err(_) if fs.open(&path).is_err() => pass.files_gone += 1,
            Err(reason) => pass.findings.push(Damage {
                kind: DamageKind::CorruptSnapshot,
                promised: None,
                intact_through: 0,
                path: Some(path),
                offset: None,
                detail: format!("found by the scrub: {reason}"),
            }),
        }
    }
    Ok(pass)
}

/// Sets aside (renamed `<name>.damaged`, the directory synced) the corrupt snapshot files `pass`
/// found other than the newest, and takes them out of its findings; returns them. Those are
/// spares: a running node sends and restores only the newest, and a restart would not even read
/// them (recovery stops at the newest snapshot that verifies), so restarting would not repair
/// them — and a scrub that restarts the node for them would do so forever. A file pruned
/// meanwhile is skipped.
pub fn set_aside_spare_snapshots<F: Fs>(
    fs: &F,
    dir: &Path,
    pass: &mut ScrubPass,
) -> Result<Vec<PathBuf>> {
    let mut set_aside = Vec::new();
    let newest = pass.newest_snapshot.clone();
    let mut kept = Vec::new();
    for finding in std::mem::take(&mut pass.findings) {
        let spare = match (&finding.kind, &finding.path) {
            (DamageKind::CorruptSnapshot, Some(path)) if Some(path) != newest.as_ref() => {
                Some(path.clone())
            }
            _ => None,
        };
        match spare {
            Some(path) => match fs.rename(&path, &damaged_name(&path)) {
                Ok(()) => set_aside.push(path),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&path)(e)),
            },
            None => kept.push(finding),
        }
    }
    pass.findings = kept;
    if !set_aside.is_empty() {
        fs.sync_dir(dir).map_err(sync_err(dir))?;
    }
    Ok(set_aside)
}

/// A corruption the scan of sealed segments ended on, as a finding.
fn sealed_damage(error: &WalError, intact_through: u64) -> Option<Damage> {
    let mut damage = log_damage(error, None, intact_through)?;
    damage.detail = format!("found by the scrub: {}", damage.detail);
    Some(damage)
}

fn is_gone(error: &WalError) -> bool {
    matches!(error, WalError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
}

/// Reads through `F`, spaced to at most `bytes_per_s`, each opened file's cached pages dropped
/// first; every read fails with `Interrupted` once `stop` is set.
#[derive(Clone)]
pub struct Throttled<F> {
    inner: F,
    pace: Arc<Pace>,
}

struct Pace {
    bytes_per_s: u64,
    stop: Arc<AtomicBool>,
    /// When the reads so far will have been paid for at the rate.
    paid_until: Mutex<Instant>,
}

impl<F: Fs> Throttled<F> {
    /// Reads through `inner` at most `bytes_per_s` bytes per second: each read first waits until
    /// it and the reads before it are paid for at that rate (time spent idle earns no credit).
    /// Once `stop` is set every read fails with `io::ErrorKind::Interrupted`, one already waiting
    /// within 50 ms. Clones share the rate and the stop.
    ///
    /// # Panics
    ///
    /// If `bytes_per_s` is 0.
    pub fn new(inner: F, bytes_per_s: u64, stop: Arc<AtomicBool>) -> Self {
        assert!(bytes_per_s > 0, "a scrub rate of zero reads nothing");
        Throttled {
            inner,
            pace: Arc::new(Pace {
                bytes_per_s,
                stop,
                paid_until: Mutex::new(Instant::now()),
            }),
        }
    }
}

impl Pace {
    fn charge(&self, bytes: usize) -> io::Result<()> {
        let wait = {
            let mut paid_until = self.paid_until.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let cost = Duration::from_secs_f64(bytes as f64 / self.bytes_per_s as f64);
            *paid_until = (*paid_until).max(now) + cost;
            paid_until.saturating_duration_since(now)
        };
        // Sleep in short steps so that a stop is noticed promptly.
        let until = Instant::now() + wait;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "scrub stopped"));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
}

/// A file opened through [`Throttled`]: its reads are paced.
pub struct ThrottledFile<H> {
    inner: H,
    pace: Arc<Pace>,
}

/// Everything but the pacing is `F`'s (the runtime wraps [`crate::ReadOnlyFs`], so a pass cannot
/// change anything).
impl<F: Fs> Fs for Throttled<F> {
    type File = ThrottledFile<F::File>;

    fn create(&self, path: &Path) -> io::Result<Self::File> {
        Ok(ThrottledFile {
            inner: self.inner.create(path)?,
            pace: self.pace.clone(),
        })
    }

    fn open(&self, path: &Path) -> io::Result<Self::File> {
        let inner = self.inner.open(path)?;
        inner.drop_cached_pages();
        Ok(ThrottledFile {
            inner,
            pace: self.pace.clone(),
        })
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
}

impl<H: FileHandle> FileHandle for ThrottledFile<H> {
    fn len_bytes(&self) -> io::Result<u64> {
        self.inner.len_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.pace.charge(buf.len())?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }

    fn set_len(&mut self, len_bytes: u64) -> io::Result<()> {
        self.inner.set_len(len_bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.inner.sync_data()
    }
}
