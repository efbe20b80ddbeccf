//! What became of a proposal, asked by its `LogId` (`Handle::propose_tracked`,
//! `Handle::commit_status`): exact after compaction, and a proposal whose caller gave up while it
//! was queued is never proposed.

use std::time::Duration;

use bytes::Bytes;
use keel_core::{CommitStatus, LogId};
use keel_runtime::ClientError;

mod common;

use common::Count;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_status_is_exact_for_compacted_entries() {
    let dir = common::scratch_dir("commit-status");
    let (node, handle) = common::one_voter(&dir, Count::default, WAIT).await;
    let first = handle
        .propose_tracked(Bytes::from_static(b"a"))
        .await
        .expect("appended");
    let id = first.log_id();
    assert_eq!(first.wait().await.expect("applied")[..], 1u64.to_le_bytes());
    assert_eq!(handle.commit_status(id).await, Ok(CommitStatus::Committed));

    // Compacted into a snapshot, the entry is still known to have committed, and another term
    // at its index is known not to have.
    for _ in 0..5 {
        handle
            .propose(Bytes::from_static(b"b"))
            .await
            .expect("applied");
    }
    let snapshot = handle.snapshot_now().await.expect("a snapshot");
    assert!(snapshot >= id.index + 5, "snapshot at {snapshot}");
    for _ in 0..3 {
        handle
            .propose(Bytes::from_static(b"c"))
            .await
            .expect("applied");
    }
    let status = handle.status().await.expect("status");
    assert!(
        status.raft.snapshot.index >= id.index,
        "compacted: {:?}",
        status.raft
    );
    assert_eq!(handle.commit_status(id).await, Ok(CommitStatus::Committed));
    let other_term = LogId {
        index: id.index,
        term: id.term + 1,
    };
    assert_eq!(
        handle.commit_status(other_term).await,
        Ok(CommitStatus::Overwritten)
    );
    let beyond = LogId {
        index: status.raft.last_log_id.index + 10,
        term: id.term,
    };
    assert_eq!(
        handle.commit_status(beyond).await,
        Ok(CommitStatus::Unknown)
    );

    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_whose_deadline_passed_in_the_queue_is_never_proposed() {
    let dir = common::scratch_dir("not-proposed");
    let (node, handle) = common::one_voter(&dir, Count::default, WAIT).await;
    handle
        .propose(Bytes::from_static(b"a"))
        .await
        .expect("applied");
    let before = handle.status().await.expect("status").raft.last_log_id;

    // Every request of this handle is past its deadline by the time the node takes it.
    let hurried = handle.with_request_timeout(Duration::ZERO);
    for _ in 0..20 {
        assert!(matches!(
            hurried.propose_tracked(Bytes::from_static(b"late")).await,
            Err(ClientError::NotProposed)
        ));
        assert!(hurried.propose(Bytes::from_static(b"late")).await.is_err());
        for pending in hurried
            .propose_batch(vec![Bytes::from_static(b"late")])
            .await
        {
            assert!(pending.wait().await.is_err());
        }
    }
    // Nothing was appended behind the callers' backs; the node serves on.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        handle.status().await.expect("status").raft.last_log_id,
        before
    );
    let total = handle
        .propose(Bytes::from_static(b"b"))
        .await
        .expect("applied");
    assert_eq!(total[..], 2u64.to_le_bytes());

    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}
