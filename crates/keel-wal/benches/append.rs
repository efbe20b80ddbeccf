//! Append throughput on the real file system: `write_batch` of N single-entry writes (one group
//! commit: one write, one fdatasync) for 100-byte and 4 KiB entries at N = 1, 16, 256, beside a
//! raw `write_at + sync_data` loop of the same byte size in the same run.
//!
//! Throughput is reported in entries per second; MB/s = entries/s × entry size, syncs/s =
//! entries/s ÷ batch size. The directory is `KEEL_WAL_BENCH_DIR` or the system temp dir (it must
//! be a real disk for the fsync numbers to mean anything).
//!
//! ```sh
//! cargo bench -p keel-wal --bench append
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::TempDir;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use keel_core::{Entry, EntryPayload, Write};
use keel_wal::{FileHandle, Fs, StdFs, Wal, WalConfig};

const ENTRY_SIZES_BYTES: [usize; 2] = [100, 4096];
const BATCH_SIZES: [usize; 3] = [1, 16, 256];
/// The WAL directory is recreated (untimed) once it holds this much, to bound disk use.
const DIR_BYTES_MAX: u64 = 512 << 20;

fn bench_dir(label: &str) -> TempDir {
    match std::env::var_os("KEEL_WAL_BENCH_DIR") {
        Some(base) => {
            std::env::set_var("TMPDIR", PathBuf::from(base));
            TempDir::new(label)
        }
        None => TempDir::new(label),
    }
}

struct Appender {
    dir: TempDir,
    wal: Wal<StdFs>,
    next_index: u64,
    written_bytes: u64,
}

impl Appender {
    fn new() -> Self {
        let dir = bench_dir("bench-append");
        let (wal, _) = Wal::open(StdFs, dir.path(), WalConfig::default()).expect("open");
        Appender {
            dir,
            wal,
            next_index: 1,
            written_bytes: 0,
        }
    }

    fn batch(&mut self, batch: usize, payload: &Bytes) -> Vec<Write> {
        (0..batch)
            .map(|_| {
                let index = self.next_index;
                self.next_index += 1;
                let entry = Entry {
                    term: 1,
                    index,
                    payload: EntryPayload::Normal(payload.clone()),
                };
                keel_wal::conformance::write(index, vec![entry], None)
            })
            .collect()
    }
}

fn wal_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("wal_append");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for size in ENTRY_SIZES_BYTES {
        let payload = Bytes::from(vec![0x5A; size]);
        for batch in BATCH_SIZES {
            group.throughput(Throughput::Elements(batch as u64));
            let id = BenchmarkId::new(format!("{size}B"), batch);
            let mut appender = Appender::new();
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let mut elapsed = Duration::ZERO;
                    for _ in 0..iters {
                        if appender.written_bytes > DIR_BYTES_MAX {
                            appender = Appender::new();
                        }
                        let writes = appender.batch(batch, &payload);
                        let start = Instant::now();
                        appender.wal.write_batch(&writes).expect("write");
                        elapsed += start.elapsed();
                        appender.written_bytes += (batch * (size + 13)) as u64;
                    }
                    elapsed
                })
            });
            drop(appender.dir);
        }
    }
    group.finish();
}

/// The disk's own figure: one positional write of the same bytes, then fdatasync, appending
/// through a preallocated file.
fn raw_write_sync(c: &mut Criterion) {
    let mut group = c.benchmark_group("raw_write_fdatasync");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for size in ENTRY_SIZES_BYTES {
        for batch in BATCH_SIZES {
            group.throughput(Throughput::Elements(batch as u64));
            let dir = bench_dir("bench-raw");
            let path = dir.path().join("raw");
            let mut file = StdFs.create(&path).expect("create");
            file.set_len(DIR_BYTES_MAX).expect("preallocate");
            let buf = vec![0x5Au8; batch * (size + 13)];
            let mut offset = 0u64;
            group.bench_function(BenchmarkId::new(format!("{size}B"), batch), |b| {
                b.iter(|| {
                    if offset + buf.len() as u64 > DIR_BYTES_MAX {
                        offset = 0;
                    }
                    file.write_at(&buf, offset).expect("write");
                    file.sync_data().expect("sync");
                    offset += buf.len() as u64;
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, wal_append, raw_write_sync);
criterion_main!(benches);
