//! A three-node cluster in one process over loopback TCP, with a tiny counter state machine.
//! Timeouts here bound hangs; nothing asserts a latency.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use keel_core::{Index, LogId, NodeId, Role};
use keel_runtime::{ClientError, Handle, Node, NodeConfig, StateMachine};

mod common;

use common::free_addr;

const CLUSTER_ID: u64 = 0x6b65656c;
const WAIT: Duration = Duration::from_secs(20);

/// Adds the u64 in each entry; returns the new total.
#[derive(Default)]
struct Counter {
    total: u64,
}

impl StateMachine for Counter {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, keel_runtime::ApplyError> {
        let add = u64::from_le_bytes(data[..8].try_into().unwrap());
        self.total += add;
        Ok(Bytes::copy_from_slice(&self.total.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn keel_runtime::SnapshotWriter> {
        Box::new(self.total.to_le_bytes().to_vec())
    }

    fn restore(
        &mut self,
        _last: keel_core::LogId,
        reader: &mut dyn std::io::Read,
    ) -> Result<(), keel_runtime::RestoreError> {
        let mut total = [0u8; 8];
        reader.read_exact(&mut total)?;
        self.total = u64::from_le_bytes(total);
        Ok(())
    }
}

fn add(n: u64) -> Bytes {
    Bytes::copy_from_slice(&n.to_le_bytes())
}

fn as_u64(b: &Bytes) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

struct Cluster {
    dir: PathBuf,
    addrs: BTreeMap<NodeId, SocketAddr>,
    nodes: BTreeMap<NodeId, Node<Counter>>,
    snapshots: Snapshots,
}

/// The snapshot policy's settings (`NodeConfig::snapshot_*`).
#[derive(Clone, Copy)]
struct Snapshots {
    entries_max: u64,
    bytes_max: u64,
    bytes_min: u64,
    log_ratio: u64,
}

impl Snapshots {
    /// Only the entry threshold decides (the byte bounds are out of reach of these tests).
    fn every(entries: u64) -> Snapshots {
        Snapshots {
            entries_max: entries,
            bytes_max: u64::MAX,
            bytes_min: u64::MAX,
            log_ratio: 0,
        }
    }
}

impl Cluster {
    async fn start(name: &str, snapshot_threshold_entries: u64) -> Cluster {
        Self::start_with(name, Snapshots::every(snapshot_threshold_entries)).await
    }

    async fn start_with(name: &str, snapshots: Snapshots) -> Cluster {
        let dir = common::scratch_dir(name);
        let addrs: BTreeMap<_, _> = (1..=3).map(|id| (id, free_addr())).collect();
        let mut c = Cluster {
            dir,
            addrs,
            nodes: BTreeMap::new(),
            snapshots,
        };
        for id in 1..=3 {
            c.start_node(id).await;
        }
        c
    }

    fn config(&self, id: NodeId) -> NodeConfig {
        let mut config = NodeConfig::new(id, CLUSTER_ID, self.dir.join(format!("n{id}")));
        config.peer_listen_addr = self.addrs[&id];
        config.peers = self.addrs.clone();
        config.initial_members = vec![1, 2, 3];
        config.tick_ms = 10;
        // Elections after 300-600 ms of silence: generous, so a loaded test machine does not
        // change leaders under the tests' feet.
        config.raft.election_timeout_ticks = 30;
        config.raft.heartbeat_interval_ticks = 3;
        config.raft.snapshot_trailing_entries = 2;
        config.snapshot_threshold_entries = self.snapshots.entries_max;
        config.snapshot_threshold_bytes = self.snapshots.bytes_max;
        config.snapshot_min_log_bytes = self.snapshots.bytes_min;
        config.snapshot_log_ratio = self.snapshots.log_ratio;
        config.request_timeout_ms = 5_000;
        config.wal.segment_size_bytes = 1 << 20;
        config.wal.frame_size_bytes_max = 64 << 10;
        config.wal.entry_size_bytes_max = 512 << 10;
        config
    }

    async fn start_node(&mut self, id: NodeId) {
        let node = common::start_node(|| self.config(id), Counter::default, WAIT).await;
        self.nodes.insert(id, node);
    }

    async fn stop(&mut self, id: NodeId) {
        self.nodes.remove(&id).expect("running").stop().await;
    }

    fn handle(&self, id: NodeId) -> Handle<Counter> {
        self.nodes[&id].handle()
    }

    /// A proposal at `at` is refused with a hint naming `leader` and its address.
    async fn assert_refuses_naming(&self, at: NodeId, leader: NodeId) {
        match self.handle(at).propose(add(1)).await {
            Err(ClientError::NotLeader {
                leader: Some(hint),
                leader_addr,
            }) => {
                assert_eq!(hint, leader, "node {at}'s hint");
                assert_eq!(leader_addr, Some(self.addrs[&leader]), "node {at}'s hint");
            }
            other => panic!("expected node {at} to name leader {leader}, got {other:?}"),
        }
    }

    async fn leader(&self) -> NodeId {
        common::leader(&self.nodes, WAIT).await
    }

    /// Proposes at whichever node leads, retrying definite failures (a leader change).
    async fn propose(&self, n: u64) -> u64 {
        as_u64(&common::propose_at_leader(&self.nodes, add(n), WAIT).await)
    }

    async fn wait_applied(&self, id: NodeId, index: Index) {
        common::wait_applied(&self.handle(id), index, WAIT).await
    }

    /// Waits for node `id` to hold a snapshot at or above `index`; returns its index.
    async fn wait_snapshot(&self, id: NodeId, index: Index) -> Index {
        tokio::time::timeout(WAIT, async {
            loop {
                let s = self.handle(id).status().await.unwrap();
                if s.raft.snapshot.index >= index {
                    return s.raft.snapshot.index;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("a snapshot")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        common::stop_nodes_and_remove_dir(&mut self.nodes, &self.dir);
    }
}

/// A follower's handle refuses proposals itself while its node follows a known leader; once the
/// node is stopped, a handle kept finds it gone, not a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_follower_s_handle_answers_shutdown_not_not_leader() {
    let mut c = Cluster::start("stopped_follower", 1_000).await;
    let leader = c.leader().await;
    c.propose(1).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    c.assert_refuses_naming(follower, leader).await;
    let kept = c.handle(follower);
    c.stop(follower).await;
    assert_eq!(kept.propose(add(1)).await, Err(ClientError::Shutdown));
    let pending = kept.propose_batch(vec![add(1)]).await;
    for p in pending {
        assert_eq!(p.wait().await, Err(ClientError::Shutdown));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn elects_commits_fails_over_and_replays_after_restart() {
    let mut c = Cluster::start("failover", 1_000).await;
    let leader = c.leader().await;
    let h = c.handle(leader);
    for i in 1..=10 {
        assert_eq!(as_u64(&h.propose(add(1)).await.unwrap()), i);
    }
    assert_eq!(h.read(|c: &Counter| c.total).await.unwrap(), 10);

    // A follower refuses with a hint naming the leader and its address.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    c.assert_refuses_naming(follower, leader).await;
    assert!(matches!(
        c.handle(follower).read(|c: &Counter| c.total).await,
        Err(ClientError::NotLeader { .. })
    ));

    // A watcher on the follower sees the leader it follows, and no change while it leads on.
    let mut watch = c.handle(follower).watch();
    assert_eq!(watch.borrow().leader, Some(leader));
    assert!(watch.borrow().serving && watch.borrow().membership.voters.len() == 3);
    assert!(!watch.has_changed().unwrap());

    // Kill the leader: the other two elect a new one and keep committing. First let a
    // heartbeat persist the leader's commit index (commit-only changes are written lazily), so
    // the replay below has a known floor.
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.stop(leader).await;
    let new_leader = c.leader().await;
    assert_ne!(new_leader, leader);
    // The watcher learns of it without asking: a later term, the new leader.
    let seen = tokio::time::timeout(WAIT, watch.wait_for(|view| view.leader == Some(new_leader)))
        .await
        .expect("the watcher sees the new leader")
        .expect("the follower runs")
        .clone();
    assert!(seen.term > 1, "{seen:?}");
    assert_eq!(c.propose(5).await, 15);
    let commit = c.handle(new_leader).status().await.unwrap().raft.commit;

    // Restart the old leader from its WAL: it replays what it had committed before serving,
    // then catches up.
    c.start_node(leader).await;
    c.wait_applied(leader, commit).await;
    let s = c.handle(leader).status().await.unwrap();
    assert!(s.serving);
    assert!(s.replay.target_index >= 11, "{:?}", s.replay); // noop + 10 entries
    assert_eq!(s.replay.entries, s.replay.target_index);

    // Back as a follower, its handle refuses proposals naming the leader it follows now (the
    // answer its node task publishes to the handles, `ProposalRefusal`).
    c.assert_refuses_naming(leader, new_leader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lone_restarted_node_replays_to_its_persisted_commit() {
    let mut c = Cluster::start("lone", 1_000).await;
    for _ in 0..20 {
        c.propose(2).await;
    }
    let leader = c.leader().await;
    let commit = c.handle(leader).status().await.unwrap().raft.commit;
    for id in 1..=3 {
        c.wait_applied(id, commit).await;
    }
    // Give the followers a heartbeat to persist the commit index (it is written lazily).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut persisted = BTreeMap::new();
    for id in 1..=3 {
        persisted.insert(
            id,
            c.handle(id)
                .status()
                .await
                .unwrap()
                .raft
                .durable_hard_state
                .commit,
        );
        c.stop(id).await;
    }
    // Alone, without a quorum, it still replays everything it had persisted as committed.
    let id = 2;
    c.start_node(id).await;
    c.wait_applied(id, persisted[&id]).await;
    let s = c.handle(id).status().await.unwrap();
    assert!(s.serving);
    assert!(s.replay.target_index >= persisted[&id]);
    assert_eq!(s.raft.applied, s.replay.target_index);
    assert_ne!(s.raft.role, Role::Leader);
}

/// The byte threshold takes snapshots on its own: entries of 8 bytes, 64 bytes between
/// snapshots, an entry threshold never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_is_taken_after_the_byte_threshold() {
    let snapshots = Snapshots {
        bytes_max: 64,
        ..Snapshots::every(1_000_000)
    };
    let c = Cluster::start_with("bytes", snapshots).await;
    for _ in 0..40 {
        c.propose(1).await;
    }
    let leader = c.leader().await;
    let snapshot = c.wait_snapshot(leader, 32).await;
    let commit = c.handle(leader).status().await.unwrap().raft.commit;
    assert!(
        snapshot <= commit,
        "a snapshot at {snapshot} beyond commit {commit}"
    );
}

/// Between the byte bounds a snapshot waits until the log since the last one holds `log_ratio`
/// times that snapshot's size: here 4 x the bootstrap snapshot's file, in 8-byte entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_waits_for_the_log_to_reach_a_multiple_of_the_last_one() {
    let snapshots = Snapshots {
        entries_max: 1_000_000,
        bytes_max: 1 << 20,
        bytes_min: 8,
        log_ratio: 4,
    };
    let c = Cluster::start_with("ratio", snapshots).await;
    let leader = c.leader().await;
    let first = only_snapshot_file(&c.dir.join(format!("n{leader}")));
    let threshold_entries = (4 * first).div_ceil(8);
    assert!(
        threshold_entries > 8,
        "the ratio, not the minimum, decides here"
    );
    for _ in 0..threshold_entries - 1 {
        c.propose(1).await;
    }
    let commit = c.handle(leader).status().await.unwrap().raft.commit;
    c.wait_applied(leader, commit).await;
    // A due snapshot is taken as the batch that crosses the threshold applies; give it time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = c.handle(leader).status().await.unwrap();
    assert_eq!(
        s.raft.snapshot.index, 0,
        "a snapshot before 4 x {first} bytes of log"
    );
    c.propose(1).await;
    c.wait_snapshot(leader, 1).await;
}

/// The size of the one snapshot file in a node's data directory.
fn only_snapshot_file(dir: &std::path::Path) -> u64 {
    let sizes: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    assert_eq!(sizes.len(), 1, "one snapshot file in {}", dir.display());
    sizes[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_compact_and_a_lagging_follower_installs_one() {
    let mut c = Cluster::start("snapshot", 5).await;
    let leader = c.leader().await;
    let lagging = (1..=3).find(|id| *id != leader).unwrap();
    c.stop(lagging).await;
    let mut total = 0;
    for _ in 0..40 {
        total = c.propose(1).await;
    }
    assert_eq!(total, 40);
    let leader = c.leader().await;
    let index = c.handle(leader).snapshot_now().await.unwrap();
    let s = c.handle(leader).status().await.unwrap();
    assert!(s.raft.snapshot.index >= index && index >= 40);
    // The restarted follower's log ends long before the leader's first entry: it needs the
    // snapshot, streamed on its own connection, then the rest of the log.
    c.start_node(lagging).await;
    c.wait_applied(lagging, s.raft.commit).await;
    let f = c.handle(lagging).status().await.unwrap();
    // It holds a snapshot of the leader's: the newest, or one the leader picked for it before it
    // took the newest (at most one snapshot interval, 5 entries, older): either covers entries
    // the leader's log no longer holds, so the follower cannot have replayed them.
    assert!(f.raft.snapshot.index + 5 >= index, "{:?}", f.raft);
    assert!(f.raft.snapshot.index > 5, "{:?}", f.raft);
    // Its state machine was restored, not replayed: a linearizable read after a leadership
    // transfer to it sees the whole total.
    c.handle(leader).transfer_leadership(lagging).await.unwrap();
    let value = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(v) = c.handle(lagging).read(|c: &Counter| c.total).await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the new leader serves reads");
    assert_eq!(value, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_learner_joins_is_promoted_and_a_voter_is_removed() {
    let mut c = Cluster::start("membership", 1_000).await;
    for _ in 0..5 {
        c.propose(1).await;
    }
    // Node 4 starts empty (no initial members): it learns the configuration from the leader.
    c.addrs.insert(4, free_addr());
    let mut config = c.config(4);
    config.initial_members.clear();
    config.peers = c.addrs.clone();
    c.nodes
        .insert(4, Node::start(config, Counter::default()).await.unwrap());
    let leader = c.leader().await;
    let h = c.handle(leader);
    h.add_learner(4, c.addrs[&4]).await.unwrap();
    let commit = h.status().await.unwrap().raft.commit;
    c.wait_applied(4, commit).await;
    h.promote(4).await.unwrap();
    let removed = (1..=3).find(|id| *id != leader).unwrap();
    // The joint configuration must be left before the next change; retry while it is.
    tokio::time::timeout(WAIT, async {
        loop {
            match c.handle(c.leader().await).remove(removed).await {
                Ok(()) => return,
                Err(ClientError::Rejected(_)) | Err(ClientError::NotLeader { .. }) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
    })
    .await
    .expect("removed");
    let members = tokio::time::timeout(WAIT, async {
        loop {
            let m = c
                .handle(c.leader().await)
                .status()
                .await
                .unwrap()
                .raft
                .membership;
            if !m.is_joint() && !m.voters.contains(&removed) {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("configuration settled");
    assert!(members.voters.contains(&4));
    assert_eq!(members.voters.len(), 3);
    assert_eq!(c.propose(1).await, 6);
}

/// `propose_batch`: the entries reach the log in batch order, consecutively (each result is the
/// running total after its own entry); a follower refuses the whole batch and names the leader;
/// reads started after the batch resolved see all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proposal_batch_applies_in_order_or_is_refused_whole() {
    let c = Cluster::start("batch", 1_000_000).await;
    let leader = c.leader().await;
    let pending = c
        .handle(leader)
        .propose_batch((1..=100).map(add).collect())
        .await;
    let mut totals = Vec::new();
    for p in pending {
        totals.push(as_u64(&p.wait().await.expect("committed")));
    }
    let base = totals[0] - 1;
    for (k, total) in (1..=100u64).zip(&totals) {
        assert_eq!(*total, base + k * (k + 1) / 2, "entry {k} out of order");
    }
    let read = c.handle(leader).start_read(|sm: &Counter| sm.total).await;
    assert_eq!(read.wait().await.unwrap(), base + 5050);

    let follower = (1..=3).find(|id| *id != leader).unwrap();
    for p in c.handle(follower).propose_batch(vec![add(1), add(2)]).await {
        match p.wait().await {
            Err(ClientError::NotLeader { leader: hint, .. }) => assert_eq!(hint, Some(leader)),
            other => panic!("a follower answered {other:?}"),
        }
    }
}

/// A proposal larger than the WAL stores is refused before it reaches the log, naming the limit
/// (it once stopped every node that tried to store it); the cluster keeps committing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_entry_larger_than_the_log_stores_is_refused_and_nothing_stops() {
    let c = Cluster::start("oversize", 1_000_000).await;
    let leader = c.leader().await;
    let limit = c.config(leader).wal.entry_payload_bytes_max();
    let mut too_large = vec![0u8; limit + 1];
    too_large[..8].copy_from_slice(&1u64.to_le_bytes());
    match c.handle(leader).propose(Bytes::from(too_large)).await {
        Err(ClientError::Rejected(why)) => {
            assert!(why.contains(&limit.to_string()), "{why}")
        }
        other => panic!("an oversize entry answered {other:?}"),
    }
    let mut largest = vec![0u8; limit];
    largest[..8].copy_from_slice(&1u64.to_le_bytes());
    let before = as_u64(&c.handle(leader).propose(add(1)).await.expect("committed"));
    let after = as_u64(
        &c.handle(leader)
            .propose(Bytes::from(largest))
            .await
            .expect("the largest entry the log stores commits"),
    );
    assert_eq!(after, before + 1);
    // Every node stored and applied it: none stopped on it.
    let commit = c.handle(leader).status().await.unwrap().raft.commit;
    for id in 1..=3 {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let status = c.handle(id).status().await.expect("the node runs");
            if status.raft.applied >= commit {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {id} did not apply {commit}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(
        as_u64(&c.handle(leader).propose(add(1)).await.expect("committed")),
        after + 1
    );
}

/// A peer message bound too small for an Append of the largest entry the WAL stores, or a frame
/// bound below the parts peers send, is refused at startup, naming the settings (followers would
/// otherwise refuse what leaders accept).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contradicting_peer_bounds_are_refused_at_startup() {
    let c = Cluster::start("bounds", 1_000_000).await;
    let start = |change: &dyn Fn(&mut NodeConfig)| {
        let mut config = c.config(1);
        config.data_dir = c.dir.join("contradiction");
        config.peer_listen_addr = "127.0.0.1:0".parse().unwrap();
        change(&mut config);
        Node::start(config, Counter::default())
    };
    let error = start(&|config| config.transport.message_size_bytes_max = 256 << 10)
        .await
        .err()
        .expect("refused");
    let text = error.to_string();
    assert!(
        text.contains("transport message_size_bytes_max")
            && text.contains("wal entry_size_bytes_max"),
        "{text}"
    );
    let error = start(&|config| config.transport.frame_size_bytes_max = 32 << 10)
        .await
        .err()
        .expect("refused");
    let text = error.to_string();
    assert!(text.contains("transport frame_size_bytes_max"), "{text}");
}

/// The leader's view of `follower`'s match index.
async fn match_of(c: &Cluster, leader: NodeId, follower: NodeId) -> Index {
    let s = c.handle(leader).status().await.unwrap();
    s.progress
        .iter()
        .find(|p| p.id == follower)
        .map_or(0, |p| p.match_index)
}

/// S37: a follower whose data directory is wiped restarts under the same id with new storage. Its
/// peers knew its old storage incarnation, so they refuse its connections: nothing it says (its
/// acknowledgements, its votes — which it may have forgotten giving) is heard, and the leader's
/// view of it does not move while the other two go on committing. Once it is removed from the
/// configuration and added back as a learner, its new storage is accepted and it catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_member_is_not_heard_until_it_is_added_back() {
    let mut c = Cluster::start("wiped", 1_000_000).await;
    for _ in 0..5 {
        c.propose(1).await;
    }
    let leader = c.leader().await;
    let wiped = (1..=3).find(|id| *id != leader).unwrap();
    let commit = c.handle(leader).status().await.unwrap().raft.commit;
    c.wait_applied(wiped, commit).await;
    c.stop(wiped).await;
    std::fs::remove_dir_all(c.dir.join(format!("n{wiped}"))).unwrap();
    c.start_node(wiped).await;

    let before = match_of(&c, leader, wiped).await;
    for _ in 0..20 {
        c.propose(1).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let commit = c.handle(leader).status().await.unwrap().raft.commit;
    assert!(commit >= before + 20, "the other two commit without it");
    assert!(
        match_of(&c, leader, wiped).await <= before,
        "an acknowledgement of the wiped node was counted"
    );

    // Removed (its incarnation forgotten everywhere) and added back: heard again.
    let h = c.handle(leader);
    tokio::time::timeout(WAIT, async {
        while h.remove(wiped).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("removed");
    let addr = c.addrs[&wiped];
    tokio::time::timeout(WAIT, async {
        while h.add_learner(wiped, addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("added back");
    let target = c.propose(1).await;
    assert!(target > 0);
    let commit = c.handle(leader).status().await.unwrap().raft.commit;
    tokio::time::timeout(WAIT, async {
        while match_of(&c, leader, wiped).await < commit {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the re-added learner's acknowledgements are heard");
}
