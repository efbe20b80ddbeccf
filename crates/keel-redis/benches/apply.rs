//! Nanoseconds per applied `SET` in the key-value state machine: 100-byte values on a key space of
//! 100,000 `key:NNNNNNNNNNNN` keys (what `keel bench` writes), the map filled before measuring.
//! Two shapes of log entry: each entry in its own buffer (a leader's proposals) and entries sliced
//! out of one received frame (a follower's), whose values then share that frame's allocation.
//!
//! A third case, `kv_apply_fill`, applies 100,000 SETs of distinct keys to an empty state machine:
//! the cost while a key space fills up (every SET adds a key), as in the first seconds of
//! `keel bench` against a new cluster.
//!
//! Run: `cargo bench -p keel-redis --bench apply`

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use keel_redis::command::{SetCondition, WriteCommand};
use keel_redis::KvStateMachine;
use keel_redis::LogCommand;

const KEYS: u64 = 100_000;
const BATCH: usize = 4096;

fn set_entry(client: u64, seq: u64, key: u64) -> Bytes {
    let set = WriteCommand::Set {
        key: Bytes::from(format!("key:{key:012}")),
        value: Bytes::from(vec![b'x'; 100]),
        condition: SetCondition::Always,
    };
    let entry = LogCommand::new(client, seq, 0, set).encode();
    // As in the server, where the log, the WAL write and the Appends hold copies of an entry
    // before it is applied: its buffer is shared by then, so applying does not pay for sharing
    // it (an allocation) as an entry's first copy would.
    drop(entry.clone());
    entry
}

/// `n` entries from 50 clients on keys spread by a fixed xorshift.
fn entries(n: usize, seq_base: u64, shared_frame: bool) -> Vec<Bytes> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let own: Vec<Bytes> = (0..n as u64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            set_entry(i % 50, seq_base + i / 50, x % KEYS)
        })
        .collect();
    if !shared_frame {
        return own;
    }
    let mut frame = BytesMut::new();
    let mut bounds = Vec::new();
    for e in &own {
        bounds.push((frame.len(), e.len()));
        frame.extend_from_slice(e);
    }
    let frame = frame.freeze();
    bounds
        .iter()
        .map(|&(at, len)| frame.slice(at..at + len))
        .collect()
}

fn bench_apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv_apply_set");
    group.throughput(Throughput::Elements(BATCH as u64));
    for (name, shared) in [("own_buffers", false), ("one_frame", true)] {
        let mut sm = KvStateMachine::new();
        let mut index = 0u64;
        for (i, e) in entries(KEYS as usize * 2, 0, shared).iter().enumerate() {
            index += 1;
            sm.apply(index, e).unwrap();
            black_box(i);
        }
        let mut seq = KEYS * 2;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    seq += BATCH as u64;
                    entries(BATCH, seq, shared)
                },
                |batch| {
                    for e in &batch {
                        index += 1;
                        black_box(sm.apply(index, e).unwrap());
                    }
                    batch
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    group.finish();

    let mut group = c.benchmark_group("kv_apply_fill");
    group.sample_size(10);
    group.throughput(Throughput::Elements(KEYS));
    group.bench_function("distinct_keys", |b| {
        b.iter_batched(
            || {
                let entries: Vec<Bytes> = (0..KEYS)
                    .map(|i| set_entry(i % 50, 1 + i / 50, i))
                    .collect();
                (KvStateMachine::new(), entries)
            },
            |(mut sm, entries)| {
                for (i, e) in entries.iter().enumerate() {
                    black_box(sm.apply(i as u64 + 1, e).unwrap());
                }
                (sm, entries)
            },
            criterion::BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_apply);
criterion_main!(benches);
