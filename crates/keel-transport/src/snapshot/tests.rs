//! The chunk protocol of the snapshot channel, driven over in-memory pipes: one side real, the
//! other written frame by frame.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_core::{LogId, Membership, SnapshotMeta};
use keel_wal::{FileHandle, Fs, StdFs};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

use keel_engine::transfer::partial;

use crate::snapshot::{self, SharedReceiver, SnapshotCounters};
use crate::wire::{
    AckStatus, ChunkHeader, PositionStatus, SnapshotId, SnapshotOffer, SNAPSHOT_CHANNEL_VERSION,
    SNAPSHOT_CONTROL_FRAME_BYTES_MAX,
};
use crate::*;

const CHUNK: u32 = 1000;

/// A fresh directory under the system temp dir, unique to this process and call, removed when
/// dropped.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> TempDir {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "keel-snapchunk-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

fn meta(index: u64) -> SnapshotMeta {
    SnapshotMeta {
        last: LogId::new(2, index),
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1), LogId::new(2, 5)],
    }
}

/// A snapshot file of `data_len` bytes of data at `index`; returns its path and bytes.
fn snapshot_file(dir: &std::path::Path, index: u64, data_len: usize) -> (PathBuf, Vec<u8>) {
    let mut w = keel_wal::create_snapshot_file(&StdFs, dir, &meta(index)).unwrap();
    let data: Vec<u8> = (0..data_len).map(|i| (i * 7 % 251) as u8).collect();
    std::io::Write::write_all(&mut w, &data).unwrap();
    let path = w.finish().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

struct Receiver {
    config: TransportConfig,
    dir: PathBuf,
    state: SharedReceiver,
    counters: Arc<SnapshotCounters>,
    floor: Arc<AtomicU64>,
    inbound: mpsc::Sender<Inbound>,
    inbound_rx: mpsc::Receiver<Inbound>,
}

impl Receiver {
    fn new(dir: &std::path::Path) -> Receiver {
        let mut config = TransportConfig::new(1, 2);
        config.snapshot_dir = Some(dir.to_owned());
        config.snapshot_chunk_size_bytes = CHUNK;
        config.snapshot_chunk_size_bytes_max = 4 * CHUNK;
        config.snapshot_sync_interval_bytes = 2 * CHUNK as u64;
        config.snapshot_timeout_ms = 5_000;
        let (inbound, inbound_rx) = mpsc::channel(4);
        Receiver {
            state: snapshot::shared_receiver(&config),
            config,
            dir: dir.to_owned(),
            counters: Arc::default(),
            floor: Arc::default(),
            inbound,
            inbound_rx,
        }
    }

    /// Like a restart: the same directory, nothing in memory.
    fn restarted(&self) -> Receiver {
        Receiver::new(&self.dir)
    }

    /// Serves one connection on a task; returns the other end.
    fn connect(
        &self,
    ) -> (
        DuplexStream,
        tokio::task::JoinHandle<Result<(), TransportError>>,
    ) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (c, st, k, f, tx) = (
            self.config.clone(),
            self.state.clone(),
            self.counters.clone(),
            self.floor.clone(),
            self.inbound.clone(),
        );
        let task = tokio::spawn(async move {
            let (mut rd, wr) = tokio::io::split(ours);
            let mut wr = FrameWriter::plain(wr);
            snapshot::receive(&c, &st, &k, &f, 1, &mut rd, &mut wr, &tx).await
        });
        (theirs, task)
    }
}

fn id(index: u64, leader_term: u64) -> SnapshotId {
    SnapshotId {
        leader_term,
        index,
        term: 2,
    }
}

async fn offer(s: &mut DuplexStream, id: SnapshotId, total: u64) -> (PositionStatus, u64) {
    let mut buf = Vec::new();
    wire::encode_offer(
        &SnapshotOffer {
            version: SNAPSHOT_CHANNEL_VERSION,
            group: 0,
            id,
            total_len_bytes: total,
        },
        &mut buf,
    );
    s.write_all(&buf).await.unwrap();
    match read_frame(s, SNAPSHOT_CONTROL_FRAME_BYTES_MAX)
        .await
        .unwrap()
    {
        Some(Body::SnapshotPosition(p)) => (p.status, p.offset),
        other => panic!("expected a position, got {other:?}"),
    }
}

/// Sends the chunk of `bytes` at `offset` (`corrupt`: one data byte flipped after the CRC).
async fn chunk(s: &mut DuplexStream, id: SnapshotId, bytes: &[u8], offset: usize, corrupt: bool) {
    let end = (offset + CHUNK as usize).min(bytes.len());
    let mut data = bytes[offset..end].to_vec();
    let header = ChunkHeader {
        id,
        offset: offset as u64,
        len_bytes: data.len() as u32,
        crc: crc32c::crc32c(&data),
        last: (end == bytes.len()).then(|| (bytes.len() as u64, crc32c::crc32c(bytes))),
    };
    if corrupt {
        data[0] ^= 1;
    }
    let mut buf = Vec::new();
    wire::encode_chunk_header(&header, &mut buf);
    buf.extend_from_slice(&data);
    s.write_all(&buf).await.unwrap();
}

async fn ack(s: &mut DuplexStream) -> (AckStatus, u64) {
    match read_frame(s, SNAPSHOT_CONTROL_FRAME_BYTES_MAX)
        .await
        .unwrap()
    {
        Some(Body::SnapshotAck(a)) => (a.status, a.received),
        other => panic!("expected an ack, got {other:?}"),
    }
}

/// The real sender over a pipe to `r`, for `path`.
async fn send_with_sender(r: &Receiver, path: &std::path::Path, id: SnapshotId) {
    let (theirs, task) = r.connect();
    let (rd, wr) = tokio::io::split(theirs);
    let file = Arc::new(StdFs.open(path).unwrap());
    let offer = SnapshotOffer {
        version: SNAPSHOT_CHANNEL_VERSION,
        group: 0,
        id,
        total_len_bytes: file.len_bytes().unwrap(),
    };
    let counters = SnapshotCounters::default();
    snapshot::stream_to(
        &r.config,
        &counters,
        rd,
        FrameWriter::plain(wr),
        offer,
        file,
    )
    .await
    .unwrap();
    task.await.unwrap().unwrap();
}

async fn expect_handed(r: &mut Receiver, bytes: &[u8], index: u64) {
    match r.inbound_rx.recv().await.unwrap() {
        Inbound::Snapshot {
            group: 0,
            from,
            term,
            meta: m,
            path,
        } => {
            assert_eq!((from, m), (1, meta(index)));
            assert!(term > 0);
            assert_eq!(std::fs::read(&path).unwrap(), bytes);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        partial::peek(&StdFs, &r.dir).is_none(),
        "no partial left behind"
    );
}

#[tokio::test]
async fn a_snapshot_streams_in_chunks_and_is_handed_over_verified() {
    let src = temp_dir("src");
    let (path, bytes) = snapshot_file(&src, 10, 20_500);
    let dst = temp_dir("dst");
    let mut r = Receiver::new(&dst);
    send_with_sender(&r, &path, id(10, 3)).await;
    expect_handed(&mut r, &bytes, 10).await;
    let stats = r.counters.get();
    assert_eq!(stats.bytes_received, bytes.len() as u64);
    assert_eq!((stats.receives_completed, stats.resumed), (1, 0));
}

#[tokio::test]
async fn a_snapshot_at_or_below_the_commit_index_or_just_received_is_not_needed() {
    let src = temp_dir("src");
    let (path, bytes) = snapshot_file(&src, 10, 2_000);
    let dst = temp_dir("dst");
    let mut r = Receiver::new(&dst);
    send_with_sender(&r, &path, id(10, 3)).await;
    expect_handed(&mut r, &bytes, 10).await;
    // Offered again before the install answer reached the leader.
    let (mut s, task) = r.connect();
    assert_eq!(
        offer(&mut s, id(10, 3), bytes.len() as u64).await.0,
        PositionStatus::NotNeeded
    );
    task.await.unwrap().unwrap();
    // At or below the node's commit index.
    r.floor.store(20, Ordering::Relaxed);
    let (mut s, task) = r.connect();
    assert_eq!(
        offer(&mut s, id(20, 3), 100).await.0,
        PositionStatus::NotNeeded
    );
    task.await.unwrap().unwrap();
    assert!(partial::peek(&StdFs, &r.dir).is_none());
}

#[tokio::test]
async fn a_corrupt_chunk_is_refused_with_the_offset_held_and_resent() {
    let src = temp_dir("src");
    let (_, bytes) = snapshot_file(&src, 10, 5_000);
    let dst = temp_dir("dst");
    let mut r = Receiver::new(&dst);
    let (mut s, task) = r.connect();
    let id = id(10, 3);
    assert_eq!(
        offer(&mut s, id, bytes.len() as u64).await,
        (PositionStatus::Continue, 0)
    );
    chunk(&mut s, id, &bytes, 0, false).await;
    assert_eq!(ack(&mut s).await, (AckStatus::Accepted, CHUNK as u64));
    // A corrupt chunk, then one already in flight behind it: one refusal naming the offset held,
    // the chunk behind it skipped without an answer.
    chunk(&mut s, id, &bytes, CHUNK as usize, true).await;
    chunk(&mut s, id, &bytes, 2 * CHUNK as usize, false).await;
    assert_eq!(ack(&mut s).await, (AckStatus::Resend, CHUNK as u64));
    let mut at = CHUNK as usize;
    while at < bytes.len() {
        chunk(&mut s, id, &bytes, at, false).await;
        at += CHUNK as usize;
        let expected = if at >= bytes.len() {
            (AckStatus::Complete, bytes.len() as u64)
        } else {
            (AckStatus::Accepted, at as u64)
        };
        assert_eq!(ack(&mut s).await, expected);
    }
    task.await.unwrap().unwrap();
    expect_handed(&mut r, &bytes, 10).await;
    assert_eq!(r.counters.get().chunks_refused, 1);
}

#[tokio::test]
async fn a_truncated_stream_resumes_from_the_durable_offset_also_after_a_restart() {
    let src = temp_dir("src");
    let (path, bytes) = snapshot_file(&src, 10, 9_000);
    let dst = temp_dir("dst");
    let r = Receiver::new(&dst);
    let id = id(10, 3);
    let (mut s, task) = r.connect();
    offer(&mut s, id, bytes.len() as u64).await;
    for i in 0..3 {
        chunk(&mut s, id, &bytes, i * CHUNK as usize, false).await;
        assert_eq!(ack(&mut s).await.0, AckStatus::Accepted);
    }
    // Half a chunk, then the connection drops.
    let mut buf = Vec::new();
    let header = ChunkHeader {
        id,
        offset: 3 * CHUNK as u64,
        len_bytes: CHUNK,
        crc: 0,
        last: None,
    };
    wire::encode_chunk_header(&header, &mut buf);
    buf.extend_from_slice(&bytes[3000..3500]);
    s.write_all(&buf).await.unwrap();
    drop(s);
    assert!(
        task.await.unwrap().is_err(),
        "a truncated chunk is an error"
    );

    // Same receiver, new connection (a dropped link or a new leader with the same snapshot):
    // resumes where it was, made durable before it answers.
    let (mut s, task) = r.connect();
    assert_eq!(
        offer(
            &mut s,
            SnapshotId {
                leader_term: 4,
                ..id
            },
            bytes.len() as u64
        )
        .await,
        (PositionStatus::Continue, 3 * CHUNK as u64)
    );
    drop(s);
    let _ = task.await.unwrap();

    // A restarted receiver finds the same durable offset on disk and the transfer completes.
    let mut r = r.restarted();
    let (mut s, task) = r.connect();
    assert_eq!(
        offer(&mut s, id, bytes.len() as u64).await,
        (PositionStatus::Continue, 3 * CHUNK as u64)
    );
    drop(s);
    let _ = task.await.unwrap();
    send_with_sender(&r, &path, id).await;
    expect_handed(&mut r, &bytes, 10).await;
    let stats = r.counters.get();
    assert_eq!(stats.resumed, 2);
    assert_eq!(stats.bytes_received, bytes.len() as u64 - 3 * CHUNK as u64);
}

#[tokio::test]
async fn a_different_snapshot_discards_the_partial_and_a_stale_leader_is_refused() {
    let src = temp_dir("src");
    let (_, bytes) = snapshot_file(&src, 10, 5_000);
    let (path20, bytes20) = snapshot_file(&src, 20, 7_000);
    let dst = temp_dir("dst");
    let mut r = Receiver::new(&dst);
    let (mut s, task) = r.connect();
    offer(&mut s, id(10, 3), bytes.len() as u64).await;
    for i in 0..3 {
        chunk(&mut s, id(10, 3), &bytes, i * CHUNK as usize, false).await;
        ack(&mut s).await;
    }
    drop(s);
    let _ = task.await.unwrap();

    // A leader of an older term offering another snapshot is refused; the partial stays.
    let (mut s, task) = r.connect();
    assert_eq!(
        offer(&mut s, id(20, 2), bytes20.len() as u64).await,
        (PositionStatus::RefusedStale, 0)
    );
    task.await.unwrap().unwrap();
    assert_eq!(partial::peek(&StdFs, &r.dir).unwrap().0, id(10, 3));

    // A new leader's different snapshot: the partial is discarded, the new one starts at 0.
    let id20 = id(20, 4);
    let (mut s, task) = r.connect();
    assert_eq!(
        offer(&mut s, id20, bytes20.len() as u64).await,
        (PositionStatus::Continue, 0)
    );
    drop(s);
    let _ = task.await.unwrap();
    assert_eq!(partial::peek(&StdFs, &r.dir).unwrap(), (id20, 0));
    assert_eq!(r.counters.get().partials_discarded, 1);
    send_with_sender(&r, &path20, id20).await;
    expect_handed(&mut r, &bytes20, 20).await;
}

#[tokio::test]
async fn an_oversize_chunk_length_is_refused_before_allocating() {
    let dst = temp_dir("dst");
    let r = Receiver::new(&dst);
    let (mut s, task) = r.connect();
    let id = id(10, 3);
    assert_eq!(offer(&mut s, id, 1 << 30).await.0, PositionStatus::Continue);
    let mut buf = Vec::new();
    let header = ChunkHeader {
        id,
        offset: 0,
        len_bytes: u32::MAX,
        crc: 0,
        last: None,
    };
    wire::encode_chunk_header(&header, &mut buf);
    s.write_all(&buf).await.unwrap();
    match task.await.unwrap() {
        Err(TransportError::Wire(WireError::Oversize { len_bytes, .. })) => {
            assert_eq!(len_bytes, u32::MAX as u64)
        }
        other => panic!("expected an oversize refusal, got {other:?}"),
    }
    // And a snapshot larger than the receiver accepts is refused at the offer.
    let dst = temp_dir("dst");
    let mut r = Receiver::new(&dst);
    r.config.snapshot_size_bytes_max = 100;
    let (mut s, task) = r.connect();
    assert_eq!(
        offer(&mut s, id, 101).await.0,
        PositionStatus::RefusedTooLarge
    );
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_whole_checksum_mismatch_fails_and_discards_the_partial() {
    let src = temp_dir("src");
    let (_, bytes) = snapshot_file(&src, 10, 1_500);
    let dst = temp_dir("dst");
    let mut r = Receiver::new(&dst);
    let (mut s, task) = r.connect();
    let id = id(10, 3);
    offer(&mut s, id, bytes.len() as u64).await;
    chunk(&mut s, id, &bytes, 0, false).await;
    assert_eq!(ack(&mut s).await.0, AckStatus::Accepted);
    // The final chunk's own CRC is right, the whole CRC it carries is not.
    let data = &bytes[CHUNK as usize..];
    let header = ChunkHeader {
        id,
        offset: CHUNK as u64,
        len_bytes: data.len() as u32,
        crc: crc32c::crc32c(data),
        last: Some((bytes.len() as u64, crc32c::crc32c(&bytes) ^ 1)),
    };
    let mut buf = Vec::new();
    wire::encode_chunk_header(&header, &mut buf);
    buf.extend_from_slice(data);
    s.write_all(&buf).await.unwrap();
    assert_eq!(ack(&mut s).await.0, AckStatus::Failed);
    task.await.unwrap().unwrap();
    assert!(partial::peek(&StdFs, &r.dir).is_none());
    assert!(
        r.inbound_rx.try_recv().is_err(),
        "nothing handed to the node"
    );
}

/// Two connections stream the same snapshot (a deposed leader still sending while the new one
/// resumes): the later offer owns the partial file, the earlier connection's next chunk is
/// refused as superseded, and the owner's acknowledgements never run ahead of what it sent.
#[tokio::test]
async fn a_later_offer_of_the_same_snapshot_supersedes_the_earlier_connection() {
    let src = temp_dir("src");
    let (path, bytes) = snapshot_file(&src, 10, 9_000);
    let dst = temp_dir("dst");
    let mut r = Receiver::new(&dst);
    let (old_id, new_id) = (id(10, 3), id(10, 4));
    let total = bytes.len() as u64;
    let (mut old, old_task) = r.connect();
    offer(&mut old, old_id, total).await;
    for i in 0..2 {
        chunk(&mut old, old_id, &bytes, i * CHUNK as usize, false).await;
        assert_eq!(ack(&mut old).await.0, AckStatus::Accepted);
    }

    // The new leader resumes at what the file holds.
    let (mut new, new_task) = r.connect();
    assert_eq!(
        offer(&mut new, new_id, total).await,
        (PositionStatus::Continue, 2 * CHUNK as u64)
    );
    // The old connection's next chunk, at the file's end, is not written.
    chunk(&mut old, old_id, &bytes, 2 * CHUNK as usize, false).await;
    match old_task.await.unwrap() {
        Err(TransportError::Refused(why)) => assert!(why.contains("superseded"), "{why}"),
        other => panic!("expected the old connection superseded, got {other:?}"),
    }
    assert_eq!(partial::peek(&StdFs, &r.dir).unwrap().1, 2 * CHUNK as u64);

    // The owner goes on from where it was told and completes.
    let mut at = 2 * CHUNK as usize;
    while at < bytes.len() {
        chunk(&mut new, new_id, &bytes, at, false).await;
        let (status, received) = ack(&mut new).await;
        at = (at + CHUNK as usize).min(bytes.len());
        assert_eq!(received, at as u64);
        let expected = if at == bytes.len() {
            AckStatus::Complete
        } else {
            AckStatus::Accepted
        };
        assert_eq!(status, expected);
    }
    new_task.await.unwrap().unwrap();
    expect_handed(&mut r, &bytes, 10).await;
    drop(path);
}
