//! A state machine that keeps its state durably itself (`StateMachine::durable`): a restart
//! starts it where its durable state is and replays only what it lacks, also when a snapshot
//! was taken beyond it (the log keeps the entries after what it holds); a crash that loses its
//! unsynced writes loses nothing; a durable state that is not this log's refuses to start.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_core::LogId;
use keel_runtime::{
    ApplyError, Node, NodeConfig, RestoreError, SnapshotWriter, StartError, StateMachine,
};

const WAIT: Duration = Duration::from_secs(20);

/// How often `FileCounter` syncs its state to its file: every this many entries.
const SYNC_EVERY: u64 = 5;

/// Calls the state machine received, across its restarts.
#[derive(Default)]
struct Calls {
    applies: AtomicU64,
    restores: AtomicU64,
}

/// Counts entries, keeping the count and the last entry it reflects in its own file, written
/// (replaced whole) every [`SYNC_EVERY`] entries: what it applied since is lost in a crash, as a
/// database's unsynced writes are.
struct FileCounter {
    path: PathBuf,
    count: u64,
    last: LogId,
    synced: Option<LogId>,
    calls: Arc<Calls>,
}

impl FileCounter {
    /// Opens the counter's file: the state it holds durably, if any.
    fn open(path: &Path, calls: &Arc<Calls>) -> Self {
        let (count, synced) = match std::fs::read(path) {
            Ok(bytes) => {
                let word =
                    |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
                (word(0), Some(LogId::new(word(1), word(2))))
            }
            Err(_) => (0, None),
        };
        FileCounter {
            path: path.to_owned(),
            count,
            last: synced.unwrap_or(LogId::ZERO),
            synced,
            calls: Arc::clone(calls),
        }
    }

    fn sync(&mut self) {
        let bytes = [self.count, self.last.term, self.last.index]
            .map(u64::to_le_bytes)
            .concat();
        let temp = self.path.with_extension("tmp");
        std::fs::write(&temp, bytes).unwrap();
        std::fs::rename(&temp, &self.path).unwrap();
        self.synced = Some(self.last);
    }
}

impl StateMachine for FileCounter {
    fn apply(&mut self, at: LogId, _data: &Bytes) -> Result<Bytes, ApplyError> {
        self.calls.applies.fetch_add(1, Ordering::Relaxed);
        self.count += 1;
        self.last = at;
        if self.count % SYNC_EVERY == 0 {
            self.sync();
        }
        Ok(Bytes::copy_from_slice(&self.count.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.count.to_le_bytes().to_vec())
    }

    fn restore(&mut self, _last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError> {
        self.calls.restores.fetch_add(1, Ordering::Relaxed);
        let mut count = [0u8; 8];
        data.read_exact(&mut count)?;
        self.count = u64::from_le_bytes(count);
        // The restored state is durable only once synced; until then `durable` says what was.
        Ok(())
    }

    fn durable(&self) -> Option<LogId> {
        self.synced
    }
}

fn config(dir: &Path) -> NodeConfig {
    let mut config = common::one_voter_config(dir);
    // No entries kept below a snapshot but the ones the state machine lacks.
    config.raft.snapshot_trailing_entries = 0;
    // Small segments, so that a snapshot's purge deletes the sealed ones below it: one entry of
    // `ENTRY_BYTES` each.
    config.wal = keel_wal::WalConfig {
        segment_size_bytes: 16 << 10,
        frame_size_bytes_max: 4 << 10,
        entry_size_bytes_max: 12 << 10,
        ..keel_wal::WalConfig::default()
    };
    config
}

/// Each entry's size: a segment holds one.
const ENTRY_BYTES: usize = 9000;

async fn start(dir: &Path, calls: &Arc<Calls>) -> Node<FileCounter> {
    let sm = FileCounter::open(&dir.join("counter"), calls);
    let node = Node::start(config(dir), sm).await.expect("start");
    common::wait_leading(&node.handle(), WAIT).await;
    node
}

async fn add(node: &Node<FileCounter>, n: usize) {
    for _ in 0..n {
        node.handle()
            .propose(Bytes::from(vec![7; ENTRY_BYTES]))
            .await
            .unwrap();
    }
}

async fn count(node: &Node<FileCounter>) -> u64 {
    node.handle().read(|c: &FileCounter| c.count).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_replays_only_what_the_state_machine_lacks() {
    let dir = common::scratch_dir("durable-replay");
    std::fs::create_dir_all(&dir).unwrap();
    let calls = Arc::new(Calls::default());
    let node = start(&dir, &calls).await;
    add(&node, 12).await;
    // Stopped abruptly: the counter's last two entries were never synced, and are lost.
    node.stop().await;
    let applied_before = calls.applies.load(Ordering::Relaxed);
    assert_eq!(applied_before, 12);

    let node = start(&dir, &calls).await;
    assert_eq!(count(&node).await, 12, "the two lost entries are replayed");
    assert_eq!(
        calls.applies.load(Ordering::Relaxed) - applied_before,
        2,
        "only what the state machine lacked is applied again"
    );
    assert_eq!(calls.restores.load(Ordering::Relaxed), 0);
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_beyond_the_durable_state_keeps_the_log_it_lacks() {
    let dir = common::scratch_dir("durable-snapshot");
    std::fs::create_dir_all(&dir).unwrap();
    let calls = Arc::new(Calls::default());
    let node = start(&dir, &calls).await;
    add(&node, 12).await;
    let snapshot_at = node.handle().snapshot_now().await.unwrap();
    let status = node.handle().status().await.unwrap();
    assert_eq!(status.raft.snapshot.index, snapshot_at);
    // The purge the snapshot allows rides on the next writes.
    add(&node, 2).await;
    node.stop().await;
    let applied_before = calls.applies.load(Ordering::Relaxed);

    // The snapshot covers entries the counter's file does not (it holds 10 of 14): they were
    // kept in the log, and the counter catches up on them instead of restoring the snapshot.
    let node = start(&dir, &calls).await;
    assert_eq!(count(&node).await, 14);
    assert_eq!(calls.restores.load(Ordering::Relaxed), 0, "no restore");
    assert_eq!(calls.applies.load(Ordering::Relaxed) - applied_before, 4);
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_state_that_is_not_this_logs_refuses_to_start() {
    let dir = common::scratch_dir("durable-foreign");
    std::fs::create_dir_all(&dir).unwrap();
    let calls = Arc::new(Calls::default());
    let node = start(&dir, &calls).await;
    add(&node, 5).await;
    node.shutdown().await;
    let synced = FileCounter::open(&dir.join("counter"), &calls)
        .synced
        .unwrap();

    for (held, why) in [
        (LogId::new(synced.term + 7, synced.index), "has term"),
        (
            LogId::new(synced.term, synced.index + 1_000),
            "beyond this log",
        ),
    ] {
        let mut foreign = FileCounter::open(&dir.join("counter"), &calls);
        foreign.last = held;
        foreign.sync();
        let sm = FileCounter::open(&dir.join("counter"), &calls);
        match Node::start(config(&dir), sm).await {
            Err(e @ StartError::StateMachine { .. }) => {
                assert!(e.to_string().contains(why), "{e}");
            }
            Err(e) => panic!("refused for another reason: {e}"),
            Ok(_) => panic!("started a state machine holding {held}, which is not this log's"),
        }
    }
    common::remove_scratch_dir(&dir);
}
