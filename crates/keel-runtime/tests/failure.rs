//! A node that cannot go on stops alone and says why; the process lives on (`failure.rs`): a
//! panicking state machine, a panic in the node task, a storage step that fails. Each is a real
//! fault of a real node (one voter, loopback), not a simulated one. Unless the process asked to
//! end with its node (`exit_on_failure`): then it exits with the failure's code, checked on a
//! child process.

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

/// Where `exit_on_failure_child` keeps its node: set only when the test below runs it.
const CHILD_DIR: &str = "KEEL_FAILURE_CHILD_DIR";

/// The child process of the test below (ignored: it runs only when that test starts it). Its
/// storage fails with `exit_on_failure` installed: the process must exit with 70, never reach
/// the end of this function.
#[test]
#[ignore = "run by exit_on_failure_ends_the_process_with_the_failures_code"]
fn exit_on_failure_child() {
    let dir = std::path::PathBuf::from(std::env::var(CHILD_DIR).expect("started by the test"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (node, handle) = common::one_voter(&dir, Fragile::default, WAIT).await;
        keel_runtime::exit_on_failure(&node);
        handle.propose(Bytes::from_static(b"one")).await.unwrap();
        std::fs::remove_dir_all(&dir).expect("remove the data directory");
        let _ = handle.snapshot_now().await;
        tokio::time::sleep(WAIT).await;
    });
    println!("the process outlived its node");
}

#[test]
fn exit_on_failure_ends_the_process_with_the_failures_code() {
    let dir = common::scratch_dir("exit-on-failure");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "exit_on_failure_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DIR, &dir)
        .output()
        .expect("run the child");
    let stderr = String::from_utf8_lossy(&child.stderr);
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert_eq!(
        child.status.code(),
        Some(70),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("keel: the node stopped: ") && stderr.contains("write a snapshot"),
        "{stderr}"
    );
    assert!(!stdout.contains("outlived"), "{stdout}");
    common::remove_scratch_dir(&dir);
}
