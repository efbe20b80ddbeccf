//! Recovery benchmark (not a test): a node restarts over a log of `--log-mb` megabytes of
//! `--entry-bytes`-byte committed entries (no snapshot) and replays them all through the apply
//! pipeline before it serves. Reports the log's size on disk, the time to open and validate it,
//! the replay rate, and the time from start to serving.
//!
//! ```text
//! cargo run --release -p keel-runtime --example replay_bench -- [--log-mb 1024] [--entry-bytes 100] [--dir D]
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, HardState, LogId, Write};
use keel_runtime::{Node, NodeConfig, SnapshotWriter, StateMachine};
use keel_wal::{bootstrap_meta, StdFs, Wal, WalConfig};

/// Counts what it applies (the cheapest state machine: the benchmark measures keel, not the app).
#[derive(Default)]
struct Tally {
    entries: u64,
    bytes: u64,
}

impl StateMachine for Tally {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, keel_runtime::ApplyError> {
        self.entries += 1;
        self.bytes += data.len() as u64;
        Ok(Bytes::new())
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        let mut out = self.entries.to_le_bytes().to_vec();
        out.extend_from_slice(&self.bytes.to_le_bytes());
        Box::new(out)
    }

    fn restore(
        &mut self,
        _last: keel_core::LogId,
        reader: &mut dyn std::io::Read,
    ) -> Result<(), keel_runtime::RestoreError> {
        let mut counts = [0u8; 16];
        reader.read_exact(&mut counts)?;
        self.entries = u64::from_le_bytes(counts[..8].try_into().expect("8 bytes"));
        self.bytes = u64::from_le_bytes(counts[8..].try_into().expect("8 bytes"));
        Ok(())
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

fn dir_size_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Writes `count` committed entries of `size` bytes in synced batches.
fn write_log(dir: &Path, count: u64, size: usize) {
    let (mut wal, _) = Wal::open(StdFs, dir.to_owned(), WalConfig::default()).expect("open");
    wal.save_snapshot(&bootstrap_meta([1]), &[])
        .expect("bootstrap");
    const BATCH: u64 = 8192;
    let payload = Bytes::from(vec![0x5a; size]);
    let mut next = 1;
    let mut id = 1;
    while next <= count {
        let last = (next + BATCH - 1).min(count);
        let entries: Vec<Entry> = (next..=last)
            .map(|index| Entry {
                term: 1,
                index,
                payload: EntryPayload::Normal(payload.clone()),
            })
            .collect();
        let write = Write {
            id,
            install: None,
            entries,
            hard_state: Some(HardState {
                term: 1,
                vote: None,
                commit: last,
            }),
            purge_to: None,
            sync: true,
            release_promise: false,
            lower_promise_to: None,
        };
        wal.write_batch(&[write]).expect("write");
        next = last + 1;
        id += 1;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let log_mb: u64 = arg("--log-mb").map_or(1024, |v| v.parse().expect("--log-mb"));
    let entry_bytes: usize =
        arg("--entry-bytes").map_or(100, |v| v.parse().expect("--entry-bytes"));
    let dir: PathBuf = arg("--dir").map_or_else(
        || std::env::temp_dir().join("keel-replaybench"),
        PathBuf::from,
    );
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    // Each entry costs its payload plus about 30 bytes of framing on disk.
    let count = log_mb * 1_000_000 / (entry_bytes as u64 + 30);

    let write_start = Instant::now();
    write_log(&dir, count, entry_bytes);
    let on_disk = dir_size_bytes(&dir);
    println!(
        "log: {count} entries of {entry_bytes} B, {:.0} MB on disk, written in {:.1} s",
        on_disk as f64 / 1e6,
        write_start.elapsed().as_secs_f64()
    );

    let mut config = NodeConfig::new(1, 1, &dir);
    config.initial_members = vec![1];
    let start = Instant::now();
    let node = Node::start(config, Tally::default()).await.expect("start");
    let opened = start.elapsed();
    let handle = node.handle();
    let status = loop {
        let status = handle.status().await.expect("status");
        if status.serving {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let to_serving = start.elapsed();
    let replay = status.replay;
    assert_eq!(
        replay.target_index, count,
        "replayed to the persisted commit"
    );
    println!(
        "open + recover the WAL, build the node: {:.2} s ({:.2} M entries/s)",
        opened.as_secs_f64(),
        count as f64 / opened.as_secs_f64() / 1e6
    );
    // The node's replay clock starts with `Node::start`, like ours.
    let replay_only = replay.duration.saturating_sub(opened);
    println!(
        "replay through the apply pipeline after that: {} entries in {:.2} s ({:.2} M entries/s)",
        replay.entries,
        replay_only.as_secs_f64(),
        replay.entries as f64 / replay_only.as_secs_f64().max(1e-9) / 1e6
    );
    println!(
        "start to serving: {:.2} s ({:.2} M entries/s overall)",
        to_serving.as_secs_f64(),
        count as f64 / to_serving.as_secs_f64() / 1e6
    );
    node.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
