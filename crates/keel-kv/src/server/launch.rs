//! Starting a node with its client listener: what `keel serve` and `keel up` share.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use keel_runtime::{Node, NodeConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::{serve, KvAdapter, ServerContext};
use crate::state_machine::KvStateMachine;

/// The cluster id `keel up` and `keel serve` use unless told otherwise ("keel" in ASCII).
pub const DEFAULT_CLUSTER_ID: u64 = 0x6b65_656c;

/// Everything one node needs.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub id: u64,
    pub cluster_id: u64,
    pub data_dir: PathBuf,
    pub client_addr: String,
    pub peer_addr: String,
    /// Every member's peer address (`--initial-cluster`). Its ids form the first configuration
    /// when the data directory is empty; the addresses are used on every start.
    pub initial_cluster: BTreeMap<u64, String>,
    /// Other nodes' client addresses, for forwarding to the leader (`--client-peers`).
    pub client_peers: BTreeMap<u64, String>,
    pub election_timeout_ms: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    pub snapshot_threshold: Option<u64>,
    pub snapshot_trailing: Option<u64>,
}

/// A running node and its client listener.
pub struct RunningNode {
    pub id: u64,
    pub client_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    node: Node<KvAdapter>,
    accept: JoinHandle<()>,
}

impl RunningNode {
    /// Stops accepting clients, then stops the node (see `Node::stop`).
    pub async fn stop(self) {
        self.accept.abort();
        let _ = self.accept.await;
        self.node.stop().await;
    }
}

/// `1=host:port,2=host:port`.
pub fn parse_id_map(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut map = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| format!("'{item}': expected id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|&id| id > 0)
            .ok_or_else(|| format!("'{item}': the id must be a positive integer"))?;
        let addr = addr.trim();
        if addr.rsplit_once(':').is_none() {
            return Err(format!("'{item}': expected id=host:port"));
        }
        if map.insert(id, addr.to_string()).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    Ok(map)
}

async fn resolve(addr: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| format!("cannot resolve '{addr}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{addr}' resolves to no address"))
}

fn ticks(ms: u64, tick_ms: u64) -> Result<u32, String> {
    u32::try_from(ms.div_ceil(tick_ms).max(1)).map_err(|_| format!("{ms} ms is too long"))
}

/// Recovers (or bootstraps) the node and starts serving clients.
pub async fn start(options: &NodeOptions) -> Result<RunningNode, String> {
    let mut config = NodeConfig::new(options.id, options.cluster_id, options.data_dir.clone());
    config.peer_listen_addr = resolve(&options.peer_addr).await?;
    for (&id, addr) in &options.initial_cluster {
        config.peers.insert(id, resolve(addr).await?);
    }
    config.initial_members = options.initial_cluster.keys().copied().collect();
    if let Some(ms) = options.election_timeout_ms {
        config.raft.election_timeout_ticks = ticks(ms, config.tick_ms)?;
    }
    if let Some(ms) = options.heartbeat_ms {
        config.raft.heartbeat_interval_ticks = ticks(ms, config.tick_ms)?;
    }
    if let Some(n) = options.snapshot_threshold {
        config.snapshot_threshold_entries = n.max(1);
    }
    if let Some(n) = options.snapshot_trailing {
        config.raft.snapshot_trailing_entries = n;
    }
    // Different nodes draw different election timeouts.
    config.raft.seed = options.id ^ std::process::id() as u64 ^ options.cluster_id.rotate_left(17);
    std::fs::create_dir_all(&options.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", options.data_dir.display()))?;

    let listener = TcpListener::bind(&options.client_addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.client_addr))?;
    let client_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let adapter = KvAdapter::new(KvStateMachine::new());
    let stats = adapter.stats();
    let node = Node::start(config, adapter)
        .await
        .map_err(|e| format!("node {}: {e}", options.id))?;
    let ctx = Arc::new(ServerContext::new(
        options.id,
        node.handle(),
        stats,
        options.initial_cluster.clone(),
        options.client_peers.clone(),
    ));
    let accept = tokio::spawn(serve(listener, ctx));
    Ok(RunningNode {
        id: options.id,
        client_addr,
        peer_addr: node.peer_addr(),
        node,
        accept,
    })
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_maps_parse_and_reject_bad_items() {
        let map = parse_id_map("1=127.0.0.1:7001, 2=localhost:7002,").unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map[&2], "localhost:7002");
        assert!(parse_id_map("0=a:1").is_err());
        assert!(parse_id_map("1=a").is_err());
        assert!(parse_id_map("x=a:1").is_err());
        assert!(parse_id_map("1=a:1,1=b:2").is_err());
        assert!(parse_id_map("").unwrap().is_empty());
    }
}
