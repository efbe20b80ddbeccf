//! Whoever reaches a peer port may send anything the wire format can carry (issue #17: nothing a
//! peer sends may take a node down). Crafted frames, built with the documented encoder, go to a
//! running three-node cluster over TCP; every node stays up, no term is pushed out of reach, and
//! the cluster keeps committing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use keel_core::{
    Entry, EntryPayload, Index, LogId, Message, MessageBody, NodeId, RepairAnswer, Term,
};
use keel_runtime::{Node, NodeConfig};
use keel_transport::wire::{self, Channel, Handshake};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

mod common;

use common::Count;

const CLUSTER_ID: u64 = 0x686f7374;
const WAIT: Duration = Duration::from_secs(20);

fn config(dir: &std::path::Path, addrs: &BTreeMap<NodeId, SocketAddr>, id: NodeId) -> NodeConfig {
    let mut config = NodeConfig::new(id, CLUSTER_ID, dir.join(format!("n{id}")));
    config.peer_listen_addr = addrs[&id];
    config.peers = addrs.clone();
    config.initial_members = vec![1, 2, 3];
    config.tick_ms = 10;
    config.raft.election_timeout_ticks = 30;
    config.raft.heartbeat_interval_ticks = 3;
    config.request_timeout_ms = 5_000;
    config
}

/// Connects to `addr` claiming to be node `as_node` (the transport checks that every message's
/// `from` is the handshake's node) and sends `messages`.
async fn send_as(addr: SocketAddr, as_node: NodeId, messages: &[Message]) {
    let mut frames = Vec::new();
    wire::encode_handshake(
        &Handshake::new(CLUSTER_ID, as_node, Channel::Messages),
        &mut frames,
    );
    for m in messages {
        wire::encode_message(0, m, &mut frames);
    }
    let mut stream = TcpStream::connect(addr).await.expect("peer port reachable");
    stream.write_all(&frames).await.expect("frames written");
    stream.flush().await.expect("flushed");
    // Let the node read everything before the connection closes.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

fn message(from: NodeId, to: NodeId, term: Term, body: MessageBody) -> Message {
    Message {
        from,
        to,
        term,
        body,
    }
}

fn noop(term: Term, index: Index) -> Entry {
    Entry {
        term,
        index,
        payload: EntryPayload::Noop,
    }
}

struct Cluster {
    dir: PathBuf,
    addrs: BTreeMap<NodeId, SocketAddr>,
    nodes: BTreeMap<NodeId, Node<Count>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        common::stop_nodes_and_remove_dir(&mut self.nodes, &self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[expect(clippy::too_many_lines)]
async fn crafted_frames_take_no_node_down_and_the_cluster_keeps_committing() {
    let dir = common::scratch_dir("hostile-peer");
    let addrs: BTreeMap<NodeId, SocketAddr> = (1..=3).map(|id| (id, common::free_addr())).collect();
    let mut c = Cluster {
        dir,
        addrs,
        nodes: BTreeMap::new(),
    };
    for id in 1..=3 {
        let node = common::start_node(|| config(&c.dir, &c.addrs, id), Count::default, WAIT).await;
        c.nodes.insert(id, node);
    }
    let leader = common::leader(&c.nodes, WAIT).await;
    common::propose_at_leader(&c.nodes, Bytes::from_static(b"before"), WAIT).await;
    let status = c.nodes[&leader].handle().status().await.unwrap();
    let term = status.raft.term;
    let last = status.raft.last_log_id;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let other = (1..=3).find(|id| *id != leader && *id != follower).unwrap();

    // To the leader, as a follower: a claim to lead the leader's own term (each kind of leader
    // message), and a term that could never be followed by another.
    let heartbeat = MessageBody::Heartbeat {
        commit: 0,
        read_round: 0,
        clock: Default::default(),
    };
    send_as(
        c.addrs[&leader],
        follower,
        &[
            message(follower, leader, term, heartbeat.clone()),
            message(
                follower,
                leader,
                term,
                MessageBody::Append {
                    prev: last,
                    entries: vec![noop(term, last.index + 1)],
                    commit: 0,
                },
            ),
            message(follower, leader, term, MessageBody::TimeoutNow),
            message(follower, leader, Term::MAX, heartbeat.clone()),
        ],
    )
    .await;
    // To a follower, as its leader: an Append with an index gap, and entries whose terms fall.
    send_as(
        c.addrs[&follower],
        leader,
        &[
            message(
                leader,
                follower,
                term,
                MessageBody::Append {
                    prev: last,
                    entries: vec![noop(term, last.index + 2)],
                    commit: 0,
                },
            ),
            message(
                leader,
                follower,
                term,
                MessageBody::Append {
                    prev: LogId::new(term, last.index),
                    entries: vec![noop(term, last.index + 1), noop(term - 1, last.index + 2)],
                    commit: 0,
                },
            ),
            message(leader, follower, Term::MAX, heartbeat),
        ],
    )
    .await;
    // To a follower, as a recovering peer: a promise of the last term below the limit (moving
    // past it would leave no term to campaign in), repair entries with a gap, a report from an
    // unreachable term, term starts that fall, a committed entry whose configuration names
    // node 0, and a holds answer that holds nothing after where it was asked from.
    send_as(
        c.addrs[&follower],
        other,
        &[
            message(
                other,
                follower,
                term,
                MessageBody::RepairRequest {
                    promised: LogId::new(keel_core::TERM_LIMIT - 1, 1),
                    last: LogId::new(0, 0),
                    terms: vec![LogId::new(keel_core::TERM_LIMIT - 1, 1)],
                    holds_last: true,
                },
            ),
            message(
                other,
                follower,
                term,
                MessageBody::RepairRequest {
                    promised: LogId::new(term, 9),
                    last: LogId::new(1, 1),
                    terms: vec![LogId::new(term, 5), LogId::new(term - 1, 7)],
                    holds_last: false,
                },
            ),
            message(
                other,
                follower,
                term,
                MessageBody::RepairResponse(RepairAnswer::Committed {
                    through: last,
                    config: keel_core::Membership::new_voters([0, 1]),
                }),
            ),
            message(
                other,
                follower,
                term,
                MessageBody::RepairResponse(RepairAnswer::Holds {
                    after: last,
                    through: last,
                    config: keel_core::Membership::new_voters([1]),
                }),
            ),
            message(
                other,
                follower,
                term,
                MessageBody::RepairResponse(RepairAnswer::Entries {
                    prev: last,
                    entries: vec![noop(term, last.index + 2)],
                }),
            ),
            message(
                other,
                follower,
                Term::MAX,
                MessageBody::RepairResponse(RepairAnswer::Lacks { after: last }),
            ),
        ],
    )
    .await;

    // Every node still runs, none adopted the unreachable term, and the cluster commits.
    for (id, node) in &c.nodes {
        let s = node.handle().status().await.expect("node task alive");
        assert!(
            s.raft.term < keel_core::TERM_LIMIT,
            "node {id}: term {}",
            s.raft.term
        );
    }
    for i in 0..5 {
        common::propose_at_leader(&c.nodes, Bytes::from(format!("after {i}")), WAIT).await;
    }
    let leader_now = common::leader(&c.nodes, WAIT).await;
    let commit = c.nodes[&leader_now]
        .handle()
        .status()
        .await
        .unwrap()
        .raft
        .commit;
    for id in [follower, other, leader] {
        common::wait_applied(&c.nodes[&id].handle(), commit, WAIT).await;
    }
    assert_eq!(refused_at(&c, leader).await, 4, "all crafted to the leader");
    // The repair request is well formed (the core answers it and moves no term: the follower
    // has a leader, and the term after the promised one is the limit).
    assert_eq!(
        refused_at(&c, follower).await,
        8,
        "all crafted to the follower but the first repair request"
    );
    assert_eq!(refused_at(&c, other).await, 0, "honest traffic passes");
}

async fn refused_at(c: &Cluster, id: NodeId) -> u64 {
    let s = c.nodes[&id].handle().status().await.unwrap();
    s.refused_messages
}
