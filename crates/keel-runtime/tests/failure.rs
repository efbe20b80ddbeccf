//! A node that cannot go on stops alone and says why; the process lives on (`failure.rs`): a
//! panicking state machine, a panic in the node task, a storage step that fails. Each is a real
//! fault of a real node (one voter, loopback), not a simulated one.

use std::time::Duration;

use bytes::Bytes;
use keel_core::LogId;
use keel_runtime::{ClientError, Node, NodeFailure, SnapshotWriter, StateMachine};

mod common;

const WAIT: Duration = Duration::from_secs(20);

/// Counts entries; panics on the entry `boom`.
#[derive(Default)]
struct Fragile {
    applied: u64,
}

impl StateMachine for Fragile {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, keel_runtime::ApplyError> {
        assert_ne!(&data[..], b"boom", "the state machine met boom");
        self.applied += 1;
        Ok(Bytes::copy_from_slice(&self.applied.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.applied.to_le_bytes().to_vec())
    }

    fn restore(
        &mut self,
        _last: keel_core::LogId,
        reader: &mut dyn std::io::Read,
    ) -> Result<(), keel_runtime::RestoreError> {
        let mut applied = [0u8; 8];
        reader.read_exact(&mut applied)?;
        self.applied = u64::from_le_bytes(applied);
        Ok(())
    }
}

async fn one_voter(name: &str) -> (Node<Fragile>, std::path::PathBuf) {
    let dir = common::scratch_dir(name);
    let (node, _) = common::one_voter(&dir, Fragile::default, WAIT).await;
    (node, dir)
}

async fn failure_of(node: &Node<Fragile>) -> NodeFailure {
    tokio::time::timeout(WAIT, node.failed())
        .await
        .expect("the node stops within the deadline")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_state_machine_stops_the_node_not_the_process() {
    let (node, dir) = one_voter("sm-panic").await;
    let handle = node.handle();
    handle
        .propose(Bytes::from_static(b"one"))
        .await
        .expect("applied");
    assert_eq!(node.failure(), None);

    let answer = handle.propose(Bytes::from_static(b"boom")).await;
    assert!(
        answer.is_err(),
        "a proposal whose apply panicked: {answer:?}"
    );
    match failure_of(&node).await {
        NodeFailure::Panicked { message, .. } => {
            assert!(message.contains("the state machine met boom"), "{message}");
        }
        other => panic!("expected a panic, got {other}"),
    }
    // Stopped for good: nothing is served, and the answer says so.
    assert_eq!(
        handle.propose(Bytes::from_static(b"two")).await,
        Err(ClientError::Shutdown)
    );
    assert_eq!(node.failure().map(|f| f.exit_code()), Some(70));
    node.stop().await;
    common::remove_scratch_dir(&dir);
}

// `Handle::debug_panic` is a test hook behind the `debug-hooks` feature, which the workspace's
// builds of these tests turn on (a dev-dependency); a build from the published crate may not.
#[cfg(feature = "debug-hooks")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_node_task_stops_the_node() {
    let (node, dir) = one_voter("task-panic").await;
    let mut watch = node.handle().watch();
    let _ = node.handle().debug_panic().await;
    assert!(matches!(
        failure_of(&node).await,
        NodeFailure::Panicked {
            thread: "the node task",
            ..
        }
    ));
    // Watchers learn that the node is gone.
    assert!(tokio::time::timeout(WAIT, watch.changed())
        .await
        .expect("the watch ends")
        .is_err());
    node.stop().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_storage_step_stops_the_node() {
    let (node, dir) = one_voter("storage").await;
    let handle = node.handle();
    handle
        .propose(Bytes::from_static(b"one"))
        .await
        .expect("applied");
    // The data directory vanishes under the node: the snapshot file cannot be created.
    std::fs::remove_dir_all(&dir).expect("remove the data directory");
    let _ = handle.snapshot_now().await;
    match failure_of(&node).await {
        NodeFailure::Storage { what, .. } => assert_eq!(what, "write a snapshot"),
        other => panic!("expected a storage failure, got {other}"),
    }
    assert_eq!(
        handle.propose(Bytes::from_static(b"two")).await,
        Err(ClientError::Shutdown)
    );
    node.stop().await;
    common::remove_scratch_dir(&dir);
}
