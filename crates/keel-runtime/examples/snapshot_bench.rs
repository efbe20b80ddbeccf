//! Snapshot benchmark (not a test): snapshot creation time and loopback transfer throughput for
//! states of a given size, beside the disk's raw sequential write+fsync rate measured in the same
//! run, and how long a follower that missed N entries of 100 bytes takes to catch up (by log and
//! by snapshot).
//!
//! ```text
//! cargo run --release -p keel-runtime --example snapshot_bench -- \
//!     [--sizes-mb 100,1024] [--entries 1000000] [--dir /tmp/keel-snapbench] [--skip-catchup]
//! ```

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_core::{LogId, Membership, NodeId, Role, SnapshotMeta};
use keel_runtime::{ClientError, Node, NodeConfig, SnapshotWriter, StateMachine};
use keel_transport::{Inbound, Transport, TransportConfig};
use tokio::sync::mpsc;

const MB: f64 = 1_000_000.0;

/// Keeps every entry's payload by index (a state of `entries x size`).
#[derive(Default)]
struct Blob {
    entries: BTreeMap<u64, Bytes>,
}

struct BlobView(BTreeMap<u64, Bytes>);

impl SnapshotWriter for BlobView {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for (index, data) in &self.0 {
            out.write_all(&index.to_le_bytes())?;
            out.write_all(&(data.len() as u32).to_le_bytes())?;
            out.write_all(data)?;
        }
        Ok(())
    }
}

impl StateMachine for Blob {
    fn apply(&mut self, at: LogId, data: &Bytes) -> Result<Bytes, keel_runtime::ApplyError> {
        let index = at.index;
        self.entries.insert(index, data.clone());
        Ok(Bytes::new())
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(BlobView(self.entries.clone()))
    }

    fn restore(
        &mut self,
        _last: keel_core::LogId,
        reader: &mut dyn std::io::Read,
    ) -> Result<(), keel_runtime::RestoreError> {
        let mut data = Vec::new();
        reader.read_to_end(&mut data)?;
        self.entries.clear();
        let data = Bytes::from(data);
        let mut at = 0;
        while at < data.len() {
            let index = u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
            let len = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
            self.entries
                .insert(index, data.slice(at + 12..at + 12 + len));
            at += 12 + len;
        }
        Ok(())
    }
}

struct Args {
    sizes_mb: Vec<u64>,
    entries: u64,
    dir: PathBuf,
    catchup: bool,
}

fn args() -> Args {
    let mut a = Args {
        sizes_mb: vec![100, 1024],
        entries: 1_000_000,
        dir: std::env::temp_dir().join("keel-snapbench"),
        catchup: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--sizes-mb" => {
                a.sizes_mb = it
                    .next()
                    .expect("--sizes-mb N,M")
                    .split(',')
                    .map(|s| s.parse().expect("a size in MB"))
                    .collect()
            }
            "--entries" => a.entries = it.next().expect("--entries N").parse().unwrap(),
            "--dir" => a.dir = it.next().expect("--dir PATH").into(),
            "--skip-catchup" => a.catchup = false,
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn fresh(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    dir.to_owned()
}

/// Raw sequential write of `bytes` in 1 MiB writes, then one fdatasync: MB/s.
fn disk_rate(dir: &Path, bytes: u64) -> f64 {
    let path = dir.join("raw.bin");
    let block = vec![0x5Au8; 1 << 20];
    let started = Instant::now();
    let mut f = std::fs::File::create(&path).unwrap();
    let mut written = 0;
    while written < bytes {
        let n = (bytes - written).min(block.len() as u64) as usize;
        f.write_all(&block[..n]).unwrap();
        written += n as u64;
    }
    f.sync_data().unwrap();
    let secs = started.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(&path).unwrap();
    bytes as f64 / MB / secs
}

fn meta(index: u64) -> SnapshotMeta {
    SnapshotMeta {
        last: LogId::new(1, index),
        membership: Arc::new(Membership::new_voters([1, 2])),
        term_history: vec![LogId::new(1, 1)],
    }
}

/// Creation (view on the "apply thread", then serialize + fsync on another) and loopback
/// transfer of a state of `size_mb`.
#[expect(clippy::too_many_lines)]
async fn size_run(root: &Path, size_mb: u64) {
    let dir = fresh(&root.join(format!("size-{size_mb}")));
    let (src, dst) = (fresh(&dir.join("src")), fresh(&dir.join("dst")));
    let disk = disk_rate(&dir, size_mb * 1_000_000);

    // 1 KiB values: the state is `size_mb` MB of data in size_mb * 1000 entries.
    let value = 1000usize;
    let n = size_mb * 1_000_000 / value as u64;
    let mut sm = Blob::default();
    let payload = vec![0xA5u8; value];
    for i in 1..=n {
        let mut v = payload.clone();
        v[..8].copy_from_slice(&i.to_le_bytes());
        sm.apply(LogId::new(1, i), &Bytes::from(v))
            .expect("applies");
    }

    let started = Instant::now();
    let view = sm.snapshot_view();
    let view_time = started.elapsed();
    let (path, write_time) = {
        let meta = meta(n);
        let src = src.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut w = keel_wal::create_snapshot_file(&keel_wal::StdFs, &src, &meta).unwrap();
            view.write_to(&mut w).unwrap();
            let path = w.finish().unwrap();
            (path, started.elapsed())
        })
        .await
        .unwrap()
    };
    let file_bytes = std::fs::metadata(&path).unwrap().len();
    drop(sm);

    let (a_tx, _a_rx) = mpsc::channel(16);
    let a = Transport::bind(
        TransportConfig::new(7, 1),
        "127.0.0.1:0".parse().unwrap(),
        a_tx,
    )
    .await
    .unwrap();
    let (b_tx, mut b_rx) = mpsc::channel(16);
    let mut config = TransportConfig::new(7, 2);
    config.snapshot_dir = Some(dst.clone());
    let b = Transport::bind(config, "127.0.0.1:0".parse().unwrap(), b_tx)
        .await
        .unwrap();
    a.set_peer(2, b.local_addr());
    let started = Instant::now();
    a.send_snapshot(0, 2, 1, meta(n), path.clone())
        .await
        .unwrap();
    // The connection's handshake announces the sender's address first; only the snapshot counts.
    let received = loop {
        match b_rx.recv().await.unwrap() {
            Inbound::Snapshot { path, .. } => break path,
            Inbound::PeerAddress { .. } => continue,
            other => panic!("unexpected {other:?}"),
        }
    };
    let transfer_time = started.elapsed();
    assert_eq!(std::fs::metadata(&received).unwrap().len(), file_bytes);
    println!(
        "state {size_mb:>5} MB ({n} entries of {value} B, file {:.1} MB): disk raw write+fsync {disk:>7.1} MB/s | \
         view (apply pause) {:>8.1} ms | serialize+fsync {:>6.2} s = {:>7.1} MB/s | loopback transfer \
         (chunked, receiver fsync + verify) {:>6.2} s = {:>7.1} MB/s",
        file_bytes as f64 / MB,
        view_time.as_secs_f64() * 1000.0,
        write_time.as_secs_f64(),
        file_bytes as f64 / MB / write_time.as_secs_f64(),
        transfer_time.as_secs_f64(),
        file_bytes as f64 / MB / transfer_time.as_secs_f64(),
    );
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn node_config(
    dir: &Path,
    id: NodeId,
    addrs: &BTreeMap<NodeId, SocketAddr>,
    by_snapshot: bool,
) -> NodeConfig {
    let mut c = NodeConfig::new(id, 9, dir.join(format!("n{id}")));
    c.peer_listen_addr = addrs[&id];
    c.peers = addrs.clone();
    c.initial_members = vec![1, 2, 3];
    c.raft.election_timeout_ticks = 100;
    c.raft.heartbeat_interval_ticks = 5;
    if by_snapshot {
        c.snapshot_threshold_entries = 100_000;
        c.raft.snapshot_trailing_entries = 1024;
    } else {
        c.snapshot_threshold_entries = u64::MAX / 2;
        c.raft.snapshot_trailing_entries = u64::MAX / 2;
        c.raft.uncommitted_entries_max = 1 << 22;
    }
    c
}

async fn leader(nodes: &BTreeMap<NodeId, Node<Blob>>) -> NodeId {
    loop {
        for (&id, n) in nodes {
            if let Ok(s) = n.handle().status().await {
                if s.serving && s.raft.role == Role::Leader {
                    return id;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A follower misses `entries` entries of 100 bytes, then restarts: time until it has applied
/// the leader's commit index.
#[expect(clippy::too_many_lines)]
async fn catchup_run(root: &Path, entries: u64, by_snapshot: bool) {
    let dir = fresh(&root.join(if by_snapshot {
        "catchup-snap"
    } else {
        "catchup-log"
    }));
    let addrs: BTreeMap<NodeId, SocketAddr> = (1..=3).map(|id| (id, free_addr())).collect();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let n = Node::start(node_config(&dir, id, &addrs, by_snapshot), Blob::default())
            .await
            .unwrap();
        nodes.insert(id, n);
    }
    let l = leader(&nodes).await;
    let follower = (1..=3).find(|id| *id != l).unwrap();
    nodes.remove(&follower).unwrap().stop().await;

    let started = Instant::now();
    let handle = nodes[&l].handle();
    let batch = 1024u64;
    let mut proposed = 0;
    let mut in_flight = std::collections::VecDeque::new();
    while proposed < entries {
        let n = batch.min(entries - proposed);
        let data: Vec<Bytes> = (0..n)
            .map(|i| {
                let mut v = vec![0x42u8; 100];
                v[..8].copy_from_slice(&(proposed + i).to_le_bytes());
                Bytes::from(v)
            })
            .collect();
        in_flight.push_back(handle.propose_batch(data).await);
        proposed += n;
        if in_flight.len() >= 16 {
            for p in in_flight.pop_front().unwrap() {
                match p.wait().await {
                    Ok(_) | Err(ClientError::Busy(_)) => {}
                    Err(e) => panic!("proposal failed: {e}"),
                }
            }
        }
    }
    for ps in in_flight {
        for p in ps {
            let _ = p.wait().await;
        }
    }
    let load_time = started.elapsed();
    let target = handle.status().await.unwrap().raft.commit;

    let started = Instant::now();
    let n = Node::start(
        node_config(&dir, follower, &addrs, by_snapshot),
        Blob::default(),
    )
    .await
    .unwrap();
    let h = n.handle();
    loop {
        if let Ok(s) = h.status().await {
            if s.raft.applied >= target {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let catchup = started.elapsed();
    let s = h.status().await.unwrap();
    let stats = n.snapshot_transfer_stats();
    println!(
        "catch-up {} after missing {entries} entries of 100 B (loaded in {:.1} s): {:.2} s to apply \
         index {target} (follower snapshot at {}, snapshot bytes received {})",
        if by_snapshot { "by snapshot" } else { "by log     " },
        load_time.as_secs_f64(),
        catchup.as_secs_f64(),
        s.raft.snapshot.index,
        stats.bytes_received,
    );
    drop(n);
    drop(nodes);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let a = args();
    let root = fresh(&a.dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for &size in &a.sizes_mb {
            size_run(&root, size).await;
        }
        if a.catchup {
            catchup_run(&root, a.entries, false).await;
            catchup_run(&root, a.entries, true).await;
        }
    });
    let _ = std::fs::remove_dir_all(&root);
}
