//! Proposals committed per second by a three-node cluster in one process: in-memory storage whose
//! writes complete at once, messages delivered by function call, empty payloads. `C` proposers
//! each keep one proposal outstanding and propose again as soon as theirs is applied on the leader.
//!
//! Run: `cargo bench -p keel-core --bench three_node`

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use keel_core::storage::{MemStorage, Storage};
use keel_core::{Config, Message, RaftNode, Role};

struct Cluster {
    nodes: Vec<RaftNode>,
    disks: Vec<MemStorage>,
    inbox: VecDeque<Message>,
}

impl Cluster {
    fn new() -> Cluster {
        let mut nodes = Vec::new();
        let mut disks = Vec::new();
        for id in 1..=3 {
            let disk = MemStorage::new_cluster([1, 2, 3]);
            let mut config = Config::new(id);
            config.uncommitted_entries_max = 1 << 20;
            nodes.push(RaftNode::new(config, disk.recover().unwrap()).unwrap());
            disks.push(disk);
        }
        let mut c = Cluster {
            nodes,
            disks,
            inbox: VecDeque::new(),
        };
        c.nodes[0].campaign();
        while c.nodes[0].role() != Role::Leader || c.nodes[0].commit_index() == 0 {
            c.pump(&mut |_| {});
        }
        c
    }

    /// Drains every node's output once and delivers every message. `on_apply` sees the leader's
    /// applied entries.
    fn pump(&mut self, on_apply: &mut impl FnMut(u64)) {
        for i in 0..self.nodes.len() {
            while self.nodes[i].has_ready() {
                let rd = self.nodes[i].ready();
                if let Some(w) = &rd.write {
                    self.disks[i].write(w).unwrap();
                    self.nodes[i].persisted(w.id);
                }
                self.inbox.extend(rd.messages);
                if let Some(last) = rd.committed.last() {
                    if i == 0 {
                        for _ in &rd.committed {
                            on_apply(1);
                        }
                    }
                    let idx = last.index;
                    self.nodes[i].applied(idx);
                }
            }
        }
        while let Some(m) = self.inbox.pop_front() {
            let to = (m.to - 1) as usize;
            self.nodes[to].step(m);
        }
    }
}

/// Commits `total` proposals with `proposers` outstanding at a time; returns the elapsed time.
fn run(proposers: usize, total: u64) -> Duration {
    let mut cluster = Cluster::new();
    let start = Instant::now();
    let mut proposed = 0u64;
    let mut committed = 0u64;
    for _ in 0..proposers.min(total as usize) {
        cluster.nodes[0].propose(Bytes::new()).unwrap();
        proposed += 1;
    }
    while committed < total {
        let mut done = 0;
        cluster.pump(&mut |n| done += n);
        // The leader applies its no-op and our entries; count only ours.
        committed += done;
        for _ in 0..done {
            if proposed < total {
                cluster.nodes[0].propose(Bytes::new()).unwrap();
                proposed += 1;
            }
        }
    }
    black_box(committed);
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("three_node_commit");
    for proposers in [1usize, 64, 256] {
        let batch = 20_000u64;
        group.throughput(Throughput::Elements(batch));
        group.bench_with_input(
            BenchmarkId::from_parameter(proposers),
            &proposers,
            |b, &p| {
                b.iter_custom(|iters| (0..iters).map(|_| run(p, batch)).sum());
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
