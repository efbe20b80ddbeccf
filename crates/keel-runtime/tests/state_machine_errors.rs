//! What a state machine's errors do (`ApplyError`, `RestoreError`): a refusal reaches the
//! proposer and changes nothing; a fatal error stops the node before the entry counts as applied,
//! so a restart applies it again; a failed restore refuses to start and keeps the snapshot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_core::LogId;
use keel_runtime::{
    ApplyError, ClientError, Handle, Node, NodeFailure, RestoreError, SnapshotWriter, StartError,
    StateMachine,
};

mod common;

const WAIT: Duration = Duration::from_secs(20);

/// Counts the entries it applied; refuses `no`; fails on `fatal` and on restore while its
/// switches say so (as a state machine whose own database went away would).
#[derive(Clone, Default)]
struct Picky {
    count: u64,
    fail_apply: Arc<AtomicBool>,
    fail_restore: Arc<AtomicBool>,
}

impl StateMachine for Picky {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        match &data[..] {
            b"no" => return Err(ApplyError::Refused(Bytes::from_static(b"no thanks"))),
            b"fatal" if self.fail_apply.load(Ordering::SeqCst) => {
                return Err(ApplyError::Fatal("its database is gone".into()))
            }
            _ => {}
        }
        self.count += 1;
        Ok(Bytes::copy_from_slice(&self.count.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.count.to_le_bytes().to_vec())
    }

    fn restore(
        &mut self,
        _last: LogId,
        reader: &mut dyn std::io::Read,
    ) -> Result<(), RestoreError> {
        let mut data = Vec::new();
        reader.read_to_end(&mut data)?;
        let data = &data[..];
        if self.fail_restore.load(Ordering::SeqCst) {
            return Err(RestoreError("its database is gone".into()));
        }
        self.count = u64::from_le_bytes(data.try_into().expect("8 bytes"));
        Ok(())
    }
}

async fn leading(dir: &std::path::Path, sm: &Picky) -> (Node<Picky>, Handle<Picky>) {
    common::one_voter(dir, || sm.clone(), WAIT).await
}

async fn count(handle: &Handle<Picky>) -> u64 {
    handle.read(|sm: &Picky| sm.count).await.expect("a read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_reaches_the_proposer_and_changes_nothing() {
    let dir = common::scratch_dir("refusal");
    let (node, handle) = leading(&dir, &Picky::default()).await;
    handle
        .propose(Bytes::from_static(b"a"))
        .await
        .expect("applied");
    let before = handle.status().await.expect("status").raft.applied;
    assert_eq!(
        handle.propose(Bytes::from_static(b"no")).await,
        Err(ClientError::Refused(Bytes::from_static(b"no thanks")))
    );
    // Applied (the index moved on), and refused (the state did not).
    assert!(handle.status().await.expect("status").raft.applied > before);
    assert_eq!(count(&handle).await, 1);
    handle
        .propose(Bytes::from_static(b"b"))
        .await
        .expect("applied");
    assert_eq!(count(&handle).await, 2);
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_apply_stops_the_node_and_a_restart_applies_the_entry_again() {
    let dir = common::scratch_dir("fatal-apply");
    let sm = Picky::default();
    sm.fail_apply.store(true, Ordering::SeqCst);
    let (node, handle) = leading(&dir, &sm).await;
    handle
        .propose(Bytes::from_static(b"a"))
        .await
        .expect("applied");
    assert!(handle.propose(Bytes::from_static(b"fatal")).await.is_err());
    let failure = tokio::time::timeout(WAIT, node.failed())
        .await
        .expect("stops");
    let NodeFailure::StateMachine { index, message } = failure else {
        panic!("expected the state machine's failure, got {failure}");
    };
    assert_eq!(message, "its database is gone");
    node.stop().await;

    // Its database back, the node applies the entry it stopped on: nothing was skipped.
    sm.fail_apply.store(false, Ordering::SeqCst);
    let (node, handle) = leading(&dir, &Picky::default()).await;
    // The read waits for everything committed before it, the entry it stopped on included.
    assert_eq!(count(&handle).await, 2, "a and fatal");
    assert!(handle.status().await.expect("status").raft.applied >= index);
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_restore_refuses_to_start_and_keeps_the_snapshot() {
    let dir = common::scratch_dir("fatal-restore");
    let (node, handle) = leading(&dir, &Picky::default()).await;
    for _ in 0..3 {
        handle
            .propose(Bytes::from_static(b"a"))
            .await
            .expect("applied");
    }
    let snapshot = handle.snapshot_now().await.expect("a snapshot");
    node.shutdown().await;

    let broken = Picky::default();
    broken.fail_restore.store(true, Ordering::SeqCst);
    match Node::start(common::one_voter_config(&dir), broken).await {
        Err(e @ StartError::StateMachine { index, .. }) => {
            assert_eq!(index, snapshot);
            assert!(!e.is_retryable());
        }
        Err(other) => panic!("expected the restore's failure, got {other}"),
        Ok(_) => panic!("started on a state machine that could not restore"),
    }
    // The snapshot is still there for the next start.
    let (node, handle) = leading(&dir, &Picky::default()).await;
    assert_eq!(count(&handle).await, 3);
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}
