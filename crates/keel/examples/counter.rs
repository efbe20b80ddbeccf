//! A replicated counter: three nodes in one process, over loopback TCP.
//!
//! Each node binds port 0; a node started later is told the addresses of those before it, and
//! they learn its address from its handshake. Proposals go to whichever node leads; a node that
//! does not lead answers `NotLeader`. Run it with `cargo run -p keel --example counter`.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use keel::{ClientError, Handle, Index, Node, NodeConfig, NodeId, SnapshotWriter, StateMachine};

/// Adds the little-endian u64 of each entry; answers the new total.
#[derive(Default)]
struct Counter(u64);

impl StateMachine for Counter {
    fn apply(&mut self, _index: Index, data: &Bytes) -> Result<Bytes, keel::ApplyError> {
        let add = data[..].try_into().map_or(0, u64::from_le_bytes);
        self.0 += add;
        Ok(Bytes::copy_from_slice(&self.0.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.0.to_le_bytes().to_vec())
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), keel::RestoreError> {
        self.0 = data.try_into().map_or(0, u64::from_le_bytes);
        Ok(())
    }
}

/// Proposes `add` at every node in turn until the leader takes it; the new total.
async fn add(handles: &[Handle<Counter>], add: u64) -> Result<u64, ClientError> {
    let entry = Bytes::copy_from_slice(&add.to_le_bytes());
    for _attempt in 0..200 {
        for handle in handles {
            match handle.propose(entry.clone()).await {
                Ok(total) => return Ok(u64::from_le_bytes(total[..].try_into().unwrap())),
                // Not applied: safe to try the next node (or again, once one is elected).
                Err(ClientError::NotLeader { .. } | ClientError::Busy(_)) => {}
                Err(other) => return Err(other),
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(ClientError::Busy("no leader elected"))
}

async fn run(dir: &std::path::Path) -> Result<u64, Box<dyn std::error::Error>> {
    let mut nodes: BTreeMap<NodeId, Node<Counter>> = BTreeMap::new();
    for id in 1..=3 {
        let mut config = NodeConfig::new(id, 0x6b65656c, dir.join(format!("node-{id}")));
        config.initial_members = vec![1, 2, 3];
        config.peers = nodes.iter().map(|(&id, n)| (id, n.peer_addr())).collect();
        nodes.insert(id, Node::start(config, Counter::default()).await?);
    }
    let handles: Vec<_> = nodes.values().map(Node::handle).collect();
    for n in 1..=10 {
        add(&handles, n).await?;
    }
    // A linearizable read, at whichever node leads.
    let mut total = None;
    while total.is_none() {
        for handle in &handles {
            total = total.or(handle.read(|counter: &Counter| counter.0).await.ok());
        }
    }
    for (_, node) in nodes {
        node.shutdown().await;
    }
    Ok(total.unwrap_or_default())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("keel-counter-{}", std::process::id()));
    let total = run(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    println!("total: {}", total?);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_count_to_55() {
        let dir = std::env::temp_dir().join(format!("keel-counter-test-{}", std::process::id()));
        let total = super::run(&dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(total.expect("the example runs"), 55);
    }
}
