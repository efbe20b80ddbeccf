//! A large state restores in bounded memory: the runtime streams the snapshot file into
//! `StateMachine::restore` (as it streams a snapshot view out to the file), so a restart over a
//! 1 GiB snapshot raises the process's peak resident memory by far less than the snapshot's
//! size. One test in this binary: the measure is the whole process's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_core::LogId;
use keel_runtime::{ApplyError, Node, RestoreError, SnapshotWriter, StateMachine};

mod common;

const WAIT: Duration = Duration::from_secs(60);
const STATE_BYTES: u64 = 1 << 30;
/// The most the restore may add to the peak resident set.
const RESTORE_RSS_BYTES_MAX: u64 = 64 << 20;
const CHUNK_BYTES: usize = 64 << 10;

/// The state's byte at `position`: a pattern any byte of which is checked on restore.
fn byte_at(position: u64) -> u8 {
    (position.wrapping_mul(0x9e37_79b9) >> 11) as u8
}

/// A state of `STATE_BYTES` bytes that exists only as a pattern: written out and read back in
/// chunks, never held whole.
#[derive(Clone, Default)]
struct Large {
    restored_bytes: Arc<AtomicU64>,
}

struct Pattern;

impl SnapshotWriter for Pattern {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let mut at = 0;
        while at < STATE_BYTES {
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = byte_at(at + i as u64);
            }
            out.write_all(&chunk)?;
            at += CHUNK_BYTES as u64;
        }
        Ok(())
    }
}

impl StateMachine for Large {
    fn apply(&mut self, _at: LogId, _data: &Bytes) -> Result<Bytes, ApplyError> {
        Ok(Bytes::new())
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(Pattern)
    }

    fn restore(&mut self, _last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError> {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let mut at = 0u64;
        loop {
            let n = data
                .read(&mut chunk)
                .map_err(|e| RestoreError(e.to_string()))?;
            if n == 0 {
                break;
            }
            if let Some(i) = (0..n).find(|&i| chunk[i] != byte_at(at + i as u64)) {
                return Err(RestoreError(format!("byte {} differs", at + i as u64)));
            }
            at += n as u64;
        }
        self.restored_bytes.store(at, Ordering::SeqCst);
        Ok(())
    }
}

/// A field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_snapshot_restores_in_bounded_memory() {
    let dir = common::scratch_dir("stream");
    let (node, handle) = common::one_voter(&dir, Large::default, WAIT).await;
    handle
        .propose(Bytes::from_static(b"x"))
        .await
        .expect("applied");
    handle.snapshot_now().await.expect("a snapshot");
    node.shutdown().await;

    // The peak from here on is the restart's: reset it (Linux: write 5 to clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak resident set");
    let before = status_bytes("VmRSS:");
    let restored = Large::default();
    let node = Node::start(common::one_voter_config(&dir), restored.clone())
        .await
        .expect("restarts");
    let peak = status_bytes("VmHWM:");
    eprintln!(
        "restoring {STATE_BYTES} bytes raised the peak resident set by {} bytes",
        peak.saturating_sub(before)
    );
    assert_eq!(restored.restored_bytes.load(Ordering::SeqCst), STATE_BYTES);
    assert!(
        peak.saturating_sub(before) < RESTORE_RSS_BYTES_MAX,
        "restoring {STATE_BYTES} bytes raised the peak resident set by {} bytes",
        peak - before
    );
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}
