//! Recovery replay rate: build a log of 100-byte entries on the real file system, then measure
//! `Wal::open` (scan, verify every frame, replay, repair, fsync) and the time to a constructed
//! `RaftNode` ("start to serving", before any network). Reports entries per second.
//!
//! `KEEL_WAL_BENCH_RECOVERY_MB` sets the log size (default 200 MB, about 1.8 million entries);
//! `KEEL_WAL_BENCH_DIR` the directory (default: the system temp dir).
//!
//! ```sh
//! cargo bench -p keel-wal --bench recovery
//! KEEL_WAL_BENCH_RECOVERY_MB=1024 cargo bench -p keel-wal --bench recovery
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::TempDir;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use keel_core::{Config, Entry, EntryPayload, HardState, RaftNode, Write};
use keel_wal::{bootstrap_meta, StdFs, Wal, WalConfig};

const ENTRY_SIZE_BYTES: usize = 100;
/// Entries per write while building the log (large frames: building is not what is measured).
const BUILD_BATCH: u64 = 16_384;

fn build_log(megabytes: u64) -> (TempDir, u64) {
    if let Some(base) = std::env::var_os("KEEL_WAL_BENCH_DIR") {
        std::env::set_var("TMPDIR", base);
    }
    let dir = TempDir::new("bench-recovery");
    let (mut wal, _) = Wal::open(StdFs, dir.path(), WalConfig::default()).expect("open");
    wal.save_snapshot(&bootstrap_meta([1]), &[])
        .expect("bootstrap");
    let payload = Bytes::from(vec![0x42; ENTRY_SIZE_BYTES]);
    let entry_bytes = (ENTRY_SIZE_BYTES + 13) as u64;
    let total = megabytes * 1_000_000 / entry_bytes;
    let mut next = 1;
    let started = Instant::now();
    while next <= total {
        let last = (next + BUILD_BATCH - 1).min(total);
        let entries = (next..=last)
            .map(|index| Entry {
                term: 1,
                index,
                payload: EntryPayload::Normal(payload.clone()),
            })
            .collect();
        let write = Write {
            id: next,
            install: None,
            entries,
            hard_state: Some(HardState {
                term: 1,
                vote: Some(1),
                commit: last,
            }),
            purge_to: None,
            sync: true,
            release_promise: false,
            lower_promise_to: None,
        };
        wal.write_batch(&[write]).expect("write");
        next = last + 1;
    }
    eprintln!(
        "built {total} entries ({megabytes} MB, {} segments) in {:.1?}",
        wal.segment_count(),
        started.elapsed()
    );
    (dir, total)
}

fn recovery(c: &mut Criterion) {
    let megabytes = std::env::var("KEEL_WAL_BENCH_RECOVERY_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let (dir, entries) = build_log(megabytes);
    let mut group = c.benchmark_group("recovery");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(100));
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(entries));
    group.bench_function(format!("open_{megabytes}MB_100B_entries"), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let (wal, recovered) =
                    Wal::open(StdFs, dir.path(), WalConfig::default()).expect("open");
                elapsed += start.elapsed();
                assert_eq!(recovered.stats.entries, entries);
                drop((wal, recovered));
            }
            elapsed
        })
    });
    group.bench_function(
        format!("open_to_raft_node_{megabytes}MB_100B_entries"),
        |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let (wal, recovered) =
                        Wal::open(StdFs, dir.path(), WalConfig::default()).expect("open");
                    let node = RaftNode::new(Config::new(1), recovered.state).expect("node");
                    elapsed += start.elapsed();
                    assert_eq!(node.status().commit, entries);
                    drop((wal, node));
                }
                elapsed
            })
        },
    );
    group.finish();
}

criterion_group!(benches, recovery);
criterion_main!(benches);
