//! What the loopback cluster tests share: free addresses, scratch directories, and the waits
//! (for a leader, a committed proposal, an applied index), each bounded by a deadline.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use keel_core::{Index, LogId, NodeId, Role};
use keel_runtime::{ClientError, Handle, Node, NodeConfig, StateMachine};

/// A loopback address for a node to bind later. Its port is drawn below the kernel's ephemeral
/// range (32768 and up by default): a port the kernel handed out as free could be handed again to
/// another test's outgoing connection before the node binds it (seen in CI: a node retried
/// `Address already in use` until its deadline). Below that range nothing is assigned
/// automatically; each process walks its own sequence (from its id) and checks each port by
/// binding it.
pub fn free_addr() -> SocketAddr {
    const FIRST_PORT: u64 = 10_000;
    const PORTS: u64 = 32_768 - FIRST_PORT;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = u64::from(std::process::id()).wrapping_mul(7_919) % PORTS;
    loop {
        let port = FIRST_PORT + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % PORTS;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port as u16)) {
            return l.local_addr().unwrap();
        }
    }
}

/// A fresh (emptied) directory under the system temp dir, unique to this process and call.
pub fn scratch_dir(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "keel-runtime-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Stops every node of a cluster — its storage and apply threads finished — and then removes
/// the cluster's directory. Dropping the nodes instead leaves their threads running on: one
/// still saving a snapshot into a directory being removed fails its I/O, and the node stops on
/// that storage error with a failure no test asked for. Needs the multi-thread runtime the tests
/// run on.
pub fn stop_nodes_and_remove_dir<S: keel_runtime::StateMachine>(
    nodes: &mut BTreeMap<NodeId, keel_runtime::Node<S>>,
    dir: &std::path::Path,
) {
    let nodes = std::mem::take(nodes);
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => tokio::task::block_in_place(|| {
            runtime.block_on(async {
                for (_, node) in nodes {
                    node.stop().await;
                }
            })
        }),
        Err(_) => drop(nodes),
    }
    remove_scratch_dir(dir);
}

/// Removes a cluster's directory once its nodes are dropped. A dropped node's threads may still be
/// finishing a file in it (a snapshot being written), so removal is retried for a while.
pub fn remove_scratch_dir(dir: &std::path::Path) {
    for _ in 0..40 {
        if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until a running node says it leads (and serves).
pub async fn leader<S: StateMachine>(nodes: &BTreeMap<NodeId, Node<S>>, wait: Duration) -> NodeId {
    tokio::time::timeout(wait, async {
        loop {
            for (&id, node) in nodes {
                if let Ok(s) = node.handle().status().await {
                    if s.serving && s.raft.role == Role::Leader {
                        return id;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leader was elected")
}

/// Proposes `data` at whichever node leads, retrying definite failures (a leader change, a
/// bound); returns the state machine's result.
pub async fn propose_at_leader<S: StateMachine>(
    nodes: &BTreeMap<NodeId, Node<S>>,
    data: Bytes,
    wait: Duration,
) -> Bytes {
    tokio::time::timeout(wait, async {
        loop {
            let id = leader(nodes, wait).await;
            match nodes[&id].handle().propose(data.clone()).await {
                Ok(result) => return result,
                Err(ClientError::NotLeader { .. }) | Err(ClientError::Busy(_)) => {}
                Err(e) => panic!("unexpected {e}"),
            }
        }
    })
    .await
    .expect("proposal committed")
}

/// Waits until the node behind `handle` applied `index` (`Handle::wait_applied`).
pub async fn wait_applied<S: StateMachine>(handle: &Handle<S>, index: Index, wait: Duration) {
    let applied = handle.with_request_timeout(wait).wait_applied(index).await;
    let applied = applied.unwrap_or_else(|e| panic!("applied {index} in time: {e}"));
    assert!(applied >= index);
}

/// Starts a node, retrying while its port is still being released after a stop.
pub async fn start_node<S: StateMachine>(
    config: impl Fn() -> NodeConfig,
    sm: impl Fn() -> S,
    wait: Duration,
) -> Node<S> {
    tokio::time::timeout(wait, async {
        loop {
            let id = config().id;
            match Node::start(config(), sm()).await {
                Ok(node) => break node,
                Err(e) => {
                    eprintln!("start {id}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await
    .expect("node started")
}

/// Waits until the node behind `handle` leads and serves (a cluster of one elects itself), as
/// its watch shows it.
pub async fn wait_leading<S: StateMachine>(handle: &Handle<S>, wait: Duration) {
    let mut view = handle.watch();
    tokio::time::timeout(wait, view.wait_for(|v| v.serving && v.role == Role::Leader))
        .await
        .expect("the node leads within the deadline")
        .expect("the node runs");
}

/// Counts the entries it applied; answers the count after each.
#[derive(Default)]
pub struct Count(pub u64);

impl StateMachine for Count {
    fn apply(&mut self, _at: LogId, _data: &Bytes) -> Result<Bytes, keel_runtime::ApplyError> {
        self.0 += 1;
        Ok(Bytes::copy_from_slice(&self.0.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn keel_runtime::SnapshotWriter> {
        Box::new(self.0.to_le_bytes().to_vec())
    }

    fn restore(
        &mut self,
        _last: LogId,
        data: &mut dyn std::io::Read,
    ) -> Result<(), keel_runtime::RestoreError> {
        let mut count = [0u8; 8];
        data.read_exact(&mut count)?;
        self.0 = u64::from_le_bytes(count);
        Ok(())
    }
}

/// Node 1 of a cluster of one, its data in `dir/n1`, on a loopback port of its own; its log keeps
/// nothing below a snapshot, so a test compacts as far as it snapshots.
pub fn one_voter_config(dir: &std::path::Path) -> NodeConfig {
    let mut config = NodeConfig::new(1, 7, dir.join("n1"));
    config.peer_listen_addr = free_addr();
    config.initial_members = vec![1];
    config.raft.snapshot_trailing_entries = 0;
    config
}

/// Starts the cluster of one of [`one_voter_config`] and waits until it leads.
pub async fn one_voter<S: StateMachine>(
    dir: &std::path::Path,
    sm: impl Fn() -> S,
    wait: Duration,
) -> (Node<S>, Handle<S>) {
    let node = start_node(|| one_voter_config(dir), sm, wait).await;
    let handle = node.handle();
    wait_leading(&handle, wait).await;
    (node, handle)
}
